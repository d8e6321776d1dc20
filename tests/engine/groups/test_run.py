"""A group's run writes the store before it tells a watcher, so a server killed at any point
after a watcher saw something restarts knowing it (the cause of a restart test's flakes)."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime

from service.engine.groups.run import GroupRun, MemberOps
from service.engine.groups.template import PreparedFilesystem
from service.models import Rollout, RolloutSpec, RolloutStatus, TaskSpec
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

    def end(self, rollout_id: str) -> None:
        self.ends[rollout_id].set_result(
            Rollout(
                id=rollout_id,
                spec=RolloutSpec(task=TaskSpec(instruction="x")),
                status=RolloutStatus.SUCCEEDED,
                create_time=datetime.now(UTC),
                member_index=int(rollout_id[1]),
            )
        )


async def _nothing_prepared() -> PreparedFilesystem | None:
    return None


async def test_every_member_and_the_group_are_saved_before_a_watcher_sees_them() -> None:
    members = _Members()
    ops = MemberOps(
        start=members.start,
        wait=members.wait,
        cancel=members.cancel,
        save=members.save,
        prepare=_nothing_prepared,
        release=lambda _: None,
        refilled=lambda _: None,
    )
    spec = GroupSpec(spec=RolloutSpec(task=TaskSpec(instruction="x")), n=2)
    run = GroupRun(Group(id="g", spec=spec, create_time=datetime.now(UTC)), spec, ops, reserved=2)
    run.task = asyncio.create_task(run.execute())
    for _ in range(100):  # then the run is idle: nothing more happens until a member ends
        await asyncio.sleep(0)
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
