"""What only the PostgreSQL store has: yoyo's migrations on a fresh database (replicas starting
together), followers woken by another server's events, cancel requests delivered to the live
owner only, writes fenced once another replica took the rows over, no secret in any table, and
a URL that never shows its password."""

from __future__ import annotations

import asyncio
from datetime import timedelta

import psycopg
import pytest

from service.engine.groups.manager import Store
from service.models import (
    AgentOutput,
    AgentOutputKind,
    EventPayload,
    Phase,
    PhaseChanged,
    RolloutEvent,
    RolloutStatus,
)
from service.models.group import Group, GroupSpec, GroupStatus
from service.store import postgres
from service.store.base import FencedError
from service.store.postgres import PostgresStore
from service.store.rows import encode_event
from testing.postgres_server import PostgresServer
from testing.samples import BASE_TIME, full_rollout, rollout

_TABLES = ("rollouts", "rollout_labels", "events", "groups", "group_labels")
_POLL_S = 0.2
"""The store's look for lost notifications, made short where a test waits for it."""


def test_matches_the_store_protocols() -> None:
    # mypy checks the shape.
    store: Store = PostgresStore("postgresql://u@127.0.0.1:1/db", server="a")
    assert isinstance(store, PostgresStore)


async def test_replicas_opening_a_fresh_database_together_migrate_it_once(
    postgres_server: PostgresServer,
) -> None:
    url = postgres_server.create_database()
    stores = [PostgresStore(url, server=name) for name in "abc"]

    await asyncio.gather(*(store.open() for store in stores))
    try:
        inserted = await stores[0].insert(rollout(1, request_id="req"))
        assert await stores[2].get(inserted.id) == inserted
    finally:
        await asyncio.gather(*(store.close() for store in stores))

    with psycopg.connect(url) as conn:
        applied = conn.execute("SELECT migration_id FROM _yoyo_migration").fetchall()
        tables = conn.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = 'public'"
        ).fetchall()
    assert sorted(applied) == [
        ("0001.rollouts-events-groups",),
        ("0002.owners-and-leases",),
        ("0003.cancel-requests",),
        ("0004.group-labels",),
        ("0005.rollout-server",),
        ("0006.rollout-instance",),
        ("0007.group-cancel-requests",),
        ("0008.server-address",),
    ]
    assert set(_TABLES) <= {name for (name,) in tables}


def _group(group_id: str) -> Group:
    spec = GroupSpec(spec=rollout(1).spec, n=2, min_complete=1, max_refills=0, deadline_s=60.0)
    return Group(id=group_id, spec=spec, create_time=BASE_TIME)


def _event(rollout_id: str, seq: int, payload: EventPayload | None = None) -> RolloutEvent:
    return RolloutEvent(
        rollout_id=rollout_id,
        seq=seq,
        time=BASE_TIME + timedelta(milliseconds=seq),
        payload=payload or AgentOutput(kind=AgentOutputKind.STDOUT, text=f"line {seq}"),
    )


