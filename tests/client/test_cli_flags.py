"""The spec and connection flags, their bad values and the figures the CLI prints: no server."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from google.protobuf import json_format
from rollout.v1 import rollout_pb2 as pb
from rollout_client.cli import app
from rollout_client.group_command import _summary
from rollout_client.messages import AGENT_NAMES
from rollout_client.render import figure, rollout_summary
from rollout_client.spec_flags import spec_flags
from rollout_client.specfile import build_spec
from typer.testing import CliRunner, Result

from service.registry import AGENTS

runner = CliRunner()
USAGE = 2


def rollout(*args: str, env: dict[str, str] | None = None) -> Result:
    return runner.invoke(app, list(args), env={"COLUMNS": "300", **(env or {})})


def said(result: Result) -> str:
    return " ".join(result.stderr.replace("│", " ").split())


@pytest.mark.parametrize("command", [["run"], ["group", "run", "--n", "2"]])
@pytest.mark.parametrize(
    ("flag", "value", "message"),
    [
        ("--env", "FOO", "Invalid value for --env: expects KEY=VALUE, got 'FOO'"),
        ("--agent-option", "=1", "Invalid value for --agent-option: expects KEY=VALUE, got '=1'"),
        ("--label", "x", "Invalid value for --label: expects KEY=VALUE, got 'x'"),
        ("--file", "/no/such/file", "Invalid value for --file: cannot read '/no/such/file'"),
        ("--file", "a.txt:", "Invalid value for --file: expects LOCAL[:REMOTE], got 'a.txt:'"),
        ("--file", ":b.txt", "Invalid value for --file: expects LOCAL[:REMOTE], got ':b.txt'"),
    ],
)
def test_a_bad_flag_value_is_bad_usage_naming_the_flag(
    command: list[str], flag: str, value: str, message: str
) -> None:
    result = rollout(*command, "--instruction", "x", flag, value)
    assert result.exit_code == USAGE, result.output
    assert message in said(result)


def test_files_are_staged_by_name_or_as_remote_with_their_executable_mode(tmp_path: Path) -> None:
    data = tmp_path / "data.csv"
    data.write_bytes(b"a,b\n")
    tool = tmp_path / "tool.sh"
    tool.write_text("#!/bin/sh\n")
    tool.chmod(0o750)
    overrides = spec_flags(instruction="x", file=[str(data), f"{tool}:bin/run.sh"])
    spec = build_spec(None, overrides)
    assert dict(spec.task.files) == {"data.csv": b"a,b\n", "bin/run.sh": b"#!/bin/sh\n"}
    assert dict(spec.task.file_modes) == {"bin/run.sh": "755"}


def test_env_and_agent_options_go_into_the_spec() -> None:
    overrides = spec_flags(
        instruction="x",
        env=["A=1", "B=x=y"],
        agent_option=["step_limit=5", 'tools=["bash"]', "prompt=be brief", "odd=NaN", "on=true"],
        image="rollout/base",
    )
    spec = build_spec(None, overrides)
    assert dict(spec.task.env) == {"A": "1", "B": "x=y"}
    # NaN stays text: the server takes no NaN number.
    assert json_format.MessageToDict(spec.agent.options) == {
        "step_limit": 5,
        "tools": ["bash"],
        "prompt": "be brief",
        "odd": "NaN",
        "on": True,
    }
    assert spec.sandbox.image == "rollout/base"


def test_agent_help_lists_every_harness_the_server_registers() -> None:
    assert set(AGENT_NAMES) == set(AGENTS)
    help_text = " ".join(rollout("run", "--help").stdout.split())
    assert f"The agent: {', '.join(AGENT_NAMES)}." in help_text


@pytest.mark.parametrize("command", [["get", "r-1"], ["group", "get", "g-1"], ["list"]])
def test_the_target_after_the_command_wins_over_the_one_before(
    command: list[str], closed_target: str
) -> None:
    before = "127.0.0.1:1"
    after = rollout("--target", before, *command, "--target", closed_target)
    only_before = rollout("--target", before, *command, env={"ROLLOUT_TARGET": closed_target})
    from_env = rollout(*command, env={"ROLLOUT_TARGET": closed_target})

    assert after.exit_code == 1
    assert f"is the server running at {closed_target}?" in after.stderr
    assert f"is the server running at {before}?" in only_before.stderr
    assert f"is the server running at {closed_target}?" in from_env.stderr


def test_a_token_after_the_command_replaces_a_token_file_before_it(
    tmp_path: Path, closed_target: str
) -> None:
    token_file = tmp_path / "token"
    token_file.write_text("t\n")
    both_before = rollout("--token", "a", "--token-file", str(token_file), "get", "x")
    replaced = rollout(
        "--token-file", str(token_file), "get", "x", "--token", "a", "--target", closed_target
    )

    assert both_before.exit_code == USAGE
    assert "give --token or --token-file, not both" in said(both_before)
    assert replaced.exit_code == 1, "it called the server"
    assert f"is the server running at {closed_target}?" in replaced.stderr


@pytest.mark.parametrize(
    ("value", "shown"),
    [
        (5.494999999999999, "5.495"),
        (1.0, "1"),
        (0.0, "0"),
        (0.5, "0.5"),
        (1 / 3, "0.333"),
        (1234.5, "1234.5"),
        (0.0001234, "0.000123"),
        (-2.25, "-2.25"),
        (math.inf, "inf"),
    ],
)
def test_figures_read_as_a_person_writes_them(value: float, shown: str) -> None:
    assert figure(value) == shown


def test_rewards_metrics_durations_and_group_stats_are_figures() -> None:
    result = pb.RolloutResult(reward=5.494999999999999, metrics={"passed": 0.30000000000000004})
    result.timings.total.FromNanoseconds(5_494_999_999)
    rollout = pb.Rollout(id="r-1", status=pb.ROLLOUT_STATUS_SUCCEEDED, result=result)
    shown = "\n".join(line.plain for line in rollout_summary(rollout))
    assert "reward 5.495" in shown
    assert "metrics passed=0.3" in shown
    assert "total 5.495s" in shown
    group = pb.Group(
        id="g-1", stats=pb.GroupStats(reward_mean=5.494999999999999, reward_stddev=0.1)
    )
    assert "reward mean 5.495 stddev 0.1," in _summary(group)[1]
