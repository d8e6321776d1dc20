"""WatchRollout: live, replayed, shared by many watchers, label-wide, and across a restart."""

from __future__ import annotations

import asyncio

import grpc
import pytest
from rollout.v1 import rollout_pb2 as pb
from rollout.v1 import rollout_pb2_grpc as pb_grpc

from testing.server_process import ServerProcess
from testing.specs import command_spec

pytestmark = pytest.mark.e2e


async def collect(
    stub: pb_grpc.RolloutServiceAsyncStub, rollout_id: str, after_seq: int = 0
) -> list[pb.RolloutEvent]:
    request = pb.WatchRolloutRequest(rollout_id=rollout_id, after_seq=after_seq)
    return [response.event async for response in stub.WatchRollout(request)]


def kinds(events: list[pb.RolloutEvent]) -> list[str]:
    return [str(event.WhichOneof("payload")) for event in events]


async def test_live_watch_sees_every_phase_in_order(stub: pb_grpc.RolloutServiceAsyncStub) -> None:
    spec = command_spec("sleep 0.5; echo agent-said-this", setup=("echo s",), verify=("true",))
    started = await stub.StartRollout(pb.StartRolloutRequest(spec=spec))
    events = await collect(stub, started.rollout.id)
    assert [e.seq for e in events] == list(range(1, len(events) + 1))
    phases = [e.phase.phase for e in events if e.HasField("phase")]
    assert phases == [
        pb.PHASE_QUEUED,
        pb.PHASE_CREATING_SANDBOX,
        pb.PHASE_PREPARING_AGENT,
        pb.PHASE_SETUP,
        pb.PHASE_AGENT,
        pb.PHASE_VERIFYING,
        pb.PHASE_COLLECTING,
        pb.PHASE_TEARDOWN,
    ]
    commands = [e.command for e in events if e.HasField("command")]
    assert [(c.stage, c.index) for c in commands] == [
        (pb.COMMAND_STAGE_SETUP, 0),
        (pb.COMMAND_STAGE_VERIFY, 0),
    ]
    output = "".join(e.output.text for e in events if e.HasField("output"))
    assert "agent-said-this" in output
    assert kinds(events)[-1] == "finished"
    assert events[-1].finished.status == pb.ROLLOUT_STATUS_SUCCEEDED
    assert events[-1].finished.result.reward == pytest.approx(1.0)


async def test_two_watchers_see_identical_sequences(stub: pb_grpc.RolloutServiceAsyncStub) -> None:
    spec = command_spec("for i in 1 2 3 4 5; do echo line-$i; sleep 0.1; done", verify=("true",))
    started = await stub.StartRollout(pb.StartRolloutRequest(spec=spec))
    first, second = await asyncio.gather(
        collect(stub, started.rollout.id), collect(stub, started.rollout.id)
    )
    assert [e.SerializeToString() for e in first] == [e.SerializeToString() for e in second]
    assert kinds(first)[-1] == "finished"


async def test_replay_after_completion_and_after_seq(stub: pb_grpc.RolloutServiceAsyncStub) -> None:
    done = await stub.RunRollout(pb.RunRolloutRequest(spec=command_spec(verify=("true",))))
    everything = await collect(stub, done.rollout.id)
    assert kinds(everything)[-1] == "finished"
    tail = await collect(stub, done.rollout.id, after_seq=3)
    assert [e.seq for e in tail] == [e.seq for e in everything[3:]]


async def test_label_watch_streams_matching_rollouts_only(
    stub: pb_grpc.RolloutServiceAsyncStub,
) -> None:
    request = pb.WatchRolloutRequest(labels={"team": "dash-test"})
    seen: list[pb.RolloutEvent] = []

    async def watch() -> None:
        async for response in stub.WatchRollout(request):
            seen.append(response.event)
            if response.event.HasField("finished"):
                return

    watcher = asyncio.create_task(watch())
    await asyncio.sleep(0.3)
    other = await stub.RunRollout(pb.RunRolloutRequest(spec=command_spec(labels={"team": "x"})))
    mine = await stub.RunRollout(
        pb.RunRolloutRequest(spec=command_spec(labels={"team": "dash-test", "run": "1"}))
    )
    await asyncio.wait_for(watcher, 30)
    assert {e.rollout_id for e in seen} == {mine.rollout.id}
    assert other.rollout.id not in {e.rollout_id for e in seen}
    assert [e.seq for e in seen] == list(range(1, len(seen) + 1))


async def test_watch_replays_after_server_restart(fresh_server: ServerProcess) -> None:
    target = fresh_server.start()
    async with grpc.aio.insecure_channel(target) as channel:
        stub = pb_grpc.RolloutServiceStub(channel)
        done = await stub.RunRollout(pb.RunRolloutRequest(spec=command_spec(verify=("true",))))
        before = await collect(stub, done.rollout.id)
    assert fresh_server.stop() == 0
    target = fresh_server.start()
    async with grpc.aio.insecure_channel(target) as channel:
        stub = pb_grpc.RolloutServiceStub(channel)
        after = await collect(stub, done.rollout.id)
        got = await stub.GetRollout(pb.GetRolloutRequest(rollout_id=done.rollout.id))
    assert [e.SerializeToString() for e in after] == [e.SerializeToString() for e in before]
    assert got.rollout.result.reward == pytest.approx(1.0)
