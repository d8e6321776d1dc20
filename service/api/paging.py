"""Responses sized in bytes: ListRollouts and ListGroups pages, and one rollout (GetRollout,
RunRollout).

A page holds at most `page_size` rollouts and at most the byte budget of them, measured as
they are encoded in the response, whichever ends it first. A rollout too large for any page
still gets one of its own, alone: skipping it would hide it.

Token data is not bounded by the proxy's record budget (bodies are; `capture.record`), and
a long rollout's can outgrow the message limit: a turn costs ~2.9 bytes per prompt id,
~29 bytes per completion token with one top logprob and ~277 with twenty, so 200 turns of
a 32k context (18 MiB of prompt ids) and 1,200 completion tokens each at twenty top
logprobs (63 MiB) pass 64 MiB with no body at all. Such a rollout, alone in a response, is
sent without its turns: `result.turn_count` still counts them, and a client that finds
fewer turns than that reads them from WatchRollout, where each turn is its own event.
"""

from __future__ import annotations

from typing import Generic, TypeVar

from google.protobuf.message import Message
from rollout.v1 import rollout_pb2 as pb

from service.api.convert import rollout_to_proto
from service.api.group_convert import group_to_proto
from service.models import Group, Rollout

__all__ = ["GroupPageBuilder", "RolloutPageBuilder"]

M = TypeVar("M", bound=Message)

_RESPONSE_RESERVE_BYTES = 4096
"""Kept out of the budget for next_page_token and the response's own framing."""


class _Page(Generic[M]):
    """Messages for one response's repeated field, while they fit in `limit_bytes`."""

    def __init__(self, limit_bytes: int) -> None:
        self.budget_bytes = limit_bytes - _RESPONSE_RESERVE_BYTES
        self.messages: list[M] = []
        self._used_bytes = 0

    def add(self, message: M) -> bool:
        """Add `message` if it fits in what is left of the budget; the first always fits."""
        size = _repeated_field_bytes(message.ByteSize())
        if self.messages and self._used_bytes + size > self.budget_bytes:
            return False
        self.messages.append(message)
        self._used_bytes += size
        return True


class RolloutPageBuilder:
    """Converts rollouts for one ListRolloutsResponse while they fit (see `TakeRollout`)."""

    def __init__(self, *, limit_bytes: int, slim: bool) -> None:
        self._slim = slim
        self._page: _Page[pb.Rollout] = _Page(limit_bytes)

    def take(self, rollout: Rollout) -> bool:
        """Add `rollout` if it fits in what is left of the budget; the first always fits."""
        message = rollout_to_proto(rollout, slim=self._slim)
        if not self._page.messages:
            _drop_turns_over(message, self._page.budget_bytes)
        return self._page.add(message)

    def response(self, next_page_token: str) -> pb.ListRolloutsResponse:
        return pb.ListRolloutsResponse(
            rollouts=self._page.messages, next_page_token=next_page_token
        )

    @staticmethod
    def alone(rollout: Rollout, *, limit_bytes: int, slim: bool) -> pb.Rollout:
        """`rollout` for a response that carries it alone (GetRollout, RunRollout): whole
        when it fits in `limit_bytes`, else without its turns."""
        message = rollout_to_proto(rollout, slim=slim)
        _drop_turns_over(message, limit_bytes - _RESPONSE_RESERVE_BYTES)
        return message


class GroupPageBuilder:
    """Converts groups for one ListGroupsResponse while they fit (a group's members are small
    and never left out: a group too large for any page still gets one of its own)."""

    def __init__(self, *, limit_bytes: int) -> None:
        self._page: _Page[pb.Group] = _Page(limit_bytes)

    def take(self, group: Group) -> bool:
        """Add `group` if it fits in what is left of the budget; the first always fits."""
        return self._page.add(group_to_proto(group))

    def response(self, next_page_token: str) -> pb.ListGroupsResponse:
        return pb.ListGroupsResponse(groups=self._page.messages, next_page_token=next_page_token)


def _drop_turns_over(message: pb.Rollout, budget_bytes: int) -> None:
    """Leave out `message`'s turns if it is larger than `budget_bytes` with them."""
    if message.result.turns and message.ByteSize() > budget_bytes:
        del message.result.turns[:]


def _repeated_field_bytes(message_bytes: int) -> int:
    """An element of a response's repeated field on the wire: a one-byte tag, a varint length,
    the message."""
    return 1 + max(1, (message_bytes.bit_length() + 6) // 7) + message_bytes
