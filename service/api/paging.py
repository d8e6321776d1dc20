"""ListRollouts pages sized in bytes: a page fits in one response and always advances.

A page holds at most `page_size` rollouts and at most the byte budget of them, measured as
they are encoded in the response, whichever ends it first. A rollout too large for any page
still gets one of its own, alone: it cannot be split, and skipping it would hide it.
"""

from __future__ import annotations

from rollout.v1 import rollout_pb2 as pb

from service.api.convert import rollout_to_proto
from service.models import Rollout

__all__ = ["RolloutPageBuilder"]

_RESPONSE_RESERVE_BYTES = 4096
"""Kept out of the budget for next_page_token and the response's own framing."""


class RolloutPageBuilder:
    """Converts rollouts for one ListRolloutsResponse while they fit (see `TakeRollout`)."""

    def __init__(self, *, limit_bytes: int, slim: bool) -> None:
        self._budget_bytes = limit_bytes - _RESPONSE_RESERVE_BYTES
        self._slim = slim
        self._used_bytes = 0
        self._messages: list[pb.Rollout] = []

    def take(self, rollout: Rollout) -> bool:
        """Add `rollout` if it fits in what is left of the budget; the first always fits."""
        message = rollout_to_proto(rollout, slim=self._slim)
        size = _repeated_field_bytes(message.ByteSize())
        if self._messages and self._used_bytes + size > self._budget_bytes:
            return False
        self._messages.append(message)
        self._used_bytes += size
        return True

    def response(self, next_page_token: str) -> pb.ListRolloutsResponse:
        return pb.ListRolloutsResponse(rollouts=self._messages, next_page_token=next_page_token)


def _repeated_field_bytes(message_bytes: int) -> int:
    """An element of `rollouts` on the wire: a one-byte tag, a varint length, the message."""
    return 1 + max(1, (message_bytes.bit_length() + 6) // 7) + message_bytes
