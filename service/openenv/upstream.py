"""Where the front door finds rollout-service, and the check it makes before serving.

The front door is a gRPC client like any other: `target` and `token` mean what they mean to
the `rollout` command (ROLLOUT_TARGET, ROLLOUT_TOKEN, ROLLOUT_TOKEN_FILE). It checks both
once at start, so a wrong address or token is one line at launch, not an error inside every
trainer's first tool call.
"""

from __future__ import annotations

from dataclasses import dataclass

from rollout_client import (
    RolloutClient,
    UnauthenticatedError,
    UnavailableError,
    why_unreachable,
)

__all__ = ["FrontDoorError", "RolloutTarget", "check_reachable"]


class FrontDoorError(Exception):
    """The front door cannot serve: its one line says why."""


@dataclass(frozen=True)
class RolloutTarget:
    """The rollout-service the environments call."""

    target: str
    """host:port of its gRPC API."""
    token: str | None = None
    """Bearer token sent on every call (None: none)."""


def check_reachable(upstream: RolloutTarget, timeout_s: float = 10.0) -> None:
    """Raise FrontDoorError unless the server at `upstream` answers and takes its token."""
    with RolloutClient(upstream.target, token=upstream.token or "", timeout=timeout_s) as client:
        try:
            client.list(page_size=1, view="SLIM")
        except UnauthenticatedError as exc:
            raise FrontDoorError(
                f"rollout-service at {upstream.target} refused the token "
                f"({'none given' if not upstream.token else 'wrong token'}): {exc.details}"
            ) from exc
        except UnavailableError as exc:
            raise FrontDoorError(
                f"rollout-service at {upstream.target} is unreachable: "
                + why_unreachable(exc.details, upstream.target)
            ) from exc
