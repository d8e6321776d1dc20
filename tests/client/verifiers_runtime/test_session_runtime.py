"""The released verifiers package's bash agent in a `SessionRuntime` (docs/verifiers.md),
through a real server with authentication, against the scripted upstream.

verifiers pins openai<3 and this suite's dev tools pin openai 3, so verifiers lives in its own
interpreter, .venv-verifiers (`make install`); each case runs `driver.py` there.
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from testing.fakes.llm_upstream import FakeUpstream, Reply, ToolCallReply, has_tools
from testing.server_process import ServerProcess, running
from tests.docs.pages import claimed_output, marked_blocks
from tests.e2e.auth_support import TENANT_A_TOKEN, write_token_file

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300)]

BLOCKS = marked_blocks()
ROOT = Path(__file__).resolve().parents[3]
DRIVER = Path(__file__).with_name("driver.py")
UPSTREAM_KEY = "sk-verifiers-upstream-1c9e"
SPEC = {
    "task": {
        "instruction": "make answer.txt say 42",
        "setup": ["echo start > notes.txt"],
        "verify": ["grep -qx 42 answer.txt"],
    }
}


@pytest.fixture(scope="module")
def verifiers_python() -> str:
    python = os.environ.get("ROLLOUT_VERIFIERS_PYTHON") or str(ROOT / ".venv-verifiers/bin/python")
    if not Path(python).exists():
        if os.environ.get("CI"):
            pytest.fail(f"{python} is missing: make install makes it")
        pytest.skip(f"{python} is missing: run make install")
    return python


@pytest.fixture(scope="module")
def target(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    folder = tmp_path_factory.mktemp("verifiers-server")
    tokens = write_token_file(folder / "tokens")
    server = ServerProcess(folder / "state", env={"ROLLOUT_AUTH_TOKEN_FILE": str(tokens)})
    with running(server):
        yield server.target


@pytest.fixture
async def upstream() -> AsyncIterator[FakeUpstream]:
    async with FakeUpstream(api_key=UPSTREAM_KEY, model="fake-policy-8b") as upstream:
        yield upstream


async def drive(python: str, **args: Any) -> dict[str, Any]:
    process = await asyncio.create_subprocess_exec(
        python,
        str(DRIVER),
        json.dumps(args),
        env={**os.environ, "UPSTREAM_KEY": UPSTREAM_KEY, "PYTHONPATH": str(ROOT)},
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await process.communicate()
    assert process.returncode == 0, err.decode()
    return dict(json.loads(out.decode().splitlines()[-1]))


async def test_the_bash_agent_solves_a_task_in_a_session(
    verifiers_python: str, target: str, upstream: FakeUpstream
) -> None:
    upstream.script(
        Reply(tool_calls=[ToolCallReply("bash", '{"command": "echo 42 > answer.txt"}')]),
        Reply(text="answer.txt says 42."),
        match=has_tools,
    )
    result = await drive(
        verifiers_python,
        target=target,
        upstream=upstream.base_url,
        spec=SPEC,
        token=TENANT_A_TOKEN,
    )
    assert "start_error" not in result, result
    assert result["ok"], result
    assert result["rewards"] == {"answer_is_42": 1.0}, result
    assert result["session_status"] == "SESSION_STATUS_VERIFIED"
    assert result["session_reward"] == 1.0
    # Both model calls crossed the session's route: captured as turns by the server.
    assert result["session_turns"] == 2
    assert len(upstream.requests) == 2


@pytest.mark.parametrize(
    ("case", "expected"),
    [
        ("unreachable", "is unreachable: nothing is listening there"),
        ("bad_token", "refused the token"),
        ("unknown_task", "rejected the session's spec: "),
    ],
)
async def test_a_bad_configuration_fails_at_start_with_one_line(
    verifiers_python: str, target: str, closed_target: str, case: str, expected: str
) -> None:
    args: dict[str, Any] = {"target": target, "upstream": "http://127.0.0.1:9/v1"}
    args["token"] = "tok-nobody" if case == "bad_token" else TENANT_A_TOKEN
    args["spec"] = {"harbor_task": {"path": "/no/such/task"}} if case == "unknown_task" else SPEC
    if case == "unreachable":
        args["target"] = closed_target
    result = await drive(verifiers_python, **args)
    line = result["start_error"]
    assert expected in line, line
    assert "\n" not in line


async def test_the_docs_example_prints_what_its_page_says(
    verifiers_python: str, target: str, upstream: FakeUpstream
) -> None:
    block = BLOCKS["verifiers-python"]
    upstream.script(
        Reply(tool_calls=[ToolCallReply("bash", '{"command": "echo 42 > answer.txt"}')]),
        match=has_tools,
    )
    env = {
        **os.environ,
        "ROLLOUT_TARGET": target,
        "ROLLOUT_TOKEN": TENANT_A_TOKEN,
        "POLICY_BASE_URL": upstream.base_url,
        "POLICY_KEY": UPSTREAM_KEY,
    }
    process = await asyncio.create_subprocess_exec(
        verifiers_python, "-c", block.code, env=env,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, err = await process.communicate()
    assert process.returncode == 0, err.decode()
    assert out.decode().strip() == claimed_output(block)
