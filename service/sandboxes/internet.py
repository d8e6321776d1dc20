"""Network FULL given to a live sandbox: the `InternetAccess` capability.

A rollout's verifier may need the internet when its agent had none (a Harbor task's
tests fetching their runner: `SandboxSpec.verifier_network`). The engine asks for it
only once every process of the agent is dead (`verifier.takeover`), so what was the
agent's never sees the network. A backend that can connect a sandbox made under NONE
(local: pasta attached to its network namespace; E2B: the sandbox's egress rules)
implements `InternetAccess`; a backend that cannot does not, and a rollout asking for
it there fails naming the field.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

__all__ = ["InternetAccess"]


@runtime_checkable
class InternetAccess(Protocol):
    """A sandbox that can be given network FULL after its creation."""

    async def open_internet(self) -> None:
        """Network FULL for every command started from now on, with the same bounds as
        a sandbox made under FULL; idempotent. Raises SandboxError when it cannot."""
        ...
