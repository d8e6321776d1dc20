"""The session RPCs of rollout.v1.RolloutService (docs/sessions.md): proto in, the session
manager's calls, proto out. No logic of its own."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import grpc
from rollout.v1 import rollout_pb2 as pb

from service.api.auth import caller_tenant
from service.api.errors import translate_errors, translate_stream_errors
from service.api.inbound import after_seq_from_proto, id_from_proto, label_filter_from_proto
from service.api.session_convert import (
    command_from_proto,
    exec_item_to_proto,
    open_from_proto,
    session_to_proto,
)
from service.api.session_forward import SessionForwarder, forwarded, forwarded_stream
from service.api.watch import EncodedEvents, FallingBehind, write_events
from service.engine import EventHub, SessionManager

__all__ = ["SessionMethods"]

Context = grpc.aio.ServicerContext[Any, Any]

_DEFAULT_PAGE_SIZE = 50
_MAX_PAGE_SIZE = 500


def _session_id(value: str) -> str:
    return id_from_proto(value, "session_id")


class SessionMethods:
    """Mixed into the servicer; needs its session manager, hub, encoded events and the
    forwarder of calls on sessions another replica holds."""

    _sessions: SessionManager
    _forwarder: SessionForwarder
    _hub: EventHub
    _encoded_events: EncodedEvents

    @translate_errors
    async def OpenSession(
        self, request: pb.OpenSessionRequest, context: Context
    ) -> pb.OpenSessionResponse:
        opened = await self._sessions.open(open_from_proto(request), tenant=caller_tenant())
        return pb.OpenSessionResponse(sessions=[session_to_proto(r, slim=True) for r in opened])

    @translate_stream_errors
    @forwarded_stream
    async def Exec(
        self, request: pb.ExecRequest, context: Context
    ) -> AsyncIterator[pb.ExecResponse]:
        command = command_from_proto(request)
        session = await self._sessions.held(_session_id(request.session_id), caller_tenant())
        async for item in session.exec(command):
            yield exec_item_to_proto(item)

    @translate_errors
    @forwarded
    async def ReadFile(self, request: pb.ReadFileRequest, context: Context) -> pb.ReadFileResponse:
        session = await self._sessions.held(_session_id(request.session_id), caller_tenant())
        content, truncated = await session.read(request.path, request.max_bytes)
        if content is None:
            return pb.ReadFileResponse(found=False)
        return pb.ReadFileResponse(found=True, content=content, truncated=truncated)

    @translate_errors
    @forwarded
    async def WriteFile(
        self, request: pb.WriteFileRequest, context: Context
    ) -> pb.WriteFileResponse:
        session = await self._sessions.held(_session_id(request.session_id), caller_tenant())
        await session.write(request.path, request.content)
        return pb.WriteFileResponse(size=len(request.content))

    @translate_errors
    @forwarded
    async def ListFiles(
        self, request: pb.ListFilesRequest, context: Context
    ) -> pb.ListFilesResponse:
        session = await self._sessions.held(_session_id(request.session_id), caller_tenant())
        entries, truncated = await session.list_files(request.directory, request.max_entries)
        files = [pb.SessionFile(path=entry.path, size=entry.size) for entry in entries]
        return pb.ListFilesResponse(files=files, truncated=truncated)

    @translate_errors
    @forwarded
    async def VerifySession(
        self, request: pb.VerifySessionRequest, context: Context
    ) -> pb.VerifySessionResponse:
        session = await self._sessions.held(_session_id(request.session_id), caller_tenant())
        return pb.VerifySessionResponse(session=session_to_proto(await session.verify()))

    @translate_errors
    @forwarded
    async def CloseSession(
        self, request: pb.CloseSessionRequest, context: Context
    ) -> pb.CloseSessionResponse:
        rollout = await self._sessions.close(
            _session_id(request.session_id), tenant=caller_tenant()
        )
        return pb.CloseSessionResponse(session=session_to_proto(rollout))

    @translate_errors
    async def GetSession(
        self, request: pb.GetSessionRequest, context: Context
    ) -> pb.GetSessionResponse:
        rollout = await self._sessions.get(_session_id(request.session_id), tenant=caller_tenant())
        return pb.GetSessionResponse(session=session_to_proto(rollout))

    @translate_errors
    async def ListSessions(
        self, request: pb.ListSessionsRequest, context: Context
    ) -> pb.ListSessionsResponse:
        rollouts, token = await self._sessions.list_sessions(
            labels=label_filter_from_proto(request.labels),
            page_size=min(request.page_size or _DEFAULT_PAGE_SIZE, _MAX_PAGE_SIZE),
            page_token=request.page_token,
            tenant=caller_tenant(),
        )
        sessions = [session_to_proto(rollout, slim=True) for rollout in rollouts]
        return pb.ListSessionsResponse(sessions=sessions, next_page_token=token)

    @translate_errors
    async def WatchSession(  # writes its bytes itself (handlers.py)
        self, request: pb.WatchSessionRequest, context: Context
    ) -> None:
        """Writes WatchRolloutResponse bytes, which are WatchSessionResponse's too (the same
        one field), encoded once for every watcher of the rollout record."""
        session_id = _session_id(request.session_id)
        after_seq = after_seq_from_proto(request.after_seq)
        await self._sessions.get(session_id, tenant=caller_tenant())
        behind = FallingBehind(self._sessions.settings.watch_backlog_events)
        events = self._hub.watch(session_id, after_seq, behind.backlog)
        await write_events(context, events, self._encoded_events, behind)
