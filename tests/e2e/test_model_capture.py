"""Through the real server: model turns captured exactly and live, secrets kept, traces made.

One server for the module, with the console span exporter on, so its output holds its
logs and every span: the upstream key must appear in none of them.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Iterator
from typing import Any

import grpc
import pytest
from rollout.v1 import rollout_pb2 as pb
from rollout.v1 import rollout_pb2_grpc as pb_grpc

from testing.fakes.llm_upstream import FakeUpstream, Reply, ToolCallReply, has_tools
from testing.server_process import ServerProcess, running
from tests.e2e.processes import eventually
from tests.telemetry.console_spans import console_spans

pytestmark = pytest.mark.e2e

UPSTREAM_KEY = "sk-e2e-upstream-secret-93c1"
UPSTREAM_MODEL = "fake-policy-8b"
CONTENT = "hello from the policy"
TRACE_ID = "5d4c3b2a191817161514131211100f0e"

# A scripted "agent": one chat call through whatever endpoint the harness exported.
CALL_MODEL = """python3 - <<'PY'
import json, os, urllib.request
request = urllib.request.Request(
    os.environ["OPENAI_BASE_URL"] + "/chat/completions",
    data=json.dumps({"model": os.environ["OPENAI_MODEL"],
                     "messages": [{"role": "user", "content": "MARKER"}]}).encode(),
    headers={"Authorization": "Bearer " + os.environ["OPENAI_API_KEY"],
             "Content-Type": "application/json"})
try:
    print(urllib.request.urlopen(request, timeout=30).read().decode())
except Exception as exc:
    print("call failed:", exc)
open("key-seen.txt", "w").write(os.environ["OPENAI_API_KEY"])
PY"""


@pytest.fixture(scope="module")
def traced_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    server = ServerProcess(
        tmp_path_factory.mktemp("traced-state"),
        env={"OTEL_TRACES_EXPORTER": "console", "OTEL_BSP_SCHEDULE_DELAY": "100"},
    )
    with running(server):
        yield server


@pytest.fixture
async def traced_stub(
    traced_server: ServerProcess,
) -> AsyncIterator[pb_grpc.RolloutServiceAsyncStub]:
    async with grpc.aio.insecure_channel(traced_server.target) as channel:
        yield pb_grpc.RolloutServiceStub(channel)


@pytest.fixture
async def upstream() -> AsyncIterator[FakeUpstream]:
    async with FakeUpstream(api_key=UPSTREAM_KEY, model=UPSTREAM_MODEL) as upstream:
        yield upstream


def endpoint(upstream: FakeUpstream) -> pb.Endpoint:
    return pb.Endpoint(base_url=upstream.base_url, api_key=UPSTREAM_KEY, model=UPSTREAM_MODEL)


async def watch_all(
    stub: pb_grpc.RolloutServiceAsyncStub, rollout_id: str
) -> list[pb.RolloutEvent]:
    request = pb.WatchRolloutRequest(rollout_id=rollout_id)
    return [response.event async for response in stub.WatchRollout(request)]


@pytest.mark.opencode
async def test_opencode_rollout_captures_exact_turns_live(
    traced_stub: pb_grpc.RolloutServiceAsyncStub,
    traced_server: ServerProcess,
    upstream: FakeUpstream,
) -> None:
    arguments = json.dumps({"filePath": "hello.txt", "content": CONTENT})
    upstream.script(Reply(tool_calls=[ToolCallReply("write", arguments)]), match=has_tools)
    spec = pb.RolloutSpec(
        task=pb.Task(instruction="Create hello.txt.", verify=[f"grep -qx '{CONTENT}' hello.txt"]),
        agent=pb.Agent(name="opencode"),
        endpoint=endpoint(upstream),
    )
    started = await traced_stub.StartRollout(pb.StartRolloutRequest(spec=spec))
    events = await watch_all(traced_stub, started.rollout.id)
    got = await traced_stub.GetRollout(pb.GetRolloutRequest(rollout_id=started.rollout.id))
    rollout = got.rollout

    assert rollout.status == pb.ROLLOUT_STATUS_SUCCEEDED, rollout.result.error
    assert rollout.result.reward == pytest.approx(1.0)
    turns = list(rollout.result.turns)
    assert len(turns) == len(upstream.sent) == 3
    assert [t.trainable for t in turns].count(False) == 1  # opencode's title call
    sent = sorted((s.prompt_token_ids, s.completion_token_ids, s.logprobs) for s in upstream.sent)
    captured = sorted(
        (list(t.prompt_token_ids), list(t.completion_token_ids), list(t.logprobs)) for t in turns
    )
    assert [ids[:2] for ids in captured] == [ids[:2] for ids in sent]
    for (_, _, got_logprobs), (_, _, sent_logprobs) in zip(captured, sent, strict=True):
        assert got_logprobs == pytest.approx(sent_logprobs, abs=1e-6)  # float32 on the wire
    assert all(t.token_ids_present for t in turns)
    # Turns are published as they complete: all of them before verification starts.
    kinds = [e.WhichOneof("payload") for e in events]
    verifying = next(
        i
        for i, e in enumerate(events)
        if e.HasField("phase") and e.phase.phase == pb.PHASE_VERIFYING
    )
    assert kinds[:verifying].count("turn") == 3
    assert any(e.output.tool_name == "write" for e in events if e.HasField("output"))
    # The key went upstream and nowhere else.
    assert all(r.headers["authorization"] == f"Bearer {UPSTREAM_KEY}" for r in upstream.requests)
    await eventually(lambda: '"name": "phase.agent"' in traced_server.text())
    for blob in (got.SerializeToString(), *(e.SerializeToString() for e in events)):
        assert UPSTREAM_KEY.encode() not in blob
    assert UPSTREAM_KEY not in traced_server.text()


async def test_sixteen_concurrent_rollouts_never_mix_turns(
    stub: pb_grpc.RolloutServiceAsyncStub, upstream: FakeUpstream
) -> None:
    async def one(i: int) -> pb.Rollout:
        spec = pb.RolloutSpec(
            task=pb.Task(instruction="call the model"),
            agent=pb.Agent(name="command", command=CALL_MODEL.replace("MARKER", f"marker-{i:02d}")),
            endpoint=endpoint(upstream),
        )
        response = await stub.RunRollout(pb.RunRolloutRequest(spec=spec))
        return response.rollout

    rollouts = await asyncio.gather(*(one(i) for i in range(16)))
    for i, rollout in enumerate(rollouts):
        assert rollout.status == pb.ROLLOUT_STATUS_SUCCEEDED, rollout.result.error
        assert len(rollout.result.turns) == 1
        (turn,) = rollout.result.turns
        assert turn.request_messages[0]["content"] == f"marker-{i:02d}"
        assert turn.upstream_status == 200
        assert rollout.result.files["key-seen.txt"] != UPSTREAM_KEY.encode()
    assert len(upstream.requests) == 16


async def test_the_forwarder_is_stopped_before_the_verifier_takes_the_sandbox_back(
    stub: pb_grpc.RolloutServiceAsyncStub, upstream: FakeUpstream
) -> None:
    """The service's own plumbing is gone when the agent's model access ends, so a
    processes-killed notice speaks of the agent's processes only: none here, one daemon there."""
    daemon = "(setsid sleep 300 >/dev/null 2>&1 &)"
    found = []
    for command in (CALL_MODEL.replace("MARKER", "x"), f"{daemon}\n{CALL_MODEL}"):
        spec = pb.RolloutSpec(
            task=pb.Task(instruction="call the model", verify=["true"]),
            agent=pb.Agent(name="command", command=command.replace("MARKER", "x")),
            endpoint=endpoint(upstream),
        )
        rollout = (await stub.RunRollout(pb.RunRolloutRequest(spec=spec))).rollout
        assert rollout.status == pb.ROLLOUT_STATUS_SUCCEEDED, rollout.result.error
        assert len(rollout.result.turns) == 1
        found.append(
            [e.notice.message for e in await watch_all(stub, rollout.id) if e.HasField("notice")]
        )
    assert not any("processes" in message for message in found[0]), found[0]
    assert any("killed 1 processes" in message for message in found[1]), found[1]


