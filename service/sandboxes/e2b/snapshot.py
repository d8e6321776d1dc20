"""Setup's state on E2B, with the SDK's own snapshots: a group's set-up-once fork, and
the state a FRESH verifier's sandbox is made of (`carry`).

    snapshot   `AsyncSandbox.create_snapshot` of the sandbox setup ran in, filesystem
               only (`mode="filesystem"`): E2B saves its disk as a template of its own
               (everything setup did, sudo included) while it keeps running; the
               snapshot's id names that template. Its name carries the service instance
               (`snapshot_prefix`), so a crashed run's can be found.
    sandbox    created from the snapshot's id in place of the spec's template: it
               cold-boots from that disk, with none of the source's processes or memory
               (a capture proxy holding a key, a daemon setup or the agent left); each is
               a sandbox of its own, so what one writes no other sees.
    release    `AsyncSandbox.delete_snapshot` at the group's (or rollout's) end; at
               start-up, the sweep deletes the instance's snapshots nobody holds
               (`sweep_snapshots`).

A team where E2B refuses filesystem snapshots (400, or 409 on an older node) gets a
SandboxError naming E2B's answer: its groups set up each member on its own, its AUTO
rollouts verify in place (`engine.verification`).

A snapshot cancelled mid-call is waited out and deleted, as sandbox creates are
(`E2BBackend._reap_abandoned`): a snapshot is a template that would outlive the service.
"""

from __future__ import annotations

import asyncio
import logging
import re
import uuid
from collections.abc import Callable, Collection
from dataclasses import dataclass, field

from e2b import AsyncSandbox

from service.errors import SandboxError
from service.sandboxes.e2b.sandbox import SDK_ERRORS

__all__ = ["E2BSnapshot", "snapshot_prefix", "sweep_snapshots", "take_snapshot"]

_log = logging.getLogger(__name__)


def snapshot_prefix(instance_id: str) -> str:
    """How the names of this service instance's snapshots begin (E2B template names are
    lowercase letters, digits and dashes). The id's own dashes are single, so `--` ends
    it: instance `a` never claims instance `a-2`'s snapshots."""
    return "rollout-" + re.sub(r"[^a-z0-9]+", "-", instance_id.lower()).strip("-") + "--"


@dataclass(frozen=True, eq=False)
class E2BSnapshot:
    """A snapshot in E2B; matches `base.Snapshot`."""

    snapshot_id: str
    api_key: str = field(repr=False)
    on_release: Callable[[E2BSnapshot], None] = field(repr=False)

    async def release(self) -> None:
        """Delete it (a snapshot already gone is no error); raises SandboxError."""
        self.on_release(self)
        try:
            await AsyncSandbox.delete_snapshot(self.snapshot_id, api_key=self.api_key)
        except SDK_ERRORS as exc:
            raise SandboxError(f"could not delete E2B snapshot {self.snapshot_id}: {exc}") from exc


async def take_snapshot(
    sandbox_id: str, api_key: str, prefix: str, on_release: Callable[[E2BSnapshot], None]
) -> E2BSnapshot:
    """Snapshot the sandbox under a name beginning with `prefix`; raises SandboxError."""
    name = prefix + uuid.uuid4().hex[:12]
    call = asyncio.ensure_future(
        AsyncSandbox.create_snapshot(sandbox_id, name=name, mode="filesystem", api_key=api_key)
    )
    try:
        info = await asyncio.shield(call)
    except SDK_ERRORS as exc:
        raise SandboxError(f"could not snapshot E2B sandbox {sandbox_id}: {exc}") from exc
    except asyncio.CancelledError:
        await asyncio.wait([call])
        if not call.exception():
            await _delete_quietly(E2BSnapshot(call.result().snapshot_id, api_key, on_release))
        raise
    return E2BSnapshot(info.snapshot_id, api_key, on_release)


async def sweep_snapshots(prefix: str, api_key: str, held: Collection[str]) -> int:
    """Delete the snapshots named with `prefix` but those `held`; returns how many."""
    paginator = AsyncSandbox.list_snapshots(api_key=api_key)
    found = []
    try:
        while paginator.has_next:
            found += await paginator.next_items()
    except SDK_ERRORS as exc:
        raise SandboxError(f"could not list E2B snapshots for the sweep: {exc}") from exc
    orphans = [
        info.snapshot_id
        for info in found
        if info.snapshot_id not in held and any(_named(name, prefix) for name in info.names)
    ]
    for snapshot_id in orphans:
        await _delete_quietly(E2BSnapshot(snapshot_id, api_key, lambda _: None))
    return len(orphans)


def _named(name: str, prefix: str) -> bool:
    """Whether a full name (`team/name:tag`) is one of the prefix's."""
    return name.rsplit("/", 1)[-1].startswith(prefix)


async def _delete_quietly(snapshot: E2BSnapshot) -> None:
    try:
        await snapshot.release()
    except SandboxError as exc:
        _log.warning("%s", exc)
