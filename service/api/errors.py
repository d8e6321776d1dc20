"""The one place where service errors become gRPC status codes (google.rpc rich status)."""

from __future__ import annotations

import functools
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, NoReturn, TypeVar

import grpc
from google.protobuf import any_pb2, duration_pb2
from google.rpc import code_pb2, error_details_pb2, status_pb2
from grpc_status import rpc_status

from service.errors import (
    CapacityError,
    FieldViolation,
    NotFoundError,
    RequestConflictError,
    RolloutServiceError,
    ShuttingDownError,
    SpecError,
)

__all__ = ["abort", "invalid_argument", "translate_errors", "translate_stream_errors"]

log = logging.getLogger(__name__)

_CODES: dict[type[RolloutServiceError], int] = {
    SpecError: code_pb2.INVALID_ARGUMENT,
    NotFoundError: code_pb2.NOT_FOUND,
    RequestConflictError: code_pb2.ALREADY_EXISTS,
    CapacityError: code_pb2.RESOURCE_EXHAUSTED,
    ShuttingDownError: code_pb2.UNAVAILABLE,
}

R = TypeVar("R")


def _status(exc: RolloutServiceError) -> status_pb2.Status:
    code = next((c for kind, c in _CODES.items() if isinstance(exc, kind)), code_pb2.INTERNAL)
    status = status_pb2.Status(code=code, message=str(exc))
    detail = any_pb2.Any()
    if isinstance(exc, SpecError | RequestConflictError):
        detail.Pack(
            error_details_pb2.BadRequest(
                field_violations=[
                    error_details_pb2.BadRequest.FieldViolation(
                        field=v.field, description=v.description
                    )
                    for v in exc.violations
                ]
            )
        )
        status.details.append(detail)
    elif isinstance(exc, CapacityError):
        detail.Pack(error_details_pb2.RetryInfo(retry_delay=duration_pb2.Duration(seconds=1)))
        status.details.append(detail)
    return status


async def abort(context: grpc.aio.ServicerContext[Any, Any], exc: RolloutServiceError) -> NoReturn:
    await context.abort_with_status(rpc_status.to_status(_status(exc)))
    raise AssertionError("abort_with_status returned")  # pragma: no cover


def invalid_argument(field: str, description: str) -> SpecError:
    return SpecError([FieldViolation(field, description)])


def translate_errors(
    method: Callable[..., Awaitable[R]],
) -> Callable[..., Awaitable[R]]:
    """Map RolloutServiceError raised by a unary handler to its status code."""

    @functools.wraps(method)
    async def wrapper(self: Any, request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> R:
        try:
            return await method(self, request, context)
        except RolloutServiceError as exc:
            await abort(context, exc)

    return wrapper


def translate_stream_errors(
    method: Callable[..., AsyncIterator[R]],
) -> Callable[..., AsyncIterator[R]]:
    """Map RolloutServiceError raised by a server-streaming handler to its status code."""

    @functools.wraps(method)
    async def wrapper(
        self: Any, request: Any, context: grpc.aio.ServicerContext[Any, Any]
    ) -> AsyncIterator[R]:
        try:
            async for item in method(self, request, context):
                yield item
        except RolloutServiceError as exc:
            await abort(context, exc)

    return wrapper
