"""RolloutStore.list (both backends): slim rows read without their bulk, and pages a `take`
ends early."""

from __future__ import annotations

from service.models import Rollout
from service.store.base import TakeRollout
from testing.samples import BINARY, full_rollout, rollout
from tests.store.conftest import AnyStore


async def test_a_slim_row_is_the_slim_rollout(store: AnyStore) -> None:
    full = full_rollout()
    await store.insert(full)
    await store.save(full)

    (listed,), _ = await store.list(labels={}, statuses=[], page_size=10, page_token="", slim=True)

    assert listed == full.slim()
    assert listed.spec.task.files == {}
    assert listed.spec.task.verifier_files == {}
    assert (listed.result.turns, listed.result.files, listed.result.agent_log_tail) == ([], {}, "")
    assert listed.result.turn_count == full.result.turn_count == 1
    assert listed.spec.task.instruction == full.spec.task.instruction


async def test_the_full_view_still_reads_everything(store: AnyStore) -> None:
    full = full_rollout()
    await store.insert(full)
    await store.save(full)

    (listed,), _ = await store.list(labels={}, statuses=[], page_size=10, page_token="")

    assert listed == full
    assert listed.spec.task.files["data.bin"] == BINARY


async def test_take_ends_the_page_and_the_token_resumes_at_the_refused_rollout(
    store: AnyStore,
) -> None:
    for n in range(7):
        await store.insert(rollout(n))
    offered: list[str] = []

    def take_three(candidate: Rollout) -> bool:
        offered.append(candidate.id)
        return len(offered) <= 3

    first, token = await store.list(
        labels={}, statuses=[], page_size=5, page_token="", take=take_three
    )
    rest, last_token = await store.list(labels={}, statuses=[], page_size=5, page_token=token)

    assert [r.id for r in first] == ["r0006", "r0005", "r0004"]
    assert offered == ["r0006", "r0005", "r0004", "r0003"], "reading stops at the refusal"
    assert [r.id for r in rest] == ["r0003", "r0002", "r0001", "r0000"]
    assert last_token == ""


def first_only() -> tuple[list[Rollout], TakeRollout]:
    """A take that accepts the first rollout offered and refuses the rest."""
    taken: list[Rollout] = []

    def take(candidate: Rollout) -> bool:
        if taken:
            return False
        taken.append(candidate)
        return True

    return taken, take


async def test_a_take_of_one_per_page_walks_every_rollout(store: AnyStore) -> None:
    for n in range(4):
        await store.insert(rollout(n))
    seen: list[str] = []
    token = ""
    while True:
        taken, take = first_only()
        page, token = await store.list(
            labels={}, statuses=[], page_size=50, page_token=token, slim=True, take=take
        )
        assert page == taken
        assert len(page) == 1
        seen += [r.id for r in page]
        if not token:
            break

    assert seen == ["r0003", "r0002", "r0001", "r0000"]
