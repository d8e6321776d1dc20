"""Reward integrity on E2B: a real server over gRPC, its e2b SDK pointed at the fake cloud
(whose sandboxes are pid namespaces, as VMs are). A forged reward and a daemon that
replaces the hidden test during VERIFYING cannot move the reward."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import pytest
from rollout.v1 import rollout_pb2 as pb
from rollout.v1 import rollout_pb2_grpc as pb_grpc

from testing.fakes.e2b_cloud import FakeE2B
from testing.server_process import ServerProcess
from tests.e2e.cheats import DAEMON, FORGE, failing_task, notices

pytestmark = pytest.mark.e2e


@pytest.fixture
async def stub(cloud: FakeE2B, tmp_path: Path) -> AsyncIterator[pb_grpc.RolloutServiceAsyncStub]:
    env = cloud.environment() | {"ROLLOUT_E2B_CREATES_PER_S": "0"}
    server = ServerProcess(tmp_path / "state", env=env)
    await asyncio.to_thread(server.start)  # the fake cloud shares this event loop
    async with grpc.aio.insecure_channel(server.target) as channel:
        yield pb_grpc.RolloutServiceStub(channel)
    assert await asyncio.to_thread(server.stop) == 0, server.text()


def _on_e2b(spec: pb.RolloutSpec) -> pb.RolloutSpec:
    spec.sandbox.backend = "e2b"
    spec.sandbox.template = "tmpl"
    return spec


@pytest.mark.parametrize("cheat", ["forged reward", "daemon"])
async def test_the_agent_cannot_move_its_reward_on_e2b(
    stub: pb_grpc.RolloutServiceAsyncStub, cloud: FakeE2B, cheat: str
) -> None:
    spec = _on_e2b(failing_task(FORGE if cheat == "forged reward" else DAEMON))
    spec.task.verify[:] = [f"sleep 1; {spec.task.verify[0]}"]  # time for a live daemon

    rollout = (await stub.RunRollout(pb.RunRolloutRequest(spec=spec))).rollout

    assert rollout.status == pb.ROLLOUT_STATUS_SUCCEEDED, rollout.result.error
    assert rollout.result.reward == 0.0
    assert "stolen.txt" not in rollout.result.files
    found = await notices(stub, rollout.id)
    topic = "verifier.leftovers" if cheat == "forged reward" else "verifier.processes_killed"
    assert topic in found
    assert cloud.live_ids() == set()
