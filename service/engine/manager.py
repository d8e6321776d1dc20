"""The rollout manager: admits rollouts (`admission`, `checks`), runs them, and cancels,
recovers (`recovery`) and shuts them down; idempotent on a tenant's request_id.

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
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime

from service.config import Settings
from service.engine.admission import Admission
from service.engine.checks import Checked, SpecChecks
from service.engine.events import EventHub
from service.engine.idempotency import check_same_request
from service.engine.lifecycle import RolloutRun
from service.engine.live_rollout import LiveRollout, record_ending
from service.engine.model_access import ModelRouter
from service.engine.model_calls import ModelCalls
from service.engine.recovery import end_interrupted, sweep_orphans
from service.engine.remote_cancel import cancel_elsewhere
from service.engine.template import PreparedFilesystem
from service.engine.validation import spec_bytes
from service.errors import NotFoundError
from service.harbor import HarborTasks
from service.memory import HeapTrimmer
from service.models import (
    EventPayload,
    Phase,
    PhaseChanged,
    Rollout,
    RolloutSpec,
    RolloutStatus,
    SessionRecord,
)
from service.registry import backend_capabilities
from service.sandboxes import SandboxBackend
from service.store import FencedError, Holder, RolloutPage, RolloutStore, TakeRollout
from service.telemetry import Metrics

__all__ = ["RolloutManager"]

log = logging.getLogger(__name__)


def _visible(rollout: Rollout, tenant: str | None) -> bool:
    return tenant is None or rollout.tenant == tenant


_UNCANCELLABLE_PHASES = frozenset({Phase.TEARDOWN, Phase.DONE})
"""Teardown runs on every path: a cancel arriving then has nothing left to stop."""


def _new_rollout(spec: RolloutSpec, tenant: str) -> Rollout:
    return Rollout(
        id=uuid.uuid4().hex, spec=spec.redacted(), create_time=datetime.now(UTC), tenant=tenant
    )


class RolloutManager:
    """Owns every live rollout of this server."""

    def __init__(
        self,
        settings: Settings,
        store: RolloutStore,
        hub: EventHub,
        models: ModelRouter,
        metrics: Metrics | None = None,
        *,
        backends: Mapping[str, SandboxBackend] | None = None,
    ) -> None:
        self._settings = settings
        self._store = store
        self._hub = hub
        self._models = models
        self._live: dict[str, LiveRollout] = {}
        self._metrics = metrics or Metrics()
        self._admission = Admission(settings, self._metrics)
        self._checks = SpecChecks(settings, models, backends)
        self._harbor = HarborTasks(settings)
        self._harbor.add_users(lambda: [live.rollout.spec for live in self._live.values()])
        self._heap = HeapTrimmer()
        self._metrics.observe_sandboxes(self._live_sandboxes)
        store.on_cancel_request(self._cancel_requested)
        store.on_lease_lost(self._lease_lost)

    def backend(self, name: str) -> SandboxBackend:
        """The backend called `name`, built once (`SpecChecks.backend`)."""
        return self._checks.backend(name)

    def load_default_backend(self) -> None:
        """Build the default backend now, so a missing dependency stops the server at start."""
        self._checks.load_default_backend()

    async def recover(self) -> int:
        """Fail rollouts a previous run left in flight, and kill sandboxes nobody owns."""
        interrupted = await self.end_interrupted()
        await sweep_orphans(self._checks.built_backends().values(), set(self._live))
        return interrupted

    async def end_interrupted(self) -> int:
        """Fail the rollouts the store says no live server runs (`recovery`)."""
        return await end_interrupted(
            self._store,
            self._hub,
            self._checks,
            default_backend=self._settings.default_backend,
        )

    async def submit(self, spec: RolloutSpec, *, tenant: str | None = None) -> Rollout:
        """Admit a rollout and start it in the background; idempotent on the tenant's
        request_id."""
        spec = await self.resolve_task(spec)
        parts = await self.checked(spec)
        async with self._admission.admitting():
            existing = await self._existing(spec, tenant or "")
            if existing is not None:
                return existing
            self._admission.check_room()
            rollout = _new_rollout(spec, tenant or "")
            stored = await self._store.insert(rollout)
            if stored.id != rollout.id:  # another server on this database admitted it first
                return check_same_request(stored, spec)
            self._launch(rollout, spec, parts)
        return rollout

    @property
    def admission(self) -> Admission:
        """The server's places, which groups and sessions reserve as a unit."""
        return self._admission

    @property
    def metrics(self) -> Metrics:
        """The server's instruments (the group manager counts refills on them)."""
        return self._metrics

    def _live_sandboxes(self) -> dict[str, int]:
        """Live sandboxes by backend; called from the metrics collector's thread, so it
        reads a copy of the backends (a dict copy is atomic; iterating one is not)."""
        backends = self._checks.built_backends().items()
        return {name: backend.live_sandboxes for name, backend in backends}

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
        place `Admission.admitting_unit(running=True)` reserved."""
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
        live = LiveRollout(rollout, spec_bytes=spec_bytes(spec))
        publish = functools.partial(self._publish, live)
        run = RolloutRun(
            rollout,
            spec,
            settings=self._settings,
            backend=parts.backend,
            agent=parts.agent,
            attach_model=self._models.attacher(
                rollout.id,
                spec,
                parts.endpoint,
                tenant=rollout.tenant,
                publish=publish,
            ),
            publish=publish,
            prepared=prepared,
            build_image=self._harbor.build_image,
            metrics=self._metrics,
        )
        self._start(live, run)

    def _start(self, live: LiveRollout, run: RolloutRun) -> None:
        rollout = run.rollout
        self._live[rollout.id] = live
        self._admission.hold()
        self._metrics.rollout_started(
            agent=rollout.spec.agent.name, backend=self._backend_of(rollout)
        )
        self._hub.open(rollout.id, rollout.spec.labels, tenant=rollout.tenant)
        self._hub.publish(rollout.id, PhaseChanged(phase=Phase.QUEUED, status=rollout.status))
        live.work = asyncio.create_task(
            run.execute(self._admission.slot), name=f"rollout-{rollout.id}"
        )
        live.settled = asyncio.create_task(self._settle(live), name=f"settle-{rollout.id}")

    async def resolve_task(self, spec: RolloutSpec) -> RolloutSpec:
        """The spec with its Harbor task directory (if it names one) mapped onto it."""
        if spec.harbor_task is None:
            return spec
        backend = backend_capabilities(spec.sandbox.backend or self.settings.default_backend)
        return await self._harbor.resolve(spec, self._checks.check_image, backend)

    async def checked(self, spec: RolloutSpec) -> Checked:
        """Everything admission can refuse before a rollout exists, as RPC errors."""
        self._admission.check_open()
        return await self._checks.check(spec)

    def _publish(self, live: LiveRollout, payload: EventPayload) -> None:
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

    async def _settle(self, live: LiveRollout) -> None:
        """Wait for the work however it ends; nothing cancels this task, so the place is freed.

        A cancel that lands while the work waits for its slot, before it ever ran, or after
        its run ends here as a terminal rollout either way: were it let through, it would skip
        the store save and leave the rollout holding its place forever.
        """
        assert live.work is not None
        await asyncio.wait([live.work])
        rollout = live.rollout
        try:
            record_ending(rollout, live.work, live.cancel_reason)
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
            self._admission.free()
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

    def _request_cancel(self, live: LiveRollout, reason: str) -> None:
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
            rollout = await self.get(rollout_id, tenant=tenant)
            reread = functools.partial(self.get, rollout_id, tenant=tenant)
            return await cancel_elsewhere(
                self._store, rollout, reason or "cancelled by request", reread
            )
        self._request_cancel(live, reason or "cancelled by request")
        await live.done.wait()
        return live.rollout

    def _lease_lost(self) -> int:
        """This server lost its lease on the shared store, and with it every rollout it runs
        (another server ends them as interrupted): stop them here, sandboxes torn down, without
        a write over the takeover's. Returns how many."""
        running = list(self._live.values())
        for live in running:
            self._fence(live)
            self._request_cancel(live, "taken over by another server")
        return len(running)

    def _fence(self, live: LiveRollout) -> None:
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
        await self._admission.close()
        await self._settled(timeout_s=grace_s)
        for live in list(self._live.values()):
            self._request_cancel(live, "server shutting down")
        await self._settled(timeout_s=None)
        for backend in self._checks.built_backends().values():
            with contextlib.suppress(Exception):
                await backend.close()
