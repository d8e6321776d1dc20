"""Registers the servicer with gRPC, decoding requests so that bad bytes are a bad request.

The generated `add_RolloutServiceServicer_to_server` decodes with `FromString`: a message
that does not decode (corrupt wire format, a string field with invalid UTF-8) raises inside
gRPC and the caller gets UNKNOWN with the parser's text. Here the decoder never raises: it
hands the handler an `Undecodable`, which the handler answers with INVALID_ARGUMENT naming
the request.

A server-streaming method written as a coroutine (not an async generator) writes responses
it has serialized itself with `context.write` (WatchRollout: one serialization per event for
all its watchers), so its responses pass through unchanged.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any, NoReturn

import grpc
from google.protobuf import message_factory
from google.protobuf.descriptor import MethodDescriptor
from google.protobuf.message import DecodeError, Message
from rollout.v1 import rollout_pb2 as pb

from service.api.errors import abort, invalid_argument
from service.telemetry import Metrics

__all__ = ["Undecodable", "add_servicer"]

_SERVICE = pb.DESCRIPTOR.services_by_name["RolloutService"]

Context = grpc.aio.ServicerContext[Any, Any]


@dataclass(frozen=True)
class Undecodable:
    """A request whose bytes are not a valid message of the method's input type."""

    type_name: str
    reason: str


def _decoder(message_type: type[Message]) -> Callable[[bytes], Message | Undecodable]:
    def decode(data: bytes) -> Message | Undecodable:
        try:
            return message_type.FromString(data)
        except DecodeError as exc:
            reason = str(exc).rpartition(": ")[2]  # the parser's words, without the type again
            return Undecodable(message_type.DESCRIPTOR.full_name, reason)

    return decode


async def _refuse(context: Context, request: Undecodable) -> NoReturn:
    description = f"is not a valid {request.type_name}: {request.reason}"
    await abort(context, invalid_argument("request", description))


def _unary(method: Callable[[Any, Context], Awaitable[Any]]) -> Callable[..., Awaitable[Any]]:
    async def handle(request: Message | Undecodable, context: Context) -> Any:
        if isinstance(request, Undecodable):
            await _refuse(context, request)
        return await method(request, context)

    return handle


def _streaming(
    method: Callable[[Any, Context], AsyncIterator[Any]], metrics: Metrics, name: str
) -> Callable[..., Any]:
    async def handle(request: Message | Undecodable, context: Context) -> AsyncIterator[Any]:
        if isinstance(request, Undecodable):
            await _refuse(context, request)
        with metrics.watching(name):  # every server stream is a watch
            async for item in method(request, context):
                yield item

    return handle


def _writing(
    method: Callable[[Any, Context], Awaitable[None]], metrics: Metrics, name: str
) -> Callable[..., Any]:
    async def handle(request: Message | Undecodable, context: Context) -> AsyncIterator[bytes]:
        if isinstance(request, Undecodable):
            await _refuse(context, request)
        with metrics.watching(name):
            await method(request, context)
        return
        yield b""  # an async generator all the same: interceptors (tracing) iterate the handler

    return handle


def _as_written(data: bytes) -> bytes:
    return data


def _handler(
    servicer: object, method: MethodDescriptor, metrics: Metrics
) -> grpc.RpcMethodHandler[Any, Any]:
    behaviour = getattr(servicer, method.name)
    decode = _decoder(message_factory.GetMessageClass(method.input_type))
    # Deterministic: map entries (labels, metrics) in key order, so every replica writes the
    # same message as the same bytes.
    encode = functools.partial(
        message_factory.GetMessageClass(method.output_type).SerializeToString, deterministic=True
    )
    if method.server_streaming and not inspect.isasyncgenfunction(behaviour):
        return grpc.unary_stream_rpc_method_handler(
            _writing(behaviour, metrics, method.name),
            request_deserializer=decode,
            response_serializer=_as_written,
        )
    if method.server_streaming:
        return grpc.unary_stream_rpc_method_handler(
            _streaming(behaviour, metrics, method.name),
            request_deserializer=decode,
            response_serializer=encode,
        )
    return grpc.unary_unary_rpc_method_handler(
        _unary(behaviour), request_deserializer=decode, response_serializer=encode
    )


def add_servicer(servicer: object, server: grpc.aio.Server, metrics: Metrics) -> None:
    """Serve `servicer`'s methods of rollout.v1.RolloutService on `server`, counting open
    watch streams on `metrics`."""
    handlers = {method.name: _handler(servicer, method, metrics) for method in _SERVICE.methods}
    server.add_generic_rpc_handlers(
        (grpc.method_handlers_generic_handler(_SERVICE.full_name, handlers),)
    )
    server.add_registered_method_handlers(_SERVICE.full_name, handlers)
