"""The one place where service errors become gRPC status codes (google.rpc rich status).

A status travels in the response's trailers, which clients cap (16 KiB is common): the
message and the BadRequest details are cut to a fixed budget here, whatever the error says,
so a request made of huge or many bad fields still gets a readable INVALID_ARGUMENT. An
error this service did not raise on purpose is logged and answered INTERNAL with no text of
its own (gRPC would answer UNKNOWN and echo the exception, input and all).
"""

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
    SessionStateError,
    ShuttingDownError,
    SpecError,
)

__all__ = ["abort", "invalid_argument", "translate_errors", "translate_stream_errors"]

log = logging.getLogger(__name__)

_CODES: dict[type[RolloutServiceError], int] = {
    SpecError: code_pb2.INVALID_ARGUMENT,
    NotFoundError: code_pb2.NOT_FOUND,
    SessionStateError: code_pb2.FAILED_PRECONDITION,
    RequestConflictError: code_pb2.ALREADY_EXISTS,
    CapacityError: code_pb2.RESOURCE_EXHAUSTED,
    ShuttingDownError: code_pb2.UNAVAILABLE,
}

R = TypeVar("R")

MESSAGE_MAX_BYTES = 1024
"""UTF-8 bytes of a status message (percent-encoded on the wire: at most three times this)."""
DETAILS_MAX_BYTES = 6 * 1024
"""Serialized bytes of the BadRequest violations (base64 on the wire: four thirds of this)."""
_FIELD_MAX_BYTES = 256
_DESCRIPTION_MAX_BYTES = 512


def _clip(text: str, max_bytes: int) -> str:
    data = text.encode()
    if len(data) <= max_bytes:
        return text
    return data[: max_bytes - 3].decode(errors="ignore") + "..."


def _bad_request(violations: list[FieldViolation]) -> tuple[error_details_pb2.BadRequest, int]:
    """The violations that fit the details budget, and how many were left out."""
    bad_request = error_details_pb2.BadRequest()
    for shown, violation in enumerate(violations):
        entry = error_details_pb2.BadRequest.FieldViolation(
            field=_clip(violation.field, _FIELD_MAX_BYTES),
            description=_clip(violation.description, _DESCRIPTION_MAX_BYTES),
        )
        if bad_request.ByteSize() + entry.ByteSize() + 8 > DETAILS_MAX_BYTES:
            return bad_request, len(violations) - shown
        bad_request.field_violations.append(entry)
    return bad_request, 0


def _status(exc: RolloutServiceError) -> status_pb2.Status:
    code = next((c for kind, c in _CODES.items() if isinstance(exc, kind)), code_pb2.INTERNAL)
    status = status_pb2.Status(code=code, message=_clip(str(exc), MESSAGE_MAX_BYTES))
    detail = any_pb2.Any()
    if isinstance(exc, SpecError | RequestConflictError):
        bad_request, left_out = _bad_request(exc.violations)
        if left_out:
            note = f" ({left_out} more violations not shown)"
            status.message = _clip(str(exc), MESSAGE_MAX_BYTES - len(note)) + note
        detail.Pack(bad_request)
        status.details.append(detail)
    elif isinstance(exc, CapacityError):
        detail.Pack(error_details_pb2.RetryInfo(retry_delay=duration_pb2.Duration(seconds=1)))
        status.details.append(detail)
    return status


async def abort(context: grpc.aio.ServicerContext[Any, Any], exc: RolloutServiceError) -> NoReturn:
    await context.abort_with_status(rpc_status.to_status(_status(exc)))
    raise AssertionError("abort_with_status returned")  # pragma: no cover


async def _internal(
    context: grpc.aio.ServicerContext[Any, Any], method: str, exc: Exception
) -> NoReturn:
    if isinstance(exc, grpc.aio.AbortError):
        raise exc  # a status already chosen: let gRPC send it
    log.error("%s failed", method, exc_info=exc)
    await abort(context, RolloutServiceError(f"internal error in {method}; see the server log"))


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
        except Exception as exc:  # noqa: BLE001 - answered INTERNAL and logged, never swallowed
            await _internal(context, method.__name__, exc)

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
        except Exception as exc:  # noqa: BLE001 - answered INTERNAL and logged, never swallowed
            await _internal(context, method.__name__, exc)

    return wrapper
