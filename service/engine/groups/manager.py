"""The group manager: admission of groups as a unit, their runs, watchers, cancel and restart.

A group takes n places at once or none: it is admitted while the rollout manager's admission
is held and every one of its n members fits (else RESOURCE_EXHAUSTED naming the places); a
group larger than the server could ever hold is INVALID_ARGUMENT. A refill takes the place
of the member it replaces. Tenancy is as for rollouts: another tenant's group is "not found".

A group runs on the server that admitted it (or took it over); on a store shared with other
servers, WatchGroup elsewhere follows the group as its server saves it, and CancelGroup
elsewhere asks that server through the store.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import uuid
from collections.abc import AsyncIterator, Callable, Iterator, Mapping, Sequence
from datetime import UTC, datetime
from typing import Protocol

from service.engine.checks import Checked
from service.engine.groups.members import belongs, member_spec
from service.engine.groups.run import GroupRun, MemberOps
from service.engine.idempotency import spec_digest
from service.engine.manager import RolloutManager
from service.engine.template import (
    PreparedFilesystem,
    prepare_filesystem,
    worth_a_template,
)
from service.engine.validation import resolved_timeouts
from service.errors import (
    FieldViolation,
    NotFoundError,
    RequestConflictError,
    RolloutFailure,
    RolloutServiceError,
    SandboxError,
    SpecError,
)
from service.models import GROUP_LABEL, Group, GroupSpec, GroupStatus, Rollout, RolloutSpec
from service.sandboxes import SandboxBackend
from service.store import GroupLister, GroupPage, GroupStore, RolloutStore

__all__ = ["GroupManager"]

log = logging.getLogger(__name__)

_MAX_REFILLS_PER_MEMBER = 10
_REMOTE_CANCEL_WAIT_S = 30.0
"""How long a CancelGroup for a group another server runs waits for its end (its members'
teardown included)."""


class Store(RolloutStore, GroupStore, GroupLister, Protocol):
    """The store groups need: rollouts and groups."""


class GroupManager:
    """Owns every live group of this server."""

    def __init__(self, rollouts: RolloutManager, store: Store) -> None:
        self._rollouts = rollouts
        self._admission = rollouts.admission
        self._store = store
        self._live: dict[str, GroupRun] = {}
        rollouts.harbor.add_users(lambda: [run.group.spec.spec for run in self._live.values()])
        store.on_group_cancel_request(self._cancel_requested)
        store.on_lease_lost(self._lease_lost)

    async def submit(self, spec: GroupSpec, *, tenant: str | None = None) -> Group:
        """Admit a group and start its members; idempotent on the tenant's request_id."""
        try:
            resolved = await self._rollouts.resolve_task(spec.spec)
        except SpecError as exc:
            raise SpecError(_in_group(exc.violations)) from exc
        spec = spec.model_copy(update={"spec": resolved})
        parts = await self._checked(spec)
        async with self._admission.admitting_unit(spec.n):
            existing = await self._existing(spec, tenant or "")
            if existing is not None:
                return existing
            group = Group(
                id=uuid.uuid4().hex,
                spec=spec.model_copy(update={"spec": spec.spec.redacted()}),
                create_time=datetime.now(UTC),
                tenant=tenant or "",
            )
            secret_free = not spec.spec.endpoint.api_key
            stored = await self._store.insert_group(group, secret_free=secret_free)
            if stored.id != group.id:
                return _same_request(stored, spec)
            self._admission.reserve(spec.n)
            run = self._run_of(group, spec, parts, reserved=spec.n)
        self._execute(run)  # its members start once the task is set up, in the places reserved
        return group

    async def run(self, spec: GroupSpec, *, tenant: str | None = None) -> Group:
        """Submit and wait until terminal; cancelling the wait cancels the group."""
        group = await self.submit(spec, tenant=tenant)
        run = self._live.get(group.id)
        if run is None or run.task is None:
            return await self.get(group.id, tenant=tenant)
        try:
            await asyncio.shield(run.task)
        except asyncio.CancelledError:
            await asyncio.shield(self.cancel(group.id, "the RunGroup call was cancelled"))
            raise
        return run.group

    async def get(self, group_id: str, *, tenant: str | None = None) -> Group:
        run = self._live.get(group_id)
        group = run.group if run is not None else await self._store.get_group(group_id)
        if group is None or (tenant is not None and group.tenant != tenant):
            raise NotFoundError(f"no group {group_id!r}")
        return group

    async def list_groups(
        self,
        *,
        labels: Mapping[str, str],
        statuses: Sequence[GroupStatus],
        page_size: int,
        page_token: str,
        take: Callable[[Group], bool],
        tenant: str | None = None,
    ) -> GroupPage:
        """A page of groups (of `tenant` only, unless None) as `take` accepts them, the ones
        this server runs as they are now."""

        def fresh(group: Group) -> Group:
            run = self._live.get(group.id)
            return run.group if run is not None else group

        groups, token = await self._store.list_groups(
            labels=labels,
            statuses=statuses,
            page_size=page_size,
            page_token=page_token,
            tenant=tenant,
            take=lambda group: take(fresh(group)),
        )
        return [fresh(group) for group in groups], token

    async def cancel(self, group_id: str, reason: str = "", *, tenant: str | None = None) -> Group:
        """Cancel a live group and wait until every member has torn down."""
        group = await self.get(group_id, tenant=tenant)
        run = self._live.get(group_id)
        if run is None or run.task is None:
            return await self._cancel_elsewhere(group, reason or "cancelled by request")
        if not run.cancel_reason:
            run.cancel_reason = reason or "cancelled by request"
            run.task.cancel()
        await asyncio.wait([run.task])
        return run.group

    async def _cancel_elsewhere(self, group: Group, reason: str) -> Group:
        """A group another server sharing the store runs: ask it to cancel, and follow the
        group for up to _REMOTE_CANCEL_WAIT_S until it is terminal. One no live server runs,
        or that outlasts the wait, is returned as it stands."""
        if group.terminal or not await self._store.request_group_cancel(group.id, reason):
            return group
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(_REMOTE_CANCEL_WAIT_S):
                async for stored in self._store.follow_group(group.id):
                    group = stored
        return group

    def _cancel_requested(self, group_id: str, reason: str) -> None:
        """Another server's CancelGroup of a group this one runs (it checked the tenant)."""
        run = self._live.get(group_id)
        if run is not None and run.task is not None and not run.cancel_reason:
            run.cancel_reason = reason
            run.task.cancel()

    async def watch(
        self, group_id: str, *, tenant: str | None = None
    ) -> AsyncIterator[Rollout | Group]:
        """Each member's terminal rollout in the order they ended, then the terminal group."""
        group = await self.get(group_id, tenant=tenant)
        run = self._live.get(group_id)
        if run is None:
            async for entry in self._watch_stored(group):
                yield entry
            return
        index = 0
        while True:
            changed = run.changed
            while index < len(run.finished):
                entry = run.finished[index]
                index += 1
                yield entry
                if isinstance(entry, Group):
                    return
            await changed.wait()

    async def _watch_stored(self, group: Group) -> AsyncIterator[Rollout | Group]:
        """A group this server does not run, from the store: as another server sharing it
        saves the group, the members that ended since, then the group once terminal (a store
        no other server shares: what is stored, once)."""
        told: set[str] = set()
        async for stored in self._store.follow_group(group.id):
            group = stored
            for rollout in await self._ended_members(group):
                if rollout.id not in told:
                    told.add(rollout.id)
                    yield rollout
            if group.terminal:
                break
        yield group

    async def recover(self) -> int:
        """Resume the groups a previous server left running (after the rollout manager has
        failed their interrupted members)."""
        unfinished = await self._store.unfinished_groups()
        for group, secret_free in unfinished:
            spec = group.spec
            try:
                parts: Checked | None = await self._rollouts.checked(spec.spec)
            except RolloutServiceError as exc:  # e.g. an endpoint that needs the lost key
                log.warning("group %s cannot start members again: %s", group.id, exc)
                parts, secret_free = None, False
            run = self._run_of(group, spec, parts)
            if parts is not None:
                await _sweep_template(parts.backend, group.id)
            members = await self._member_rollouts(group)
            members.update((r.id, r) for r in await self._missed_members(group, members))
            await run.resume(members, secret_free=secret_free)
            await self._store.save_group(run.group)  # every server now reads its new members
            self._execute(run)
        return len(unfinished)

    async def shutdown(self) -> None:
        """Stop following groups, leaving them RUNNING in the store for the next server;
        their members are the rollout manager's to stop."""
        self._interrupt()
        tasks = [run.task for run in self._live.values() if run.task is not None]
        if tasks:
            await asyncio.wait(tasks)

    def _lease_lost(self) -> int:
        """This server lost its lease on the shared store: the server that takes its groups
        over resumes them, so stop following them here, as at shutdown (their saves are
        refused now). Returns how many."""
        return self._interrupt()

    def _interrupt(self) -> int:
        """Cancel every live group's run as interrupted (no end recorded); how many."""
        interrupted = 0
        for run in list(self._live.values()):
            if run.task is not None:
                run.interrupted = True
                run.task.cancel()
                interrupted += 1
        return interrupted

    async def _checked(self, spec: GroupSpec) -> Checked:
        violations = list(_group_violations(spec, self._admission.capacity))
        try:
            parts = await self._rollouts.checked(member_spec(spec.spec, uuid.uuid4().hex, 0))
        except SpecError as exc:
            violations += _in_group(exc.violations)
            parts = None
        if violations or parts is None:
            raise SpecError(violations)
        return parts

    async def _existing(self, spec: GroupSpec, tenant: str) -> Group | None:
        request_id = spec.spec.request_id
        if not request_id:
            return None
        for run in self._live.values():
            group = run.group
            if group.tenant == tenant and group.spec.spec.request_id == request_id:
                return _same_request(group, spec)
        found = await self._store.find_group(request_id, tenant=tenant)
        return None if found is None else _same_request(found, spec)

    def _run_of(
        self, group: Group, spec: GroupSpec, parts: Checked | None, *, reserved: int = 0
    ) -> GroupRun:
        async def start(
            member: RolloutSpec, index: int, prepared: PreparedFilesystem | None
        ) -> Rollout:
            if parts is None:
                raise RolloutFailure(
                    "members cannot be started again after a restart: the spec needs the "
                    "endpoint's API key, which is never stored"
                )
            return await self._rollouts.submit_member(
                member,
                parts,
                tenant=group.tenant,
                group_id=group.id,
                index=index,
                prepared=prepared,
            )

        async def cancel(rollout_id: str, reason: str) -> Rollout:
            return await self._rollouts.cancel(rollout_id, reason)

        async def prepare() -> PreparedFilesystem | None:
            if parts is None or not worth_a_template(spec.spec, spec.n, parts.backend):
                return None
            _, command_timeout_s, _ = resolved_timeouts(spec.spec, self._rollouts.settings)
            prepared = await prepare_filesystem(
                parts.backend,
                spec.spec,
                name=_template_name(group.id),
                command_timeout_s=command_timeout_s,
            )
            if prepared is not None:
                group.template_setups += 1
            return prepared

        ops = MemberOps(
            start=start,
            wait=self._rollouts.wait,
            cancel=cancel,
            save=self._store.save_group,
            prepare=prepare,
            release=self._admission.release,
            refilled=self._rollouts.metrics.group_refilled,
        )
        return GroupRun(group, spec, ops, reserved=reserved)

    def _execute(self, run: GroupRun) -> None:
        self._live[run.group.id] = run
        run.task = asyncio.create_task(run.execute(), name=f"group-{run.group.id}")
        run.task.add_done_callback(functools.partial(self._forget, run.group.id))

    def _forget(self, group_id: str, _: asyncio.Task[None]) -> None:
        self._live.pop(group_id, None)

    async def _member_rollouts(self, group: Group) -> dict[str, Rollout]:
        """The member rollouts `group`'s record names, as stored."""
        found = {}
        for member in group.members:
            rollout = await self._store.get(member.rollout_id)
            if rollout is not None:
                found[rollout.id] = rollout
        return found

    async def _missed_members(self, group: Group, known: Mapping[str, Rollout]) -> list[Rollout]:
        """Member rollouts `group`'s record missed (started by a server killed before it saved
        the group), found by their label and kept only if the group started them (`belongs`).
        Only recovery needs them: a running group saves each member as it starts."""
        missed: list[Rollout] = []
        token = ""
        while True:
            page, token = await self._store.list(
                labels={GROUP_LABEL: group.id}, statuses=(), page_size=0, page_token=token
            )
            missed += [r for r in page if r.id not in known and belongs(r, group)]
            if not token:
                return missed

    async def _ended_members(self, group: Group) -> list[Rollout]:
        rollouts = [r for r in (await self._member_rollouts(group)).values() if r.terminal]
        rollouts.sort(key=lambda rollout: rollout.finish_time or rollout.create_time)
        return [rollout.slim() for rollout in rollouts]


