"""Errors raised by the rollout client.

    RolloutError                     base of every error this package raises
    ├── SpecError                    a spec that is not valid: found by the client (a mapping
    │                                or file that is not a RolloutSpec; no call is made), or
    │                                by the server (InvalidArgumentError, below)
    └── StatusError                  the call ended with a non-OK gRPC status (.code, .details)
        ├── InvalidArgumentError     INVALID_ARGUMENT, also a SpecError: the server rejected
        │                            the request; .field_violations name each wrong field
        ├── NotFoundError            NOT_FOUND: no rollout with that id
        ├── ResourceExhaustedError   RESOURCE_EXHAUSTED: the server is at capacity; retry after
        │                            .retry_delay_s
        ├── UnavailableError         UNAVAILABLE: the server is unreachable or shutting down
        ├── UnauthenticatedError     UNAUTHENTICATED: no bearer token, or not one it accepts
        ├── DeadlineExceededError    DEADLINE_EXCEEDED: the call's timeout passed
        └── CallCancelledError       CANCELLED: the call, and so its rollout, was cancelled

A rollout that fails is not an error here: it is a Rollout with status FAILED whose
`result.error.kind` tells "retry" (infrastructure) from "score" (the task failed).

`grpc.RpcError` is translated in one place, `translate_errors`, shared by the sync and the
asyncio client; the original error stays reachable as `__cause__`.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import cast

import grpc
from google.rpc import error_details_pb2, status_pb2
from grpc_status import rpc_status

__all__ = [
    "CallCancelledError",
    "DeadlineExceededError",
    "FieldViolation",
    "InvalidArgumentError",
    "NotFoundError",
    "ResourceExhaustedError",
    "RolloutError",
    "SpecError",
    "StatusError",
    "UnauthenticatedError",
    "UnavailableError",
    "from_rpc_error",
    "translate_errors",
]


class RolloutError(Exception):
    """Base of every error the rollout client raises."""


@dataclass(frozen=True)
class FieldViolation:
    """One offending request field, named by its path (e.g. "spec.task.instruction")."""

    field: str
    description: str

    def __str__(self) -> str:
        return f"{self.field}: {self.description}"


class SpecError(RolloutError, ValueError):
    """The spec is not valid. Raised by the client (unknown field, wrong type, bad file: the
    message names the field) or, as InvalidArgumentError, by the server, whose
    `field_violations` name each wrong field."""

    field_violations: tuple[FieldViolation, ...] = ()


class StatusError(RolloutError):
    """The server (or the channel) ended the call with a non-OK status.

    `field_violations` come from a google.rpc.BadRequest detail, `retry_delay_s` from a
    google.rpc.RetryInfo detail (None when the server sent none).
    """

    def __init__(
        self,
        code: grpc.StatusCode,
        details: str,
        field_violations: tuple[FieldViolation, ...] = (),
        retry_delay_s: float | None = None,
    ) -> None:
        self.code = code
        self.details = details
        self.field_violations = field_violations
        self.retry_delay_s = retry_delay_s
        message = f"{code.name}: {details}" if details else code.name
        unmentioned = [str(v) for v in field_violations if str(v) not in details]
        if unmentioned:
            message += " (" + "; ".join(unmentioned) + ")"
        super().__init__(message)


class InvalidArgumentError(StatusError, SpecError):
    """The request was rejected; `field_violations` names every wrong field.

    A SpecError too, so `except SpecError` catches a bad spec whoever found it.
    """


class NotFoundError(StatusError):
    """No rollout with that id."""


class ResourceExhaustedError(StatusError):
    """The server's running and queued slots are all taken; retry later."""


class UnavailableError(StatusError):
    """The server cannot be reached, or is shutting down."""


class UnauthenticatedError(StatusError):
    """The server wants a bearer token (`token=`, ROLLOUT_TOKEN) and got none it accepts."""


class DeadlineExceededError(StatusError):
    """The call's timeout passed before the server answered."""


class CallCancelledError(StatusError):
    """The call was cancelled (by the caller, or by the server shutting down)."""


_ERROR_BY_CODE: dict[grpc.StatusCode, type[StatusError]] = {
    grpc.StatusCode.INVALID_ARGUMENT: InvalidArgumentError,
    grpc.StatusCode.NOT_FOUND: NotFoundError,
    grpc.StatusCode.RESOURCE_EXHAUSTED: ResourceExhaustedError,
    grpc.StatusCode.UNAVAILABLE: UnavailableError,
    grpc.StatusCode.UNAUTHENTICATED: UnauthenticatedError,
    grpc.StatusCode.DEADLINE_EXCEEDED: DeadlineExceededError,
    grpc.StatusCode.CANCELLED: CallCancelledError,
}


def from_rpc_error(exc: grpc.RpcError) -> StatusError:
    """The client error for a failed call, with what its rich status details say."""
    # Errors of sync calls are grpc.Call objects; aio errors are not, but carry the same
    # code/details/trailing_metadata methods, which is all that is read here.
    if not isinstance(exc, grpc.Call | grpc.aio.AioRpcError):
        return StatusError(grpc.StatusCode.UNKNOWN, str(exc))
    code = exc.code()
    error_class = _ERROR_BY_CODE.get(code, StatusError)
    return error_class(code, exc.details() or "", *_rich_details(cast(grpc.Call, exc)))


def _rich_details(call: grpc.Call) -> tuple[tuple[FieldViolation, ...], float | None]:
    """The field violations (BadRequest) and retry delay (RetryInfo) of the call's status."""
    try:
        status: status_pb2.Status | None = rpc_status.from_call(call)
    except ValueError:
        # The rich status disagrees with the call's own code or message: the code and
        # message are still right, only the details are unusable.
        return (), None
    violations: list[FieldViolation] = []
    retry_delay_s: float | None = None
    for detail in status.details if status is not None else ():
        bad_request = error_details_pb2.BadRequest()
        retry_info = error_details_pb2.RetryInfo()
        if detail.Unpack(bad_request):
            violations.extend(
                FieldViolation(v.field, v.description) for v in bad_request.field_violations
            )
        elif detail.Unpack(retry_info):
            retry_delay_s = retry_info.retry_delay.ToTimedelta().total_seconds()
    return tuple(violations), retry_delay_s


@contextmanager
def translate_errors() -> Iterator[None]:
    """Re-raise any `grpc.RpcError` inside the block as a `StatusError` subclass."""
    try:
        yield
    except grpc.RpcError as exc:
        raise from_rpc_error(exc) from exc
