"""The gRPC servicer: proto in, domain calls, proto out. No logic of its own."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import grpc
from rollout.v1 import rollout_pb2 as pb
from rollout.v1 import rollout_pb2_grpc as pb_grpc

from service.api.convert import (
    event_to_proto,
    rollout_to_proto,
    spec_from_proto,
    statuses_from_proto,
)
from service.api.errors import invalid_argument, translate_errors, translate_stream_errors
from service.api.paging import RolloutPageBuilder
from service.engine.events import EventHub
from service.engine.manager import RolloutManager

__all__ = ["RolloutServicer"]

Context = grpc.aio.ServicerContext[Any, Any]

_DEFAULT_PAGE_SIZE = 50
_MAX_PAGE_SIZE = 500


def _required_id(rollout_id: str) -> str:
    if not rollout_id:
        raise invalid_argument("rollout_id", "is required")
    return rollout_id


class RolloutServicer(pb_grpc.RolloutServiceServicer):
    """Implements rollout.v1.RolloutService on top of the manager and the event hub."""

    def __init__(self, manager: RolloutManager, hub: EventHub) -> None:
        self._manager = manager
        self._hub = hub

    @translate_errors
    async def RunRollout(
        self, request: pb.RunRolloutRequest, context: Context
    ) -> pb.RunRolloutResponse:
        rollout = await self._manager.run(spec_from_proto(request.spec))
        slim = request.view == pb.RESULT_VIEW_SLIM
        return pb.RunRolloutResponse(rollout=rollout_to_proto(rollout, slim=slim))

    @translate_errors
    async def StartRollout(
        self, request: pb.StartRolloutRequest, context: Context
    ) -> pb.StartRolloutResponse:
        rollout = await self._manager.submit(spec_from_proto(request.spec))
        return pb.StartRolloutResponse(rollout=rollout_to_proto(rollout, slim=True))

    @translate_stream_errors
    async def WatchRollout(
        self, request: pb.WatchRolloutRequest, context: Context
    ) -> AsyncIterator[pb.WatchRolloutResponse]:
        if request.rollout_id:
            await self._manager.get(request.rollout_id)
            events = self._hub.watch(request.rollout_id, request.after_seq)
        else:
            events = self._hub.watch_all(request.labels)
        async for event in events:
            yield pb.WatchRolloutResponse(event=event_to_proto(event))

    @translate_errors
    async def GetRollout(
        self, request: pb.GetRolloutRequest, context: Context
    ) -> pb.GetRolloutResponse:
        rollout = await self._manager.get(_required_id(request.rollout_id))
        slim = request.view == pb.RESULT_VIEW_SLIM
        return pb.GetRolloutResponse(rollout=rollout_to_proto(rollout, slim=slim))

    @translate_errors
    async def ListRollouts(
        self, request: pb.ListRolloutsRequest, context: Context
    ) -> pb.ListRolloutsResponse:
        page_size = min(request.page_size or _DEFAULT_PAGE_SIZE, _MAX_PAGE_SIZE)
        limit_bytes = self._manager.settings.max_message_bytes
        if request.max_page_bytes:
            limit_bytes = min(limit_bytes, request.max_page_bytes)
        slim = request.view != pb.RESULT_VIEW_FULL
        page = RolloutPageBuilder(limit_bytes=limit_bytes, slim=slim)
        _, token = await self._manager.list(
            labels=request.labels,
            statuses=statuses_from_proto(request.statuses),
            page_size=page_size,
            page_token=request.page_token,
            slim=slim,
            take=page.take,
        )
        return page.response(token)

    @translate_errors
    async def CancelRollout(
        self, request: pb.CancelRolloutRequest, context: Context
    ) -> pb.CancelRolloutResponse:
        rollout = await self._manager.cancel(_required_id(request.rollout_id), request.reason)
        return pb.CancelRolloutResponse(rollout=rollout_to_proto(rollout, slim=True))
