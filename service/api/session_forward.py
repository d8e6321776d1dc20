"""A session's call forwarded to the replica that holds its sandbox (docs/sessions.md).

A session lives in the memory of the server that opened it. On replicas sharing PostgreSQL,
a call that needs its sandbox (Exec, the file calls, VerifySession, CloseSession) reaching
another replica raises `SessionElsewhereError` with the holder's address (its lease row's
`address`: `Settings.advertise_address`, else its listen address), and `forwarded` sends the
very request on to it:

- with the caller's own `authorization` metadata and nothing else of it: the holder
  authenticates the caller and applies its tenancy itself, so forwarding grants nothing;
- within the caller's deadline; a caller that goes away cancels the holder's call (an Exec's
  command is killed there, as it is for a caller of the holder);
- marked `rollout-forwarded-by: <instance id>` and never forwarded again: a replica that
  gets a forwarded call for a session it does not hold answers FAILED_PRECONDITION naming
  the holder (no loops, whatever the store says meanwhile);
- the holder's answer is the caller's: its messages as they come (an Exec's chunks as the
  holder sends them), its status code, message and details.

The channel to the holder speaks TLS when this server does (the holder's certificate
checked against `tls_peer_ca_file`, else the system's roots). With client certificates
required (mTLS), this server cannot prove the caller's identity to the holder, and the call
is not forwarded.
"""

from __future__ import annotations

import functools
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, NoReturn, TypeVar

import grpc
from rollout.v1 import rollout_pb2_grpc as pb_grpc

from service.api.transport import peer_roots
from service.config import Settings
from service.errors import SessionElsewhereError

__all__ = ["FORWARDED_BY", "SessionForwarder", "forwarded", "forwarded_stream"]

FORWARDED_BY = "rollout-forwarded-by"
"""Metadata naming the replica that forwarded a call (its instance id)."""
_PASSED_ON = frozenset({"authorization"})
"""The caller's metadata the holder receives."""

Context = grpc.aio.ServicerContext[Any, Any]
R = TypeVar("R")


class SessionForwarder:
    """This server's channels to the replicas holding sessions (one per address, kept)."""

    def __init__(self, settings: Settings) -> None:
        self._instance = settings.instance_id
        self._tls = settings.tls_cert_file is not None
        self._roots = peer_roots(settings) if self._tls else None
        self._possible = settings.tls_client_ca_file is None
        self._options = [
            ("grpc.max_send_message_length", settings.max_message_bytes),
            ("grpc.max_receive_message_length", settings.max_message_bytes),
        ]
        self._stubs: dict[str, pb_grpc.RolloutServiceStub] = {}
        self._channels: list[grpc.aio.Channel] = []

    def forwards(self, error: SessionElsewhereError, context: Context) -> bool:
        """Whether this call goes on to the holder named by `error`."""
        if not (self._possible and error.address):
            return False
        return all(key != FORWARDED_BY for key, _ in context.invocation_metadata() or ())

    def call_options(self, context: Context) -> dict[str, Any]:
        passed = [(k, v) for k, v in context.invocation_metadata() or () if k in _PASSED_ON]
        return {
            "metadata": (*passed, (FORWARDED_BY, self._instance)),
            "timeout": context.time_remaining(),
        }

    def stub(self, address: str) -> pb_grpc.RolloutServiceStub:
        stub = self._stubs.get(address)
        if stub is None:
            if self._tls:
                credentials = grpc.ssl_channel_credentials(self._roots)
                channel = grpc.aio.secure_channel(address, credentials, options=self._options)
            else:
                channel = grpc.aio.insecure_channel(address, options=self._options)
            self._channels.append(channel)
            stub = self._stubs[address] = pb_grpc.RolloutServiceStub(channel)
        return stub

    async def close(self) -> None:
        channels, self._channels, self._stubs = self._channels, [], {}
        for channel in channels:
            await channel.close()


async def _relay(context: Context, error: grpc.aio.AioRpcError, holder: str) -> NoReturn:
    """The holder's status as this call's (its details in the trailers included)."""
    details = error.details() or ""
    if error.code() is grpc.StatusCode.UNAVAILABLE:
        details = f"the server holding this session ({holder}) is unavailable: {details}"
    trailers = tuple((key, value) for key, value in error.trailing_metadata() or ())
    await context.abort(error.code(), details, trailers)
    raise AssertionError("abort returned")  # pragma: no cover


def forwarded(
    method: Callable[[Any, Any, Context], Awaitable[R]],
) -> Callable[[Any, Any, Context], Awaitable[R]]:
    """A unary session handler whose call, on a session another replica holds, is answered
    by that replica (the servicer's `_forwarder`)."""

    @functools.wraps(method)
    async def wrapper(self: Any, request: Any, context: Context) -> R:
        try:
            return await method(self, request, context)
        except SessionElsewhereError as exc:
            forwarder: SessionForwarder = self._forwarder
            if not forwarder.forwards(exc, context):
                raise
            send = getattr(forwarder.stub(exc.address), method.__name__)
            try:
                response: R = await send(request, **forwarder.call_options(context))
            except grpc.aio.AioRpcError as error:
                await _relay(context, error, exc.instance)
            return response

    return wrapper


def forwarded_stream(
    method: Callable[[Any, Any, Context], AsyncIterator[R]],
) -> Callable[[Any, Any, Context], AsyncIterator[R]]:
    """`forwarded` for a server-streaming handler: the holder's messages as they come."""

    @functools.wraps(method)
    async def wrapper(self: Any, request: Any, context: Context) -> AsyncIterator[R]:
        elsewhere: SessionElsewhereError | None = None
        try:
            async for item in method(self, request, context):
                yield item
        except SessionElsewhereError as exc:  # raised before any item: nothing was sent
            forwarder: SessionForwarder = self._forwarder
            if not forwarder.forwards(exc, context):
                raise
            elsewhere = exc
        if elsewhere is None:
            return
        call = getattr(forwarder.stub(elsewhere.address), method.__name__)(
            request, **forwarder.call_options(context)
        )
        try:
            async for item in call:
                yield item
        except grpc.aio.AioRpcError as error:
            await _relay(context, error, elsewhere.instance)
        finally:
            call.cancel()  # the caller went away: the holder's call ends too

    return wrapper
