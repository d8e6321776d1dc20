"""The gRPC servicer: proto in, domain calls, proto out. No logic of its own."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import grpc
from rollout.v1 import rollout_pb2 as pb
from rollout.v1 import rollout_pb2_grpc as pb_grpc

from service.api.auth import caller_tenant
from service.api.convert import rollout_to_proto
from service.api.errors import translate_errors, translate_stream_errors
from service.api.group_convert import (
    group_id_from_proto,
    group_spec_from_proto,
    group_to_proto,
    watch_entry_to_proto,
)
from service.api.inbound import (
    after_seq_from_proto,
    cancel_reason_from_proto,
    group_statuses_from_proto,
    label_filter_from_proto,
    rollout_id_from_proto,
    slim_view,
    spec_from_proto,
    statuses_from_proto,
)
from service.api.model_calls_in import selector_from_proto, version_from_proto
from service.api.paging import GroupPageBuilder, RolloutPageBuilder
from service.api.session_forward import SessionForwarder
from service.api.session_methods import SessionMethods
from service.api.watch import EncodedEvents, FallingBehind, write_events
from service.engine import EventHub, GroupManager, RolloutManager, SessionManager

__all__ = ["RolloutServicer"]

Context = grpc.aio.ServicerContext[Any, Any]

_DEFAULT_PAGE_SIZE = 50
_MAX_PAGE_SIZE = 500
_ENCODED_EVENTS_BYTES = 8 * 1024 * 1024
"""Wire bytes of recent events kept for their other watchers (see `EncodedEvents`)."""


class RolloutServicer(SessionMethods, pb_grpc.RolloutServiceServicer):  # type: ignore[misc]
    """Implements rollout.v1.RolloutService on top of the managers and the event hub."""

    def __init__(
        self,
        manager: RolloutManager,
        hub: EventHub,
        groups: GroupManager,
        sessions: SessionManager,
    ) -> None:
        self._manager = manager
        self._hub = hub
        self._groups = groups
        self._sessions = sessions
        self._forwarder = SessionForwarder(sessions.settings)
        self._encoded_events = EncodedEvents(_ENCODED_EVENTS_BYTES)

    @translate_errors
    async def RunRollout(
        self, request: pb.RunRolloutRequest, context: Context
    ) -> pb.RunRolloutResponse:
        slim = slim_view(request.view, default_slim=False)
        rollout = await self._manager.run(spec_from_proto(request.spec), tenant=caller_tenant())
        limit_bytes = self._manager.settings.max_message_bytes
        alone = RolloutPageBuilder.alone(rollout, limit_bytes=limit_bytes, slim=slim)
        return pb.RunRolloutResponse(rollout=alone)

    @translate_errors
    async def StartRollout(
        self, request: pb.StartRolloutRequest, context: Context
    ) -> pb.StartRolloutResponse:
        rollout = await self._manager.submit(spec_from_proto(request.spec), tenant=caller_tenant())
        return pb.StartRolloutResponse(rollout=rollout_to_proto(rollout, slim=True))

    @translate_errors
    async def WatchRollout(  # type: ignore[override]  # writes its bytes itself (handlers.py)
        self, request: pb.WatchRolloutRequest, context: Context
    ) -> None:
        """Writes WatchRolloutResponse bytes itself, encoded once for every watcher (watch.py)."""
        if not request.rollout_id:
            labels = label_filter_from_proto(request.labels)
            events = self._hub.watch_all(labels, tenant=caller_tenant())
            await write_events(context, events, self._encoded_events)
            return
        rollout_id = rollout_id_from_proto(request.rollout_id)
        after_seq = after_seq_from_proto(request.after_seq)
        await self._manager.get(rollout_id, tenant=caller_tenant())
        behind = FallingBehind(self._manager.settings.watch_backlog_events)
        events = self._hub.watch(rollout_id, after_seq, behind.backlog)
        await write_events(context, events, self._encoded_events, behind)

    @translate_errors
    async def GetRollout(
        self, request: pb.GetRolloutRequest, context: Context
    ) -> pb.GetRolloutResponse:
        slim = slim_view(request.view, default_slim=False)
        rollout_id = rollout_id_from_proto(request.rollout_id)
        rollout = await self._manager.get(rollout_id, tenant=caller_tenant())
        limit_bytes = self._manager.settings.max_message_bytes
        alone = RolloutPageBuilder.alone(rollout, limit_bytes=limit_bytes, slim=slim)
        return pb.GetRolloutResponse(rollout=alone)

    @translate_errors
    async def ListRollouts(
        self, request: pb.ListRolloutsRequest, context: Context
    ) -> pb.ListRolloutsResponse:
        page_size = min(request.page_size or _DEFAULT_PAGE_SIZE, _MAX_PAGE_SIZE)
        limit_bytes = self._manager.settings.max_message_bytes
        if request.max_page_bytes:
            limit_bytes = min(limit_bytes, request.max_page_bytes)
        slim = slim_view(request.view, default_slim=True)
        page = RolloutPageBuilder(limit_bytes=limit_bytes, slim=slim)
        _, token = await self._manager.list(
            labels=label_filter_from_proto(request.labels),
            statuses=statuses_from_proto(request.statuses),
            page_size=page_size,
            page_token=request.page_token,
            tenant=caller_tenant(),
            slim=slim,
            take=page.take,
        )
        return page.response(token)

    @translate_errors
    async def CancelRollout(
        self, request: pb.CancelRolloutRequest, context: Context
    ) -> pb.CancelRolloutResponse:
        rollout = await self._manager.cancel(
            rollout_id_from_proto(request.rollout_id),
            cancel_reason_from_proto(request.reason),
            tenant=caller_tenant(),
        )
        return pb.CancelRolloutResponse(rollout=rollout_to_proto(rollout, slim=True))

    @translate_errors
    async def RunGroup(self, request: pb.RunGroupRequest, context: Context) -> pb.RunGroupResponse:
        group = await self._groups.run(group_spec_from_proto(request.spec), tenant=caller_tenant())
        return pb.RunGroupResponse(group=group_to_proto(group))

    @translate_errors
    async def StartGroup(
        self, request: pb.StartGroupRequest, context: Context
    ) -> pb.StartGroupResponse:
        spec = group_spec_from_proto(request.spec)
        group = await self._groups.submit(spec, tenant=caller_tenant())
        return pb.StartGroupResponse(group=group_to_proto(group))

    @translate_stream_errors
    async def WatchGroup(
        self, request: pb.WatchGroupRequest, context: Context
    ) -> AsyncIterator[pb.WatchGroupResponse]:
        group_id = group_id_from_proto(request.group_id)
        async for entry in self._groups.watch(group_id, tenant=caller_tenant()):
            yield watch_entry_to_proto(entry)

    @translate_errors
    async def GetGroup(self, request: pb.GetGroupRequest, context: Context) -> pb.GetGroupResponse:
        group_id = group_id_from_proto(request.group_id)
        group = await self._groups.get(group_id, tenant=caller_tenant())
        return pb.GetGroupResponse(group=group_to_proto(group))

    @translate_errors
    async def ListGroups(
        self, request: pb.ListGroupsRequest, context: Context
    ) -> pb.ListGroupsResponse:
        page = GroupPageBuilder(limit_bytes=self._manager.settings.max_message_bytes)
        _, token = await self._groups.list_groups(
            labels=label_filter_from_proto(request.labels),
            statuses=group_statuses_from_proto(request.statuses),
            page_size=min(request.page_size or _DEFAULT_PAGE_SIZE, _MAX_PAGE_SIZE),
            page_token=request.page_token,
            tenant=caller_tenant(),
            take=page.take,
        )
        return page.response(token)

    @translate_errors
    async def CancelGroup(
        self, request: pb.CancelGroupRequest, context: Context
    ) -> pb.CancelGroupResponse:
        group = await self._groups.cancel(
            group_id_from_proto(request.group_id),
            cancel_reason_from_proto(request.reason),
            tenant=caller_tenant(),
        )
        return pb.CancelGroupResponse(group=group_to_proto(group))

    @translate_errors
    async def SetPolicyVersion(
        self, request: pb.SetPolicyVersionRequest, context: Context
    ) -> pb.SetPolicyVersionResponse:
        selector = selector_from_proto(request.selector, caller_tenant())
        version = version_from_proto(request.version)
        rollouts = self._manager.model_calls.set_version(selector, version)
        return pb.SetPolicyVersionResponse(rollouts=rollouts)

    @translate_errors
    async def PauseModelCalls(
        self, request: pb.PauseModelCallsRequest, context: Context
    ) -> pb.PauseModelCallsResponse:
        selector = selector_from_proto(request.selector, caller_tenant())
        report = await self._manager.model_calls.pause(
            selector, abort_in_flight=request.abort_in_flight
        )
        return pb.PauseModelCallsResponse(
            rollouts=report.rollouts, calls_finished=report.finished, calls_aborted=report.aborted
        )

    @translate_errors
    async def ResumeModelCalls(
        self, request: pb.ResumeModelCallsRequest, context: Context
    ) -> pb.ResumeModelCallsResponse:
        selector = selector_from_proto(request.selector, caller_tenant())
        rollouts, released = self._manager.model_calls.resume(selector)
        return pb.ResumeModelCallsResponse(rollouts=rollouts, calls_released=released)
