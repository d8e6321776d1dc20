"""Harbor build contexts within ROLLOUT_HARBOR_CONTEXTS_MAX_MB, through the real server on the
fake E2B cloud: a rollout waiting at sandbox creation keeps its task's context through a sweep
that another task's admission runs over the budget; once it has ended, the next admission over
the budget removes it; and the task admitted again gets its context back and runs on the same
template (same digest, same name, not built again)."""

from __future__ import annotations

import asyncio
import shutil
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

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
    """Three tasks of a fresh digest whose contexts hold 700 KiB each: two pass 1 MiB."""
    root = tmp_path / "tasks"
    marker = uuid.uuid4().hex
    for name in ("a", "b", "c"):
        shutil.copytree(HARBOR_TASKS / "needs_root", root / name)
        environment = root / name / "environment"
        (environment / "data.bin").write_bytes(f"{name}{marker}".encode() * 22 * 1024)
    return root


@pytest.fixture
async def server(cloud: FakeE2B, tmp_path: Path, task_root: Path) -> AsyncIterator[ServerProcess]:
    env = cloud.environment() | {
        "ROLLOUT_E2B_CREATES_PER_S": "0",
        "ROLLOUT_TASK_ROOTS": f'["{task_root}"]',
        "ROLLOUT_HARBOR_CONTEXTS_MAX_MB": "1",
    }
    server = ServerProcess(tmp_path / "state", env=env)
    await asyncio.to_thread(server.start)  # the fake cloud shares this event loop
    yield server
    assert await asyncio.to_thread(server.stop) == 0, server.text()


def _spec(path: str) -> pb.RolloutSpec:
    document = {
        "harborTask": {"path": path},
        "agent": {"name": "oracle"},
        "sandbox": {"backend": "e2b"},
    }
    return json_format.ParseDict(document, pb.RolloutSpec())


async def _ended(stub: pb_grpc.RolloutServiceAsyncStub, rollout_id: str) -> pb.Rollout:
    """The rollout once its events' stream has ended (at its terminal status) and the server
    no longer counts it live."""
    async for _ in stub.WatchRollout(pb.WatchRolloutRequest(rollout_id=rollout_id)):
        pass
    # Cancelling a terminal rollout returns it once the server has let it go (no longer live).
    response = await stub.CancelRollout(pb.CancelRolloutRequest(rollout_id=rollout_id))
    rollout: pb.Rollout = response.rollout
    return rollout


def _contexts(tmp_path: Path) -> set[str]:
    return {p.name for p in (tmp_path / "state" / "harbor").iterdir() if not p.name.startswith(".")}


async def test_a_context_in_use_survives_the_budget_and_a_pruned_one_comes_back(
    server: ServerProcess, cloud: FakeE2B, tmp_path: Path
) -> None:
    async with grpc.aio.insecure_channel(server.target) as channel:
        stub = pb_grpc.RolloutServiceStub(channel)
        cloud.hold_creates()
        first = (await stub.StartRollout(pb.StartRolloutRequest(spec=_spec("a")))).rollout
        await asyncio.wait_for(cloud.create_arrived.wait(), 600)  # its template is built
        digest_a = first.spec.harbor_task.digest
        second = (await stub.StartRollout(pb.StartRolloutRequest(spec=_spec("b")))).rollout
        digest_b = second.spec.harbor_task.digest
        # b's admission swept over the budget (1.4 MiB > 1 MiB): a is held by its rollout.
        assert _contexts(tmp_path) == {digest_a, digest_b}
        cloud.release_creates()
        for rollout in (first, second):
            ended = await _ended(stub, rollout.id)
            assert ended.status == pb.ROLLOUT_STATUS_SUCCEEDED, ended.result.error
            assert ended.result.reward == 1.0

        third = (await stub.StartRollout(pb.StartRolloutRequest(spec=_spec("c")))).rollout
        assert _contexts(tmp_path) == {third.spec.harbor_task.digest}  # a, then b, went
        await stub.CancelRollout(pb.CancelRolloutRequest(rollout_id=third.id))

        builds = len(cloud.templates.builds)
        again = (await stub.RunRollout(pb.RunRolloutRequest(spec=_spec("a")))).rollout
        assert again.status == pb.ROLLOUT_STATUS_SUCCEEDED, again.result.error
        assert again.result.reward == 1.0
        assert again.spec.harbor_task.digest == digest_a
        assert again.spec.sandbox.template == first.spec.sandbox.template
        assert len(cloud.templates.builds) == builds  # the template of a is reused
        assert digest_a in _contexts(tmp_path)
