"""The command line's error paths, which need no server: one clear line and the right code."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import typer
from rollout.v1 import rollout_pb2 as pb
from rollout_client.cli import EXIT_ERROR, app
from rollout_client.exits import EXIT_REWARD_TOO_LOW, exit_for
from typer.testing import CliRunner

runner = CliRunner()
USAGE = 2


def test_run_without_a_spec_file_or_an_instruction_is_bad_usage() -> None:
    # The help says 2 means bad usage; this exited 1.
    result = runner.invoke(app, ["run", "--agent-command", "true"])
    assert result.exit_code == USAGE
    assert "give a SPEC_FILE or --instruction" in result.stderr


def test_a_bad_spec_file_is_one_line_naming_the_file(tmp_path: Path) -> None:
    spec_file = tmp_path / "spec.yaml"
    spec_file.write_text("task:\n  instrction: typo\n")
    result = runner.invoke(app, ["run", str(spec_file)])
    assert result.exit_code == EXIT_ERROR
    [line] = result.stderr.splitlines()
    assert line.startswith(f"error: spec file {spec_file}: invalid spec:")
    assert '"instrction"' in line


def test_a_label_without_a_value_is_a_usage_error() -> None:
    result = runner.invoke(app, ["run", "--instruction", "x", "--label", "novalue"])
    assert result.exit_code == USAGE
    assert "Invalid value for --label: expects KEY=VALUE, got 'novalue'" in result.stderr


def test_an_unknown_status_lists_the_choices() -> None:
    result = runner.invoke(app, ["list", "--status", "DONE"])
    assert result.exit_code == USAGE
    assert "SUCCEEDED" in result.stderr


def test_an_unreachable_server_asks_if_it_is_running(closed_target: str) -> None:
    result = runner.invoke(app, ["get", "r-1", "--target", closed_target])
    assert result.exit_code == EXIT_ERROR
    [line] = result.stderr.splitlines()
    assert line.endswith(f"is the server running at {closed_target}?")


def test_the_target_comes_from_the_environment(closed_target: str) -> None:
    result = runner.invoke(app, ["cancel", "r-1"], env={"ROLLOUT_TARGET": closed_target})
    assert result.exit_code == EXIT_ERROR
    assert f"is the server running at {closed_target}?" in result.stderr


def test_serve_without_the_server_says_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    # A None entry makes `service` unfindable, as if the package were not installed.
    monkeypatch.delitem(sys.modules, "service.server", raising=False)
    monkeypatch.setitem(sys.modules, "service", None)
    result = runner.invoke(app, ["serve", "--listen", "127.0.0.1:0"])
    assert result.exit_code == EXIT_ERROR
    assert result.stderr == (
        "error: `rollout serve` needs the server (service is missing): install rollout-service\n"
    )


def test_a_low_reward_is_reported_with_the_clients_figures(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # exit_for printed `{reward:g}`: "reward 0.333333: below --require-reward 0.5",
    # where every other figure the client prints reads 0.333 (`render.figure`).
    rollout = pb.Rollout(status=pb.ROLLOUT_STATUS_SUCCEEDED, result=pb.RolloutResult(reward=1 / 3))
    with pytest.raises(typer.Exit) as exited:
        exit_for(rollout, require_reward=0.5)
    assert exited.value.exit_code == EXIT_REWARD_TOO_LOW
    assert capsys.readouterr().err.strip() == "reward 0.333: below --require-reward 0.5"
