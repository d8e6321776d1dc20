"""Harbor tasks on E2B through the real server: the task's Dockerfile becomes an E2B template
(built through the e2b SDK's template builder against the fake cloud, which realises it with
the image store), the sandbox runs on it, the oracle reaches reward 1, and the same task's
next rollout reuses the template instead of building it again."""

from __future__ import annotations

import asyncio
import io
import shutil
import tarfile
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from google.protobuf import json_format
from rollout.v1 import rollout_pb2 as pb
from rollout.v1 import rollout_pb2_grpc as pb_grpc

from testing.e2b_support import HARBOR_BUILDS, HARBOR_TASKS
from testing.fakes.e2b_cloud import FakeE2B
from testing.server_process import ServerProcess

pytestmark = HARBOR_BUILDS


@pytest.fixture
def task_root(tmp_path: Path) -> Path:
    """Copies of the fixture tasks, under a fresh name each (a fresh digest, a cold build)."""
    root = tmp_path / "tasks"
    root.mkdir()
    marker = uuid.uuid4().hex
    for name in ("needs_root", "multi_reward"):
        shutil.copytree(HARBOR_TASKS / name, root / name)
        with (root / name / "instruction.md").open("a") as instruction:
            instruction.write(f"\n{marker}\n")
    broken = root / "broken"
    shutil.copytree(HARBOR_TASKS / "needs_root", broken)
    (broken / "environment" / "Dockerfile").write_text(
        f"FROM rollout/base\nRUN echo {marker}-failed-here >&2 && exit 3\n"
    )
    return root


@pytest.fixture
def extra_env() -> dict[str, str]:
    """More server environment (a test parametrizes it)."""
    return {}


@pytest.fixture
async def stub(
    cloud: FakeE2B, tmp_path: Path, task_root: Path, extra_env: dict[str, str]
) -> AsyncIterator[pb_grpc.RolloutServiceAsyncStub]:
    env = (
        cloud.environment()
        | {
            "ROLLOUT_E2B_CREATES_PER_S": "0",
            "ROLLOUT_TASK_ROOTS": f'["{task_root}"]',
        }
        | extra_env
    )
    server = ServerProcess(tmp_path / "state", env=env)
    await asyncio.to_thread(server.start)  # the fake cloud shares this event loop
    async with grpc.aio.insecure_channel(server.target) as channel:
        yield pb_grpc.RolloutServiceStub(channel)
    assert await asyncio.to_thread(server.stop) == 0, server.text()


def _spec(path: str, agent: dict[str, Any], **fields: Any) -> pb.RolloutSpec:
    document = {"harborTask": {"path": path}, "agent": agent, "sandbox": {"backend": "e2b"}}
    return json_format.ParseDict(document | fields, pb.RolloutSpec())


async def _run(stub: pb_grpc.RolloutServiceAsyncStub, spec: pb.RolloutSpec) -> pb.Rollout:
    rollout: pb.Rollout = (await stub.RunRollout(pb.RunRolloutRequest(spec=spec))).rollout
    return rollout


async def test_a_harbor_task_reaches_reward_1_on_a_built_template_and_reuses_it(
    stub: pb_grpc.RolloutServiceAsyncStub, cloud: FakeE2B
) -> None:
    oracle = await _run(stub, _spec("needs_root", {"name": "oracle"}))
    assert oracle.status == pb.ROLLOUT_STATUS_SUCCEEDED, (
        oracle.result.error,
        oracle.result.verify_results,
        oracle.result.agent_log_tail,
    )
    assert oracle.result.reward == 1.0
    template = oracle.spec.sandbox.template
    assert template == f"harbor-task-{oracle.spec.harbor_task.digest[:24]}"
    assert not oracle.spec.sandbox.image
    assert cloud.records[oracle.result.sandbox_id].template == template
    assert [build.name for build in cloud.templates.builds] == [template]

    no_op = await _run(stub, _spec("needs_root", {"name": "command", "command": "true"}))
    assert no_op.status == pb.ROLLOUT_STATUS_SUCCEEDED, no_op.result.error
    assert no_op.result.reward == 0.0
    assert cloud.records[no_op.result.sandbox_id].template == template
    assert len(cloud.templates.builds) == 1  # the second rollout found the template built
    assert cloud.live_ids() == set()