def _group_violations(spec: GroupSpec, capacity: int) -> Iterator[FieldViolation]:
    if spec.n < 1:
        yield FieldViolation("spec.n", "must be at least 1")
    elif spec.n > capacity:
        yield FieldViolation(
            "spec.n", f"{spec.n} members exceed the {capacity} rollouts this server can hold"
        )
    if spec.min_complete > spec.n:
        yield FieldViolation("spec.min_complete", f"must be at most n ({spec.n})")
    limit = _MAX_REFILLS_PER_MEMBER * max(spec.n, 1)
    if spec.max_refills is not None and spec.max_refills > limit:
        yield FieldViolation("spec.max_refills", f"must be at most {limit} (10 per member)")
    if spec.deadline_s is not None and spec.deadline_s <= 0:
        yield FieldViolation("spec.deadline", "must be positive")


def _template_name(group_id: str) -> str:
    """The name, and rollout label, of the group's template sandbox (`prepare_filesystem`)."""
    return f"{group_id}-template"


async def _sweep_template(backend: SandboxBackend, group_id: str) -> None:
    """Kill the template sandbox a server that is gone may have left mid-setup on a remote
    backend (found by its label), before the group sets up again here."""
    try:
        swept = await backend.sweep_rollouts({_template_name(group_id)})
    except SandboxError as exc:
        log.warning("could not sweep group %s's template sandbox: %s", group_id, exc)
        return
    if swept:
        log.info("killed the template sandbox group %s's server left", group_id)


def _knobs(spec: GroupSpec) -> tuple[object, ...]:
    return spec.n, spec.min_complete, spec.max_refills, spec.deadline_s


def _same_request(existing: Group, spec: GroupSpec) -> Group:
    """`existing` if it was made from `spec`; RequestConflictError naming the field if not."""
    same_spec = spec_digest(existing.spec.spec) == spec_digest(spec.spec)
    if not same_spec or _knobs(existing.spec) != _knobs(spec):
        raise RequestConflictError(
            FieldViolation(
                "spec.spec.request_id", f"already names group {existing.id}, made from another spec"
            )
        )
    return existing


def _in_group(violations: Sequence[FieldViolation]) -> list[FieldViolation]:
    """A member spec's violations, named as fields of the group's spec (`spec.spec.…`)."""
    return [FieldViolation(f"spec.{v.field}", v.description) for v in violations]
