"""Three servers on one PostgreSQL (ROLLOUT_DATABASE_URL): any answers Get and List for a
rollout another runs, a WatchRollout on another is live and complete, in order, a
CancelRollout on another ends it on its owner, and when the owner is killed (-9), restarted or
not, the watcher on another gets the rollout's end.

The rollout's agent prints a line and then sleeps until cancelled, so that the watcher on the
second server provably receives events while the rollout runs, not a replay after its end.
"""

from __future__ import annotations

import signal
from collections.abc import AsyncIterable, AsyncIterator, Iterator
from pathlib import Path

import grpc
import pytest
from rollout.v1 import rollout_pb2 as pb
from rollout.v1 import rollout_pb2_grpc as pb_grpc

from testing.postgres_server import PostgresServer, postgres_bin_dir
from testing.server_process import ServerProcess, running_all
from testing.specs import command_spec
from tests.e2e.test_startup import refused

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def database_url() -> Iterator[str]:
    bin_dir = postgres_bin_dir()
    if bin_dir is None:
        pytest.skip("PostgreSQL is not installed (apt-get install postgresql)")
    postgres = PostgresServer(bin_dir)
    try:
        postgres.start()
        yield postgres.create_database()
    finally:
        postgres.stop()


Replicas = tuple[ServerProcess, ServerProcess, ServerProcess]


def three_replicas(
    tmp_path_factory: pytest.TempPathFactory, database_url: str, *, lease_s: float
) -> Iterator[Replicas]:
    """Three servers, each with its own state folder, sharing the database; a server that
    stops renewing its lease is taken for dead after `lease_s`. Each must exit 0 at the end."""
    env = {"ROLLOUT_DATABASE_URL": database_url, "ROLLOUT_DATABASE_LEASE_S": str(lease_s)}
    servers = [ServerProcess(tmp_path_factory.mktemp(f"replica-{name}"), env) for name in "abc"]
    with running_all(servers):
        yield servers[0], servers[1], servers[2]


@pytest.fixture(scope="module")
def replicas(tmp_path_factory: pytest.TempPathFactory, database_url: str) -> Iterator[Replicas]:
    yield from three_replicas(tmp_path_factory, database_url, lease_s=2)


@pytest.fixture
async def stubs(
    replicas: Replicas,
) -> AsyncIterator[tuple[pb_grpc.RolloutServiceAsyncStub, pb_grpc.RolloutServiceAsyncStub]]:
    """Stubs of the first two replicas."""
    a, b, _ = replicas
    async with (
        grpc.aio.insecure_channel(a.target) as to_a,
        grpc.aio.insecure_channel(b.target) as to_b,
    ):
        yield pb_grpc.RolloutServiceStub(to_a), pb_grpc.RolloutServiceStub(to_b)


async def test_a_watch_on_the_other_replica_is_live_and_sees_every_event_in_order(
    stubs: tuple[pb_grpc.RolloutServiceAsyncStub, pb_grpc.RolloutServiceAsyncStub],
) -> None:
    a, b = stubs
    spec = command_spec("echo replica-ready; exec sleep 600", labels={"suite": "replicas"})
    started = await a.StartRollout(pb.StartRolloutRequest(spec=spec))
    rollout_id = started.rollout.id
    request = pb.WatchRolloutRequest(rollout_id=rollout_id)
    on_a = a.WatchRollout(request)
    on_b = b.WatchRollout(request)
    seen_on_b = await events_until_ready(on_b)

    # The agent sleeps until cancelled: B saw its output while the rollout ran on A.
    running = await b.GetRollout(pb.GetRolloutRequest(rollout_id=rollout_id))
    assert running.rollout.status == pb.ROLLOUT_STATUS_RUNNING
    await a.CancelRollout(pb.CancelRolloutRequest(rollout_id=rollout_id))
    seen_on_b += [response.event async for response in on_b]
    seen_on_a = [response.event async for response in on_a]

    assert [event.seq for event in seen_on_b] == list(range(1, len(seen_on_b) + 1))
    assert [e.SerializeToString() for e in seen_on_b] == [e.SerializeToString() for e in seen_on_a]
    assert seen_on_b[-1].finished.status == pb.ROLLOUT_STATUS_CANCELLED
    listed = await b.ListRollouts(pb.ListRolloutsRequest(labels={"suite": "replicas"}))
    assert [rollout.id for rollout in listed.rollouts] == [rollout_id]
    assert listed.rollouts[0].status == pb.ROLLOUT_STATUS_CANCELLED


async def test_a_replayed_watch_on_the_other_replica_ends_with_the_final_event(
    stubs: tuple[pb_grpc.RolloutServiceAsyncStub, pb_grpc.RolloutServiceAsyncStub],
) -> None:
    a, b = stubs
    done = await a.RunRollout(pb.RunRolloutRequest(spec=command_spec(verify=("true",))))

    request = pb.WatchRolloutRequest(rollout_id=done.rollout.id, after_seq=1)
    replayed = [response.event async for response in b.WatchRollout(request)]

    assert replayed[0].seq == 2
    assert replayed[-1].finished.status == pb.ROLLOUT_STATUS_SUCCEEDED
    fetched = await b.GetRollout(pb.GetRolloutRequest(rollout_id=done.rollout.id))
    assert fetched.rollout.result.reward == done.rollout.result.reward == 1.0


