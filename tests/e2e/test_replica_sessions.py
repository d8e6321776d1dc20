"""Sessions on two servers sharing one PostgreSQL (docs/sessions.md#restart-and-replicas): a
client whose channel round-robins over both reaches the session's sandbox whichever replica
each call lands on. The replica that does not hold it forwards the call to the one that
does (the address in its lease): Exec streams as it comes, a cancelled Exec kills its
command on the holder, errors are the holder's, and a forwarded call is never forwarded
again."""

from __future__ import annotations

import asyncio
import functools
import time
import uuid
from collections.abc import AsyncIterator, Iterator

import grpc
import pytest
from rollout.v1 import rollout_pb2 as pb
from rollout.v1 import rollout_pb2_grpc as pb_grpc

from testing.server_process import ServerProcess, running_all
from tests.e2e.processes import eventually, processes_with
from tests.e2e.test_replicas import database_url as database_url  # the PostgreSQL fixture
from tests.e2e.test_sessions import SOLVABLE, open_one, run

pytestmark = pytest.mark.e2e

Pair = tuple[ServerProcess, ServerProcess]


@pytest.fixture(scope="module")
def replicas(tmp_path_factory: pytest.TempPathFactory, database_url: str) -> Iterator[Pair]:
    servers = [
        ServerProcess(
            tmp_path_factory.mktemp(f"session-replica-{name}"),
            {"ROLLOUT_DATABASE_URL": database_url, "ROLLOUT_INSTANCE_ID": f"replica-{name}"},
        )
        for name in "ab"
    ]
    with running_all(servers):
        yield servers[0], servers[1]


@pytest.fixture
async def stubs(replicas: Pair) -> AsyncIterator[dict[str, pb_grpc.RolloutServiceAsyncStub]]:
    """A round_robin stub over both replicas, and one pinned to each."""
    a, b = replicas
    both = f"ipv4:{a.target},{b.target}"
    options = [("grpc.lb_policy_name", "round_robin")]
    async with (
        grpc.aio.insecure_channel(both, options=options) as spread,
        grpc.aio.insecure_channel(a.target) as to_a,
        grpc.aio.insecure_channel(b.target) as to_b,
    ):
        await spread.channel_ready()
        yield {
            "spread": pb_grpc.RolloutServiceStub(spread),
            "a": pb_grpc.RolloutServiceStub(to_a),
            "b": pb_grpc.RolloutServiceStub(to_b),
        }


async def test_a_round_robin_client_steps_a_session_through_either_replica(
    stubs: dict[str, pb_grpc.RolloutServiceAsyncStub],
) -> None:
    spread = stubs["spread"]
    session = await open_one(spread)
    assert session.status == pb.SESSION_STATUS_READY, session.result.error
    for n in range(6):  # round_robin: half land on the replica that does not hold it
        out, _, result = await run(spread, session.id, f"echo {n} >> steps.txt; cat steps.txt")
        assert (result.exit_code, result.index) == (0, n)
        assert out.split() == [str(i).encode() for i in range(n + 1)]
    for pinned in (stubs["a"], stubs["b"]):  # each replica, explicitly: one forwards
        out, _, _ = await run(pinned, session.id, "wc -l < steps.txt")
        assert out == b"6\n"
        await pinned.WriteFile(
            pb.WriteFileRequest(session_id=session.id, path="answer.txt", content=b"42\n")
        )
        read = await pinned.ReadFile(pb.ReadFileRequest(session_id=session.id, path="answer.txt"))
        assert (read.found, read.content) == (True, b"42\n")
        listed = await pinned.ListFiles(pb.ListFilesRequest(session_id=session.id))
        assert {"answer.txt", "notes.txt", "steps.txt"} <= {f.path for f in listed.files}
        with pytest.raises(grpc.aio.AioRpcError) as caught:  # the holder's own answer
            await pinned.ReadFile(pb.ReadFileRequest(session_id=session.id, path="a/../b"))
        assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    verified = (await spread.VerifySession(pb.VerifySessionRequest(session_id=session.id))).session
    assert verified.status == pb.SESSION_STATUS_VERIFIED, verified.result.error
    assert (verified.result.reward, verified.commands) == (1.0, 8)
    for pinned in (stubs["a"], stubs["b"]):
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await run(pinned, session.id, "true")
        assert caught.value.code() == grpc.StatusCode.FAILED_PRECONDITION


async def _holder_and_other(
    stubs: dict[str, pb_grpc.RolloutServiceAsyncStub], session_id: str
) -> tuple[pb_grpc.RolloutServiceAsyncStub, pb_grpc.RolloutServiceAsyncStub]:
    """(the replica holding the session, the other): only the holder answers a call that
    says it was forwarded already."""
    marked = (("rollout-forwarded-by", "test"),)
    request = pb.ListFilesRequest(session_id=session_id)
    on_a, on_b = await asyncio.gather(
        *(stubs[name].ListFiles(request, metadata=marked) for name in "ab"),
        return_exceptions=True,
    )
    refused = on_b if isinstance(on_b, grpc.aio.AioRpcError) else on_a
    assert isinstance(refused, grpc.aio.AioRpcError)
    assert refused.code() == grpc.StatusCode.FAILED_PRECONDITION
    holder = "a" if refused is on_b else "b"
    assert isinstance(on_a if holder == "a" else on_b, pb.ListFilesResponse)
    assert f"held by server 'replica-{holder}' at 127.0.0.1:" in (refused.details() or "")
    return stubs[holder], stubs["b" if holder == "a" else "a"]


async def test_a_forwarded_exec_streams_as_it_comes_and_its_cancel_kills_the_command(
    stubs: dict[str, pb_grpc.RolloutServiceAsyncStub],
) -> None:
    session = await open_one(stubs["a"], SOLVABLE)
    _, other = await _holder_and_other(stubs, session.id)

    started = time.monotonic()
    arrivals = []
    command = "echo first; sleep 1.5; echo second >&2"
    async for item in other.Exec(pb.ExecRequest(session_id=session.id, command=command)):
        arrivals.append((item.WhichOneof("item"), time.monotonic() - started))
    assert [kind for kind, _ in arrivals] == ["output", "output", "result"]
    assert arrivals[0][1] < 1.0 < arrivals[1][1]  # the first line came before the second

    marker = f"forwarded-exec-{uuid.uuid4().hex[:8]}"
    call = other.Exec(
        pb.ExecRequest(session_id=session.id, command=f"echo up; exec -a {marker} sleep 300")
    )
    async for _ in call:  # its first output: the command runs on the holder
        break
    await eventually(functools.partial(processes_with, marker))
    call.cancel()
    await eventually(lambda: not processes_with(marker))
    closed = (await other.CloseSession(pb.CloseSessionRequest(session_id=session.id))).session
    assert closed.status == pb.SESSION_STATUS_CLOSED


async def test_many_forwarded_execs_at_once_each_get_their_own_output(
    stubs: dict[str, pb_grpc.RolloutServiceAsyncStub],
) -> None:
    session = await open_one(stubs["b"], SOLVABLE)
    _, other = await _holder_and_other(stubs, session.id)
    outputs = await asyncio.gather(*(run(other, session.id, f"echo {n}") for n in range(16)))
    assert [out for out, _, _ in outputs] == [f"{n}\n".encode() for n in range(16)]
    await other.CloseSession(pb.CloseSessionRequest(session_id=session.id))
