"""ListGroups in the store: one page of 50 out of N groups (8 members each, 100 to a batch
label), on SQLite and, when Debian's postgresql is installed, on a throwaway PostgreSQL
cluster. Each query is timed as the best of 5; the ratio is against a ListRollouts page of
50 over N rollouts with the same label filter (none for the first two), measured in the same
run on the same store.

    python bench/bench_list_groups.py [--groups 10000]
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from service.models import Group, GroupMember, GroupSpec, GroupStatus
from service.store import PostgresStore, SqliteStore
from testing.postgres_server import PostgresServer, postgres_bin_dir
from testing.samples import BASE_TIME, rollout

Store = SqliteStore | PostgresStore


def _labels(number: int) -> dict[str, str]:
    return {"rollout.batch": f"b{number // 100}", "team": "rl"}


def _group(number: int) -> Group:
    members = [GroupMember(rollout_id=f"{number:06d}{m:026d}", index=m) for m in range(8)]
    return Group(
        id=f"g{number:06d}",
        spec=GroupSpec(spec=rollout(1, labels=_labels(number)).spec, n=8),
        members=members,
        status=GroupStatus.COMPLETED if number % 10 else GroupStatus.RUNNING,
        create_time=BASE_TIME + timedelta(seconds=number),
        tenant="t",
    )


async def _best_ms(call: Callable[[], Awaitable[Any]]) -> float:
    best = float("inf")
    for _ in range(5):
        start = time.perf_counter()
        await call()
        best = min(best, time.perf_counter() - start)
    return best * 1000


async def _measure(store: Store, name: str, count: int) -> None:
    for number in range(count):
        await store.insert_group(_group(number), secret_free=True)
        await store.insert(rollout(number, labels=_labels(number)))
    oldest = {"rollout.batch": "b3"}
    queries: list[tuple[str, dict[str, Any], dict[str, Any]]] = [
        ("newest, no filter", {}, {}),
        ("tenant, one status", {"tenant": "t", "statuses": [GroupStatus.RUNNING]}, {}),
        ("label of an old batch", {"labels": oldest}, {"labels": oldest}),
    ]
    print(f"| {name} | query | ListGroups ms | ListRollouts ms | ratio |")
    print("|---|---|---|---|---|")
    for title, group_query, rollout_query in queries:

        async def groups_page(q: dict[str, Any] = group_query) -> Any:
            return await store.list_groups(
                labels=q.get("labels", {}),
                statuses=q.get("statuses", ()),
                tenant=q.get("tenant"),
                page_size=50,
                page_token="",
            )

        async def rollouts_page(q: dict[str, Any] = rollout_query) -> Any:
            return await store.list(
                labels=q.get("labels", {}), statuses=(), page_size=50, page_token=""
            )

        groups_ms = await _best_ms(groups_page)
        rollouts_ms = await _best_ms(rollouts_page)
        ratio = groups_ms / rollouts_ms
        print(f"| {count} | {title} | {groups_ms:.1f} | {rollouts_ms:.1f} | {ratio:.2f} |")


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--groups", type=int, default=10_000)
    count = parser.parse_args().groups
    with tempfile.TemporaryDirectory() as folder:
        async with SqliteStore(Path(folder) / "bench.db") as store:
            await _measure(store, "SQLite", count)
    bin_dir = postgres_bin_dir()
    if bin_dir is None:
        print("PostgreSQL is not installed: its half is skipped")
        return
    server = PostgresServer(bin_dir)
    server.start()
    try:
        url = server.create_database()
        async with PostgresStore(url, server="bench") as store:
            await _measure(store, "PostgreSQL", count)
    finally:
        server.stop()


if __name__ == "__main__":
    asyncio.run(main())
