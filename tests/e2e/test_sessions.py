"""Sessions through the real server (docs/sessions.md): opened, stepped, verified, closed,
reaped, on real bwrap sandboxes and SQLite."""

from __future__ import annotations

import asyncio
import functools
import signal
import uuid
from collections.abc import AsyncIterator, Awaitable
from typing import TYPE_CHECKING, Any

import grpc
import pytest
from google.protobuf import duration_pb2
from google.rpc import error_details_pb2
from grpc_status import rpc_status
from rollout.v1 import rollout_pb2 as pb
from rollout.v1 import rollout_pb2_grpc as pb_grpc

from testing.fakes.llm_upstream import FakeUpstream
from testing.server_process import ServerProcess
from testing.specs import command_spec
from tests.e2e.bad_request import violated_fields
from tests.e2e.processes import eventually, kill_namespace_holder, processes_with

pytestmark = pytest.mark.e2e

if TYPE_CHECKING:
    Stub = pb_grpc.RolloutServiceAsyncStub
UPSTREAM_KEY = "sk-session-upstream-secret-5e2a"
UPSTREAM_MODEL = "fake-policy-8b"


def task(**fields: Any) -> pb.RolloutSpec:
    return pb.RolloutSpec(task=pb.Task(instruction="make answer.txt say 42", **fields))


SOLVABLE = task(
    setup=["echo start > notes.txt"],
    verify=["grep -qx 42 answer.txt"],
)


async def open_one(stub: Stub, spec: pb.RolloutSpec = SOLVABLE, **fields: Any) -> pb.Session:
    response = await stub.OpenSession(pb.OpenSessionRequest(spec=spec, **fields))
    (session,) = response.sessions
    return session


async def run(
    stub: Stub, session_id: str, command: str, **fields: Any
) -> tuple[bytes, bytes, pb.ExecResult]:
    out, err = b"", b""
    result = None
    async for item in stub.Exec(pb.ExecRequest(session_id=session_id, command=command, **fields)):
        if item.HasField("output"):
            if item.output.stream == pb.EXEC_STREAM_STDOUT:
                out += item.output.data
            else:
                err += item.output.data
        else:
            result = item.result
    assert result is not None
    return out, err, result


async def events(stub: Stub, session_id: str) -> list[pb.RolloutEvent]:
    stream = stub.WatchSession(pb.WatchSessionRequest(session_id=session_id))
    return [response.event async for response in stream]


def seconds(value: float) -> duration_pb2.Duration:
    message = duration_pb2.Duration()
    message.FromNanoseconds(int(value * 1e9))
    return message


async def test_open_exec_files_and_verify_to_the_tests_reward(stub: Stub) -> None:
    session = await open_one(stub)
    assert session.status == pb.SESSION_STATUS_READY, session.result.error
    assert [r.exit_code for r in session.result.setup_results] == [0]
    assert session.HasField("ready_time")
    out, _, result = await run(stub, session.id, "cat notes.txt; echo oops >&2; exit 3")
    assert (out, result.exit_code, result.index) == (b"start\n", 3, 0)
    await stub.WriteFile(
        pb.WriteFileRequest(session_id=session.id, path="answer.txt", content=b"42\n")
    )
    read = await stub.ReadFile(pb.ReadFileRequest(session_id=session.id, path="answer.txt"))
    assert (read.found, read.content, read.truncated) == (True, b"42\n", False)
    listed = await stub.ListFiles(pb.ListFilesRequest(session_id=session.id))
    assert sorted(f.path for f in listed.files) == ["answer.txt", "notes.txt"]
    verified = (await stub.VerifySession(pb.VerifySessionRequest(session_id=session.id))).session
    assert verified.status == pb.SESSION_STATUS_VERIFIED, verified.result.error
    assert verified.result.reward == 1.0
    assert verified.commands == 1
    kinds = [e.WhichOneof("payload") for e in await events(stub, session.id)]
    assert kinds[-1] == "finished"
    commands = [e.command for e in await events(stub, session.id) if e.HasField("command")]
    assert [(c.stage, c.exit_code) for c in commands] == [
        (pb.COMMAND_STAGE_SETUP, 0),
        (pb.COMMAND_STAGE_SESSION, 3),
        (pb.COMMAND_STAGE_VERIFY, 0),
    ]
    assert commands[1].stderr == "oops\n"


