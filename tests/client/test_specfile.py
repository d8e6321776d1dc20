"""Spec files in each format, and the `rollout run` flags merged over them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from rollout.v1 import rollout_pb2 as pb
from rollout_client.errors import SpecError
from rollout_client.specfile import SpecOverrides, build_spec, load_spec_file, parse_pairs

SPEC = {
    "task_id": "t-1",
    "task": {"instruction": "copy a to b", "setup": ["echo hi > a.txt"], "verify": ["test -f b"]},
    "agent": {"name": "command", "command": "cp a.txt b.txt"},
    "agent_timeout": "90s",
    "labels": {"epoch": "3"},
}
YAML_SPEC = """\
task_id: t-1
task:
  instruction: copy a to b
  setup: ["echo hi > a.txt"]
  verify: ["test -f b"]
agent: {name: command, command: cp a.txt b.txt}
agent_timeout: 90s
labels: {epoch: "3"}
"""
TOML_SPEC = """\
task_id = "t-1"
agent_timeout = "90s"
[task]
instruction = "copy a to b"
setup = ["echo hi > a.txt"]
verify = ["test -f b"]
[agent]
name = "command"
command = "cp a.txt b.txt"
[labels]
epoch = "3"
"""


@pytest.mark.parametrize(
    ("name", "text"),
    [
        ("spec.yaml", YAML_SPEC),
        ("spec.yml", YAML_SPEC),
        ("spec.json", json.dumps(SPEC)),
        ("spec.toml", TOML_SPEC),
        ("request.json", json.dumps({"spec": SPEC})),
    ],
)
def test_every_format_gives_the_same_spec(tmp_path: Path, name: str, text: str) -> None:
    path = tmp_path / name
    path.write_text(text)
    spec = build_spec(path, SpecOverrides())
    assert spec.task_id == "t-1"
    assert spec.task.instruction == "copy a to b"
    assert list(spec.task.setup) == ["echo hi > a.txt"]
    assert spec.agent.command == "cp a.txt b.txt"
    assert spec.agent_timeout.seconds == 90
    assert dict(spec.labels) == {"epoch": "3"}


def test_flags_override_the_file(tmp_path: Path) -> None:
    path = tmp_path / "spec.json"
    path.write_text(json.dumps(SPEC))
    overrides = SpecOverrides(
        instruction="new instruction",
        setup=("s1", "s2"),
        verify=("v1",),
        agent_command="true",
        labels={"run": "7", "epoch": "4"},
        agent_timeout_s=1.5,
        backend="local",
        request_id="req-1",
    )
    spec = build_spec(path, overrides)
    assert spec.task.instruction == "new instruction"
    assert list(spec.task.setup) == ["s1", "s2"]
    assert list(spec.task.verify) == ["v1"]
    assert (spec.agent.name, spec.agent.command) == ("command", "true")
    assert dict(spec.labels) == {"epoch": "4", "run": "7"}
    assert (spec.agent_timeout.seconds, spec.agent_timeout.nanos) == (1, 500_000_000)
    assert spec.sandbox.backend == "local"
    assert spec.request_id == "req-1"
    assert spec.task_id == "t-1", "fields without a flag keep the file's value"


def test_unset_flags_keep_the_file_lists(tmp_path: Path) -> None:
    path = tmp_path / "spec.yaml"
    path.write_text(YAML_SPEC)
    spec = build_spec(path, SpecOverrides(instruction="other"))
    assert list(spec.task.verify) == ["test -f b"]
    assert spec.agent.name == "command"


def test_flags_alone_make_a_spec() -> None:
    spec = build_spec(None, SpecOverrides(instruction="x", agent_command="echo hi"))
    assert spec == pb.RolloutSpec(
        task=pb.Task(instruction="x"), agent=pb.Agent(name="command", command="echo hi")
    )


def test_agent_flag_wins_over_the_implied_command_agent() -> None:
    spec = build_spec(None, SpecOverrides(instruction="x", agent="opencode", agent_command="a"))
    assert spec.agent.name == "opencode"


def test_no_file_and_no_instruction_is_an_error() -> None:
    with pytest.raises(SpecError, match="SPEC_FILE or --instruction"):
        build_spec(None, SpecOverrides(agent_command="true"))


@pytest.mark.parametrize(
    ("name", "text", "message"),
    [
        ("spec.txt", "task: {}", r"unknown extension '\.txt'"),
        ("spec.yaml", "task: [1\n", "not valid YAML"),
        ("spec.json", "{", "not valid JSON"),
        ("spec.toml", "task = ", "not valid TOML"),
        ("spec.yaml", "- 1\n", "expected a mapping, found list"),
        ("spec.yaml", "task: {instrction: x}\n", r"no field named \"instrction\""),
        ("spec.json", '{"agent_timeout": "soon"}', "agent_timeout"),
    ],
)
def test_bad_files_name_the_file_and_the_problem(
    tmp_path: Path, name: str, text: str, message: str
) -> None:
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(SpecError, match=message) as caught:
        build_spec(path, SpecOverrides())
    assert str(path) in str(caught.value)
    assert "\n" not in str(caught.value)


def test_a_missing_file_is_a_spec_error(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match="No such file"):
        load_spec_file(tmp_path / "absent.yaml")


def test_an_empty_file_is_an_empty_spec(tmp_path: Path) -> None:
    path = tmp_path / "empty.yaml"
    path.write_text("")
    spec = build_spec(path, SpecOverrides(instruction="x"))
    assert spec.task.instruction == "x"


def test_key_value_pairs() -> None:
    assert parse_pairs(["a=1", "b=x=y", "c="]) == {"a": "1", "b": "x=y", "c": ""}
    with pytest.raises(ValueError, match="expects KEY=VALUE, got 'novalue'"):
        parse_pairs(["novalue"])
    with pytest.raises(ValueError, match="expects KEY=VALUE, got '=1'"):
        parse_pairs(["=1"])
