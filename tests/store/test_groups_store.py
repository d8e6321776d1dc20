"""Groups in the store (both backends): round trips, request ids per tenant, restart's view;
and SQLite's schema v3."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from pathlib import Path

from service.models import ErrorKind, RolloutStatus, Sampling
from service.models.group import Group, GroupMember, GroupSpec, GroupStats, GroupStatus
from service.store.schema import MIGRATIONS, SCHEMA_VERSION
from service.store.sqlite import SqliteStore
from testing.samples import BASE_TIME, rollout
from tests.store.conftest import AnyStore


def _group(group_id: str, *, tenant: str = "", request_id: str = "") -> Group:
    spec = rollout(1, request_id=request_id).spec
    spec = spec.model_copy(
        update={"capture": spec.capture.model_copy(update={"sampling": Sampling(seed=7)})}
    )
    return Group(
        id=group_id,
        spec=GroupSpec(spec=spec, n=2, min_complete=1, max_refills=3, deadline_s=60.0),
        members=[
            GroupMember(
                rollout_id="m1",
                index=0,
                status=RolloutStatus.FAILED,
                error_kind=ErrorKind.SANDBOX,
                replaced_by="m2",
                seed=11,
            ),
            GroupMember(rollout_id="m2", index=0, seed=11),
        ],
        stats=GroupStats(refills=1, statuses={RolloutStatus.FAILED: 1}),
        create_time=BASE_TIME,
        tenant=tenant,
    )


async def test_a_group_round_trips_and_restart_finds_the_unfinished(
    new_store: Callable[[], AnyStore],
) -> None:
    async with new_store() as store:
        running = _group("g1")
        await store.insert_group(running, secret_free=True)
        done = _group("g2")
        await store.insert_group(done, secret_free=False)
        done.status = GroupStatus.COMPLETED
        await store.save_group(done)
        assert await store.get_group("g1") == running
        assert await store.get_group("g2") == done
        assert await store.get_group("nope") is None
    async with new_store() as restarted:
        assert await restarted.unfinished_groups() == [(running, True)]


async def test_a_request_id_names_one_group_per_tenant(new_store: Callable[[], AnyStore]) -> None:
    async with new_store() as store:
        first = await store.insert_group(_group("g1", tenant="a", request_id="r"), secret_free=True)
        again = await store.insert_group(_group("g2", tenant="a", request_id="r"), secret_free=True)
        other = await store.insert_group(_group("g3", tenant="b", request_id="r"), secret_free=True)
        assert again.id == first.id == "g1"
        assert other.id == "g3"
        found = await store.find_group("r", tenant="b")
        assert found is not None
        assert found.id == "g3"
        assert await store.find_group("r", tenant="c") is None


async def test_members_keep_their_group_across_the_store(new_store: Callable[[], AnyStore]) -> None:
    member = rollout(1).model_copy(update={"group_id": "g1", "member_index": 5})
    async with new_store() as store:
        await store.insert(member)
        got = await store.get(member.id)
        listed, _ = await store.list(labels={}, statuses=[], page_size=5, page_token="", slim=True)
    assert got is not None
    assert (got.group_id, got.member_index) == ("g1", 5)
    assert [(r.group_id, r.member_index) for r in listed] == [("g1", 5)]


async def test_a_version_2_database_gains_groups_and_keeps_its_rollouts(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    conn = sqlite3.connect(path, isolation_level=None)
    for statements in MIGRATIONS[:2]:
        for statement in statements:
            conn.execute(statement)
    conn.execute("PRAGMA user_version = 2")
    old = rollout(3)
    conn.execute(
        "INSERT INTO rollouts (id, tenant, status, phase, create_us, create_time, spec, result)"
        " VALUES (?, '', 'succeeded', 'done', 1, ?, ?, '{}')",
        (old.id, BASE_TIME.isoformat(), old.spec.model_dump_json()),
    )
    conn.close()
    async with SqliteStore(path) as store:
        got = await store.get(old.id)
        await store.insert_group(_group("g1"), secret_free=True)
        assert await store.get_group("g1") is not None
    assert got is not None
    assert (got.group_id, got.member_index) == ("", 0)
    conn = sqlite3.connect(path)
    try:
        assert conn.execute("PRAGMA user_version").fetchone() == (SCHEMA_VERSION,) == (4,)
    finally:
        conn.close()
