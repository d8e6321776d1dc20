"""What a batch asks of the server: the calls of `AsyncRolloutClient` the runner makes.

The runner takes any object with these methods (the asyncio client is one), so the batch
library does not import the client that offers it as `AsyncRolloutClient.batch`.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Protocol

from rollout.v1 import rollout_pb2 as pb

from rollout_client.messages import SpecLike, ViewLike

__all__ = ["BatchClient"]


class BatchClient(Protocol):
    """The rollout and group calls a batch makes (`AsyncRolloutClient` has them all)."""

    async def start(self, spec: SpecLike) -> pb.Rollout: ...

    async def get(self, rollout_id: str, *, view: ViewLike = ...) -> pb.Rollout: ...

    async def cancel(self, rollout_id: str, reason: str = ...) -> pb.Rollout: ...

    def watch(self, rollout_id: str = ...) -> AsyncIterator[pb.RolloutEvent]: ...

    async def start_group(self, spec: pb.GroupSpec) -> pb.Group: ...

    def watch_group(self, group_id: str) -> AsyncIterator[pb.WatchGroupResponse]: ...

    async def get_group(self, group_id: str) -> pb.Group: ...

    async def cancel_group(self, group_id: str, reason: str = ...) -> pb.Group: ...
