"""A group's run writes the store before it tells a watcher, so a server killed at any point
after a watcher saw something restarts knowing it (the cause of a restart test's flakes)."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime

from service.engine.groups.run import GroupRun, MemberOps
from service.engine.template import PreparedFilesystem
from service.models import Rollout, RolloutResult, RolloutSpec, RolloutStatus, TaskSpec
from service.models.group import Group, GroupSpec, GroupStatus


class _Members:
    """Member rollouts the test ends by hand, and every group the run saved."""

    def __init__(self) -> None:
        self.ends: dict[str, asyncio.Future[Rollout]] = {}
        self.saved: list[Group] = []

    async def start(self, spec: RolloutSpec, index: int, _: PreparedFilesystem | None) -> Rollout:
        rollout = Rollout(
            id=f"m{index}-{len(self.ends)}",
            spec=spec,
            status=RolloutStatus.RUNNING,
            create_time=datetime.now(UTC),
            member_index=index,
        )
        self.ends[rollout.id] = asyncio.get_running_loop().create_future()
        return rollout

    async def wait(self, rollout_id: str) -> Rollout:
        return await self.ends[rollout_id]

    async def cancel(self, rollout_id: str, _: str) -> Rollout:
        raise AssertionError(f"{rollout_id} was cancelled")

    async def save(self, group: Group) -> None:
        await asyncio.sleep(0)  # a store write yields to the loop, as the real ones do
        self.saved.append(group.model_copy(deep=True))

    def end(self, rollout_id: str, versions: tuple[int, int] | None = None) -> None:
        """End the member, its turns having run under policy `versions` (oldest, newest)."""
        result = RolloutResult()
        if versions is not None:
            result.policy_version_min, result.policy_version_max = versions
        self.ends[rollout_id].set_result(
            Rollout(
                id=rollout_id,
                spec=RolloutSpec(task=TaskSpec(instruction="x")),
                status=RolloutStatus.SUCCEEDED,
                create_time=datetime.now(UTC),
                member_index=int(rollout_id[1]),
                result=result,
            )
        )

    def ops(self) -> MemberOps:
        return MemberOps(
            start=self.start,
            wait=self.wait,
            cancel=self.cancel,
            save=self.save,
            prepare=_nothing_prepared,
            release=lambda _: None,
            refilled=lambda _: None,
        )


async def _idle() -> None:
    """Let the run go on until it waits for a member to end."""
    for _ in range(100):
        await asyncio.sleep(0)


async def _nothing_prepared() -> PreparedFilesystem | None:
    return None


def _group_run(members: _Members) -> GroupRun:
    spec = GroupSpec(spec=RolloutSpec(task=TaskSpec(instruction="x")), n=2)
    group = Group(id="g", spec=spec, create_time=datetime.now(UTC))
    return GroupRun(group, spec, members.ops(), reserved=2)


async def test_every_member_and_the_group_are_saved_before_a_watcher_sees_them() -> None:
    members = _Members()
    run = _group_run(members)
    run.task = asyncio.create_task(run.execute())
    await _idle()
    assert len(members.ends) == 2, "both members started"
    assert members.saved, "the run started its members and saved nothing"
    assert [m.rollout_id for m in members.saved[-1].members] == ["m0-0", "m1-1"]

    seen: list[tuple[str, list[RolloutStatus]]] = []
    for rollout_id in ("m0-0", "m1-1"):
        changed = run.changed
        members.end(rollout_id)
        await changed.wait()
        entry = run.finished[-1]
        stored = members.saved[-1]
        seen.append((entry.id, [member.status for member in stored.members]))
    await run.task
    assert seen == [
        ("m0-0", [RolloutStatus.SUCCEEDED, RolloutStatus.RUNNING]),
        ("m1-1", [RolloutStatus.SUCCEEDED, RolloutStatus.SUCCEEDED]),
    ]
    assert isinstance(run.finished[-1], Group)
    assert members.saved[-1].status is GroupStatus.COMPLETED
    assert members.saved[-1].stats.counted == 2


async def test_the_groups_stats_span_its_members_policy_versions() -> None:
    members = _Members()
    run = _group_run(members)
    run.task = asyncio.create_task(run.execute())
    await _idle()
    members.end("m0-0", versions=(2, 3))
    members.end("m1-1", versions=(1, 2))
    await run.task
    stats = members.saved[-1].stats
    assert (stats.policy_version_min, stats.policy_version_max) == (1, 3)
    member_versions = [(m.policy_version_min, m.policy_version_max) for m in run.group.members]
    assert member_versions == [(2, 3), (1, 2)]
