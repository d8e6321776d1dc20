"""Python client of the rollout-service gRPC API.

    from rollout_client import RolloutClient, reward_of, status_name

    with RolloutClient("127.0.0.1:50051") as client:
        rollout = client.run({
            "task": {"instruction": "copy a.txt to b.txt", "setup": ["echo hi > a.txt"],
                     "verify": ["test -f b.txt"]},
            "agent": {"name": "command", "command": "cp a.txt b.txt"},
        })
        print(status_name(rollout.status), reward_of(rollout))   # SUCCEEDED 1.0

With no target, a client uses $ROLLOUT_TARGET, else 127.0.0.1:50051 (`default_target`).
`AsyncRolloutClient` has the same methods for asyncio. For a server with authentication or
TLS, pass `token=` (or set ROLLOUT_TOKEN; `read_token_file` reads one kept in a file) and
`credentials=tls_credentials(...)` (PEM paths as str or Path, or PEM bytes). A mapping spec
may hold raw bytes (`task.files`, `harbor_task.archive`) or base64 strings. The messages are
the generated `rollout.v1.rollout_pb2` classes; errors are drawn in `rollout_client.errors`,
and `why_unreachable` says in one line why a server answered UNAVAILABLE.

Importing it sets GRPC_VERBOSITY to ERROR when it is not set (`rollout_client._quiet_grpc`).
"""

# First, before any module that imports grpc (its name sorts first).
from rollout_client import _quiet_grpc  # noqa: F401
from rollout_client.aio import AsyncRolloutClient
from rollout_client.client import RolloutClient
from rollout_client.connection import default_target, read_token_file, tls_credentials
from rollout_client.errors import (
    CallCancelledError,
    DeadlineExceededError,
    FieldViolation,
    InvalidArgumentError,
    NotFoundError,
    ResourceExhaustedError,
    RolloutError,
    SpecError,
    StatusError,
    UnauthenticatedError,
    UnavailableError,
)
from rollout_client.messages import (
    DEFAULT_MAX_MESSAGE_BYTES,
    DEFAULT_TARGET,
    SpecLike,
    StatusLike,
    ViewLike,
    parse_status,
    parse_view,
    to_spec,
)
from rollout_client.results import ExecOutcome, reward_of, session_status_name, status_name
from rollout_client.unreachable import why_unreachable

__all__ = [
    "DEFAULT_MAX_MESSAGE_BYTES",
    "DEFAULT_TARGET",
    "AsyncRolloutClient",
    "CallCancelledError",
    "DeadlineExceededError",
    "ExecOutcome",
    "FieldViolation",
    "InvalidArgumentError",
    "NotFoundError",
    "ResourceExhaustedError",
    "RolloutClient",
    "RolloutError",
    "SpecError",
    "SpecLike",
    "StatusError",
    "StatusLike",
    "UnauthenticatedError",
    "UnavailableError",
    "ViewLike",
    "default_target",
    "parse_status",
    "parse_view",
    "read_token_file",
    "reward_of",
    "session_status_name",
    "status_name",
    "tls_credentials",
    "to_spec",
    "why_unreachable",
]