def _uploaded(task: Path) -> pb.RolloutSpec:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        tar.add(task, arcname=task.name)
    spec = _spec("", {"name": "oracle"})
    spec.harbor_task.archive = buffer.getvalue()
    return spec


async def test_an_uploaded_task_is_not_built_on_e2b_by_default(
    stub: pb_grpc.RolloutServiceAsyncStub, cloud: FakeE2B, task_root: Path
) -> None:
    """Each template build is paid for on the operator's E2B account: uploads need opt-in."""
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await _run(stub, _uploaded(task_root / "needs_root"))
    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    details = refused.value.details() or ""
    assert "spec.harbor_task.archive" in details
    assert "ROLLOUT_HARBOR_UPLOAD_BUILDS" in details
    assert cloud.templates.builds == []


@pytest.mark.parametrize("extra_env", [{"ROLLOUT_HARBOR_UPLOAD_BUILDS": "true"}])
async def test_an_uploaded_task_builds_on_e2b_and_shares_the_template_of_its_content(
    stub: pb_grpc.RolloutServiceAsyncStub, cloud: FakeE2B, task_root: Path
) -> None:
    """When the operator allows it, an uploaded task's Dockerfile is built as a template; same
    content, same template."""
    spec = _uploaded(task_root / "needs_root")
    uploaded = await _run(stub, spec)
    assert uploaded.result.reward == 1.0, uploaded.result.error
    by_path = await _run(stub, _spec("needs_root", {"name": "oracle"}))
    assert by_path.result.reward == 1.0, by_path.result.error
    assert by_path.spec.sandbox.template == uploaded.spec.sandbox.template
    assert len(cloud.templates.builds) == 1


async def test_workdir_env_and_multi_dimensional_reward_on_e2b(
    stub: pb_grpc.RolloutServiceAsyncStub, cloud: FakeE2B
) -> None:
    spec = _spec("multi_reward", {"name": "oracle"}, task={"rewardKey": "passed"})
    rollout = await _run(stub, spec)
    assert rollout.status == pb.ROLLOUT_STATUS_SUCCEEDED, (
        rollout.result.error,
        rollout.result.verify_results,
    )
    assert rollout.spec.task.workdir == "/work"  # made by the Dockerfile's RUN step
    assert dict(rollout.result.metrics) == {"passed": 1.0, "heading": 1.0, "mentions_done": 1.0}


async def test_a_dockerfile_that_fails_to_build_is_a_sandbox_error_with_its_log(
    stub: pb_grpc.RolloutServiceAsyncStub, cloud: FakeE2B
) -> None:
    rollout = await _run(stub, _spec("broken", {"name": "oracle"}))
    assert rollout.status == pb.ROLLOUT_STATUS_FAILED
    error = rollout.result.error
    assert error.kind == pb.ERROR_KIND_SANDBOX
    assert "building the task's E2B template harbor-task-" in error.message
    assert "-failed-here" in error.message.split("build log (last", 1)[1]
    assert [build.status for build in cloud.templates.builds] == ["error"]
    assert cloud.records == {}  # no sandbox was created


async def test_a_callers_own_template_gets_no_root_so_tests_at_absolute_paths_are_refused(
    stub: pb_grpc.RolloutServiceAsyncStub, cloud: FakeE2B
) -> None:
    """A template the caller names was not built from the task with root as its user: the
    task's /tests and /solution cannot be staged there, so admission says so."""
    spec = _spec("needs_root", {"name": "oracle"}, sandbox={"backend": "e2b", "template": "t"})
    with pytest.raises(grpc.aio.AioRpcError) as error:
        await _run(stub, spec)
    assert error.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "spec.task.solution_files" in (error.value.details() or "")
    assert cloud.templates.builds == []
