"""The rollout manager: admission, capacity, idempotency, cancellation, restart and shutdown.

Tenancy: every call takes the caller's `tenant`. A tenant name sees, cancels and reuses
request_ids of only its own rollouts (another tenant's rollout is "not found", so its
existence does not leak); None is an admin, or a server without auth: it sees every rollout
and submits rollouts of no tenant ("").
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import uuid
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime

from service.agents import Agent
from service.config import Settings
from service.engine.events import EventHub
from service.engine.groups.template import PreparedFilesystem
from service.engine.idempotency import check_same_request
from service.engine.lifecycle import RolloutRun
from service.engine.model_access import ModelRouter
from service.engine.model_calls import ModelCalls
from service.engine.validation import spec_bytes, validate_spec
from service.engine.verification import check_verify_mode
from service.errors import (
    CapacityError,
    FieldViolation,
    MissingDependencyError,
    NotFoundError,
    SandboxError,
    ShuttingDownError,
    SpecError,
)
from service.harbor import HarborTasks
from service.memory import HeapTrimmer
from service.models import (
    TERMINAL_STATUSES,
    ErrorKind,
    EventPayload,
    Phase,
    PhaseChanged,
    Rollout,
    RolloutError,
    RolloutSpec,
    RolloutStatus,
    SandboxSpec,
    SessionRecord,
)
from service.proxy import ResolvedEndpoint
from service.registry import BACKENDS, load_agent, load_backend
from service.sandboxes import SandboxBackend
from service.store import FencedError, Holder, Interrupted, RolloutPage, RolloutStore, TakeRollout
from service.telemetry import Metrics

__all__ = ["Checked", "RolloutManager"]

log = logging.getLogger(__name__)


def _visible(rollout: Rollout, tenant: str | None) -> bool:
    return tenant is None or rollout.tenant == tenant


_UNCANCELLABLE_PHASES = frozenset({Phase.TEARDOWN, Phase.DONE})
"""Teardown runs on every path: a cancel arriving then has nothing left to stop."""

_REMOTE_CANCEL_WAIT_S = 10.0
"""How long a CancelRollout for a rollout another server runs waits for its end."""


Checked = tuple[SandboxBackend, Agent, ResolvedEndpoint | None]
"""What admission resolved for a spec: its backend, its agent and its model endpoint."""


def _new_rollout(spec: RolloutSpec, tenant: str) -> Rollout:
    return Rollout(
        id=uuid.uuid4().hex, spec=spec.redacted(), create_time=datetime.now(UTC), tenant=tenant
    )


@dataclass
class _Live:
    """A rollout this server runs: its work, and the task that settles it whatever happens."""

    rollout: Rollout
    work: asyncio.Task[Rollout] | None = None
    """The queue wait and the run: the only task a cancel ever touches."""
    settled: asyncio.Task[None] | None = None
    """Records, publishes and saves how `work` ended, then frees the rollout's place."""
    done: asyncio.Event = field(default_factory=asyncio.Event)
    cancel_reason: str = ""
    spec_bytes: int = 0
    """What its spec's files weigh: freed when it ends (`HeapTrimmer`)."""
    fenced: bool = False
    """Another server took the rollout over (this one lost its lease): the run is stopped and
    nothing of it is published or saved any more, so nothing overwrites the takeover's."""


