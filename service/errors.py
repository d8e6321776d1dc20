"""The service's exception hierarchy.

    RolloutServiceError
    ├── SpecError            bad input; INVALID_ARGUMENT with one violation per field
    ├── NotFoundError        NOT_FOUND
    ├── SessionStateError    FAILED_PRECONDITION: the session is not READY (ended, verifying,
    │   │                    or held by another server)
    │   └── SessionElsewhereError  another live server holds it (the API forwards the call)
    ├── RequestConflictError ALREADY_EXISTS: the request_id names a rollout of another spec
    ├── CapacityError        RESOURCE_EXHAUSTED: running and queue slots are full, or a
    │                        tenant's standing versions and pauses are at their limit
    ├── ShuttingDownError    UNAVAILABLE: the server is draining
    ├── ConfigError          a server setting is unusable: the server does not start
    ├── ImageError           an image could not be made, imported or found (names image and step)
    ├── DialectRequestError  a model call the proxy cannot translate (400 naming the field)
    └── RolloutFailure       raised inside a rollout; recorded on the result, never an RPC error
        ├── SandboxError     infrastructure: the sandbox could not be created, or died (SANDBOX)
        ├── AgentError       the agent could not be prepared or run (AGENT)
        ├── AgentInstallError  the agent could not be installed or found (AGENT_INSTALL)
        ├── UpstreamError    every model call failed upstream (UPSTREAM_LLM)
        └── VerifierError    no reward could be computed (VERIFIER)

    MissingDependencyError   (a RuntimeError) a backend's or harness's optional dependency is
                             not installed: says what to install (`service.registry`)

Lower-layer errors (bwrap, e2b, httpx, sqlite) are translated into these once, at the
module that calls the lower layer, with `raise ... from exc`. The gRPC status mapping
lives in one place: `service.api.errors`.
"""

from __future__ import annotations

from dataclasses import dataclass

from service.models import ErrorKind

__all__ = [
    "AgentError",
    "AgentInstallError",
    "CapacityError",
    "ConfigError",
    "DialectRequestError",
    "FieldViolation",
    "ImageError",
    "MissingDependencyError",
    "NotFoundError",
    "RequestConflictError",
    "RolloutFailure",
    "RolloutServiceError",
    "SandboxError",
    "SessionElsewhereError",
    "SessionStateError",
    "ShuttingDownError",
    "SpecError",
    "UpstreamError",
    "VerifierError",
    "excerpt",
    "first_of",
]

_EXCERPT_CHARS = 48


def excerpt(value: str, limit: int = _EXCERPT_CHARS) -> str:
    """`value` quoted for an error message, cut to `limit` characters: input is never echoed
    whole, so one huge or hostile field cannot blow up a status, a log line or a stored error."""
    if len(value) <= limit:
        return repr(value)
    return f"{value[:limit]!r}... ({len(value)} chars)"


def first_of(items: list[str], shown: int, separator: str = ", ") -> str:
    """The first `shown` of `items` joined by `separator`, and how many more there are: a
    message names a few of a long list, never all of it."""
    more = len(items) - shown
    return separator.join(items[:shown]) + (f" and {more} more" if more > 0 else "")


class MissingDependencyError(RuntimeError):
    """An implementation's optional dependency is not installed. Raised where the dependency
    is looked for (the registry, a backend, a harness): it lives here, below all of them."""


class RolloutServiceError(Exception):
    """Base of every error this service raises on purpose."""


@dataclass(frozen=True)
class FieldViolation:
    """One offending field, named by its proto path (e.g. "spec.task.instruction")."""

    field: str
    description: str


class SpecError(RolloutServiceError):
    """The request is invalid; carries every offending field."""

    def __init__(self, violations: list[FieldViolation]) -> None:
        self.violations = violations
        super().__init__("; ".join(f"{v.field}: {v.description}" for v in violations))


class NotFoundError(RolloutServiceError):
    """No rollout with that id."""


class SessionStateError(RolloutServiceError):
    """A call a session cannot take in its state: it ended, is being verified or closed, or
    another server holds it."""


class SessionElsewhereError(SessionStateError):
    """A live session another server sharing the store holds: `instance` names it, `address`
    is where its API is reached ('' when it named none)."""

    def __init__(self, message: str, *, instance: str, address: str) -> None:
        super().__init__(message)
        self.instance = instance
        self.address = address


class RequestConflictError(RolloutServiceError):
    """The spec's request_id already names a rollout made from a different spec."""

    def __init__(self, violation: FieldViolation) -> None:
        self.violations = [violation]
        super().__init__(f"{violation.field}: {violation.description}")


class CapacityError(RolloutServiceError):
    """Every running and queued slot is taken, or a caller holds all it may (names the limit)."""


class ShuttingDownError(RolloutServiceError):
    """The server is shutting down and admits no new rollouts."""


class ConfigError(RolloutServiceError):
    """A server setting is unusable (names it); raised before the server serves anything."""


class DialectRequestError(RolloutServiceError):
    """An agent's Responses or Messages call the proxy cannot translate to chat completions;
    answered 400 in the agent's dialect, naming the field (e.g. `messages[2].content`)."""

    def __init__(self, field: str, message: str) -> None:
        self.field = field
        super().__init__(f"{field}: {message}")


class ImageError(RolloutServiceError):
    """An image could not be built, imported, unpacked or found; names the image and the step."""

    def __init__(self, image: str, step: str, message: str) -> None:
        self.image = image
        self.step = step
        self.detail = message
        super().__init__(f"image {image!r}, {step}: {message}")


class RolloutFailure(RolloutServiceError):
    """A failure inside a rollout, carrying the kind that lands on its result."""

    kind: ErrorKind = ErrorKind.INTERNAL

    def __init__(self, message: str, *, kind: ErrorKind | None = None) -> None:
        super().__init__(message)
        if kind is not None:
            self.kind = kind


class SandboxError(RolloutFailure):
    """The sandbox could not be created, or stopped working. Retryable."""

    kind = ErrorKind.SANDBOX


class AgentError(RolloutFailure):
    """The agent could not be prepared or run."""

    kind = ErrorKind.AGENT


class AgentInstallError(RolloutFailure):
    """The agent's program could not be installed or found (npm unreachable, say). Retryable:
    infrastructure, never the policy's doing, so a trainer must not score it."""

    kind = ErrorKind.AGENT_INSTALL


class UpstreamError(RolloutFailure):
    """The caller's LLM endpoint failed every call. Retryable."""

    kind = ErrorKind.UPSTREAM_LLM


class VerifierError(RolloutFailure):
    """The verifier ran but no reward could be computed from what it wrote."""

    kind = ErrorKind.VERIFIER
