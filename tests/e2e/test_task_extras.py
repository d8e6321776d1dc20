"""Through the real server: an inline task's env, file modes, workdir, verify timeout and
solution files (the oracle agent). On main none of these fields exist."""

from __future__ import annotations

import base64
import os
from typing import Any

import grpc
import pytest
from rollout.v1 import rollout_pb2 as pb
from rollout.v1 import rollout_pb2_grpc as pb_grpc

from testing.specs import command_spec

pytestmark = pytest.mark.e2e


def _b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


async def _run(stub: pb_grpc.RolloutServiceAsyncStub, spec: pb.RolloutSpec) -> pb.Rollout:
    response = await stub.RunRollout(pb.RunRolloutRequest(spec=spec))
    rollout: pb.Rollout = response.rollout
    return rollout


async def test_env_modes_and_workdir_reach_each_step(
    stub: pb_grpc.RolloutServiceAsyncStub,
) -> None:
    task: dict[str, Any] = {
        "instruction": "x",
        "setup": ['echo "setup:$WHERE:$ONLY_VERIFY" > setup.txt', "./run.sh > ran.txt"],
        "verify": ['test "$WHERE:$ONLY_VERIFY" = "task:verifier"', "test -x check.sh"],
        "files": {"run.sh": _b64("#!/bin/sh\necho ran in $(pwd)\n"), "data.txt": _b64("d\n")},
        "verifierFiles": {"check.sh": _b64("true\n")},
        "fileModes": {"run.sh": "755", "check.sh": "700", "data.txt": "600"},
        "env": {"WHERE": "task"},
        "verifierEnv": {"ONLY_VERIFY": "verifier"},
        "workdir": "/home/user/project",
    }
    spec = command_spec('echo "agent:$WHERE:$ONLY_VERIFY" > agent.txt; stat -c %a data.txt > m')
    spec.task.CopyFrom(command_spec(task=task).task)
    rollout = await _run(stub, spec)
    assert rollout.status == pb.ROLLOUT_STATUS_SUCCEEDED, rollout.result.error
    files = rollout.result.files  # collected from the task's workdir
    assert files["setup.txt"] == b"setup:task:\n"
    assert files["ran.txt"] == b"ran in /home/user/project\n"
    assert files["agent.txt"] == b"agent:task:\n"
    assert files["m"] == b"600\n"
    assert rollout.result.reward == 1.0
    assert "check.sh" not in files


async def test_verify_has_its_own_timeout(stub: pb_grpc.RolloutServiceAsyncStub) -> None:
    spec = command_spec(setup=("sleep 2",), verify=("sleep 30",))
    spec.command_timeout.FromSeconds(20)
    spec.verify_timeout.FromSeconds(1)
    rollout = await _run(stub, spec)
    assert rollout.result.setup_results[0].exit_code == 0
    assert rollout.result.verify_results[0].timed_out
    assert rollout.result.reward == 0.0


@pytest.mark.skipif(os.geteuid() != 0, reason="image sandboxes need a root server")
async def test_solution_files_reach_the_oracle_only(stub: pb_grpc.RolloutServiceAsyncStub) -> None:
    task: dict[str, Any] = {
        "instruction": "x",
        "verify": ["grep -qx 42 /app/answer.txt"],
        "solutionFiles": {"solve.sh": _b64('echo "$ANSWER" > answer.txt\n')},
        "solutionEnv": {"ANSWER": "42"},
        "workdir": "/app",
    }
    oracle = command_spec(agent={"name": "oracle"}, task=task, sandbox={"image": "rollout/base"})
    peeking = command_spec(
        "ls -la /solution > peek.txt 2>&1; echo $ANSWER >> peek.txt",
        task=task,
        sandbox={"image": "rollout/base"},
    )
    solved, peeked = await _run(stub, oracle), await _run(stub, peeking)
    assert solved.result.reward == 1.0, solved.result.error
    assert peeked.result.reward == 0.0
    assert b"No such file" in peeked.result.files["peek.txt"]


