"""Groups in and out: GroupSpec from the wire, Group and WatchGroup entries to it."""

from __future__ import annotations

from rollout.v1 import rollout_pb2 as pb

from service.api.convert import enum_to_proto, rollout_to_proto, spec_to_proto, timestamp
from service.api.inbound import group_deadline_from_proto, rollout_id_from_proto, spec_from_proto
from service.errors import FieldViolation, SpecError
from service.models import Group, GroupMember, GroupSpec, GroupStats, Rollout

__all__ = [
    "group_id_from_proto",
    "group_spec_from_proto",
    "group_to_proto",
    "watch_entry_to_proto",
]


def group_spec_from_proto(message: pb.GroupSpec) -> GroupSpec:
    """A request's group spec; wire-level nonsense (in the spec too) is a SpecError."""
    try:
        spec = spec_from_proto(message.spec)
    except SpecError as exc:
        raise SpecError(
            [FieldViolation(f"spec.{v.field}", v.description) for v in exc.violations]
        ) from exc
    deadline_s = group_deadline_from_proto(message)
    return GroupSpec(
        spec=spec,
        n=message.n,
        min_complete=message.min_complete,
        max_refills=message.max_refills if message.HasField("max_refills") else None,
        deadline_s=deadline_s,
    )


def group_id_from_proto(group_id: str) -> str:
    try:
        return rollout_id_from_proto(group_id)
    except SpecError as exc:
        raise SpecError(
            [FieldViolation("group_id", v.description) for v in exc.violations]
        ) from exc


def group_to_proto(group: Group) -> pb.Group:
    spec = group.spec
    message = pb.Group(
        id=group.id,
        spec=pb.GroupSpec(
            spec=spec_to_proto(spec.spec.redacted()),
            n=spec.n,
            min_complete=spec.min_complete,
            max_refills=spec.max_refills,
        ),
        status=enum_to_proto(group.status, "GroupStatus"),  # type: ignore[arg-type]
        members=[_member_to_proto(member) for member in group.members],
        stats=_stats_to_proto(group.stats),
        create_time=timestamp(group.create_time),
        finish_time=timestamp(group.finish_time),
        tenant=group.tenant,
        template_setups=group.template_setups,
    )
    if spec.deadline_s is not None:
        message.spec.deadline.FromNanoseconds(int(spec.deadline_s * 1e9))
    if group.error is not None:
        message.error.CopyFrom(
            pb.Error(
                kind=enum_to_proto(group.error.kind, "ErrorKind"),  # type: ignore[arg-type]
                message=group.error.message,
            )
        )
    return message


def _member_to_proto(member: GroupMember) -> pb.GroupMember:
    return pb.GroupMember(
        rollout_id=member.rollout_id,
        index=member.index,
        status=enum_to_proto(member.status, "RolloutStatus"),  # type: ignore[arg-type]
        reward=member.reward,
        error_kind=(
            enum_to_proto(member.error_kind, "ErrorKind")  # type: ignore[arg-type]
            if member.error_kind is not None
            else pb.ERROR_KIND_UNSPECIFIED
        ),
        counted=member.counted,
        replaced_by=member.replaced_by,
        seed=member.seed,
    )


def _stats_to_proto(stats: GroupStats) -> pb.GroupStats:
    return pb.GroupStats(
        counted=stats.counted,
        reward_mean=stats.reward_mean,
        reward_stddev=stats.reward_stddev,
        statuses=[
            pb.GroupStatusCount(
                status=enum_to_proto(status, "RolloutStatus"),  # type: ignore[arg-type]
                count=count,
            )
            for status, count in stats.statuses.items()
        ],
        errors=[
            pb.GroupErrorCount(
                kind=enum_to_proto(kind, "ErrorKind"),  # type: ignore[arg-type]
                count=count,
            )
            for kind, count in stats.errors.items()
        ],
        refills=stats.refills,
        rewarded=stats.rewarded,
        policy_version_min=stats.policy_version_min,
        policy_version_max=stats.policy_version_max,
    )


def watch_entry_to_proto(entry: Rollout | Group) -> pb.WatchGroupResponse:
    if isinstance(entry, Group):
        return pb.WatchGroupResponse(group=group_to_proto(entry))
    return pb.WatchGroupResponse(member=rollout_to_proto(entry, slim=True))
