"""The spec flags of `rollout run` and `rollout group run` reach the server: seen in the
stored spec and inside the sandbox. Real server, real sandboxes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from rollout.v1 import rollout_pb2 as pb
from rollout_client import RolloutClient
from rollout_client.cli import EXIT_ERROR, app
from typer.testing import CliRunner, Result

pytestmark = pytest.mark.e2e

runner = CliRunner()


def rollout(*args: str) -> Result:
    return runner.invoke(app, list(args), env={"COLUMNS": "300"})


def test_env_file_and_image_reach_the_sandbox(server_target: str, tmp_path: Path) -> None:
    data = tmp_path / "data.txt"
    data.write_text("hi\n")
    tool = tmp_path / "tool.sh"
    tool.write_text("#!/bin/sh\necho tool ran\n")
    tool.chmod(0o755)

    done = rollout(
        "run", "--target", server_target, "--json",
        "--instruction", "use the files",
        "--env", "FOO=bar=baz",
        "--file", str(data),
        "--file", f"{tool}:bin/tool.sh",
        "--agent-command", 'echo "FOO is $FOO"; ./bin/tool.sh',
        "--verify", "grep -qx hi data.txt",
        "--image", "rollout/base",
    )  # fmt: skip

    assert done.exit_code == 0, done.output
    shown = json.loads(done.stdout)
    assert shown["result"]["reward"] == 1.0
    tail = shown["result"]["agentLogTail"]
    assert "FOO is bar=baz" in tail
    assert "tool ran" in tail, "the staged script kept its executable mode"
    with RolloutClient(server_target) as client:
        spec = client.get(shown["id"]).spec
    assert dict(spec.task.env) == {"FOO": "bar=baz"}
    assert dict(spec.task.files) == {"data.txt": b"hi\n", "bin/tool.sh": tool.read_bytes()}
    assert dict(spec.task.file_modes) == {"bin/tool.sh": "755"}
    assert spec.sandbox.image == "rollout/base"


def test_group_run_takes_the_endpoint_and_task_flags(server_target: str) -> None:
    # `group run` took a spec file and nothing else: no endpoint flags at all.
    done = rollout(
        "group", "run", "--n", "2", "--target", server_target, "--json",
        "--instruction", "x", "--agent-command", 'test "$FOO" = bar', "--verify", "true",
        "--env", "FOO=bar",
        "--base-url", "http://127.0.0.1:9/v1", "--model", "test-model",
    )  # fmt: skip

    assert done.exit_code == 0, done.output
    # JSON lines: a WatchGroupResponse per member as it ends, then the group's.
    lines = [json.loads(line) for line in done.stdout.splitlines()]
    assert [list(line) for line in lines] == [["member"], ["member"], ["group"]]
    group = lines[-1]["group"]
    with RolloutClient(server_target) as client:
        stored = client.get_group(group["id"])
        members = [client.get(m.rollout_id) for m in stored.members]
    assert stored.spec.spec.endpoint.base_url == "http://127.0.0.1:9/v1"
    assert stored.spec.spec.endpoint.model == "test-model"
    assert [m.status for m in members] == [pb.ROLLOUT_STATUS_SUCCEEDED] * 2
    assert [m.result.agent_exit_code for m in members] == [0, 0], "FOO reached each member"


def test_agent_options_reach_the_server(server_target: str) -> None:
    # The command harness takes no options: the server's refusal names each one it was sent.
    refused = rollout(
        "run", "--target", server_target, "--instruction", "x", "--agent-command", "true",
        "--agent-option", "retries=3", "--agent-option", "mode=fast",
    )  # fmt: skip

    assert refused.exit_code == EXIT_ERROR, refused.output
    said = refused.stderr
    assert said.startswith("error: invalid request: ")
    assert "spec.agent.options.retries: the command agent takes no options" in said
    assert "spec.agent.options.mode" in said
