"""The E2B backend: sandboxes in E2B's cloud through the `e2b` SDK, leak-proof.

Defences against a leaked (paid, running) sandbox, innermost first:
1. each create call is shielded from cancellation; if its caller was cancelled meanwhile,
   the sandbox it yields is killed as soon as its id is known;
2. `E2BSandbox.kill` is shielded and idempotent, and the engine runs it on every path;
   `close` kills whatever is left at shutdown;
3. E2B kills a sandbox by itself at its timeout (the rollout's lifetime plus
   `e2b_lifetime_margin_s`);
4. `sweep_orphans`, at startup, kills the sandboxes labelled with this instance that no live
   rollout owns (a crash skips 1 and 2); `sweep_rollouts` kills those of the rollouts another
   replica ran, labelled with their rollout, when this one takes them over.
Creates wait for a place under `e2b_max_sandboxes` and a turn under `e2b_creates_per_s`;
429, 5xx and connection failures are retried with backoff, under one idempotency key so a
retry never makes a second sandbox.

The API key comes from the environment (`E2B_API_KEY`, as for every E2B tool); the SDK also
honours `E2B_DOMAIN`, and `E2B_API_URL` / `E2B_SANDBOX_URL` (used by the tests' fake cloud).
"""

from __future__ import annotations

import asyncio
import logging
import math
import os
import uuid
from collections.abc import Sequence
from typing import Any, ClassVar

import httpx
from e2b import (
    AsyncSandbox,
    RateLimitException,
    SandboxException,
    SandboxQuery,
    SandboxState,
    ServiceBusyException,
)

from service.config import Settings
from service.errors import FieldViolation, RolloutFailure, SandboxError, SpecError
from service.models import ErrorKind, NetworkPolicy, SandboxSpec
from service.sandboxes.base import WORKDIR, Capabilities, Sandbox, SandboxRequest, Snapshot
from service.sandboxes.e2b.carry import E2BCarried, lay_carried, read_carried
from service.sandboxes.e2b.guard import (
    CreateRateLimiter,
    RetryPolicy,
    SandboxSlots,
    Slot,
    retry_transient,
)
from service.sandboxes.e2b.presence import PAGE, Presence
from service.sandboxes.e2b.sandbox import KILL_TIMEOUT_S, SDK_ERRORS, E2BSandbox
from service.sandboxes.e2b.snapshot import (
    E2BSnapshot,
    snapshot_prefix,
    sweep_snapshots,
    take_snapshot,
)

__all__ = ["API_KEY_ENV", "INSTANCE_LABEL", "ROLLOUT_LABEL", "E2BBackend"]

_log = logging.getLogger(__name__)

API_KEY_ENV = "E2B_API_KEY"
INSTANCE_LABEL = "rollout-service-instance"
"""Sandbox metadata key naming the service instance that created it (`Settings.instance_id`)."""
ROLLOUT_LABEL = "rollout-id"
"""Sandbox metadata key naming the rollout it runs."""
MAX_TIMEOUT_S = 24 * 3600
"""The longest sandbox life E2B grants (Pro tier)."""
HEALTH_INTERVAL_S = 10.0
"""How often the sandboxes of waiting commands are checked to still exist (`presence`)."""
_MISSING_KEY = f"backend 'e2b' is not available: {API_KEY_ENV} is not set on the server"


def _is_transient(exc: Exception) -> bool:
    """Provider trouble worth another try: rate limits, 5xx, connection failures."""
    if isinstance(exc, RateLimitException | ServiceBusyException | httpx.TransportError):
        return True
    status = getattr(exc, "status_code", None)
    return isinstance(exc, SandboxException) and isinstance(status, int) and status >= 500


