"""Through the real server and a real sandbox: what the agent sends cannot sink its result,
and an upstream echoing the key gets it stored nowhere (issue 21).

The server runs with a 16 MiB gRPC message limit, a 1 MiB per-turn cap and a 2 MiB rollout
budget, so three 8 MiB bodies (24 MiB: RESOURCE_EXHAUSTED before the cut) stay fast.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import grpc
import pytest
from rollout.v1 import rollout_pb2 as pb
from rollout.v1 import rollout_pb2_grpc as pb_grpc

from testing.fakes.llm_upstream import FakeUpstream, Reply
from testing.server_process import ServerProcess, resident_bytes, running
from testing.specs import PATHS, POST, command_spec

pytestmark = pytest.mark.e2e

MIB = 1024 * 1024
KEY = "sk-e2e-bounds-secret-7f2a"
MESSAGE_LIMIT = 16 * MIB
TURN_CAP = 1 * MIB
ROLLOUT_BUDGET = 2 * MIB
BODY_BYTES = 8 * MIB
RETURNED_BODY_BYTES = 24 * MIB
"""Each body of the rollouts whose memory must come back once they ended."""

# The agent: a streamed and a unary chat call whose answers echo the key.
ECHO = """python3 - <<'PY'
import json, os, urllib.request
for stream in (True, False):
    body = {"model": os.environ["OPENAI_MODEL"], "stream": stream,
            "messages": [{"role": "user", "content": "echo"}]}
    request = urllib.request.Request(os.environ["OPENAI_BASE_URL"] + "/chat/completions",
        data=json.dumps(body).encode(),
        headers={"Authorization": "Bearer " + os.environ["OPENAI_API_KEY"],
                 "Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=60) as response:
        response.read()  # the whole answer, as an agent reads it
    print(response.status, flush=True)
PY"""


@pytest.fixture(scope="module")
def bounded_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    server = ServerProcess(
        tmp_path_factory.mktemp("bounds-state"),
        env={
            "ROLLOUT_MAX_MESSAGE_BYTES": str(MESSAGE_LIMIT),
            "ROLLOUT_PROXY_TURN_RECORD_BYTES": str(TURN_CAP),
            "ROLLOUT_PROXY_ROLLOUT_RECORD_BYTES": str(ROLLOUT_BUDGET),
        },
    )
    with running(server):
        yield server


@pytest.fixture
async def stub(bounded_server: ServerProcess) -> AsyncIterator[pb_grpc.RolloutServiceAsyncStub]:
    options = [
        ("grpc.max_send_message_length", MESSAGE_LIMIT),
        ("grpc.max_receive_message_length", MESSAGE_LIMIT),
    ]
    async with grpc.aio.insecure_channel(bounded_server.target, options=options) as channel:
        yield pb_grpc.RolloutServiceStub(channel)


@pytest.fixture
async def upstream() -> AsyncIterator[FakeUpstream]:
    async with FakeUpstream(api_key=KEY) as upstream:
        yield upstream


def spec(command: str, upstream: FakeUpstream) -> pb.RolloutSpec:
    endpoint = {"baseUrl": upstream.base_url, "apiKey": KEY, "model": "m"}
    return command_spec(command, endpoint=endpoint)


async def events_of(
    stub: pb_grpc.RolloutServiceAsyncStub, rollout_id: str
) -> list[pb.RolloutEvent]:
    request = pb.WatchRolloutRequest(rollout_id=rollout_id)
    return [response.event async for response in stub.WatchRollout(request)]


async def test_big_bodies_in_every_dialect_leave_a_readable_result(
    stub: pb_grpc.RolloutServiceAsyncStub, bounded_server: ServerProcess, upstream: FakeUpstream
) -> None:
    warm = command_spec("true")
    await stub.RunRollout(pb.RunRolloutRequest(spec=warm, view=pb.RESULT_VIEW_SLIM))
    before = resident_bytes(bounded_server.pid)
    command = POST.format(size=BODY_BYTES, paths=PATHS)
    run = pb.RunRolloutRequest(spec=spec(command, upstream), view=pb.RESULT_VIEW_FULL)
    rollout = (await stub.RunRollout(run)).rollout

    assert rollout.status == pb.ROLLOUT_STATUS_SUCCEEDED, rollout.result.error
    assert [f"{path} 200" for path in PATHS] == rollout.result.agent_log_tail.splitlines()
    got = await stub.GetRollout(pb.GetRolloutRequest(rollout_id=rollout.id))
    assert list(got.rollout.result.turns) == list(rollout.result.turns)
    assert got.rollout.ByteSize() < ROLLOUT_BUDGET + 1 * MIB
    # The upstream got every body whole.
    bodies = [request.body for request in upstream.requests]
    sent = [body["messages"][-1]["content"] for body in bodies if body is not None]
    assert [len(content) for content in sent] == [BODY_BYTES] * 3
    turns = list(rollout.result.turns)
    assert [turn.dialect for turn in turns] == [
        pb.DIALECT_RESPONSES,
        pb.DIALECT_MESSAGES,
        pb.DIALECT_CHAT_COMPLETIONS,
    ]
    kept = [sum(len(m.fields["content"].string_value) for m in t.request_messages) for t in turns]
    assert [turn.body_cut for turn in turns] == [True] * 3, (kept, turns[-1].completion_text)
    assert TURN_CAP - 1024 < kept[0] < TURN_CAP
    assert TURN_CAP - 1024 < kept[1] < TURN_CAP
    assert kept[2] == 0  # past the rollout's budget: no bodies
    assert turns[2].body_bytes_dropped > BODY_BYTES
    token_data = [(len(t.completion_token_ids), len(t.logprobs)) for t in turns]
    assert token_data == [(1, 1)] * 3  # "Done.": its id and logprob, whatever the cut
    events = await events_of(stub, rollout.id)
    published = [event.turn for event in events if event.HasField("turn")]
    assert [turn.body_bytes_dropped for turn in published] == [
        turn.body_bytes_dropped for turn in turns
    ]
    # What the rollout weighed is not kept once it ended (the bodies were 24 MiB).
    assert resident_bytes(bounded_server.pid) - before < 3 * BODY_BYTES


async def test_an_ended_rollout_gives_its_bodies_back(
    stub: pb_grpc.RolloutServiceAsyncStub, bounded_server: ServerProcess, upstream: FakeUpstream
) -> None:
    """Before the fix a closed proxy connection kept its route, and so the parsed bodies,
    until a full garbage-collector pass: two bodies of each ended rollout stayed resident."""
    warm = pb.RunRolloutRequest(spec=spec(POST.format(size=1024, paths=PATHS), upstream))
    await stub.RunRollout(warm)  # the proxy and dialect paths' own first-use memory
    before = resident_bytes(bounded_server.pid)
    command = POST.format(size=RETURNED_BODY_BYTES, paths=PATHS)
    for _ in range(2):
        run = pb.RunRolloutRequest(spec=spec(command, upstream), view=pb.RESULT_VIEW_SLIM)
        rollout = (await stub.RunRollout(run)).rollout
        assert rollout.status == pb.ROLLOUT_STATUS_SUCCEEDED, rollout.result.error
        upstream.requests.clear()  # the fake's copies, in this process
    growth = resident_bytes(bounded_server.pid) - before
    assert growth < RETURNED_BODY_BYTES, f"the server kept {growth / MIB:.0f} MiB"


async def test_token_data_over_the_message_limit_leaves_a_readable_result(
    tmp_path: Path, upstream: FakeUpstream
) -> None:
    """Token data is not bounded by the record budget: three turns of 8,000 tokens (~240 KB
    of ids, tokens and logprobs) against a 128 KiB limit. RunRollout and GetRollout answer without
    the turns (RESOURCE_EXHAUSTED before), counting them; WatchRollout has every one."""
    limit = 128 * 1024
    server = ServerProcess(tmp_path, env={"ROLLOUT_MAX_MESSAGE_BYTES": str(limit)})
    upstream.script(*[Reply(text="a" * 8000, token_chars=1)] * 3)
    command = POST.format(size=10, paths=("chat/completions",) * 3)
    try:
        async with grpc.aio.insecure_channel(server.start()) as channel:
            stub = pb_grpc.RolloutServiceStub(channel)
            run = pb.RunRolloutRequest(spec=spec(command, upstream), view=pb.RESULT_VIEW_FULL)
            rollout = (await stub.RunRollout(run)).rollout
            assert rollout.status == pb.ROLLOUT_STATUS_SUCCEEDED, rollout.result.error
            got = (await stub.GetRollout(pb.GetRolloutRequest(rollout_id=rollout.id))).rollout
            events = await events_of(stub, rollout.id)
    finally:
        assert server.stop() == 0, server.text()
    for read in (rollout, got):
        assert (len(read.result.turns), read.result.turn_count) == (0, 3)
        assert read.ByteSize() < limit
    turns = [event.turn for event in events if event.HasField("turn")]
    assert [len(turn.completion_token_ids) for turn in turns] == [8000] * 3


def stored_bytes(state_dir: Path) -> bytes:
    """The SQLite database as it is on disk, with its write-ahead log."""
    return b"".join(path.read_bytes() for path in sorted(state_dir.glob("rollouts.db*")))


async def test_a_key_echoed_in_200_answers_is_stored_nowhere(
    stub: pb_grpc.RolloutServiceAsyncStub, bounded_server: ServerProcess, upstream: FakeUpstream
) -> None:
    upstream.script(
        Reply(text=f"the key is {KEY} ok", token_chars=4),  # split across stream chunks
        Reply(text=f"the key is {KEY} ok", reasoning=f"saw {KEY}"),
    )
    run = pb.RunRolloutRequest(spec=spec(ECHO, upstream), view=pb.RESULT_VIEW_FULL)
    rollout = (await stub.RunRollout(run)).rollout
    assert rollout.status == pb.ROLLOUT_STATUS_SUCCEEDED, rollout.result.error
    assert len(rollout.result.turns) == 2
    assert all("[redacted]" in turn.completion_text for turn in rollout.result.turns), [
        turn.completion_text for turn in rollout.result.turns
    ]
    events = await events_of(stub, rollout.id)
    got = await stub.GetRollout(pb.GetRolloutRequest(rollout_id=rollout.id))
    secret = KEY.encode()
    assert secret not in rollout.SerializeToString()
    assert secret not in got.rollout.SerializeToString()
    assert all(secret not in event.SerializeToString() for event in events)
    assert secret not in stored_bytes(bounded_server.state_dir)
