"""The client as the README describes it, against the real server."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from rollout_client import AsyncRolloutClient, InvalidArgumentError, RolloutClient, SpecError
from rollout_client.cli import app
from typer.testing import CliRunner

from testing.server_process import ServerProcess

pytestmark = pytest.mark.e2e

runner = CliRunner()
REWARD_TOO_LOW = 6


def test_except_spec_error_catches_a_server_rejection(server_target: str) -> None:
    # The README said "SpecError carries the offending field names"; the server's rejection
    # was an InvalidArgumentError that `except SpecError` missed.
    spec = {"task": {"instruction": ""}, "agent": {"name": "command", "command": "true"}}
    with RolloutClient(server_target) as client, pytest.raises(SpecError) as raised:
        client.run(spec)

    assert isinstance(raised.value, InvalidArgumentError)
    assert "spec.task.instruction" in [v.field for v in raised.value.field_violations]


def _run(target: str, *args: str) -> tuple[int, str, str]:
    command = ["run", "--instruction", "x", "--setup", "echo hi > a.txt", *args]
    result = runner.invoke(app, [*command, "--target", target])
    return result.exit_code, result.stdout, result.stderr


def test_require_reward_makes_a_scored_failure_exit_6(server_target: str) -> None:
    # verify fails: SUCCEEDED with reward 0, which exits 0 for a trainer but 6 when asked.
    args = ("--agent-command", "true", "--verify", "test -f b.txt")
    assert _run(server_target, *args)[0] == 0
    code, stdout, stderr = _run(server_target, *args, "--require-reward", "1")

    assert code == REWARD_TOO_LOW
    assert "SUCCEEDED  reward 0" in stdout
    assert "reward 0: below --require-reward 1" in stderr


def test_require_reward_passes_a_full_reward(server_target: str) -> None:
    args = ("--agent-command", "cp a.txt b.txt", "--verify", "test -f b.txt")
    assert _run(server_target, *args, "--require-reward", "1")[0] == 0


def test_require_reward_does_not_hide_a_failed_rollout(server_target: str) -> None:
    code, _, _ = _run(
        server_target, "--agent-command", "true", "--setup", "false", "--require-reward", "1"
    )
    assert code == 3  # FAILED (SETUP) keeps its own code


def test_no_reward_is_below_any_bar(server_target: str) -> None:
    # No verify command: the reward is unset, not 0.
    code, stdout, stderr = _run(server_target, "--agent-command", "true", "--require-reward", "0")
    assert code == REWARD_TOO_LOW
    assert "reward none" in stdout
    assert "no reward: below --require-reward 0" in stderr


def test_run_waits_for_a_server_that_is_still_starting(tmp_path: Path, closed_target: str) -> None:
    # `make run &` then `rollout run` at once used to fail: the server was not up yet.
    cli = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "from rollout_client.cli import main; main()",
            "run",
            "--instruction",
            "x",
            "--agent-command",
            "true",
            "--wait-for-server",
            "60",
            "--target",
            closed_target,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert cli.stderr is not None
    waiting = cli.stderr.readline()  # printed before the server exists
    server = ServerProcess(tmp_path / "state", {"ROLLOUT_LISTEN": closed_target})
    server.start()
    try:
        stdout, stderr = cli.communicate(timeout=120)
    finally:
        server.stop()

    assert f"waiting up to 60s for the server at {closed_target} to start" in waiting
    assert cli.returncode == 0, (stdout, stderr)
    assert "SUCCEEDED" in stdout


async def test_the_async_client_waits_until_ready(server_target: str, closed_target: str) -> None:
    async with AsyncRolloutClient(server_target) as client:
        assert await client.wait_until_ready(10)
    async with AsyncRolloutClient(closed_target) as client:
        assert not await client.wait_until_ready(0.2)
