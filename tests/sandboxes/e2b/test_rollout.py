"""Whole rollouts with `sandbox.backend = "e2b"`: a real server subprocess over gRPC, its e2b
SDK pointed at the fake E2B cloud that this test runs on loopback."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import pytest
from rollout.v1 import rollout_pb2 as pb
from rollout.v1 import rollout_pb2_grpc as pb_grpc

from testing.e2b_support import eventually
from testing.fakes.e2b_cloud import FakeE2B
from testing.fakes.envd import FakeSandbox
from testing.server_process import ServerProcess
from testing.specs import command_spec, terminal

pytestmark = pytest.mark.e2e


@pytest.fixture
async def stub(cloud: FakeE2B, tmp_path: Path) -> AsyncIterator[pb_grpc.RolloutServiceAsyncStub]:
    env = cloud.environment() | {"ROLLOUT_E2B_CREATES_PER_S": "0"}
    server = ServerProcess(tmp_path / "state", env=env)
    # The fake cloud shares this event loop: never block it on the server.
    await asyncio.to_thread(server.start)
    async with grpc.aio.insecure_channel(server.target) as channel:
        yield pb_grpc.RolloutServiceStub(channel)
    assert await asyncio.to_thread(server.stop) == 0, server.text()


def _e2b_spec(
    agent: str, *, setup: tuple[str, ...] = (), verify: tuple[str, ...] = ()
) -> pb.RolloutSpec:
    sandbox = {"backend": "e2b", "template": "tmpl"}
    return command_spec(agent, setup=setup, verify=verify, sandbox=sandbox)


async def test_rollout_runs_on_e2b_and_its_sandbox_is_killed(
    stub: pb_grpc.RolloutServiceAsyncStub, cloud: FakeE2B
) -> None:
    spec = _e2b_spec(
        "cat in.txt > out.txt",
        setup=("echo hello > in.txt",),
        verify=("grep -q hello out.txt", "false"),
    )
    rollout = (await stub.RunRollout(pb.RunRolloutRequest(spec=spec))).rollout
    assert rollout.status == pb.ROLLOUT_STATUS_SUCCEEDED, rollout.result.error
    assert rollout.result.reward == pytest.approx(0.5)
    assert rollout.result.sandbox_id in cloud.records
    assert cloud.records[rollout.result.sandbox_id].template == "tmpl"
    assert cloud.live_ids() == set()


async def test_sandbox_dying_mid_agent_fails_the_rollout_with_kind_sandbox(
    stub: pb_grpc.RolloutServiceAsyncStub, cloud: FakeE2B
) -> None:
    started = await stub.StartRollout(pb.StartRolloutRequest(spec=_e2b_spec("sleep 300")))
    await eventually(lambda: _running(cloud, "sleep 300"), timeout_s=30)
    (sandbox_id,) = cloud.live_ids()
    cloud.vanish(sandbox_id)
    rollout = await _until_terminal(stub, started.rollout.id)
    assert rollout.status == pb.ROLLOUT_STATUS_FAILED
    assert rollout.result.error.kind == pb.ERROR_KIND_SANDBOX


async def test_cancel_kills_the_e2b_sandbox(
    stub: pb_grpc.RolloutServiceAsyncStub, cloud: FakeE2B
) -> None:
    started = await stub.StartRollout(pb.StartRolloutRequest(spec=_e2b_spec("sleep 300")))
    await eventually(lambda: _running(cloud, "sleep 300"), timeout_s=30)
    await stub.CancelRollout(pb.CancelRolloutRequest(rollout_id=started.rollout.id))
    rollout = await _until_terminal(stub, started.rollout.id)
    assert rollout.status == pb.ROLLOUT_STATUS_CANCELLED
    await eventually(lambda: not cloud.live_ids())


async def test_a_cancel_while_the_fresh_verifier_runs_leaves_no_sandbox_nor_snapshot(
    stub: pb_grpc.RolloutServiceAsyncStub, cloud: FakeE2B
) -> None:
    spec = _e2b_spec("echo done > b.txt", setup=("true",), verify=("sleep 300",))
    started = await stub.StartRollout(pb.StartRolloutRequest(spec=spec))
    await eventually(lambda: _running(cloud, "sleep 300"), timeout_s=30)
    [snapshot] = cloud.snapshots
    verifying = [r for r in cloud.records.values() if _running_in(r.sandbox, "sleep 300")]
    assert [record.template for record in verifying] == [snapshot]  # in the verifier's sandbox
    await stub.CancelRollout(pb.CancelRolloutRequest(rollout_id=started.rollout.id))
    rollout = await _until_terminal(stub, started.rollout.id)
    assert rollout.status == pb.ROLLOUT_STATUS_CANCELLED
    await eventually(lambda: not cloud.live_ids())
    assert cloud.template_ids() == set()


def _running(cloud: FakeE2B, text: str) -> bool:
    return any(_running_in(record.sandbox, text) for record in cloud.records.values())


def _running_in(sandbox: FakeSandbox, text: str) -> bool:
    return any(
        text in " ".join(process.config.get("args", [])) for process in sandbox.processes.values()
    )


async def _until_terminal(stub: pb_grpc.RolloutServiceAsyncStub, rollout_id: str) -> pb.Rollout:
    async with asyncio.timeout(60):
        while True:
            got = await stub.GetRollout(pb.GetRolloutRequest(rollout_id=rollout_id))
            rollout = got.rollout
            if terminal(rollout):
                return rollout
            await asyncio.sleep(0.1)
