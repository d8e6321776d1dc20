"""One group's life: set up once, n members started, infrastructure failures refilled, stopped
when enough count, at the deadline or on cancel.

    set up once (`template`; a failing setup fails the group, no member starts) ->
    start n members from its snapshot (saved as they start) -> as each ends: save it, then
    publish it, then refill it if the infrastructure failed it (budget allowing) -> COMPLETED
    once `needed` members count, FAILED when none is left running short of that -> the
    members still running are cancelled (reported so) -> the snapshot is released.

The store is written before a watcher is told: a server killed just after a watcher saw a
member end restarts with that member ended and counted, never started again.

A cancel or the deadline cancels the members still running and waits for their teardown, so
the group is terminal only when nothing of it is left. A server shutting down interrupts the
group instead: it stays RUNNING in the store and the next server resumes it (`resume`).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from service.engine.groups.members import (
    adopt,
    group_stats,
    member_of,
    member_spec,
    refillable,
)
from service.engine.template import PreparedFilesystem
from service.errors import RolloutFailure
from service.models import (
    ErrorKind,
    Group,
    GroupMember,
    GroupSpec,
    GroupStatus,
    Rollout,
    RolloutError,
    RolloutSpec,
)
from service.store import FencedError

__all__ = ["GroupRun", "MemberOps"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class MemberOps:
    """What a group does to its members through the rollout manager and the store."""

    start: Callable[[RolloutSpec, int, PreparedFilesystem | None], Coroutine[Any, Any, Rollout]]
    """Start member `index` of the (member's) spec, from a prepared filesystem if given."""
    wait: Callable[[str], Coroutine[Any, Any, Rollout]]
    cancel: Callable[[str, str], Awaitable[Rollout]]
    save: Callable[[Group], Awaitable[None]]
    prepare: Callable[[], Awaitable[PreparedFilesystem | None]]
    """Set the task up once for every member (`template`); None: nothing to."""
    release: Callable[[int], None]
    """Give back admission's reserved places."""
    refilled: Callable[[str], None]
    """Count a member refilled, by the error kind that failed it (metrics)."""


class GroupRun:
    """Drives one group; `finished` and `changed` are what its watchers follow."""

    def __init__(self, group: Group, spec: GroupSpec, ops: MemberOps, *, reserved: int) -> None:
        self.group = group
        self._spec = spec
        self._ops = ops
        self.finished: list[Rollout | Group] = []
        """Each member's terminal rollout (slim) as it ended, then the terminal group."""
        self._changed = asyncio.Event()
        self._running: dict[asyncio.Task[Rollout], GroupMember] = {}
        self._refills_left = spec.refill_budget - sum(1 for m in group.members if m.replaced_by)
        self.cancel_reason = ""
        self.interrupted = False
        self.task: asyncio.Task[None] | None = None
        self._reserved = reserved
        """Places admission reserved for members not started yet (none for a resumed group)."""
        self._prepared: PreparedFilesystem | None = None

    @property
    def changed(self) -> asyncio.Event:
        """Set at the next entry of `finished` (take it before reading, then wait on it)."""
        return self._changed

    async def _start_members(self) -> None:
        """Set the task up once, then start the n members in the places admission reserved."""
        self._prepared = await self._ops.prepare()
        for index in range(self._spec.n):
            await self._start(index)
            await self._save()
        self._release()

    def _release(self) -> None:
        if self._reserved:
            self._ops.release(self._reserved)
            self._reserved = 0

    async def resume(self, member_rollouts: dict[str, Rollout], *, secret_free: bool) -> None:
        """Take a group back after a restart: members that ended are kept; members the old
        server was running, or had started without saving the group, are started again
        (`secret_free`; a restart is no fault of theirs, so not charged to the refill
        budget) or reported as they ended."""
        done = [r for r in member_rollouts.values() if r.terminal]
        done.sort(key=lambda rollout: rollout.finish_time or rollout.create_time)
        self.finished.extend(rollout.slim() for rollout in done)
        unsettled = {m.rollout_id for m in self.group.members if not m.terminal}
        for member in self.group.members:
            if member.rollout_id in unsettled and member.rollout_id in member_rollouts:
                _refresh(member, member_rollouts[member.rollout_id])
        unsettled.update(adopt(self.group.members, member_rollouts.values()))
        self._refills_left = self._spec.refill_budget - group_stats(self.group.members).refills
        if not secret_free:
            return
        for member in list(self.group.members):
            if member.rollout_id in unsettled and not (member.counted or member.replaced_by):
                member.replaced_by = (await self._start(member.index)).rollout_id
                self._refills_left += 1
        begun = {member.index for member in self.group.members}
        if begun:  # else `execute` starts them all
            for index in range(self._spec.n):
                if index not in begun:
                    await self._start(index)

    async def execute(self) -> None:
        """Run until terminal (or interrupted by shutdown); never raises but cancellation."""
        budget = asyncio.timeout(self._deadline_left())
        try:
            async with budget:
                if not self.group.members:
                    await self._start_members()
                await self._follow()
        except RolloutFailure as failure:  # the group's setup: no member started
            self._end(GroupStatus.FAILED, str(failure), failure.kind)
        except asyncio.CancelledError:
            if not self.interrupted:
                self._end(GroupStatus.CANCELLED, f"cancelled: {self.cancel_reason or 'by request'}")
            task = asyncio.current_task()
            if task is not None:
                task.uncancel()
        except Exception:
            if budget.expired():  # asyncio.timeout's TimeoutError
                message = f"the group's deadline ({self._spec.deadline_s}s) passed"
                self._end(GroupStatus.TIMED_OUT, message)
            else:  # a bug: the group still ends, with its members stopped
                log.exception("group %s crashed", self.group.id)
                self._end(GroupStatus.FAILED, "the group's run crashed", ErrorKind.INTERNAL)
        finally:
            self._release()
            if not self.interrupted:
                await self._stop_running()
                self._finish()
                await self._release_snapshot()
            await self._save()
            if not self.interrupted:
                self._publish(self.group)

    async def _release_snapshot(self) -> None:
        """Free the members' common layer, now that none is left (on shutdown the backend
        frees it as it closes)."""
        prepared, self._prepared = self._prepared, None
        if prepared is not None:
            try:
                await prepared.snapshot.release()
            except Exception:  # the next server's start-up sweep removes it
                log.exception("releasing group %s's snapshot failed", self.group.id)

    async def _follow(self) -> None:
        while self._running and self.group.stats.counted < self._spec.needed:
            done, _ = await asyncio.wait(self._running, return_when=asyncio.FIRST_COMPLETED)
            for task in done:
                await self._ended(self._running.pop(task), task.result())
            await self._save()
        if self.group.stats.counted >= self._spec.needed:
            self._end(GroupStatus.COMPLETED)
        else:
            message = (
                f"{self.group.stats.counted} of {self._spec.needed} members counted; "
                f"the refill budget ({self._spec.refill_budget}) ran out"
            )
            self._end(GroupStatus.FAILED, message, self._last_infrastructure_kind())

    async def _start(self, index: int) -> GroupMember:
        spec = member_spec(self._spec.spec, self.group.id, index)
        starting = asyncio.ensure_future(self._ops.start(spec, index, self._prepared))
        try:
            rollout = await asyncio.shield(starting)
        except asyncio.CancelledError:
            # A member admitted as the group is cancelled is still the group's to stop.
            self._follow_member(await starting)
            raise
        return self._follow_member(rollout)

    def _follow_member(self, rollout: Rollout) -> GroupMember:
        member = member_of(rollout)
        self.group.members.append(member)
        task = asyncio.create_task(self._ops.wait(rollout.id), name=f"member-{rollout.id}")
        self._running[task] = member
        return member

    async def _ended(self, member: GroupMember, rollout: Rollout) -> None:
        _refresh(member, rollout)
        self.group.stats = group_stats(self.group.members)
        await self._save()
        self._publish(rollout.slim())
        if refillable(member) and self._refills_left > 0 and not self._enough():
            self._refills_left -= 1
            member.replaced_by = (await self._start(member.index)).rollout_id
            self._ops.refilled(member.error_kind.value if member.error_kind else "")
        self.group.stats = group_stats(self.group.members)

    def _enough(self) -> bool:
        return group_stats(self.group.members).counted >= self._spec.needed

    async def _stop_running(self) -> None:
        """Cancel the members still running and record how they ended (nothing is left)."""
        error = self.group.error
        reason = self.cancel_reason or (error.message if error else "the group is complete")
        running, self._running = self._running, {}
        ended = await asyncio.gather(
            *(self._ops.cancel(member.rollout_id, reason) for member in running.values())
        )
        for task in running:
            task.cancel()
        for member, rollout in zip(running.values(), ended, strict=True):
            _refresh(member, rollout)
            self._publish(rollout.slim())

    def _end(self, status: GroupStatus, message: str = "", kind: ErrorKind | None = None) -> None:
        if self.group.terminal:
            return
        self.group.status = status
        if status is not GroupStatus.COMPLETED:
            self.group.error = RolloutError(kind=kind or ErrorKind.CANCELLED, message=message)

    def _finish(self) -> None:
        self.group.stats = group_stats(self.group.members)
        self.group.finish_time = datetime.now(UTC)

    def _publish(self, entry: Rollout | Group) -> None:
        self.finished.append(entry)
        changed, self._changed = self._changed, asyncio.Event()
        changed.set()

    async def _save(self) -> None:
        try:
            await self._ops.save(self.group)
        except FencedError:  # another server took the group over: its saves stand
            log.info("group %s was taken over by another server; not saved", self.group.id)
        except Exception:  # the run goes on; the next save (or the final one) catches up
            log.exception("saving group %s failed", self.group.id)

    def _deadline_left(self) -> float | None:
        if self._spec.deadline_s is None:
            return None
        elapsed = (datetime.now(UTC) - self.group.create_time).total_seconds()
        return max(0.0, self._spec.deadline_s - elapsed)

    def _last_infrastructure_kind(self) -> ErrorKind:
        kinds = [m.error_kind for m in self.group.members if refillable(m) and m.error_kind]
        return kinds[-1] if kinds else ErrorKind.INTERNAL


_MEMBER_IDENTITY = frozenset({"rollout_id", "index", "replaced_by"})
"""What a member's rollout never changes: every other field of the member follows it."""


def _refresh(member: GroupMember, rollout: Rollout) -> None:
    """Bring `member` up to date with its rollout (what replaced it stays)."""
    current = member_of(rollout)
    for name in GroupMember.model_fields.keys() - _MEMBER_IDENTITY:
        setattr(member, name, getattr(current, name))