async def test_a_cancel_sent_to_another_replica_reaches_the_owner_and_ends_its_rollout(
    replicas: Replicas,
    stubs: tuple[pb_grpc.RolloutServiceAsyncStub, pb_grpc.RolloutServiceAsyncStub],
) -> None:
    *_, server_c = replicas
    a, b = stubs
    marker = "612.5"
    spec = command_spec(f"echo replica-ready; exec sleep {marker}")
    started = await a.StartRollout(pb.StartRolloutRequest(spec=spec))
    rollout_id = started.rollout.id
    async with grpc.aio.insecure_channel(server_c.target) as to_c:
        on_c = pb_grpc.RolloutServiceStub(to_c).WatchRollout(
            pb.WatchRolloutRequest(rollout_id=rollout_id)
        )
        seen = await events_until_ready(on_c)
        assert _processes_with(f"sleep {marker}"), "the agent's process is not to be found"

        request = pb.CancelRolloutRequest(rollout_id=rollout_id, reason="asked on b")
        cancelled = (await b.CancelRollout(request)).rollout
        seen += [response.event async for response in on_c]

    assert cancelled.status == pb.ROLLOUT_STATUS_CANCELLED
    assert cancelled.result.error.kind == pb.ERROR_KIND_CANCELLED
    assert cancelled.result.error.message == "cancelled: asked on b"
    on_a = await a.GetRollout(pb.GetRolloutRequest(rollout_id=rollout_id))
    assert on_a.rollout.status == pb.ROLLOUT_STATUS_CANCELLED
    assert on_a.rollout.result.error.message == "cancelled: asked on b"
    assert [event.seq for event in seen] == list(range(1, len(seen) + 1))
    assert seen[-1].finished.status == pb.ROLLOUT_STATUS_CANCELLED
    assert not _processes_with(f"sleep {marker}")


async def test_a_replica_killed_mid_rollout_loses_no_event_and_leaks_no_process(
    replicas: Replicas,
    stubs: tuple[pb_grpc.RolloutServiceAsyncStub, pb_grpc.RolloutServiceAsyncStub],
) -> None:
    server_a, _, _ = replicas
    a, b = stubs
    marker = "613.25"  # the agent's sleep, found in /proc while it lives
    spec = command_spec(f"echo replica-ready; exec sleep {marker}")
    started = await a.StartRollout(pb.StartRolloutRequest(spec=spec))
    rollout_id = started.rollout.id
    on_b = b.WatchRollout(pb.WatchRolloutRequest(rollout_id=rollout_id))
    seen = await events_until_ready(on_b)

    assert _processes_with(f"sleep {marker}"), "the agent's process is not to be found"
    assert server_a.stop(signal.SIGKILL) == -signal.SIGKILL
    server_a.start()  # same state folder, same owner: it takes its rollout back at once
    seen += [response.event async for response in on_b]

    assert [event.seq for event in seen] == list(range(1, len(seen) + 1))
    final = seen[-1].finished
    assert final.status == pb.ROLLOUT_STATUS_FAILED
    assert final.result.error.kind == pb.ERROR_KIND_INTERNAL
    fetched = await b.GetRollout(pb.GetRolloutRequest(rollout_id=rollout_id))
    assert fetched.rollout.status == pb.ROLLOUT_STATUS_FAILED
    assert not _processes_with(f"sleep {marker}")


async def test_a_replica_killed_for_good_is_taken_over_by_the_others(
    replicas: Replicas,
    stubs: tuple[pb_grpc.RolloutServiceAsyncStub, pb_grpc.RolloutServiceAsyncStub],
) -> None:
    *_, server_c = replicas
    a, b = stubs
    marker = "614.75"
    async with grpc.aio.insecure_channel(server_c.target) as to_c:
        c = pb_grpc.RolloutServiceStub(to_c)
        spec = command_spec(f"echo replica-ready; exec sleep {marker}")
        started = await c.StartRollout(pb.StartRolloutRequest(spec=spec))
    rollout_id = started.rollout.id
    on_b = b.WatchRollout(pb.WatchRolloutRequest(rollout_id=rollout_id))
    seen = await events_until_ready(on_b)

    assert server_c.stop(signal.SIGKILL) == -signal.SIGKILL
    seen += [response.event async for response in on_b]  # ends when A or B has taken over

    assert [event.seq for event in seen] == list(range(1, len(seen) + 1))
    assert seen[-1].finished.status == pb.ROLLOUT_STATUS_FAILED
    assert seen[-1].finished.result.error.kind == pb.ERROR_KIND_INTERNAL
    fetched = await a.GetRollout(pb.GetRolloutRequest(rollout_id=rollout_id))
    assert fetched.rollout.status == pb.ROLLOUT_STATUS_FAILED
    assert not _processes_with(f"sleep {marker}")
    # What only its own host can free (its sandboxes' disk mounts) waits for its restart.
    server_c.start()
    mounts = Path("/proc/self/mounts").read_text()
    assert str(server_c.state_dir) not in mounts


async def events_until_ready(
    watch: AsyncIterable[pb.WatchRolloutResponse],
) -> list[pb.RolloutEvent]:
    """The events of `watch` up to the agent's `replica-ready` line (the agent then runs on;
    iterating `watch` again goes on from there)."""
    seen = []
    async for response in watch:
        seen.append(response.event)
        if "replica-ready" in response.event.output.text:
            return seen
    raise AssertionError(f"the rollout ended before its agent was ready: {seen}")


def _processes_with(text: str) -> list[int]:
    """Pids whose command line contains `text`."""
    pids = []
    for entry in Path("/proc").iterdir():
        try:
            command = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except (OSError, UnicodeDecodeError):
            continue
        if entry.name.isdigit() and text in command:
            pids.append(int(entry.name))
    return pids


def test_a_database_url_that_is_not_postgresql_is_refused_without_showing_it(
    tmp_path: Path,
) -> None:
    line = refused(tmp_path, {"ROLLOUT_DATABASE_URL": "mysql://root:hunter2@db/rollouts"})

    assert "ROLLOUT_DATABASE_URL" in line
    assert "postgresql://" in line
    assert "hunter2" not in line