class RolloutManager:
    """Owns every live rollout of this server."""

    def __init__(
        self,
        settings: Settings,
        store: RolloutStore,
        hub: EventHub,
        models: ModelRouter,
        metrics: Metrics | None = None,
    ) -> None:
        self._settings = settings
        self._store = store
        self._hub = hub
        self._models = models
        self._live: dict[str, _Live] = {}
        self._slots = asyncio.Semaphore(settings.max_running)
        self._admission = asyncio.Lock()
        self._backends: dict[str, SandboxBackend] = {}
        self._agents: dict[str, Agent] = {}
        self._accepting = True
        self._reserved = 0
        """Places admitted groups hold for members they have not started yet."""
        self._harbor = HarborTasks(settings)
        self._harbor.add_users(lambda: [live.rollout.spec for live in self._live.values()])
        self._metrics = metrics or Metrics()
        self._heap = HeapTrimmer()
        self._metrics.set_capacity(self.capacity)
        self._metrics.observe_sandboxes(self._live_sandboxes)
        store.on_cancel_request(self._cancel_requested)
        store.on_lease_lost(self._lease_lost)

    def backend(self, name: str) -> SandboxBackend:
        """The backend called `name`, built once."""
        if name not in self._backends:
            try:
                self._backends[name] = load_backend(name, self._settings)
            except MissingDependencyError as exc:
                raise SpecError([FieldViolation("spec.sandbox.backend", str(exc))]) from exc
        return self._backends[name]

    def load_default_backend(self) -> None:
        """Build the default backend now, so a missing dependency stops the server at start."""
        name = self._settings.default_backend
        self._backends[name] = load_backend(name, self._settings)

    def _agent(self, name: str) -> Agent:
        if name not in self._agents:
            try:
                self._agents[name] = load_agent(name, self._settings)
            except MissingDependencyError as exc:
                raise SpecError([FieldViolation("spec.agent.name", str(exc))]) from exc
        return self._agents[name]

    async def recover(self) -> int:
        """Fail rollouts a previous run left in flight, and kill sandboxes nobody owns."""
        interrupted = await self.end_interrupted()
        for backend in self._backends.values():
            try:
                swept = await backend.sweep_orphans(set(self._live))
            except SandboxError as exc:
                # An unreachable provider must not keep the server from serving other backends.
                log.warning("could not sweep orphaned %s sandboxes: %s", backend.name, exc)
                continue
            if swept:
                log.info("killed %d orphaned %s sandboxes", swept, backend.name)
        return interrupted

    async def end_interrupted(self) -> int:
        """Fail the rollouts the store says no live server runs (a previous run of this one;
        on a shared store, also a replica that stopped renewing its lease)."""
        interrupted = await self._store.non_terminal()
        await self._sweep_sandboxes_of(interrupted)
        for rollout, reason in interrupted:
            rollout.status = RolloutStatus.FAILED
            rollout.phase = Phase.DONE
            rollout.finish_time = datetime.now(UTC)
            rollout.result.error = RolloutError(kind=ErrorKind.INTERNAL, message=reason)
            await self._store.save(rollout)
            await self._hub.close_interrupted(rollout)
        return len(interrupted)

    async def _sweep_sandboxes_of(self, interrupted: list[Interrupted]) -> None:
        """Kill what the remote backends still run for these rollouts, found by their label
        (the server that ran them is gone), before they are reported ended."""
        by_backend: dict[str, set[str]] = {}
        for rollout, _ in interrupted:
            by_backend.setdefault(self._backend_of(rollout), set()).add(rollout.id)
        for name, rollout_ids in by_backend.items():
            if name not in BACKENDS:
                continue
            try:
                swept = await self.backend(name).sweep_rollouts(rollout_ids)
            except (SandboxError, SpecError) as exc:  # unreachable, or not installed here
                log.warning(
                    "could not sweep the %s sandboxes of interrupted rollouts: %s", name, exc
                )
                continue
            if swept:
                log.info("killed %d %s sandboxes of interrupted rollouts", swept, name)

    async def submit(self, spec: RolloutSpec, *, tenant: str | None = None) -> Rollout:
        """Admit a rollout and start it in the background; idempotent on the tenant's
        request_id."""
        spec = await self.resolve_task(spec)
        parts = await self.checked(spec)
        async with self._admission:
            if not self._accepting:  # shutdown began while this call waited for the lock
                raise ShuttingDownError("the server is shutting down")
            existing = await self._existing(spec, tenant or "")
            if existing is not None:
                return existing
            if len(self._live) + self._reserved >= self.capacity:
                raise CapacityError(
                    f"{len(self._live)} rollouts running or queued; the limit is "
                    f"{self._settings.max_running} running + {self._settings.max_queued} queued"
                )
            rollout = _new_rollout(spec, tenant or "")
            stored = await self._store.insert(rollout)
            if stored.id != rollout.id:  # another server on this database admitted it first
                return check_same_request(stored, spec)
            self._launch(rollout, spec, parts)
        return rollout

    @property
    def capacity(self) -> int:
        """Rollouts this server holds at most, running and queued."""
        return self._settings.max_running + self._settings.max_queued

    @contextlib.asynccontextmanager
    async def admitting(
        self, places: int, *, running: bool = False, what: str = "the group"
    ) -> AsyncIterator[None]:
        """Hold admission to admit `places` rollouts as a unit (a group's members; with
        `running`, sessions, which never queue: running slots free now): CapacityError naming
        the places when they do not all fit now. The body `reserve`s them if it admits it."""
        async with self._admission:
            if not self._accepting:
                raise ShuttingDownError("the server is shutting down")
            limit = self._settings.max_running if running else self.capacity
            free = max(0, limit - len(self._live) - self._reserved)
            if places > free:
                raise CapacityError(
                    f"{what} needs {places} slots and {free} are free "
                    f"({len(self._live)} rollouts running or queued, {self._reserved} reserved; "
                    f"limit {limit}{' running' if running else ''})"
                )
            yield

    def reserve(self, places: int) -> None:
        """Hold places for a group's members until they start (call while `admitting`)."""
        self._reserved += places
        self._metrics.hold_places(places)

    def release(self, places: int) -> None:
        """Give back reserved places (the members now hold their own, or never will)."""
        self._reserved -= places
        self._metrics.hold_places(-places)

    @property
    def metrics(self) -> Metrics:
        """The server's instruments (the group manager counts refills on them)."""
        return self._metrics

    def _live_sandboxes(self) -> dict[str, int]:
        """Live sandboxes by backend; called from the metrics collector's thread, so it
        reads a copy of the backends (a dict copy is atomic; iterating one is not)."""
        return {name: backend.live_sandboxes for name, backend in self._backends.copy().items()}

    async def submit_member(
        self,
        spec: RolloutSpec,
        parts: Checked,
        *,
        tenant: str,
        group_id: str,
        index: int,
        prepared: PreparedFilesystem | None = None,
    ) -> Rollout:
        """Start a member of an admitted group: its place was counted with the group's (a
        refill takes the place of the member it replaces)."""
        rollout = _new_rollout(spec, tenant)
        rollout.group_id, rollout.member_index = group_id, index
        await self._store.insert(rollout)
        self._launch(rollout, spec, parts, prepared)
        return rollout

    async def submit_session(
        self,
        spec: RolloutSpec,
        parts: Checked,
        *,
        tenant: str,
        record: SessionRecord,
        prepared: PreparedFilesystem | None = None,
    ) -> Rollout:
        """Start a session's rollout (its agent is the caller: `engine.sessions`) in a
        place `admitting(running=True)` reserved."""
        rollout = _new_rollout(spec, tenant)
        rollout.result.session = record
        await self._store.insert(rollout)
        self._launch(rollout, spec, parts, prepared)
        return rollout

    def publish(self, rollout_id: str, payload: EventPayload) -> None:
        """Publish an event of a live rollout this server runs (a session's command)."""
        live = self._live.get(rollout_id)
        if live is not None:
            self._publish(live, payload)

    async def wait(self, rollout_id: str) -> Rollout:
        """The rollout once it is terminal (at once if it already is)."""
        live = self._live.get(rollout_id)
        if live is None:
            return await self.get(rollout_id)
        await live.done.wait()
        return live.rollout

    def _launch(
        self,
        rollout: Rollout,
        spec: RolloutSpec,
        parts: Checked,
        prepared: PreparedFilesystem | None = None,
    ) -> None:
        backend, agent, upstream = parts
        live = _Live(rollout, spec_bytes=spec_bytes(spec))
        publish = functools.partial(self._publish, live)
        run = RolloutRun(
            rollout,
            spec,
            settings=self._settings,
            backend=backend,
            agent=agent,
            attach_model=self._models.attacher(
                rollout.id,
                spec,
                upstream,
                tenant=rollout.tenant,
                publish=publish,
            ),
            publish=publish,
            prepared=prepared,
            build_image=self._harbor.build_image,
            metrics=self._metrics,
        )
        self._start(live, run)

    async def _check_image(self, sandbox: SandboxSpec) -> None:
        """The backend's check of a sandbox spec; an unknown backend is left to validation."""
        name = sandbox.backend or self._settings.default_backend
        if name in BACKENDS:
            await self.backend(name).check_spec(sandbox)

    def _start(self, live: _Live, run: RolloutRun) -> None:
        rollout = run.rollout
        self._live[rollout.id] = live
        self._metrics.hold_places(1)
        self._metrics.rollout_started(
            agent=rollout.spec.agent.name, backend=self._backend_of(rollout)
        )
        self._hub.open(rollout.id, rollout.spec.labels, tenant=rollout.tenant)
        self._hub.publish(rollout.id, PhaseChanged(phase=Phase.QUEUED, status=rollout.status))
        live.work = asyncio.create_task(run.execute(self._slot), name=f"rollout-{rollout.id}")
        live.settled = asyncio.create_task(self._settle(live), name=f"settle-{rollout.id}")

    async def resolve_task(self, spec: RolloutSpec) -> RolloutSpec:
        """The spec with its Harbor task directory (if it names one) mapped onto it."""
        if spec.harbor_task is None:
            return spec
        return await self._harbor.resolve(spec, self._check_image)

    async def checked(self, spec: RolloutSpec) -> Checked:
        """Everything admission can refuse before a rollout exists, as RPC errors."""
        if not self._accepting:
            raise ShuttingDownError("the server is shutting down")
        validate_spec(spec, self._settings)
        backend = self.backend(spec.sandbox.backend or self._settings.default_backend)
        backend.check_ready()
        if spec.harbor_task is None:  # a Harbor task's image is built at its start
            await backend.check_spec(spec.sandbox)
        check_verify_mode(spec, backend)
        agent = self._agent(spec.agent.name)
        violations = agent.option_violations(spec.agent.options)
        if violations:
            raise SpecError(violations)
        return backend, agent, self._models.resolve(spec, required=agent.requires_model)

    def _publish(self, live: _Live, payload: EventPayload) -> None:
        if not live.fenced:
            self._hub.publish(live.rollout.id, payload)

    async def _existing(self, spec: RolloutSpec, tenant: str) -> Rollout | None:
        """The rollout the tenant's request_id already names (RequestConflictError if not it)."""
        if not spec.request_id:
            return None
        for live in self._live.values():
            rollout = live.rollout
            if rollout.spec.request_id == spec.request_id and rollout.tenant == tenant:
                return check_same_request(rollout, spec)
        existing = await self._store.find_by_request_id(spec.request_id, tenant=tenant)
        return None if existing is None else check_same_request(existing, spec)

    def _backend_of(self, rollout: Rollout) -> str:
        return rollout.spec.sandbox.backend or self._settings.default_backend

    @contextlib.asynccontextmanager
    async def _slot(self) -> AsyncIterator[None]:
        """One running slot, held for the body (the run's `Slot`)."""
        with self._metrics.in_queue():
            await self._slots.acquire()
        try:
            with self._metrics.in_slot():
                yield
        finally:
            self._slots.release()

    async def _settle(self, live: _Live) -> None:
        """Wait for the work however it ends; nothing cancels this task, so the place is freed.

        A cancel that lands while the work waits for its slot, before it ever ran, or after
        its run (the old race: it escaped the store save and left the rollout holding its place
        forever) ends here as a terminal rollout either way.
        """
        assert live.work is not None
        await asyncio.wait([live.work])
        rollout = live.rollout
        try:
            _record_ending(rollout, live.work, live.cancel_reason)
            self._count_ending(rollout)
            if not live.fenced:
                self._hub.publish(rollout.id, rollout)  # terminal: nothing changes it any more
                await self._store.save(rollout)
        except FencedError:
            self._fence(live)  # taken over since its last write: the takeover's end stands
        except Exception:
            log.exception("settling rollout %s failed", rollout.id)
        finally:
            if live.fenced:
                live.rollout = await self._taken_over(rollout)
            self._live.pop(rollout.id, None)
            self._metrics.hold_places(-1)
            try:
                await self._heap.ended(live.spec_bytes)
            finally:
                live.done.set()

    async def _taken_over(self, rollout: Rollout) -> Rollout:
        """A fenced rollout as its takeover ended it, for its waiters here; this run's own
        record until the takeover has stored its end (or the store cannot be read)."""
        with contextlib.suppress(Exception):
            stored = await self._store.get(rollout.id)
            if stored is not None and stored.terminal:
                return stored
        return rollout

    def _count_ending(self, rollout: Rollout) -> None:
        error = rollout.result.error
        self._metrics.rollout_finished(
            status=rollout.status.value,
            error_kind=None if error is None else error.kind.value,
            agent=rollout.spec.agent.name,
            backend=self._backend_of(rollout),
        )

    async def _settled(self, *, timeout_s: float | None) -> None:
        """Wait until every live rollout is settled, or `timeout_s` has passed."""
        settling = [live.settled for live in self._live.values() if live.settled is not None]
        if settling:
            await asyncio.wait(settling, timeout=timeout_s)

    def _request_cancel(self, live: _Live, reason: str) -> None:
        """Cancel the work once, unless it is already tearing down (it then ends on its own)."""
        if live.cancel_reason or live.rollout.phase in _UNCANCELLABLE_PHASES:
            return
        live.cancel_reason = reason
        if live.work is not None:
            live.work.cancel()

    async def run(self, spec: RolloutSpec, *, tenant: str | None = None) -> Rollout:
        """Submit and wait for the terminal status; cancelling the wait cancels the rollout."""
        rollout = await self.submit(spec, tenant=tenant)
        live = self._live.get(rollout.id)
        if live is None:
            return await self.get(rollout.id, tenant=tenant)
        try:
            await live.done.wait()
        except asyncio.CancelledError:
            await asyncio.shield(self.cancel(rollout.id, "the RunRollout call was cancelled"))
            raise
        return live.rollout

    async def cancel(
        self, rollout_id: str, reason: str = "", *, tenant: str | None = None
    ) -> Rollout:
        """Cancel a live rollout and wait for its teardown; a terminal one is returned as is."""
        live = self._live.get(rollout_id)
        if live is None or not _visible(live.rollout, tenant):
            return await self._cancel_elsewhere(rollout_id, reason, tenant)
        self._request_cancel(live, reason or "cancelled by request")
        await live.done.wait()
        return live.rollout

    async def _cancel_elsewhere(self, rollout_id: str, reason: str, tenant: str | None) -> Rollout:
        """A rollout another server sharing the store runs: ask it to cancel, and follow the
        events until the final one for up to _REMOTE_CANCEL_WAIT_S. One no live server runs
        (its lease expired: the takeover ends it), or that outlasts the wait, is returned as
        it stands."""
        rollout = await self.get(rollout_id, tenant=tenant)
        if rollout.status in TERMINAL_STATUSES or not await self._store.request_cancel(
            rollout_id, reason or "cancelled by request"
        ):
            return rollout
        final: Rollout | None = None
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(_REMOTE_CANCEL_WAIT_S):
                async for event in self._store.follow_events(rollout_id, after_seq=0):
                    if isinstance(event.payload, Rollout):
                        final = event.payload
        stored = await self.get(rollout_id, tenant=tenant)
        # The owner stores the final event before its final save of the row.
        return final if final is not None and stored.status not in TERMINAL_STATUSES else stored

    def _lease_lost(self) -> int:
        """This server lost its lease on the shared store, and with it every rollout it runs
        (another server ends them as interrupted): stop them here, sandboxes torn down, without
        a write over the takeover's. Returns how many."""
        running = list(self._live.values())
        for live in running:
            self._fence(live)
            self._request_cancel(live, "taken over by another server")
        return len(running)

    def _fence(self, live: _Live) -> None:
        live.fenced = True
        self._hub.fence(live.rollout.id)

    def _cancel_requested(self, rollout_id: str, reason: str) -> None:
        """Another server's CancelRollout of a rollout this one runs (it checked the tenant)."""
        live = self._live.get(rollout_id)
        if live is not None:
            self._request_cancel(live, reason)

    @property
    def settings(self) -> Settings:
        return self._settings

    @property
    def harbor(self) -> HarborTasks:
        """The server's Harbor tasks (groups count their build contexts as in use)."""
        return self._harbor

    @property
    def model_calls(self) -> ModelCalls:
        """Policy versions and pauses of the live rollouts' model calls (`model_calls`)."""
        return self._models.calls

    async def holder(self, rollout_id: str) -> Holder | None:
        """The live server sharing the store that runs this rollout, if another one does."""
        return await self._store.holder(rollout_id)

    async def get(self, rollout_id: str, *, tenant: str | None = None) -> Rollout:
        live = self._live.get(rollout_id)
        rollout = live.rollout if live is not None else await self._store.get(rollout_id)
        if rollout is None or not _visible(rollout, tenant):
            raise NotFoundError(f"no rollout {rollout_id!r}")
        return rollout

    async def list(
        self,
        *,
        labels: Mapping[str, str],
        statuses: Sequence[RolloutStatus],
        page_size: int,
        page_token: str,
        slim: bool,
        take: TakeRollout,
        tenant: str | None = None,
    ) -> RolloutPage:
        """A page of rollouts as `take` accepts them, live ones as they are now."""
        rollouts, token = await self._store.list(
            labels=labels,
            statuses=statuses,
            page_size=page_size,
            page_token=page_token,
            tenant=tenant,
            slim=slim,
            take=lambda rollout: take(self._fresh(rollout)),
        )
        return [self._fresh(rollout) for rollout in rollouts], token

    def _fresh(self, rollout: Rollout) -> Rollout:
        live = self._live.get(rollout.id)
        return live.rollout if live is not None else rollout

    async def shutdown(self, grace_s: float) -> None:
        """Stop admitting; let rollouts finish for `grace_s`, then cancel them; kill sandboxes."""
        self._accepting = False
        async with self._admission:
            pass  # an admission under way finishes first; none starts after it
        await self._settled(timeout_s=grace_s)
        for live in list(self._live.values()):
            self._request_cancel(live, "server shutting down")
        await self._settled(timeout_s=None)
        for backend in self._backends.values():
            with contextlib.suppress(Exception):
                await backend.close()


def _record_ending(rollout: Rollout, work: asyncio.Task[Rollout], cancel_reason: str) -> None:
    """Make the rollout terminal from how its work ended (the run itself records most)."""
    if work.cancelled():
        rollout.status = RolloutStatus.CANCELLED
    elif work.exception() is not None:
        log.error("rollout %s crashed", rollout.id, exc_info=work.exception())
        rollout.status = RolloutStatus.FAILED
        rollout.result.error = RolloutError(kind=ErrorKind.INTERNAL, message="the run crashed")
    if rollout.status is RolloutStatus.CANCELLED:
        message = f"cancelled: {cancel_reason}" if cancel_reason else "cancelled"
        rollout.result.error = RolloutError(kind=ErrorKind.CANCELLED, message=message)
    rollout.phase = Phase.DONE
    rollout.finish_time = rollout.finish_time or datetime.now(UTC)
