"""What a group makes of its members: seeds, specs, what counts and the statistics."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta

import pytest

from service.engine.groups.members import (
    adopt,
    belongs,
    group_stats,
    member_of,
    member_seed,
    member_spec,
)
from service.models import (
    ErrorKind,
    Rollout,
    RolloutError,
    RolloutResult,
    RolloutSpec,
    RolloutStatus,
    Sampling,
    TaskSpec,
)
from service.models.group import GROUP_LABEL, Group, GroupMember, GroupSpec


def test_member_seeds_are_stable_distinct_and_fit_a_signed_64_bit_integer() -> None:
    seeds = [member_seed(42, index) for index in range(64)]
    assert len(set(seeds)) == 64
    assert all(0 <= seed < 2**63 for seed in seeds)
    assert member_seed(42, 3) == member_seed(42, 3) != member_seed(43, 3)
    # Pinned: a change here breaks every trainer's reproducibility.
    assert member_seed(42, 0) == 2558911547692978034


def test_a_member_spec_carries_the_group_label_its_seed_and_no_request_id() -> None:
    spec = RolloutSpec(task=TaskSpec(instruction="x"), labels={"a": "b"}, request_id="req")
    spec = spec.model_copy(
        update={
            "capture": spec.capture.model_copy(update={"sampling": Sampling(seed=9, top_p=0.5)})
        }
    )
    member = member_spec(spec, "g1", 4)
    assert member.labels == {"a": "b", GROUP_LABEL: "g1"}
    assert member.request_id == ""
    assert member.capture.sampling == Sampling(seed=member_seed(9, 4), top_p=0.5)
    unseeded = member_spec(RolloutSpec(task=TaskSpec(instruction="x")), "g1", 4)
    assert unseeded.capture.sampling.seed is None


@pytest.mark.parametrize(
    ("status", "kind", "counted"),
    [
        (RolloutStatus.SUCCEEDED, None, True),
        (RolloutStatus.FAILED, ErrorKind.AGENT, True),
        (RolloutStatus.TIMED_OUT, ErrorKind.AGENT_TIMEOUT, True),
        (RolloutStatus.FAILED, ErrorKind.VERIFIER, True),
        (RolloutStatus.FAILED, ErrorKind.SANDBOX, False),
        (RolloutStatus.FAILED, ErrorKind.UPSTREAM_LLM, False),
        (RolloutStatus.FAILED, ErrorKind.INTERNAL, False),
        (RolloutStatus.FAILED, ErrorKind.AGENT_INSTALL, False),
        (RolloutStatus.CANCELLED, ErrorKind.CANCELLED, False),
        (RolloutStatus.RUNNING, None, False),
    ],
)
def test_only_task_outcomes_count(
    status: RolloutStatus, kind: ErrorKind | None, counted: bool
) -> None:
    error = None if kind is None else RolloutError(kind=kind)
    rollout = Rollout(
        id="r",
        spec=RolloutSpec(task=TaskSpec(instruction="x")),
        status=status,
        result=RolloutResult(error=error),
        create_time=datetime.now(UTC),
    )
    assert member_of(rollout).counted is counted


def test_statistics_cover_the_counted_members_only() -> None:
    members = [
        GroupMember(
            rollout_id="a", index=0, status=RolloutStatus.SUCCEEDED, reward=1.0, counted=True
        ),
        GroupMember(
            rollout_id="b", index=1, status=RolloutStatus.SUCCEEDED, reward=0.0, counted=True
        ),
        GroupMember(
            rollout_id="c",
            index=2,
            status=RolloutStatus.FAILED,
            error_kind=ErrorKind.VERIFIER,
            counted=True,
        ),
        GroupMember(
            rollout_id="d",
            index=3,
            status=RolloutStatus.FAILED,
            reward=0.0,
            error_kind=ErrorKind.SANDBOX,
            replaced_by="e",
        ),
        GroupMember(
            rollout_id="e", index=3, status=RolloutStatus.SUCCEEDED, reward=1.0, counted=True
        ),
    ]
    stats = group_stats(members)
    assert stats.counted == 4
    assert stats.rewarded == 3
    assert stats.reward_mean == pytest.approx(2 / 3)
    assert stats.reward_stddev == pytest.approx(math.sqrt(2 / 9))
    assert stats.statuses == {RolloutStatus.SUCCEEDED: 3, RolloutStatus.FAILED: 1}
    assert stats.errors == {ErrorKind.VERIFIER: 1}
    assert stats.refills == 1
    empty = group_stats([])
    assert (empty.reward_mean, empty.reward_stddev, empty.counted) == (None, None, 0)


def _member_rollout(rollout_id: str, index: int, kind: ErrorKind | None, age_s: int) -> Rollout:
    return Rollout(
        id=rollout_id,
        spec=RolloutSpec(task=TaskSpec(instruction="x")),
        status=RolloutStatus.SUCCEEDED if kind is None else RolloutStatus.FAILED,
        result=RolloutResult(error=None if kind is None else RolloutError(kind=kind)),
        create_time=datetime(2026, 1, 1, tzinfo=UTC) + timedelta(seconds=age_s),
        member_index=index,
    )


def test_adopt_adds_the_members_a_record_missed_each_replacing_its_index() -> None:
    """A server killed between starting members and saving the group: the next one finds
    them by their label and takes them in, oldest first, refills linked to what they replace."""
    recorded = _member_rollout("a", 0, None, 0)
    failed = _member_rollout("b", 1, ErrorKind.SANDBOX, 1)
    refill = _member_rollout("c", 1, ErrorKind.INTERNAL, 3)
    other = _member_rollout("d", 2, None, 2)
    members = [member_of(recorded)]
    added = adopt(members, [refill, recorded, other, failed])
    assert added == ["b", "d", "c"]
    assert [(m.rollout_id, m.index, m.replaced_by) for m in members] == [
        ("a", 0, ""),
        ("b", 1, "c"),
        ("d", 2, ""),
        ("c", 1, ""),
    ]
    assert adopt(members, [recorded, failed, refill, other]) == []


def test_a_rollout_belongs_to_a_group_only_if_the_group_started_it() -> None:
    """A caller's own rollout labelled `rollout.group=<id>` is never taken for a member."""
    spec = RolloutSpec(task=TaskSpec(instruction="x"))
    group = Group(id="g", spec=GroupSpec(spec=spec, n=2), create_time=datetime.now(UTC), tenant="a")
    started = _member_rollout("m", 0, None, 0).model_copy(update={"group_id": "g", "tenant": "a"})
    forged = started.model_copy(
        update={
            "id": "f",
            "group_id": "",
            "spec": spec.model_copy(update={"labels": {GROUP_LABEL: "g"}}),
        }
    )
    other_tenant = started.model_copy(update={"id": "o", "tenant": "b"})
    assert [r.id for r in (started, forged, other_tenant) if belongs(r, group)] == ["m"]
