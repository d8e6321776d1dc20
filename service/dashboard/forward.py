"""Connect endpoints of the dashboard, each forwarding to the same method of the gRPC API.

The endpoints are made from the proto's service descriptor (no generated Connect code to keep
in step): every method of READ_METHODS, unary or server-streaming, becomes a call on a gRPC
channel with the caller's `authorization` header as metadata and the caller's Connect timeout
as deadline. A gRPC status comes back as the Connect error of the same code and message, with
the same google.rpc details (the BadRequest that names a bad field, RetryInfo).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import Any, NoReturn

import grpc
from connectrpc.code import Code
from connectrpc.errors import ConnectError, ErrorDetail
from connectrpc.method import IdempotencyLevel, MethodInfo
from connectrpc.request import RequestContext
from connectrpc.server import Endpoint
from google.protobuf import any_pb2, message_factory
from google.protobuf.descriptor import MethodDescriptor
from google.protobuf.message import Message
from grpc_status import rpc_status
from protobuf.wkt import Any as AnyDetail
from rollout.v1 import rollout_pb2 as pb

__all__ = ["READ_METHODS", "SERVICE_PATH", "forwarding_endpoints", "read_requests"]

_SERVICE = pb.DESCRIPTOR.services_by_name["RolloutService"]
SERVICE_PATH = f"/{_SERVICE.full_name}/"
"""The URL path prefix of every Connect call."""

READ_METHODS = (
    "ListRollouts",
    "GetRollout",
    "WatchRollout",
    "ListGroups",
    "GetGroup",
    "WatchGroup",
)
"""What the dashboard may call: it shows rollouts and groups, it never starts or cancels one."""

Context = RequestContext[Any, Any]


def forwarding_endpoints(channel: grpc.aio.Channel) -> Mapping[str, Any]:
    """URL path -> Connect endpoint, for every method of READ_METHODS, calling `channel`."""
    endpoints: dict[str, Any] = {}
    for name in READ_METHODS:
        method = _SERVICE.methods_by_name[name]
        path = f"{SERVICE_PATH}{name}"
        info = _method_info(method)
        output = info.output
        if method.server_streaming:
            call = channel.unary_stream(
                path,
                request_serializer=_serialize,
                response_deserializer=output.FromString,
            )
            endpoints[path] = Endpoint.server_stream(info, _streaming(call))
        else:
            unary = channel.unary_unary(
                path,
                request_serializer=_serialize,
                response_deserializer=output.FromString,
            )
            endpoints[path] = Endpoint.unary(info, _unary(unary))
    return endpoints


def read_requests() -> Mapping[str, tuple[type[Message], bool]]:
    """URL path -> the request message class of that method of READ_METHODS, and whether
    the method streams its responses."""
    requests: dict[str, tuple[type[Message], bool]] = {}
    for name in READ_METHODS:
        method = _SERVICE.methods_by_name[name]
        request_class = message_factory.GetMessageClass(method.input_type)
        requests[f"{SERVICE_PATH}{name}"] = (request_class, method.server_streaming)
    return requests


def _method_info(method: MethodDescriptor) -> MethodInfo[Any, Any]:
    return MethodInfo(
        name=method.name,
        service_name=_SERVICE.full_name,
        input=message_factory.GetMessageClass(method.input_type),
        output=message_factory.GetMessageClass(method.output_type),
        idempotency_level=IdempotencyLevel.NO_SIDE_EFFECTS,
    )


def _serialize(message: Message) -> bytes:
    return message.SerializeToString()


def _call_options(context: Context) -> dict[str, Any]:
    """The caller's bearer token as metadata (the API's interceptor judges it) and deadline."""
    authorization = context.request_headers.getall("authorization")
    timeout_ms = context.timeout_ms
    return {
        "metadata": tuple(("authorization", value) for value in authorization),
        "timeout": None if timeout_ms is None else timeout_ms / 1000,
    }


def _unary(
    call: grpc.aio.UnaryUnaryMultiCallable[Any, Any],
) -> Callable[[Message, Context], Awaitable[Message]]:
    async def forward(request: Message, context: Context) -> Message:
        try:
            response: Message = await call(request, **_call_options(context))
        except grpc.aio.AioRpcError as exc:
            raise _connect_error(exc) from exc
        except asyncio.CancelledError:
            _raise_unless_closing()
        return response

    return forward


def _streaming(
    call: grpc.aio.UnaryStreamMultiCallable[Any, Any],
) -> Callable[[Message, Context], AsyncIterator[Message]]:
    async def forward(request: Message, context: Context) -> AsyncIterator[Message]:
        stream = call(request, **_call_options(context))
        try:
            async for response in stream:
                yield response
        except grpc.aio.AioRpcError as exc:
            raise _connect_error(exc) from exc
        except asyncio.CancelledError:
            _raise_unless_closing()
        finally:
            stream.cancel()  # the page went away: the API's watch ends too

    return forward


def _raise_unless_closing() -> NoReturn:
    """The channel closing (the server stops) cancels its calls, not the task that made them:
    that is UNAVAILABLE to the page. A cancelled task (the page went away) stays cancelled."""
    task = asyncio.current_task()
    if task is not None and task.cancelling():
        raise asyncio.CancelledError
    raise ConnectError(Code.UNAVAILABLE, "the server is shutting down")


def _connect_error(exc: grpc.aio.AioRpcError) -> ConnectError:
    """The Connect error of the gRPC status: same code (CANCELLED is spelled CANCELED), message
    and details (each google.protobuf.Any passed on as it came, type and bytes)."""
    status = exc.code()
    code = Code.CANCELED if status is grpc.StatusCode.CANCELLED else Code[status.name]
    rich = rpc_status.from_call(exc)
    details = [] if rich is None else [_detail(detail) for detail in rich.details]
    return ConnectError(code, exc.details() or "", details)


def _detail(detail: any_pb2.Any) -> ErrorDetail:
    """A google.protobuf Any as connectrpc's own Any (its protobuf runtime is another)."""
    return ErrorDetail(AnyDetail(type_url=detail.type_url, value=detail.value))
