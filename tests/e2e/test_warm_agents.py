"""opencode, claude-code and codex started ahead (`ROLLOUT_LOCAL_WARM_AGENTS`, on by default)
through the real server at its defaults: the same task three times, the first cold (its launch
is learnt, and a warm sandbox starts it), later ones handed to an agent started ahead (its INFO
line in the server's log, never a timing), each with the events and turns of the cold one."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from google.protobuf.json_format import MessageToDict
from rollout.v1 import rollout_pb2 as pb
from rollout.v1 import rollout_pb2_grpc as pb_grpc

from testing.fakes.llm_upstream import FakeUpstream
from testing.server_process import ServerProcess

pytestmark = [pytest.mark.e2e, pytest.mark.opencode, pytest.mark.agents]

KEY = "sk-warm-agents-3c9e"
MODEL = "fake-policy-warm"
HANDED_OVER = "was started ahead: handed its instruction"


@pytest.fixture
async def upstream() -> AsyncIterator[FakeUpstream]:
    async with FakeUpstream(api_key=KEY, model=MODEL) as upstream:
        yield upstream


def _same(value: Any) -> Any:
    """`value` with what differs between any two rollouts blanked: ids, times, durations."""
    if isinstance(value, str):
        value = re.sub(r"\b(call|ses|msg|prt)_[A-Za-z0-9]+|\b1[0-9]{12}\b", "<id>", value)
        return re.sub(r"[0-9a-f]{8}-[0-9a-f-]{27}|\d{4}-\d\d-\d\dT[0-9:.]+Z", "<id>", value)
    if isinstance(value, dict):
        varying = {"time", "startTime", "latency", "timeToFirstToken", "paused", "usage", "seq"}
        return {k: _same(v) for k, v in value.items() if k not in varying and "Id" not in k}
    if isinstance(value, list):
        return [_same(item) for item in value]
    return value


async def _run(stub: pb_grpc.RolloutServiceAsyncStub, upstream: FakeUpstream, agent: str) -> Any:
    spec = pb.RolloutSpec(
        task=pb.Task(instruction="Say hi.", verify=["true"]),
        agent=pb.Agent(name=agent),
        endpoint=pb.Endpoint(base_url=upstream.base_url, api_key=KEY, model=MODEL),
    )
    rollout = (await stub.RunRollout(pb.RunRolloutRequest(spec=spec))).rollout
    assert rollout.status == pb.ROLLOUT_STATUS_SUCCEEDED, rollout.result.error
    events = []
    async for response in stub.WatchRollout(pb.WatchRolloutRequest(rollout_id=rollout.id)):
        event = MessageToDict(response.event)
        if "phase" in event or "output" in event:
            events.append(event)
    # opencode sends its title call and its answer's call at once: which the proxy numbers
    # first is a race, warm or cold: turns are compared by model (a stable sort: in order
    # within one).
    turns = [MessageToDict(turn) for turn in rollout.result.turns]
    for turn in turns:
        turn.pop("index", None)
    turns.sort(key=lambda turn: str(turn.get("requestedModel", "")))
    return _same({"events": events, "turns": turns})


@pytest.mark.parametrize("agent", ["opencode", "claude-code", "codex"])
async def test_rollouts_after_the_first_of_a_kind_run_in_an_agent_started_ahead(
    tmp_path: Path, upstream: FakeUpstream, agent: str
) -> None:
    server = ServerProcess(tmp_path / "state")
    target = server.start()
    try:
        async with grpc.aio.insecure_channel(target) as channel:
            stub = pb_grpc.RolloutServiceStub(channel)
            first = await _run(stub, upstream, agent)  # cold: its plan is learnt
            assert server.text().count(HANDED_OVER) == 0
            # Each made while the one before ran: ready when it is claimed, if not settled.
            later = [await _run(stub, upstream, agent) for _ in range(2)]
            assert server.text().count(HANDED_OVER) == 2, server.text()[-3000:]
    finally:
        assert server.stop() == 0, server.text()[-3000:]
    if agent == "opencode":
        assert len(first["turns"]) == 2  # the title and the answer
    assert later == [first, first]