async def test_a_follower_gets_another_stores_events_in_order_until_the_final_one(
    postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Only a notification can wake the follower: were NOTIFY lost, the test would time out.
    monkeypatch.setattr(postgres, "POLL_S", 3600.0)
    async with (
        PostgresStore(postgres_url, server="a") as writer,
        PostgresStore(postgres_url, server="b") as reader,
    ):
        owner = await writer.insert(rollout(1))
        other = await writer.insert(rollout(2))
        await writer.append_events([_event(owner.id, 1)])
        received: list[int] = []
        first_read = asyncio.Event()

        async def follow() -> None:
            async for event in reader.follow_events(owner.id, after_seq=0):
                received.append(event.seq)
                first_read.set()

        follower = asyncio.create_task(follow())
        await first_read.wait()
        for start, end in ((2, 3), (3, 6), (6, 12), (12, 24)):  # batches of 1, 3, 6, 12 events
            batch = [_event(owner.id, seq) for seq in range(start, end)]
            await writer.append_events([*batch, _event(other.id, start)])
        await writer.append_events([_event(owner.id, 24, owner), _event(owner.id, 25)])
        await follower

    assert received == list(range(1, 25))


async def test_a_label_wide_follower_gets_other_runs_events_from_its_start_lost_ones_too(
    postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(postgres, "POLL_S", 0.2)
    async with (
        PostgresStore(postgres_url, server="a") as writer,
        PostgresStore(postgres_url, server="b") as reader,
    ):
        running = await writer.insert(rollout(1))
        await writer.append_events([_event(running.id, 1)])  # before the follower: not its
        probe = await writer.insert(rollout(2))
        own = await reader.insert(rollout(3))
        got: asyncio.Queue[tuple[str, int]] = asyncio.Queue()

        async def follow() -> None:
            async for event in reader.follow_others():
                got.put_nowait((event.rollout_id, event.seq))

        follower = asyncio.create_task(follow())
        seq = 0
        while not any(rollout_id == probe.id for rollout_id, _ in _drain(got)):
            seq += 1  # until the follower listens (it starts at its first read)
            await writer.append_events([_event(probe.id, seq)])
            await asyncio.sleep(0.1)
        await reader.append_events([_event(own.id, 1)])
        await writer.append_events([_event(running.id, 2)])
        received = await _until(got, (running.id, 2), leaving_out=probe.id)
        with psycopg.connect(postgres_url, autocommit=True) as conn:  # stored, never notified
            conn.execute(
                "INSERT INTO events (rollout_id, seq, time, kind, payload)"
                " VALUES (%s, %s, %s, %s, %s)",
                encode_event(_event(running.id, 3, running)),
            )
        received += await _until(got, (running.id, 3), leaving_out=probe.id)
        follower.cancel()

    assert received == [(running.id, 2), (running.id, 3)]


async def _until(
    queue: asyncio.Queue[tuple[str, int]], last: tuple[str, int], *, leaving_out: str
) -> list[tuple[str, int]]:
    """What the queue receives up to `last`, but for the rollout `leaving_out`."""
    received: list[tuple[str, int]] = []
    while last not in received:
        item = await queue.get()
        if item[0] != leaving_out:
            received.append(item)
    return received


def _drain(queue: asyncio.Queue[tuple[str, int]]) -> list[tuple[str, int]]:
    items = []
    while not queue.empty():
        items.append(queue.get_nowait())
    return items


async def test_a_cancel_request_is_recorded_and_reaches_only_the_live_owner(
    postgres_url: str,
) -> None:
    async with (
        PostgresStore(postgres_url, server="a") as owner,
        PostgresStore(postgres_url, server="b") as other,
    ):
        heard: asyncio.Queue[tuple[str, str]] = asyncio.Queue()
        owner.on_cancel_request(lambda rollout_id, reason: heard.put_nowait((rollout_id, reason)))
        other.on_cancel_request(lambda rollout_id, reason: heard.put_nowait(("b?", reason)))
        running = await owner.insert(rollout(1))
        finished = await owner.insert(full_rollout())

        assert await other.request_cancel(running.id, "first") is True
        assert await heard.get() == (running.id, "first")
        # Taken: a later request is a new one (the owner's handler keeps the first reason).
        assert await other.request_cancel(running.id, "second") is True
        assert await heard.get() == (running.id, "second")
        assert await owner.request_cancel(running.id, "own") is False  # it cancels locally
        assert await other.request_cancel(finished.id, "late") is False
        with psycopg.connect(postgres_url, autocommit=True) as conn:
            conn.execute(
                "UPDATE servers SET heartbeat_at = now() - interval '1 hour' WHERE server = 'a'"
            )
            assert await other.request_cancel(running.id, "dead") is False
            rows = conn.execute("SELECT rollout_id, reason FROM cancel_requests").fetchall()

    assert heard.empty()
    assert rows == []  # each taken by its owner, or never recorded (no live owner)


async def test_a_phase_change_updates_the_row_every_server_reads_but_never_a_terminal_one(
    postgres_url: str,
) -> None:
    async with (
        PostgresStore(postgres_url, server="a") as writer,
        PostgresStore(postgres_url, server="b") as reader,
    ):
        queued = await writer.insert(rollout(1))
        agent = PhaseChanged(phase=Phase.AGENT, status=RolloutStatus.RUNNING)
        await writer.append_events([_event(queued.id, 1, agent)])
        running = await reader.get(queued.id)
        finished = full_rollout(queued.id)
        await writer.save(finished)
        late = PhaseChanged(phase=Phase.TEARDOWN, status=RolloutStatus.RUNNING)
        await writer.append_events([_event(queued.id, 2, late)])
        final = await reader.get(queued.id)

    assert running is not None
    assert (running.status, running.phase) == (RolloutStatus.RUNNING, Phase.AGENT)
    assert final is not None
    assert (final.status, final.phase) == (finished.status, finished.phase)


async def test_a_starting_replica_takes_over_only_what_a_dead_one_left_and_only_once(
    postgres_url: str,
) -> None:
    async with PostgresStore(postgres_url, server="a") as a:
        queued = await a.insert(rollout(1))
        await a.insert_group(_group("g1"), secret_free=True)
        async with PostgresStore(postgres_url, server="b") as b:
            assert await b.non_terminal() == []
            assert await b.unfinished_groups() == []
            # a's heartbeats stop (kill -9): its lease runs out.
            with psycopg.connect(postgres_url, autocommit=True) as conn:
                conn.execute(
                    "UPDATE servers SET heartbeat_at = now() - interval '1 hour' WHERE server = 'a'"
                )
            async with PostgresStore(postgres_url, server="c") as c:
                claims = await asyncio.gather(b.non_terminal(), c.non_terminal())
                groups = await asyncio.gather(b.unfinished_groups(), c.unfinished_groups())

    assert sorted(len(claim) for claim in claims) == [0, 1]
    assert [r.rollout.id for claim in claims for r in claim] == [queued.id]
    assert [g.id for claim in groups for g, _ in claim] == ["g1"]


async def test_a_group_is_taken_over_by_the_run_that_holds_its_unfinished_members(
    postgres_url: str,
) -> None:
    member = rollout(1)
    member.group_id = "g2"
    async with PostgresStore(postgres_url, server="a") as a:
        await a.insert(member)
        await a.insert_group(_group("g2"), secret_free=True)
        async with (
            PostgresStore(postgres_url, server="b") as b,
            PostgresStore(postgres_url, server="c") as c,
        ):
            with psycopg.connect(postgres_url, autocommit=True) as conn:
                conn.execute(
                    "UPDATE servers SET heartbeat_at = now() - interval '1 hour' WHERE server = 'a'"
                )
            claimed = await b.non_terminal()  # b has not ended its member yet
            by_c = await c.unfinished_groups()
            by_b = await b.unfinished_groups()

    assert [r.rollout.id for r in claimed] == [member.id]
    assert by_c == []
    assert [g.id for g, _ in by_b] == ["g2"]


def _expire(url: str, server: str) -> None:
    """The server's heartbeats stopped (a stalled host): its lease is a lease ago."""
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(
            "UPDATE servers SET heartbeat_at = now() - interval '1 hour' WHERE server = %s",
            (server,),
        )


async def test_a_stalled_replica_s_writes_are_fenced_after_a_takeover_and_it_takes_a_new_lease(
    postgres_url: str,
) -> None:
    member = rollout(1)
    member.group_id = "g4"
    lost = asyncio.Event()

    def stop_everything() -> int:
        lost.set()
        return 1

    async with (
        PostgresStore(postgres_url, server="a") as stalled,
        PostgresStore(postgres_url, server="b") as takeover,
    ):
        stalled.on_lease_lost(stop_everything)
        await stalled.insert(member)
        await stalled.insert_group(_group("g4"), secret_free=True)
        running = PhaseChanged(phase=Phase.AGENT, status=RolloutStatus.RUNNING)
        await stalled.append_events([_event(member.id, 1, running)])
        _expire(postgres_url, "a")
        [(claimed, _)] = await takeover.non_terminal()
        claimed.status, claimed.phase = RolloutStatus.FAILED, Phase.DONE
        await takeover.save(claimed)
        await takeover.append_events([_event(member.id, 2, claimed)])
        [(group, _)] = await takeover.unfinished_groups()

        # The stalled replica wakes up and writes what it still believes it runs.
        succeeded = full_rollout(member.id)
        with pytest.raises(FencedError) as refused_save:
            await stalled.save(succeeded)
        late = _event(member.id, 3)
        with pytest.raises(FencedError) as refused_events:
            await stalled.append_events([late])
        group.status = GroupStatus.COMPLETED
        with pytest.raises(FencedError):
            await stalled.save_group(group)
        await lost.wait()  # its refused write made it renew at once: the lease is gone
        after = await stalled.insert(rollout(2))
        asked: asyncio.Queue[tuple[str, str]] = asyncio.Queue()
        stalled.on_cancel_request(lambda rollout_id, reason: asked.put_nowait((rollout_id, reason)))
        sent = await takeover.request_cancel(after.id, "to the new lease")
        heard = await asked.get()
        stored = await takeover.get(member.id)
        events = await takeover.events(member.id, after_seq=0, limit=10)
        stored_group = await takeover.get_group("g4")
        left_to_take = await takeover.non_terminal()

    assert refused_save.value.ids == refused_events.value.ids == {member.id}
    assert stored is not None
    assert (stored.status, stored.phase) == (RolloutStatus.FAILED, Phase.DONE)
    assert [event.seq for event in events] == [1, 2]
    assert events[-1].is_final
    assert stored_group is not None
    assert stored_group.status is GroupStatus.RUNNING
    # Under its new lease it is live again: what it admits now is its own, and it hears
    # cancel requests on its new lease's channel.
    assert after.id not in {r.rollout.id for r in left_to_take}
    assert (sent, heard) == (True, (after.id, "to the new lease"))


async def test_a_group_cancel_reaches_its_live_owner_and_its_saves_wake_other_runs(
    postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Only a notification can wake the follower: were NOTIFY lost, the test would time out.
    monkeypatch.setattr(postgres, "POLL_S", 3600.0)
    group = _group("g3")
    async with (
        PostgresStore(postgres_url, server="a") as owner,
        PostgresStore(postgres_url, server="b") as other,
    ):
        await owner.insert_group(group, secret_free=True)
        asked: asyncio.Queue[tuple[str, str]] = asyncio.Queue()
        owner.on_group_cancel_request(lambda group_id, reason: asked.put_nowait((group_id, reason)))
        seen: list[GroupStatus] = []
        first_read = asyncio.Event()

        async def follow() -> None:
            async for stored in other.follow_group(group.id):
                seen.append(stored.status)
                first_read.set()

        follower = asyncio.create_task(follow())
        await first_read.wait()
        sent = await other.request_group_cancel(group.id, "from b")
        heard = await asked.get()
        to_itself = await owner.request_group_cancel(group.id, "own")
        group.status = GroupStatus.CANCELLED
        await owner.save_group(group)
        await follower
        too_late = await other.request_group_cancel(group.id, "late")

    assert (sent, heard, to_itself, too_late) == (True, (group.id, "from b"), False, False)
    assert asked.empty()
    assert seen == [GroupStatus.RUNNING, GroupStatus.CANCELLED]


async def test_cancel_requests_whose_notification_is_lost_reach_the_owner_once(
    postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(postgres, "POLL_S", _POLL_S)
    async with (
        PostgresStore(postgres_url, server="a") as owner,
        PostgresStore(postgres_url, server="b") as other,
    ):
        heard: asyncio.Queue[tuple[str, str]] = asyncio.Queue()
        owner.on_cancel_request(lambda rollout_id, reason: heard.put_nowait((rollout_id, reason)))
        owner.on_group_cancel_request(lambda group_id, reason: heard.put_nowait((group_id, reason)))
        unnotified = await owner.insert(rollout(1))
        unheard = await owner.insert(rollout(2))
        await owner.insert_group(_group("g5"), secret_free=True)
        with psycopg.connect(postgres_url, autocommit=True) as conn:
            # Recorded without a NOTIFY, as if the notification was lost.
            conn.execute(
                "INSERT INTO cancel_requests (rollout_id, reason) VALUES (%s, 'no notify')",
                (unnotified.id,),
            )
            conn.execute(
                "INSERT INTO group_cancel_requests (group_id, reason) VALUES ('g5', 'no notify')"
            )
            async with asyncio.timeout(60):  # a hang guard, not a measure
                without_notify = {await heard.get(), await heard.get()}
            # The owner's LISTEN connection drops: what it is sent meanwhile is never heard.
            [(ended,)] = conn.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                " WHERE query LIKE 'LISTEN %%' || (SELECT owner FROM servers WHERE server = 'a')"
                " || '%%'"
            ).fetchall()
            sent = await other.request_cancel(unheard.id, "listener down")
            async with asyncio.timeout(60):
                listener_down = await heard.get()
            await asyncio.sleep(5 * _POLL_S)  # five more looks: nothing is taken twice
            left = conn.execute(
                "SELECT (SELECT count(*) FROM cancel_requests)"
                " + (SELECT count(*) FROM group_cancel_requests)"
            ).fetchall()

    assert without_notify == {(unnotified.id, "no notify"), ("g5", "no notify")}
    assert (ended, sent, listener_down) == (True, True, (unheard.id, "listener down"))
    assert heard.empty()
    assert left == [(0,)]


async def test_a_replica_that_stops_cleanly_leaves_its_rollouts_to_the_next_at_once(
    postgres_url: str,
) -> None:
    async with PostgresStore(postgres_url, server="b") as b:
        async with PostgresStore(postgres_url, server="a") as a:
            queued = await a.insert(rollout(1))
            assert await b.non_terminal() == []

        assert [r.rollout.id for r in await b.non_terminal()] == [queued.id]


async def test_api_key_never_lands_in_the_database(postgres_url: str) -> None:
    secret = "sk-live-4f9c2e1d8b7a"
    leaky = full_rollout(api_key=secret)
    async with PostgresStore(postgres_url, server="a") as store:
        inserted = await store.insert(leaky)
        await store.save(leaky)
        final = PhaseChanged(phase=Phase.DONE, status=RolloutStatus.FAILED)
        events = [
            RolloutEvent(
                rollout_id=leaky.id,
                seq=seq,
                time=BASE_TIME + timedelta(seconds=seq),
                payload=payload,
            )
            for seq, payload in ((1, final), (2, leaky))
        ]
        await store.append_events(events)
        stored = await store.get(leaky.id)

    assert inserted.spec.endpoint.api_key == ""
    assert stored is not None
    assert stored.spec == leaky.spec.redacted()
    with psycopg.connect(postgres_url) as conn:
        for table in _TABLES:
            rows = conn.execute(f"SELECT t::text FROM {table} AS t").fetchall()
            assert table in ("groups", "group_labels") or rows, table
            assert not [row for (row,) in rows if secret in row], table


def test_the_url_password_is_never_shown() -> None:
    store = PostgresStore("postgresql://rollout:hunter2-secret@127.0.0.1:5432/rollouts", server="a")

    assert "hunter2" not in repr(store)
    assert "hunter2" not in str(store)
