"""RolloutPageBuilder and GroupPageBuilder: pages measured as encoded, never over the limit,
never empty."""

from __future__ import annotations

from datetime import UTC, datetime

from service.api.paging import GroupPageBuilder, RolloutPageBuilder
from service.models import Rollout, RolloutResult, RolloutSpec, TaskSpec, Turn
from service.models.group import Group, GroupMember, GroupSpec

_MIB = 1024 * 1024


def with_files(rollout_id: str, size: int) -> Rollout:
    spec = RolloutSpec(task=TaskSpec(instruction="x", files={"blob": b"\0" * size}))
    return Rollout(id=rollout_id, spec=spec, create_time=datetime.now(UTC))


def with_token_data(rollout_id: str, turns: int, prompt_ids: int) -> Rollout:
    """A rollout whose turns carry token ids only (no body, which the proxy bounds)."""
    ids = list(range(100_000, 100_000 + prompt_ids))
    result = RolloutResult(turns=[Turn(index=n, prompt_token_ids=ids) for n in range(turns)])
    rollout = with_files(rollout_id, 0)
    rollout.result = result
    return rollout


def test_full_pages_stop_before_the_limit_and_the_response_stays_under_it() -> None:
    page = RolloutPageBuilder(limit_bytes=5 * _MIB, slim=False)

    taken = [page.take(with_files(f"r{n}", 2 * _MIB)) for n in range(3)]

    assert taken == [True, True, False]
    response = page.response("next")
    assert [r.id for r in response.rollouts] == ["r0", "r1"]
    assert 4 * _MIB < response.ByteSize() <= 5 * _MIB


def test_a_rollout_larger_than_the_limit_gets_a_page_of_its_own() -> None:
    page = RolloutPageBuilder(limit_bytes=_MIB, slim=False)

    assert page.take(with_files("huge", 2 * _MIB)) is True
    assert page.take(with_files("small", 10)) is False
    assert [r.id for r in page.response("").rollouts] == ["huge"]


def test_slim_pages_carry_no_spec_files() -> None:
    page = RolloutPageBuilder(limit_bytes=_MIB, slim=True)

    assert all(page.take(with_files(f"r{n}", 2 * _MIB)) for n in range(10))
    response = page.response("")
    assert len(response.rollouts) == 10
    assert not any(r.spec.task.files for r in response.rollouts)
    assert response.ByteSize() < 4096


def test_a_rollout_that_fits_is_sent_alone_with_its_turns() -> None:
    rollout = with_token_data("r", turns=3, prompt_ids=1000)

    message = RolloutPageBuilder.alone(rollout, limit_bytes=_MIB, slim=False)

    assert len(message.result.turns) == message.result.turn_count == 3


def test_token_data_over_the_limit_leaves_the_turns_out_and_counts_them() -> None:
    rollout = with_token_data("r", turns=20, prompt_ids=32_768)  # ~1.8 MiB of ids

    message = RolloutPageBuilder.alone(rollout, limit_bytes=_MIB, slim=False)

    assert message.ByteSize() < _MIB
    assert list(message.result.turns) == []
    assert message.result.turn_count == 20  # the client reads them from WatchRollout
    page = RolloutPageBuilder(limit_bytes=_MIB, slim=False)
    assert page.take(rollout) is True
    assert page.response("").ByteSize() < _MIB
    assert page.response("").rollouts[0].result.turn_count == 20


def test_group_pages_stop_before_the_limit_and_a_large_group_gets_one_alone() -> None:
    def group(group_id: str, members: int) -> Group:
        spec = GroupSpec(spec=RolloutSpec(task=TaskSpec(instruction="x")), n=members)
        listed = [GroupMember(rollout_id=f"{n:032x}", index=n) for n in range(members)]
        return Group(id=group_id, spec=spec, members=listed, create_time=datetime.now(UTC))

    page = GroupPageBuilder(limit_bytes=64 * 1024)
    taken = [page.take(group(f"g{n}", 500)) for n in range(4)]
    alone = GroupPageBuilder(limit_bytes=1024)
    alone_taken = [alone.take(group("big", 500)), alone.take(group("small", 1))]

    assert taken == [True, True, True, False]
    response = page.response("next")
    assert [g.id for g in response.groups] == ["g0", "g1", "g2"]
    assert 48 * 1024 < response.ByteSize() <= 64 * 1024
    assert alone_taken == [True, False]
    assert len(alone.response("").groups[0].members) == 500
