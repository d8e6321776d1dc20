"""RolloutPageBuilder: pages measured as encoded, never over the limit, never empty."""

from __future__ import annotations

from datetime import UTC, datetime

from service.api.paging import RolloutPageBuilder
from service.models import Rollout, RolloutSpec, TaskSpec

_MIB = 1024 * 1024


def with_files(rollout_id: str, size: int) -> Rollout:
    spec = RolloutSpec(task=TaskSpec(instruction="x", files={"blob": b"\0" * size}))
    return Rollout(id=rollout_id, spec=spec, create_time=datetime.now(UTC))


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