async def test_every_call_failing_upstream_is_upstream_llm(
    stub: pb_grpc.RolloutServiceAsyncStub, upstream: FakeUpstream
) -> None:
    upstream.script(Reply(status=503), Reply(status=503))
    twice = f"{CALL_MODEL}\n{CALL_MODEL}".replace("MARKER", "x")
    spec = pb.RolloutSpec(
        task=pb.Task(instruction="call the model", verify=["true"]),
        agent=pb.Agent(name="command", command=twice),
        endpoint=endpoint(upstream),
    )
    response = await stub.RunRollout(pb.RunRolloutRequest(spec=spec))
    rollout = response.rollout
    assert rollout.status == pb.ROLLOUT_STATUS_FAILED
    assert rollout.result.error.kind == pb.ERROR_KIND_UPSTREAM_LLM
    assert [t.upstream_status for t in rollout.result.turns] == [503, 503]


async def test_a_callers_trace_continues_into_the_rollout(
    traced_stub: pb_grpc.RolloutServiceAsyncStub, traced_server: ServerProcess
) -> None:
    spec = pb.RolloutSpec(
        task=pb.Task(instruction="x", setup=["true"], verify=["true"]),
        agent=pb.Agent(name="command", command="true"),
    )
    metadata = (("traceparent", f"00-{TRACE_ID}-00f067aa0ba902b7-01"),)
    await traced_stub.RunRollout(pb.RunRolloutRequest(spec=spec), metadata=metadata)

    def ours() -> list[dict[str, Any]]:
        spans = console_spans(traced_server.text())
        return [s for s in spans if s["context"]["trace_id"] == f"0x{TRACE_ID}"]

    await eventually(lambda: any(s["name"] == "rollout" for s in ours()))
    names = {s["name"] for s in ours()}
    assert {"rollout", "phase.creating_sandbox", "phase.setup", "phase.agent"} <= names
    assert {"phase.queued", "phase.verifying", "phase.collecting", "phase.teardown"} <= names
    rollout_span = next(s for s in ours() if s["name"] == "rollout")
    assert rollout_span["attributes"]["rollout.status"] == "succeeded"
