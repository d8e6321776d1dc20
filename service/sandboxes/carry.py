"""Carrying paths of one sandbox into a new one: the `PathCarrier` capability.

A FRESH verifier (`service.engine.verification`) runs in a sandbox made anew from the
state setup left (a `Snapshot`), with only what the agent left at a few paths (its
workdir) laid over it: every program, library and configuration file the verifier runs
is setup's. A backend that can freeze some paths of a reclaimed sandbox as a layer, and
start a sandbox from a snapshot with such a layer on top (`SandboxRequest.carried`),
implements `PathCarrier`: the local backend on a server running as root (overlay layers),
and E2B (a filesystem snapshot, and the paths carried as an archive: `e2b.carry`). One
that cannot leaves verification in place, behind the integrity check (`SystemSeal`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

from service.models import SandboxSpec
from service.sandboxes.base import Sandbox, Snapshot

__all__ = ["PathCarrier"]


@runtime_checkable
class PathCarrier(Protocol):
    """A backend whose sandboxes can carry paths into new ones."""

    def can_carry(self, spec: SandboxSpec) -> bool:
        """Whether `carry` and `SandboxRequest.carried` work for sandboxes of this spec
        (`snapshot` then works too: the state setup left is one)."""
        ...

    async def carry(
        self, sandbox: Sandbox, paths: Sequence[str], *, over: Snapshot | None = None
    ) -> Snapshot:
        """Freeze what `sandbox` (one of this backend's, its commands reclaimed) holds at
        `paths` (absolute, none below another) as a layer to lay over `over`, a snapshot
        of the same sandbox taken earlier (a lone rollout's setup state), so what was
        removed since is removed there too; raises SandboxError."""
        ...