@pytest.mark.skipif(os.geteuid() != 0, reason="image sandboxes need a root server")
async def test_an_oracle_group_gets_its_solution_over_the_shared_setup(
    stub: pb_grpc.RolloutServiceAsyncStub,
) -> None:
    """Members start from the template's snapshot, which has no solution (the template is no
    oracle's); each oracle member still gets it staged. The template's setup ran in the
    task's workdir, with the task's env, as a lone rollout's does."""
    task: dict[str, Any] = {
        "instruction": "x",
        "setup": ["echo $PREPARED > prepared.txt"],
        "env": {"PREPARED": "prepared"},
        "verify": ["grep -qx 42 /app/answer.txt && grep -qx prepared /app/prepared.txt"],
        "solutionFiles": {"solve.sh": _b64('echo "$ANSWER" > answer.txt\n')},
        "solutionEnv": {"ANSWER": "42"},
        "workdir": "/app",
    }
    spec = command_spec(agent={"name": "oracle"}, task=task, sandbox={"image": "rollout/base"})
    group = (await stub.RunGroup(pb.RunGroupRequest(spec=pb.GroupSpec(spec=spec, n=2)))).group
    assert group.status == pb.GROUP_STATUS_COMPLETED, group
    assert group.template_setups == 1
    assert group.stats.rewarded == 2
    assert group.stats.reward_mean == 1.0


@pytest.mark.parametrize(
    ("task", "field"),
    [
        ({"env": {"1X": "v"}}, "spec.task.env['1X']"),
        ({"env": {"HOME": "/x"}}, "spec.task.env['HOME']"),
        ({"files": {"a": ""}, "fileModes": {"a": "rwx"}}, "spec.task.file_modes['a']"),
        ({"fileModes": {"run.sh": "755"}}, "spec.task.file_modes['run.sh']"),
        ({"files": {"a": ""}, "fileModes": {"a": "4755"}}, "spec.task.file_modes['a']"),
        ({"workdir": "app"}, "spec.task.workdir"),
        ({"workdir": "/app/../etc"}, "spec.task.workdir"),
        ({"solutionFiles": {"../x": ""}}, "spec.task.solution_files['../x']"),
    ],
)
async def test_bad_values_are_invalid_argument_naming_the_field(
    stub: pb_grpc.RolloutServiceAsyncStub, task: dict[str, Any], field: str
) -> None:
    spec = command_spec(task=task)
    with pytest.raises(grpc.aio.AioRpcError) as error:
        await _run(stub, spec)
    assert error.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert field in (error.value.details() or "")


async def test_what_needs_a_root_of_its_own_is_refused_on_host(
    stub: pb_grpc.RolloutServiceAsyncStub,
) -> None:
    spec = command_spec(
        task={"solutionFiles": {"solve.sh": ""}, "verifierFiles": {"/tests/t.sh": ""}},
        sandbox={"image": "host"},
    )
    with pytest.raises(grpc.aio.AioRpcError) as error:
        await _run(stub, spec)
    details = error.value.details() or ""
    assert "spec.task.solution_files" in details
    assert "spec.task.verifier_files['/tests/t.sh']" in details


@pytest.mark.skipif(os.geteuid() != 0, reason="image sandboxes need a root server")
async def test_the_root_as_workdir_runs_there_and_collects_nothing(
    stub: pb_grpc.RolloutServiceAsyncStub,
) -> None:
    spec = command_spec(
        "pwd > /tmp/pwd.txt",
        task={"workdir": "/", "files": {"seed.txt": _b64("s\n")}},
        verify=('test "$(cat /tmp/pwd.txt)" = / && test -f /seed.txt',),
        sandbox={"image": "rollout/base"},
    )
    rollout = await _run(stub, spec)
    assert rollout.result.reward == 1.0, rollout.result.verify_results
    assert dict(rollout.result.files) == {}