async def test_a_session_that_did_nothing_scores_zero(stub: Stub) -> None:
    session = await open_one(stub)
    verified = (await stub.VerifySession(pb.VerifySessionRequest(session_id=session.id))).session
    assert verified.status == pb.SESSION_STATUS_VERIFIED
    assert verified.result.HasField("reward")
    assert verified.result.reward == 0.0


async def test_a_background_process_outlives_its_command_until_verification(stub: Stub) -> None:
    marker = f"session-daemon-{uuid.uuid4().hex[:8]}"
    session = await open_one(stub)
    _, _, result = await run(
        stub, session.id, f"(setsid bash -c 'exec -a {marker} sleep 300' >/dev/null 2>&1 &)"
    )
    assert result.exit_code == 0
    await eventually(lambda: processes_with(marker))
    out, _, _ = await run(stub, session.id, f"pgrep -f {marker} >/dev/null && echo alive")
    assert out == b"alive\n"
    await stub.VerifySession(pb.VerifySessionRequest(session_id=session.id))
    assert not processes_with(marker)


async def test_output_streams_as_it_comes_and_is_bounded(stub: Stub) -> None:
    session = await open_one(stub)
    request = pb.ExecRequest(
        session_id=session.id,
        command="echo first; sleep 0.5; head -c 3000000 /dev/zero",
        max_output_bytes=100_000,
    )
    items = [item async for item in stub.Exec(request)]
    assert items[0].output.data == b"first\n"  # sent before the command went on
    sent = sum(len(item.output.data) for item in items if item.HasField("output"))
    result = items[-1].result
    assert sent == 100_000
    assert result.stdout_bytes == 3_000_006
    assert result.output_bytes_dropped == 3_000_006 - 100_000
    await stub.CloseSession(pb.CloseSessionRequest(session_id=session.id))


async def test_cwd_env_and_timeout(stub: Stub) -> None:
    session = await open_one(stub)
    await run(stub, session.id, "mkdir -p sub")
    out, _, _ = await run(
        stub, session.id, "pwd; echo $GREETING", cwd="sub", env={"GREETING": "hi"}
    )
    assert out.decode().split() == ["/home/user/workdir/sub", "hi"]
    _, _, result = await run(stub, session.id, "sleep 30", timeout=seconds(0.3))
    assert result.timed_out
    assert result.exit_code == -1
    await stub.CloseSession(pb.CloseSessionRequest(session_id=session.id))


async def test_files_are_bounded_and_links_never_followed(stub: Stub) -> None:
    session = await open_one(stub)
    await run(
        stub, session.id, "head -c 5000 /dev/zero > big; ln -s /etc/hostname link; mkfifo pipe"
    )
    read = await stub.ReadFile(pb.ReadFileRequest(session_id=session.id, path="big", max_bytes=100))
    assert (len(read.content), read.truncated) == (100, True)
    for path in ("link", "pipe", "missing"):
        read = await stub.ReadFile(pb.ReadFileRequest(session_id=session.id, path=path))
        assert not read.found, path
    listed = await stub.ListFiles(pb.ListFilesRequest(session_id=session.id))
    assert "link" not in {f.path for f in listed.files}
    await stub.WriteFile(pb.WriteFileRequest(session_id=session.id, path="link", content=b"x"))
    out, _, _ = await run(stub, session.id, "test -L link || cat link")
    assert out == b"x"
    await stub.CloseSession(pb.CloseSessionRequest(session_id=session.id))


async def test_closed_and_unknown_sessions(stub: Stub) -> None:
    session = await open_one(stub)
    closed = (await stub.CloseSession(pb.CloseSessionRequest(session_id=session.id))).session
    assert closed.status == pb.SESSION_STATUS_CLOSED
    again = (await stub.CloseSession(pb.CloseSessionRequest(session_id=session.id))).session
    assert again.status == pb.SESSION_STATUS_CLOSED
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await run(stub, session.id, "true")
    assert caught.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await stub.VerifySession(pb.VerifySessionRequest(session_id=session.id))
    assert caught.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    for call in (
        stub.GetSession(pb.GetSessionRequest(session_id="nope")),
        stub.ReadFile(pb.ReadFileRequest(session_id="nope", path="a")),
        stub.CloseSession(pb.CloseSessionRequest(session_id="nope")),
    ):
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await call
        assert caught.value.code() == grpc.StatusCode.NOT_FOUND


