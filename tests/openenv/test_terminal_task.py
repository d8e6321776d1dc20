"""The terminal's reset arguments and actions, read as the session spec and commands they mean.
(The environment itself, through the real server: tests/openenv/test_terminal_env.py.)"""

from __future__ import annotations

import base64

import pytest
from pydantic import ValidationError
from rollout.v1 import rollout_pb2 as pb

from service.openenv.terminal_models import TerminalAction
from service.openenv.terminal_task import session_spec


def test_a_harbor_task_by_name_by_archive_or_an_inline_task() -> None:
    assert session_spec(harbor_task="tasks/hello").harbor_task.path == "tasks/hello"
    archive = base64.b64encode(b"\x1f\x8b not really").decode()
    assert session_spec(harbor_archive=archive).harbor_task.archive == b"\x1f\x8b not really"
    inline = session_spec(
        task={"instruction": "fix it", "verify": ["pytest -q"], "files": {"a.py": b"x = 1\n"}},
        sandbox={"network": "NONE"},
    )
    assert inline.task.instruction == "fix it"
    assert list(inline.task.verify) == ["pytest -q"]
    assert inline.task.files["a.py"] == b"x = 1\n"
    assert inline.sandbox.network == pb.NETWORK_POLICY_NONE


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({}, "exactly one of harbor_task, harbor_archive or task$"),
        ({"harbor_task": "a", "task": {"instruction": "x"}}, "got harbor_task and task"),
        ({"harbor_archive": "not base64!"}, "harbor_archive: not base64"),
    ],
)
def test_a_wrong_reset_names_its_argument(arguments: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        session_spec(**arguments)  # type: ignore[arg-type]


def test_an_action_is_a_command_or_a_verify() -> None:
    assert TerminalAction(command="ls").command == "ls"
    assert TerminalAction(verify=True).verify
    for wrong in ({}, {"command": "ls", "verify": True}):
        with pytest.raises(ValidationError, match="either a command or verify"):
            TerminalAction(**wrong)
