"""What a server does at start, and when a replica's lease expires, for the rollouts no live
server runs any more: fail them as interrupted, and kill the sandboxes they left.

Local sandboxes are found by the backend itself (`sweep_orphans`: everything of an earlier
run of this server no live rollout owns); a remote backend's are found by their rollout's
label (`sweep_rollouts`), since the server that made them is gone.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from datetime import UTC, datetime

from service.engine.checks import SpecChecks
from service.engine.events import EventHub
from service.engine.verification import verifier_sandbox_label
from service.errors import SandboxError, SpecError
from service.models import ErrorKind, Phase, RolloutError, RolloutStatus
from service.registry import BACKENDS
from service.sandboxes import SandboxBackend
from service.store import Interrupted, RolloutStore

__all__ = ["end_interrupted", "sweep_orphans"]

log = logging.getLogger(__name__)


async def sweep_orphans(backends: Iterable[SandboxBackend], live_rollout_ids: set[str]) -> None:
    """Kill the sandboxes of these backends that no live rollout owns."""
    for backend in backends:
        try:
            swept = await backend.sweep_orphans(live_rollout_ids)
        except SandboxError as exc:
            # An unreachable provider must not keep the server from serving other backends.
            log.warning("could not sweep orphaned %s sandboxes: %s", backend.name, exc)
            continue
        if swept:
            log.info("killed %d orphaned %s sandboxes", swept, backend.name)


async def end_interrupted(
    store: RolloutStore, hub: EventHub, checks: SpecChecks, *, default_backend: str
) -> int:
    """Fail the rollouts the store says no live server runs (a previous run of this one;
    on a shared store, also a replica that stopped renewing its lease); how many."""
    interrupted = await store.non_terminal()
    await _sweep_sandboxes_of(interrupted, checks, default_backend)
    for rollout, reason in interrupted:
        rollout.status = RolloutStatus.FAILED
        rollout.phase = Phase.DONE
        rollout.finish_time = datetime.now(UTC)
        rollout.result.error = RolloutError(kind=ErrorKind.INTERNAL, message=reason)
        await store.save(rollout)
        await hub.close_interrupted(rollout)
    return len(interrupted)


async def _sweep_sandboxes_of(
    interrupted: list[Interrupted], checks: SpecChecks, default_backend: str
) -> None:
    """Kill what the remote backends still run for these rollouts, found by their label
    (the server that ran them is gone), their FRESH verifiers' sandboxes too, before they
    are reported ended."""
    by_backend: dict[str, set[str]] = {}
    for rollout, _ in interrupted:
        name = rollout.spec.sandbox.backend or default_backend
        by_backend.setdefault(name, set()).update((rollout.id, verifier_sandbox_label(rollout.id)))
    for name, rollout_ids in by_backend.items():
        if name not in BACKENDS:
            continue
        try:
            swept = await checks.backend(name).sweep_rollouts(rollout_ids)
        except (SandboxError, SpecError) as exc:  # unreachable, or not installed here
            log.warning("could not sweep the %s sandboxes of interrupted rollouts: %s", name, exc)
            continue
        if swept:
            log.info("killed %d %s sandboxes of interrupted rollouts", swept, name)