async def test_bad_input_names_the_field(stub: Stub) -> None:
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await stub.OpenSession(
            pb.OpenSessionRequest(
                spec=pb.RolloutSpec(agent=pb.Agent(name="command", command="x")),
                copies=100_000,
                idle_timeout=seconds(-1),
            )
        )
    assert {"spec.agent", "copies", "idle_timeout"} <= set(violated_fields(caught.value))
    session = await open_one(stub)
    bad = {
        "command": pb.ExecRequest(session_id=session.id, command=""),
        "cwd": pb.ExecRequest(session_id=session.id, command="true", cwd="../.."),
        "env['1x']": pb.ExecRequest(session_id=session.id, command="true", env={"1x": "y"}),
    }
    for field, request in bad.items():
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await run(stub, session.id, request.command, cwd=request.cwd, env=request.env)
        assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert field in violated_fields(caught.value), field
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await stub.ReadFile(pb.ReadFileRequest(session_id=session.id, path="", max_bytes=1))
    assert violated_fields(caught.value) == ["path"]
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await stub.GetSession(pb.GetSessionRequest())
    assert violated_fields(caught.value) == ["session_id"]
    await stub.CloseSession(pb.CloseSessionRequest(session_id=session.id))


async def test_an_idle_session_is_reaped_with_nothing_left(stub: Stub) -> None:
    marker = f"idle-daemon-{uuid.uuid4().hex[:8]}"
    session = await open_one(stub, idle_timeout=seconds(1))
    await run(stub, session.id, f"(setsid bash -c 'exec -a {marker} sleep 300' >/dev/null 2>&1 &)")
    ended = await events(stub, session.id)  # follows it to its end
    assert ended[-1].HasField("finished")
    got = (await stub.GetSession(pb.GetSessionRequest(session_id=session.id))).session
    assert got.status == pb.SESSION_STATUS_EXPIRED
    assert "idle_timeout" in got.result.error.message
    assert not processes_with(marker)


async def test_a_session_past_its_lifetime_expires_though_busy_with_nothing_left(
    stub: Stub,
) -> None:
    marker = f"lifetime-daemon-{uuid.uuid4().hex[:8]}"
    session = await open_one(stub, max_lifetime=seconds(3))
    await run(stub, session.id, _daemon(marker))
    with pytest.raises(grpc.aio.AioRpcError) as caught:  # busy to the end: no idle expiry
        await run(stub, session.id, "sleep 30", timeout=seconds(60))
    assert caught.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert "EXPIRED: the command was killed" in (caught.value.details() or "")
    assert (await events(stub, session.id))[-1].HasField("finished")  # followed to its end
    got = (await stub.GetSession(pb.GetSessionRequest(session_id=session.id))).session
    assert got.status == pb.SESSION_STATUS_EXPIRED
    assert "max_lifetime" in got.result.error.message
    finished = got.finish_time.ToDatetime() - got.create_time.ToDatetime()
    assert finished.total_seconds() < 15
    assert not processes_with(marker)


async def test_a_sandbox_that_dies_under_a_session_fails_it_with_nothing_left(
    stub: Stub,
) -> None:
    marker = f"dying-daemon-{uuid.uuid4().hex[:8]}"
    session = await open_one(stub)
    await run(stub, session.id, _daemon(marker))
    await eventually(functools.partial(processes_with, marker))
    kill_namespace_holder(marker)
    await eventually(lambda: not processes_with(marker))

    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await run(stub, session.id, "true")
    assert caught.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert "lost its sandbox" in (caught.value.details() or "")
    assert (await events(stub, session.id))[-1].HasField("finished")  # followed to its end
    got = (await stub.GetSession(pb.GetSessionRequest(session_id=session.id))).session
    assert got.status == pb.SESSION_STATUS_FAILED
    assert got.result.error.kind == pb.ERROR_KIND_SANDBOX, got.result.error
    calls: list[Awaitable[object]] = [
        run(stub, session.id, "true"),
        stub.ReadFile(pb.ReadFileRequest(session_id=session.id, path="notes.txt")),
        stub.VerifySession(pb.VerifySessionRequest(session_id=session.id)),
    ]
    for call in calls:
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await call
        assert caught.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    closed = (await stub.CloseSession(pb.CloseSessionRequest(session_id=session.id))).session
    assert closed.status == pb.SESSION_STATUS_FAILED


