"""What a group makes of its members: their specs and seeds, what counts, the statistics.

A member is an ordinary rollout of the group's spec with three changes: it carries the label
`rollout.group` (so label-wide watchers see it), no request_id (the group's is the group's),
and, when the group has a seed, its own seed, derived from the group's and its member index.
A refill keeps the index, and so the seed, of the member it replaces: a group run again with
the same seed asks the upstream for the same n samples.
"""

from __future__ import annotations

import hashlib
import statistics
from collections import Counter
from collections.abc import Iterable

from service.models import (
    GROUP_LABEL,
    INFRASTRUCTURE_KINDS,
    ErrorKind,
    Group,
    GroupMember,
    GroupStats,
    Rollout,
    RolloutSpec,
    RolloutStatus,
)

__all__ = [
    "adopt",
    "belongs",
    "group_stats",
    "member_of",
    "member_seed",
    "member_spec",
    "refillable",
]

_SEED_MASK = 2**63 - 1
"""Seeds stay in a signed 64-bit integer, which every upstream accepts."""


def member_seed(group_seed: int, index: int) -> int:
    """The seed of member `index`: stable across runs, servers and Python versions."""
    digest = hashlib.sha256(f"rollout-group-seed/{group_seed}/{index}".encode()).digest()
    return int.from_bytes(digest[:8], "big") & _SEED_MASK


def member_spec(spec: RolloutSpec, group_id: str, index: int) -> RolloutSpec:
    """The spec member `index` runs."""
    sampling = spec.capture.sampling
    if sampling.seed is not None:
        sampling = sampling.model_copy(update={"seed": member_seed(sampling.seed, index)})
    return spec.model_copy(
        update={
            "labels": {**spec.labels, GROUP_LABEL: group_id},
            "request_id": "",
            "capture": spec.capture.model_copy(update={"sampling": sampling}),
        }
    )


def member_of(rollout: Rollout) -> GroupMember:
    """The group's view of a member rollout as it stands now."""
    error = rollout.result.error
    kind = None if error is None else error.kind
    member = GroupMember(
        rollout_id=rollout.id,
        index=rollout.member_index,
        status=rollout.status,
        reward=rollout.result.reward,
        error_kind=kind,
        seed=rollout.spec.capture.sampling.seed,
        policy_version_min=rollout.result.policy_version_min,
        policy_version_max=rollout.result.policy_version_max,
    )
    member.counted = (
        member.terminal
        and rollout.status is not RolloutStatus.CANCELLED
        and kind not in INFRASTRUCTURE_KINDS
    )
    return member


def belongs(rollout: Rollout, group: Group) -> bool:
    """Whether the group started `rollout`: the label `rollout.group` alone proves nothing, as
    any caller may set it on a rollout of its own; `group_id` only the group sets."""
    return rollout.group_id == group.id and rollout.tenant == group.tenant


def adopt(members: list[GroupMember], rollouts: Iterable[Rollout]) -> list[str]:
    """Add to `members` the member rollouts its record missed (a server killed between
    starting a member and saving the group), oldest first, and return their ids; each one
    replaces the member of its index the infrastructure failed, if nothing replaced it yet."""
    known = {member.rollout_id for member in members}
    missed = sorted(
        (rollout for rollout in rollouts if rollout.id not in known),
        key=lambda rollout: rollout.create_time,
    )
    for rollout in missed:
        for member in members:
            if (
                member.index == rollout.member_index
                and refillable(member)
                and not member.replaced_by
            ):
                member.replaced_by = rollout.id
                break
        members.append(member_of(rollout))
    return [rollout.id for rollout in missed]


def refillable(member: GroupMember) -> bool:
    """An infrastructure failure: replaced by a new member, never scored."""
    return member.terminal and member.error_kind in INFRASTRUCTURE_KINDS


def group_stats(members: Iterable[GroupMember]) -> GroupStats:
    """Statistics over the members that count (rewards: mean and population stddev)."""
    members = list(members)
    counted = [m for m in members if m.counted]
    rewards = [m.reward for m in counted if m.reward is not None]
    errors: Counter[ErrorKind] = Counter(m.error_kind for m in counted if m.error_kind)
    oldest = [m.policy_version_min for m in counted if m.policy_version_min is not None]
    newest = [m.policy_version_max for m in counted if m.policy_version_max is not None]
    return GroupStats(
        counted=len(counted),
        rewarded=len(rewards),
        reward_mean=statistics.fmean(rewards) if rewards else None,
        reward_stddev=statistics.pstdev(rewards) if rewards else None,
        statuses=dict(Counter(m.status for m in counted)),
        errors=dict(errors),
        refills=sum(1 for m in members if m.replaced_by),
        policy_version_min=min(oldest, default=None),
        policy_version_max=max(newest, default=None),
    )
