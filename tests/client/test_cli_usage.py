"""What the command line says about itself, and its usage errors: no server needed."""

from __future__ import annotations

import subprocess
import sys
from importlib import metadata
from pathlib import Path

from rollout_client.cli import app
from typer.testing import CliRunner

from service.config import Settings

runner = CliRunner()
USAGE = 2


def test_version() -> None:
    result = runner.invoke(app, ["--version"])
    assert result.exit_code == 0
    assert result.stdout == f"rollout {metadata.version('rollout-client')}\n"


def test_the_help_lists_every_exit_code() -> None:
    text = " ".join(runner.invoke(app, ["--help"]).stdout.split())
    for code in ("0 done", "1 error", "2 bad usage", "3 FAILED", "4 TIMED_OUT", "5 CANCELLED"):
        assert code in text
    assert "6 reward unset or below --require-reward" in text


def test_an_unknown_network_is_bad_usage() -> None:
    result = runner.invoke(app, ["run", "--instruction", "x", "--network", "wide"])
    assert result.exit_code == USAGE
    said = " ".join(result.stderr.replace("│", " ").split())
    assert "'--network': unknown network_policy 'wide' (one of: NONE, FULL)" in said


def test_an_api_key_variable_that_is_not_set_is_bad_usage() -> None:
    result = runner.invoke(
        app, ["run", "--instruction", "x", "--api-key-env", "ROLLOUT_TEST_UNSET_KEY"], env={}
    )
    assert result.exit_code == USAGE
    assert "ROLLOUT_TEST_UNSET_KEY is not set" in result.stderr


def test_no_server_is_one_line_after_the_wait(closed_target: str) -> None:
    result = runner.invoke(
        app,
        ["run", "--instruction", "x", "--agent-command", "true", "--wait-for-server", "0.2"],
        env={"ROLLOUT_TARGET": closed_target},
    )
    assert result.exit_code == 1
    assert f"waiting up to 0.2s for the server at {closed_target}" in result.stderr
    assert f"is the server running at {closed_target}?" in result.stderr.splitlines()[-1]


def test_serve_help_describes_every_option_with_its_real_default(tmp_path: Path) -> None:
    # Printed "(default factory: _default_state_dir)" and no descriptions at all.
    home = tmp_path / "home"
    result = subprocess.run(
        [sys.executable, "-c", "from rollout_client.cli import main; main()", "serve", "--help"],
        capture_output=True,
        text=True,
        env={"HOME": str(home), "COLUMNS": "200", "PATH": "/usr/bin:/bin"},
        check=True,
    )
    text = " ".join(result.stdout.replace("│", " ").split())
    assert "default factory" not in text
    assert f"[default: {home}/.local/state/rollout-service]" in text
    assert f"[default: {home}/.cache/rollout-service]" in text
    for name, field in Settings.model_fields.items():
        assert field.description, f"setting {name} has no description"
        assert " ".join(field.description.split()) in text, name


def test_serve_help_reads_like_the_other_commands() -> None:
    # It was argparse's, from pydantic-settings: `[--database {Path,null}]`, `list[SecretStr]`.
    result = runner.invoke(app, ["serve", "--help"], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    text = " ".join(result.stdout.replace("│", " ").split())
    assert text.startswith("Usage: rollout serve [OPTIONS]")
    for argparse_style in ("{Path,null}", "list[SecretStr]", "usage:", "options:"):
        assert argparse_style not in text
    for flag_and_metavar in ("--listen HOST:PORT", "--state-dir PATH", "--auth-tokens JSON",
                             "--shutdown-grace-s SECONDS", "--max-running N",
                             "--listen-reuse-port true|false",
                             "--allow-insecure-listen true|false"):  # fmt: skip
        assert flag_and_metavar in " ".join(text.split()), flag_and_metavar
    assert "─ Storage ─" in result.stdout


def test_batch_lists_only_the_flags_it_takes() -> None:
    # INPUT names the tasks: the flags that name a task were listed, then refused.
    text = runner.invoke(app, ["batch", "--help"], env={"COLUMNS": "200"}).stdout
    for refused in ("--instruction", "--harbor-task", "--harbor-dir", "--request-id"):
        assert refused not in text, refused
        given = runner.invoke(app, ["batch", "tasks", "--output", "out", refused, "x"])
        assert given.exit_code == USAGE
        assert f"No such option: {refused}" in given.stderr
    for taken in ("--agent", "--verify", "--label", "--reward-key", "--local"):
        assert taken in text, taken