class E2BBackend:
    """Creates sandboxes in E2B (`SandboxBackend`, `PathCarrier`)."""

    name = "e2b"
    capabilities: ClassVar[Capabilities] = Capabilities(task_templates=True)

    def __init__(
        self,
        settings: Settings,
        *,
        retry: RetryPolicy | None = None,
        health_interval_s: float = HEALTH_INTERVAL_S,
    ) -> None:
        self._settings = settings
        self._api_key = os.environ.get(API_KEY_ENV, "")
        self._slots = SandboxSlots(settings.e2b_max_sandboxes)
        self._rate = CreateRateLimiter(settings.e2b_creates_per_s)
        self._retry = retry or RetryPolicy()
        self._presence = Presence(self._existing, health_interval_s)
        self._live: dict[str, E2BSandbox] = {}
        self._snapshots: set[str] = set()
        """The ids of the snapshots taken and not released (`snapshot`)."""
        self._reapers: set[asyncio.Task[None]] = set()

    def check_ready(self) -> None:
        """Raise SpecError if rollouts cannot run on E2B; the engine asks at admission."""
        if not self._api_key:
            raise SpecError([FieldViolation("spec.sandbox.backend", _MISSING_KEY)])

    async def check_spec(self, spec: SandboxSpec) -> None:
        """Refuse an image: an E2B sandbox runs on a template (`spec.sandbox.template`)."""
        if spec.image:
            raise SpecError(
                [
                    FieldViolation(
                        "spec.sandbox.image",
                        "images are for local sandboxes; an E2B sandbox runs on a template: "
                        "set spec.sandbox.template",
                    )
                ]
            )

    def can_snapshot(self, spec: SandboxSpec) -> bool:
        """Yes: E2B's own snapshots (`snapshot`)."""
        return True

    async def snapshot(self, sandbox: Sandbox) -> E2BSnapshot:
        """Snapshot one of this backend's sandboxes (`snapshot`); raises SandboxError."""
        prefix = snapshot_prefix(self._settings.instance_id)
        snapshot_of = self._own(sandbox).id
        snapshot = await take_snapshot(snapshot_of, self._api_key, prefix, self._released)
        self._snapshots.add(snapshot.snapshot_id)
        return snapshot

    def _released(self, snapshot: E2BSnapshot) -> None:
        self._snapshots.discard(snapshot.snapshot_id)

    def can_carry(self, spec: SandboxSpec) -> bool:
        """A FRESH verifier's sandbox is made from setup's snapshot (`carry`), beside the
        agent's: yes, unless the cap on live sandboxes leaves no room for two."""
        return self._settings.e2b_max_sandboxes >= 2

    async def carry(
        self, sandbox: Sandbox, paths: Sequence[str], *, over: Snapshot | None = None
    ) -> E2BCarried:
        """The agent's `paths` read out of its reclaimed sandbox, for
        `SandboxRequest.carried` (`carry.read_carried`); they replace the snapshot's whole,
        so `over` is not needed."""
        return await read_carried(self._own(sandbox), paths)

    def _own(self, sandbox: Sandbox) -> E2BSandbox:
        if self._live.get(sandbox.id) is not sandbox:
            raise ValueError(f"sandbox {sandbox.id} is not one of this backend's")
        assert isinstance(sandbox, E2BSandbox)
        return sandbox

    async def create(self, request: SandboxRequest) -> E2BSandbox:
        """Create a sandbox, waiting for a place under the cap and a turn under the rate limit."""
        if not self._api_key:
            raise RolloutFailure(_MISSING_KEY, kind=ErrorKind.INVALID_SPEC)
        slot = await self._slots.take(keep_one=request.verifier_follows)
        try:
            sdk = await self._create_with_retries(request, slot)
        except BaseException:
            slot.release()  # a no-op once a reaper has taken the slot over
            raise
        sandbox = self._adopt(sdk, slot)
        try:
            await sandbox.make_dirs(WORKDIR)
            if request.carried is not None:
                if not isinstance(request.carried, E2BCarried):
                    raise SandboxError("the carried paths are not the e2b backend's")
                await lay_carried(sandbox, request.carried)
        except BaseException:
            await sandbox.kill()
            raise
        return sandbox

    @property
    def live_sandboxes(self) -> int:
        return len(self._live)

    async def sweep_orphans(self, live_rollout_ids: set[str]) -> int:
        """Kill this instance's sandboxes that no live rollout owns, and delete its group
        snapshots this backend does not hold; returns how many sandboxes were killed."""
        if not self._api_key:
            return 0
        orphans = [
            info.sandbox_id
            for info in await self._list_own()
            if info.sandbox_id not in self._live
            and info.metadata.get(ROLLOUT_LABEL) not in live_rollout_ids
        ]
        killed = await asyncio.gather(*(self._kill_by_id(sandbox_id) for sandbox_id in orphans))
        if orphans:
            _log.info("orphan sweep: killed %d of %d E2B sandboxes", sum(killed), len(orphans))
        prefix = snapshot_prefix(self._settings.instance_id)
        deleted = await sweep_snapshots(prefix, self._api_key, set(self._snapshots))
        if deleted:
            _log.info("orphan sweep: deleted %d E2B snapshots of groups no server runs", deleted)
        return sum(killed)

    async def sweep_rollouts(self, rollout_ids: set[str]) -> int:
        """Kill the sandboxes labelled with these rollouts, whichever instance created them
        (a replica whose lease expired, whose rollouts this server ended)."""
        if not self._api_key:
            return 0
        found = await asyncio.gather(
            *(self._list({ROLLOUT_LABEL: rollout_id}) for rollout_id in sorted(rollout_ids))
        )
        left = [info.sandbox_id for infos in found for info in infos]
        killed = await asyncio.gather(*(self._kill_by_id(sandbox_id) for sandbox_id in left))
        if left:
            _log.info("takeover sweep: killed %d of %d E2B sandboxes", sum(killed), len(left))
        return sum(killed)

    async def close(self) -> None:
        """Kill every sandbox this backend holds, those of abandoned creates included."""
        while self._reapers:
            await asyncio.wait(set(self._reapers))
        await asyncio.gather(*(sandbox.kill() for sandbox in list(self._live.values())))
        await self._presence.close()

    async def _create_with_retries(self, request: SandboxRequest, slot: Slot) -> AsyncSandbox:
        idempotency_key = str(uuid.uuid4())
        try:
            return await retry_transient(
                lambda: self._create_once(request, idempotency_key, slot),
                policy=self._retry,
                is_transient=_is_transient,
                what=f"E2B create for rollout {request.rollout_id}",
            )
        except SDK_ERRORS as exc:
            raise SandboxError(f"could not create an E2B sandbox: {exc}") from exc

    async def _create_once(self, request: SandboxRequest, key: str, slot: Slot) -> AsyncSandbox:
        await self._rate.wait()
        call = asyncio.create_task(AsyncSandbox.create(**self._create_args(request, key)))
        try:
            return await asyncio.shield(call)
        except asyncio.CancelledError:
            reaper = asyncio.create_task(self._reap_abandoned(call, slot.transfer()))
            self._reapers.add(reaper)
            reaper.add_done_callback(self._reapers.discard)
            raise

    def _create_args(self, request: SandboxRequest, idempotency_key: str) -> dict[str, Any]:
        labels = {INSTANCE_LABEL: self._settings.instance_id, ROLLOUT_LABEL: request.rollout_id}
        template = request.spec.template or self._settings.e2b_template
        if request.snapshot is not None:
            if not isinstance(request.snapshot, E2BSnapshot):
                raise SandboxError("the snapshot is not one of the e2b backend's")
            template = request.snapshot.snapshot_id
        return {
            "template": template,
            "timeout": self._timeout_s(request),
            "metadata": labels,
            "envs": {},
            "allow_internet_access": request.spec.network is NetworkPolicy.FULL,
            "idempotency_key": idempotency_key,
            "api_key": self._api_key,
            "retries": 0,  # retries are ours: bounded, jittered, under the rate limit
        }

    def _timeout_s(self, request: SandboxRequest) -> int:
        """E2B's own kill deadline: the rollout's lifetime plus a margin for creation and
        teardown, within the longest life E2B grants."""
        lifetime_s = request.lifetime_s + self._settings.e2b_lifetime_margin_s
        return min(MAX_TIMEOUT_S, max(1, math.ceil(lifetime_s)))

    async def _reap_abandoned(self, call: asyncio.Task[AsyncSandbox], slot: Slot) -> None:
        """Wait out a create whose caller was cancelled, and kill what it made."""
        sandbox = None
        try:
            sandbox = self._adopt(await call, slot)
        except SDK_ERRORS as exc:
            _log.info("an abandoned E2B create failed, nothing to kill: %s", exc)
        finally:
            if sandbox is None:
                slot.release()
        if sandbox is not None:
            await sandbox.kill()

    def _adopt(self, sdk: AsyncSandbox, slot: Slot) -> E2BSandbox:
        sandbox_id: str = sdk.sandbox_id

        def forget() -> None:
            self._live.pop(sandbox_id, None)
            slot.release()

        sandbox = E2BSandbox(sdk, self._settings, on_killed=forget, presence=self._presence)
        self._live[sandbox_id] = sandbox
        return sandbox

    async def _list_own(self) -> list[Any]:
        return await self._list({INSTANCE_LABEL: self._settings.instance_id})

    async def _existing(self) -> set[str]:
        """The ids of this instance's sandboxes, running or paused (`presence`)."""
        query = SandboxQuery(
            metadata={INSTANCE_LABEL: self._settings.instance_id},
            state=[SandboxState.RUNNING, SandboxState.PAUSED],
        )
        return {info.sandbox_id for info in await self._list_pages(query)}

    async def _list(self, metadata: dict[str, str]) -> list[Any]:
        """The sandboxes whose metadata includes `metadata`."""
        return await self._list_pages(SandboxQuery(metadata=metadata))

    async def _list_pages(self, query: SandboxQuery) -> list[Any]:
        paginator = AsyncSandbox.list(query=query, limit=PAGE, api_key=self._api_key)
        found: list[Any] = []
        try:
            while paginator.has_next:
                found += await paginator.next_items()
        except SDK_ERRORS as exc:
            raise SandboxError(f"could not list E2B sandboxes: {exc}") from exc
        return found

    async def _kill_by_id(self, sandbox_id: str) -> bool:
        try:
            killed = await AsyncSandbox.kill(
                sandbox_id, api_key=self._api_key, request_timeout=KILL_TIMEOUT_S
            )
        except SDK_ERRORS as exc:
            _log.warning("orphan sweep: could not kill E2B sandbox %s: %s", sandbox_id, exc)
            return False
        return bool(killed)