async def test_a_sandbox_that_dies_between_commands_fails_its_session_unasked(
    fresh_server: ServerProcess,
) -> None:
    fresh_server.env["ROLLOUT_SESSION_PROBE_INTERVAL_S"] = "0.5"
    fresh_server.start()
    marker = f"idle-dying-{uuid.uuid4().hex[:8]}"
    async with grpc.aio.insecure_channel(fresh_server.target) as channel:
        stub = pb_grpc.RolloutServiceStub(channel)
        session = await open_one(stub)
        await run(stub, session.id, _daemon(marker))
        await eventually(functools.partial(processes_with, marker))
        kill_namespace_holder(marker)

        ended = await asyncio.wait_for(events(stub, session.id), 60)  # no call: probed
        got = (await stub.GetSession(pb.GetSessionRequest(session_id=session.id))).session
    assert ended[-1].HasField("finished")
    assert got.status == pb.SESSION_STATUS_FAILED
    assert got.result.error.kind == pb.ERROR_KIND_SANDBOX, got.result.error
    assert not processes_with(marker)


async def test_sessions_are_listed_with_their_labels(stub: Stub) -> None:
    label = uuid.uuid4().hex
    spec = task()
    spec.labels["run"] = label
    session = await open_one(stub, spec)
    listed = (await stub.ListSessions(pb.ListSessionsRequest(labels={"run": label}))).sessions
    assert [s.id for s in listed] == [session.id]
    assert dict(listed[0].spec.labels) == {"run": label}
    await stub.CloseSession(pb.CloseSessionRequest(session_id=session.id))
    listed = (await stub.ListSessions(pb.ListSessionsRequest(labels={"run": label}))).sessions
    assert [s.status for s in listed] == [pb.SESSION_STATUS_CLOSED]


async def test_copies_fork_from_one_setup(stub: Stub) -> None:
    spec = task(setup=["echo $RANDOM$RANDOM > seed.txt"], verify=["grep -qx 42 answer.txt"])
    response = await stub.OpenSession(pb.OpenSessionRequest(spec=spec, copies=3))
    sessions = response.sessions
    assert [s.copy_index for s in sessions] == [0, 1, 2]
    assert all(s.status == pb.SESSION_STATUS_READY for s in sessions)
    seeds = {(await run(stub, s.id, "cat seed.txt"))[0] for s in sessions}
    assert len(seeds) == 1  # one setup, forked
    await run(stub, sessions[0].id, "echo 42 > answer.txt")
    rewards = []
    for s in sessions:
        verified = (await stub.VerifySession(pb.VerifySessionRequest(session_id=s.id))).session
        rewards.append(verified.result.reward)
    assert rewards == [1.0, 0.0, 0.0]


@pytest.fixture
async def upstream() -> AsyncIterator[FakeUpstream]:
    async with FakeUpstream(api_key=UPSTREAM_KEY, model=UPSTREAM_MODEL) as upstream:
        yield upstream


async def test_a_model_route_captures_a_turn(stub: Stub, upstream: FakeUpstream) -> None:
    spec = task()
    spec.endpoint.CopyFrom(
        pb.Endpoint(base_url=upstream.base_url, api_key=UPSTREAM_KEY, model=UPSTREAM_MODEL)
    )
    session = await open_one(stub, spec)
    assert session.model_base_url
    call = (
        "curl -s $OPENAI_BASE_URL/chat/completions -H 'Content-Type: application/json' "
        '-H "Authorization: Bearer $OPENAI_API_KEY" '
        '-d \'{"model": "m", "messages": [{"role": "user", "content": "hi"}]}\''
    )
    out, _, result = await run(stub, session.id, call)
    assert result.exit_code == 0, out
    turns = [e.turn for e in await _until_turn(stub, session.id)]
    assert len(turns) == 1
    assert turns[0].completion_token_ids
    closed = (await stub.CloseSession(pb.CloseSessionRequest(session_id=session.id))).session
    assert closed.result.turn_count == 1
    assert UPSTREAM_KEY not in str(closed)


