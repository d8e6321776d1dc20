"""`list_groups` on both backends: newest first, paged, filtered by the spec's labels, status
and tenant, ended early by `take`, and a bad token named; SQLite's schema v4 fills in the labels
of the groups a v3 database holds."""

from __future__ import annotations

import sqlite3
from datetime import timedelta
from pathlib import Path

import pytest

from service.errors import SpecError
from service.models.group import Group, GroupSpec, GroupStatus
from service.store.codec import encode_model
from service.store.rows import epoch_us
from service.store.schema import MIGRATIONS
from service.store.sqlite import SqliteStore
from testing.samples import BASE_TIME, rollout
from tests.store.conftest import AnyStore


def _group(
    number: int,
    *,
    labels: dict[str, str] | None = None,
    status: GroupStatus = GroupStatus.RUNNING,
    tenant: str = "",
) -> Group:
    """Group g<number>, created <number> seconds after BASE_TIME."""
    return Group(
        id=f"g{number:04d}",
        spec=GroupSpec(spec=rollout(number, labels=labels).spec, n=2),
        status=status,
        create_time=BASE_TIME + timedelta(seconds=number),
        tenant=tenant,
    )


async def _insert(store: AnyStore, *groups: Group) -> None:
    for group in groups:
        await store.insert_group(group, secret_free=True)
        if group.status is not GroupStatus.RUNNING:
            await store.save_group(group)


async def _ids(store: AnyStore, **query: object) -> list[str]:
    """Every page's group ids in order, pages of two."""
    ids: list[str] = []
    token = ""
    while True:
        page, token = await store.list_groups(
            labels=query.get("labels", {}),  # type: ignore[arg-type]
            statuses=query.get("statuses", ()),  # type: ignore[arg-type]
            tenant=query.get("tenant"),  # type: ignore[arg-type]
            page_size=2,
            page_token=token,
        )
        assert len(page) <= 2
        ids += [group.id for group in page]
        if not token:
            return ids


async def test_groups_come_newest_first_in_pages_and_whole(store: AnyStore) -> None:
    groups = [_group(number) for number in range(1, 6)]
    await _insert(store, *groups)
    assert await _ids(store) == ["g0005", "g0004", "g0003", "g0002", "g0001"]
    page, token = await store.list_groups(labels={}, statuses=(), page_size=0, page_token="")
    assert page == groups[::-1]
    assert token == ""


async def test_labels_status_and_tenant_each_narrow_the_list(store: AnyStore) -> None:
    nightly = {"rollout.batch": "nightly", "team": "rl"}
    await _insert(
        store,
        _group(1, labels=nightly),
        _group(2, labels={"rollout.batch": "nightly"}, status=GroupStatus.COMPLETED),
        _group(3, labels=nightly, status=GroupStatus.FAILED, tenant="a"),
        _group(4, labels={"team": "rl"}, tenant="a"),
        _group(5, labels={"rollout.batch": "nightly-2", "team": "rl"}, tenant="b"),
    )
    assert await _ids(store, labels={"rollout.batch": "nightly"}) == ["g0003", "g0002", "g0001"]
    assert await _ids(store, labels=nightly) == ["g0003", "g0001"]
    assert await _ids(store, labels={"team": "rl", "other": ""}) == []
    running = await _ids(store, statuses=[GroupStatus.RUNNING])
    assert running == ["g0005", "g0004", "g0001"]
    done = [GroupStatus.COMPLETED, GroupStatus.FAILED]
    assert await _ids(store, statuses=done, labels=nightly) == ["g0003"]
    assert await _ids(store, tenant="a") == ["g0004", "g0003"]
    assert await _ids(store, tenant="a", labels={"team": "rl"}, statuses=done) == ["g0003"]
    assert await _ids(store, tenant="") == ["g0002", "g0001"]
    assert await _ids(store, tenant="c") == []


async def test_a_saved_group_is_listed_as_saved(store: AnyStore) -> None:
    group = _group(1)
    await _insert(store, group)
    group.status = GroupStatus.COMPLETED
    group.finish_time = BASE_TIME + timedelta(seconds=9)
    await store.save_group(group)
    assert await _ids(store, statuses=[GroupStatus.RUNNING]) == []
    page, _ = await store.list_groups(
        labels={}, statuses=[GroupStatus.COMPLETED], page_size=0, page_token=""
    )
    assert page == [group]


async def test_take_ends_a_page_and_its_token_resumes_there(store: AnyStore) -> None:
    await _insert(store, *(_group(number) for number in range(1, 5)))
    taken: list[str] = []

    def two(group: Group) -> bool:
        if len(taken) == 2:
            return False
        taken.append(group.id)
        return True

    page, token = await store.list_groups(
        labels={}, statuses=(), page_size=10, page_token="", take=two
    )
    assert [group.id for group in page] == ["g0004", "g0003"]
    rest, last = await store.list_groups(labels={}, statuses=(), page_size=10, page_token=token)
    assert [group.id for group in rest] == ["g0002", "g0001"]
    assert last == ""


@pytest.mark.parametrize(
    ("page_size", "page_token", "field"),
    [(0, "not-a-token", "page_token"), (0, "WzEsMl0=", "page_token"), (-1, "", "page_size")],
)
async def test_a_bad_page_token_or_size_is_named(
    store: AnyStore, page_size: int, page_token: str, field: str
) -> None:
    with pytest.raises(SpecError) as raised:
        await store.list_groups(labels={}, statuses=(), page_size=page_size, page_token=page_token)
    assert [violation.field for violation in raised.value.violations] == [field]


async def test_a_version_3_database_lists_its_groups_by_label(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    conn = sqlite3.connect(path, isolation_level=None)
    for statements in MIGRATIONS[:3]:
        for statement in statements:
            conn.execute(statement)
    conn.execute("PRAGMA user_version = 3")
    old = [_group(1, labels={"rollout.batch": "b", "team": "rl"}), _group(2), _group(3)]
    old[2].spec.spec.labels["rollout.batch"] = "b"
    for group in old:
        conn.execute(
            "INSERT INTO groups (id, tenant, status, create_us, secret_free, document)"
            " VALUES (?, '', 'running', ?, 1, ?)",
            (group.id, epoch_us(group.create_time), encode_model(group)),
        )
    conn.close()
    async with SqliteStore(path) as store:
        batch = await _ids(store, labels={"rollout.batch": "b"})
        both = await _ids(store, labels={"rollout.batch": "b", "team": "rl"})
        everything = await _ids(store)
    assert batch == ["g0003", "g0001"]
    assert both == ["g0001"]
    assert everything == ["g0003", "g0002", "g0001"]
