"""`rollout run` and `rollout get` print an agent's escape sequences inert (issue 31): the
agent writes a clipboard (OSC 52), a window title, a screen clear, a hyperlink, a C1 CSI and
a bidi override to stdout, stderr, a file name and a failing verify's stderr; none reaches
the operator's terminal as the terminal would act on it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from rollout.v1 import rollout_pb2 as pb
from rollout_client.cli import EXIT_CODES, app
from typer.testing import CliRunner

pytestmark = pytest.mark.e2e

PAYLOAD = (
    "\x1b]52;c;cHduZWQ=\x07"  # write "pwned" to the clipboard
    "\x1b]0;pwned title\x07"  # set the window title
    "\x1b[2J\x1b[H"  # clear the screen, cursor home
    "\x1b]8;;http://evil.example/\x1b\\click me\x1b]8;;\x1b\\"  # a hyperlink
    "\x9b2J"  # a C1 CSI: clear the screen again
    "\u202eevil\u202c"  # a right-to-left override
    "\x7f\n"
)
ACTIVE = ("\x1b", "\x07", "\x9b", "\u202e", "\u202c", "\x7f")
AGENT = "cat payload.txt; cat payload.txt >&2; touch \"$(printf 'name\\033]0;t\\007')\""
runner = CliRunner()


def _assert_inert(printed: str) -> None:
    assert not [char for char in ACTIVE if char in printed], printed
    assert "\\x1b]52;c;cHduZWQ=\\x07" in printed
    assert "\\x9b2J\\u202eevil\\u202c\\x7f" in printed


def test_run_and_get_print_the_agents_escapes_visibly(server_target: str, tmp_path: Path) -> None:
    payload = tmp_path / "payload.txt"
    payload.write_bytes(PAYLOAD.encode())
    run = runner.invoke(
        app,
        [
            "run", "--target", server_target,
            "--instruction", "print escapes",
            "--file", str(payload),
            "--agent-command", AGENT,
            "--verify", "cat payload.txt >&2; false",
        ],
    )  # fmt: skip
    assert run.exit_code == EXIT_CODES[pb.ROLLOUT_STATUS_SUCCEEDED], run.output
    _assert_inert(run.stdout)
    assert "verify[0] FAIL" in run.stdout
    rollout_id = run.stdout.split()[1]
    got = runner.invoke(app, ["get", rollout_id, "--target", server_target])
    assert got.exit_code == 0, got.output
    _assert_inert(got.stdout)
    assert "name\\x1b]0;t\\x07" in got.stdout


def test_json_keeps_the_agents_bytes_escaped_as_json(server_target: str) -> None:
    run = runner.invoke(
        app,
        [
            "run", "--target", server_target, "--json",
            "--instruction", "print escapes",
            "--agent-command", "printf '\\033]0;t\\007\\302\\233\\342\\200\\256x\\n'",
        ],
    )  # fmt: skip
    assert run.exit_code == EXIT_CODES[pb.ROLLOUT_STATUS_SUCCEEDED], run.output
    rollout_id = json.loads(run.stdout)["id"]
    got = runner.invoke(app, ["get", rollout_id, "--json", "--target", server_target])
    assert got.exit_code == 0, got.output
    for printed in (run.stdout, got.stdout):
        assert not [char for char in ACTIVE if char in printed], printed
        assert json.loads(printed)["result"]["agentLogTail"] == "\x1b]0;t\x07\x9b\u202ex\n"
