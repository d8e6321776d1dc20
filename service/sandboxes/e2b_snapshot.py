"""A group's set-up-once fork on E2B, with the SDK's own snapshots.

    snapshot   `AsyncSandbox.create_snapshot` of the template sandbox once its commands
               are reclaimed: E2B pauses it, saves it as a template of its own (the API's
               default kind, memory and filesystem: everything setup did, sudo included)
               and resumes it; the snapshot's id names that template.
    member     created from the snapshot's id in place of the spec's template: each is a
               sandbox of its own, so what one member writes no other sees.
    release    `AsyncSandbox.delete_snapshot` at the group's end.

A create cancelled mid-call is waited out and what it made deleted, as sandbox creates are
(`E2BBackend._reap_abandoned`): a snapshot is a template that would outlive the service.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field

from e2b import AsyncSandbox

from service.errors import SandboxError
from service.sandboxes.e2b_sandbox import SDK_ERRORS

__all__ = ["E2BSnapshot", "take_snapshot"]

_log = logging.getLogger(__name__)


@dataclass(frozen=True, eq=False)
class E2BSnapshot:
    """A snapshot in E2B; matches `base.Snapshot`."""

    snapshot_id: str
    api_key: str = field(repr=False)

    async def release(self) -> None:
        """Delete it (a snapshot already gone is no error); raises SandboxError."""
        try:
            await AsyncSandbox.delete_snapshot(self.snapshot_id, api_key=self.api_key)
        except SDK_ERRORS as exc:
            raise SandboxError(f"could not delete E2B snapshot {self.snapshot_id}: {exc}") from exc


async def take_snapshot(sandbox_id: str, api_key: str) -> E2BSnapshot:
    """Snapshot the sandbox; raises SandboxError."""
    call = asyncio.ensure_future(AsyncSandbox.create_snapshot(sandbox_id, api_key=api_key))
    try:
        info = await asyncio.shield(call)
    except SDK_ERRORS as exc:
        raise SandboxError(f"could not snapshot E2B sandbox {sandbox_id}: {exc}") from exc
    except asyncio.CancelledError:
        await asyncio.wait([call])
        if not call.exception():
            await _delete_quietly(E2BSnapshot(call.result().snapshot_id, api_key))
        raise
    return E2BSnapshot(info.snapshot_id, api_key)


async def _delete_quietly(snapshot: E2BSnapshot) -> None:
    try:
        await snapshot.release()
    except SandboxError as exc:
        _log.warning("%s", exc)