async def test_the_route_secret_never_comes_back_in_exec_output(
    stub: Stub, upstream: FakeUpstream
) -> None:
    spec = task()
    spec.endpoint.CopyFrom(
        pb.Endpoint(base_url=upstream.base_url, api_key=UPSTREAM_KEY, model=UPSTREAM_MODEL)
    )
    session = await open_one(stub, spec)
    token, _, _ = await run(stub, session.id, 'printf %s "$OPENAI_API_KEY" | wc -c')
    assert int(token) >= 8  # a secret the scrubber keeps out
    halves = (  # split across two chunks of output, on both streams
        'printf %s "${OPENAI_API_KEY:0:5}"; sleep 0.3; echo "${OPENAI_API_KEY:5} done"; '
        'printf %s "${OPENAI_API_KEY:0:5}" >&2; sleep 0.3; echo "${OPENAI_API_KEY:5}" >&2; '
        "env"
    )
    out, err, result = await run(stub, session.id, halves)
    assert result.exit_code == 0
    assert out.startswith(b"[redacted] done\n")
    assert err == b"[redacted]\n"
    assert b"OPENAI_API_KEY=[redacted]" in out
    assert UPSTREAM_KEY.encode() not in out + err
    await stub.CloseSession(pb.CloseSessionRequest(session_id=session.id))
    commands = [e.command for e in await events(stub, session.id) if e.HasField("command")]
    assert commands[-1].stdout.startswith("[redacted] done")


async def _until_turn(stub: Stub, session_id: str) -> list[pb.RolloutEvent]:
    found: list[pb.RolloutEvent] = []
    async for response in stub.WatchSession(pb.WatchSessionRequest(session_id=session_id)):
        if response.event.HasField("turn"):
            found.append(response.event)
            return found
    return found


def retry_delay(error: grpc.aio.AioRpcError) -> duration_pb2.Duration | None:
    """The RetryInfo a RESOURCE_EXHAUSTED status carries, if any."""
    status = rpc_status.from_call(error)
    for detail in [] if status is None else status.details:
        if detail.Is(error_details_pb2.RetryInfo.DESCRIPTOR):
            info = error_details_pb2.RetryInfo()
            detail.Unpack(info)
            delay: duration_pb2.Duration = info.retry_delay
            return delay
    return None


def _daemon(marker: str) -> str:
    return f"(setsid bash -c 'exec -a {marker} sleep 300' >/dev/null 2>&1 &)"


async def test_capacity_is_shared_with_rollouts_and_refused_with_retry_info(
    fresh_server: ServerProcess,
) -> None:
    fresh_server.env["ROLLOUT_MAX_RUNNING"] = "2"
    fresh_server.start()
    async with grpc.aio.insecure_channel(fresh_server.target) as channel:
        stub = pb_grpc.RolloutServiceStub(channel)
        rollout = await stub.StartRollout(pb.StartRolloutRequest(spec=command_spec("sleep 60")))
        session = await open_one(stub, task())
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await open_one(stub, task())
        assert caught.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert retry_delay(caught.value) is not None
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await stub.OpenSession(pb.OpenSessionRequest(spec=task(), copies=2))
        assert caught.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        await stub.CloseSession(pb.CloseSessionRequest(session_id=session.id))
        assert (await open_one(stub, task())).status == pb.SESSION_STATUS_READY
        await stub.CancelRollout(pb.CancelRolloutRequest(rollout_id=rollout.rollout.id))


async def test_a_stopping_server_ends_its_sessions_and_a_crashed_ones_are_failed_on_restart(
    fresh_server: ServerProcess,
) -> None:
    markers = [f"restart-daemon-{uuid.uuid4().hex[:8]}" for _ in range(2)]
    ids = []
    for marker, sig in zip(markers, (signal.SIGTERM, signal.SIGKILL), strict=True):
        fresh_server.start()
        async with grpc.aio.insecure_channel(fresh_server.target) as channel:
            stub = pb_grpc.RolloutServiceStub(channel)
            session = await open_one(stub, task())
            await run(stub, session.id, _daemon(marker))
            await eventually(functools.partial(processes_with, marker))
            ids.append(session.id)
        fresh_server.stop(sig)
    fresh_server.start()  # a restart sweeps the crashed server's sandboxes
    assert not any(processes_with(marker) for marker in markers)
    async with grpc.aio.insecure_channel(fresh_server.target) as channel:
        stub = pb_grpc.RolloutServiceStub(channel)
        stopped, crashed = [
            (await stub.GetSession(pb.GetSessionRequest(session_id=i))).session for i in ids
        ]
        assert stopped.status == pb.SESSION_STATUS_CLOSED
        assert "shutting down" in stopped.result.error.message
        assert crashed.status == pb.SESSION_STATUS_FAILED
        assert "interrupted by restart" in crashed.result.error.message
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await run(stub, crashed.id, "true")
        assert caught.value.code() == grpc.StatusCode.FAILED_PRECONDITION
