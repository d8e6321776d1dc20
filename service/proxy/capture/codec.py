"""What the relay writes to the agent, per dialect: the `Codec` a call is relayed with.

The relay (`relay`) talks HTTP with the upstream and classifies failures; a codec says
how the upstream's answer feeds the turn (`add_unary`, `add_chunk`) and what the agent
gets for it (`unary_body`, `event`, `done`, `end`, the error shapes). `ChatCodec`
forwards chat completions byte for byte, as the proxy always did; the dialects'
codecs (`service.proxy.dialects`) translate, or read a native dialect.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

from service.proxy.capture.assembly import CompletionAssembler
from service.proxy.capture.failures import error_body, sse_error_event

__all__ = ["ChatCodec", "Codec"]

_DONE_EVENT = b"data: [DONE]\n\n"


class Codec(Protocol):
    """How one call's answer is read into its turn and written to the agent."""

    def add_unary(self, doc: Mapping[str, Any]) -> None:
        """Feed a whole unary response to the turn."""

    def unary_body(self, body: bytes, doc: Mapping[str, Any]) -> bytes:
        """The agent's body for the upstream's unary `body` (parsed as `doc`)."""

    def add_chunk(self, chunk: Mapping[str, Any]) -> bool:
        """Feed one stream event's data; whether it carried generated output."""

    def event(self, event: bytes, chunk: Mapping[str, Any]) -> bytes:
        """The agent's bytes for one upstream stream event (`chunk` its parsed data)."""

    def done(self, event: bytes) -> bytes:
        """The agent's bytes for the upstream's `data: [DONE]`."""

    def end(self) -> bytes:
        """The agent's bytes for a stream that finished without `[DONE]`."""

    def error_body(self, message: str, status: int) -> bytes:
        """An error response body in the agent's dialect."""

    def stream_error(self, message: str, status: int) -> bytes:
        """An in-band error ending a stream, in the agent's dialect."""


class ChatCodec:
    """Chat completions as they are: the upstream's bytes go to the agent unchanged."""

    def __init__(self, assembler: CompletionAssembler) -> None:
        self._assembler = assembler

    def add_unary(self, doc: Mapping[str, Any]) -> None:
        self._assembler.add_completion(doc)

    def unary_body(self, body: bytes, doc: Mapping[str, Any]) -> bytes:
        return body

    def add_chunk(self, chunk: Mapping[str, Any]) -> bool:
        return self._assembler.add_chunk(chunk)

    def event(self, event: bytes, chunk: Mapping[str, Any]) -> bytes:
        return event

    def done(self, event: bytes) -> bytes:
        return event

    def end(self) -> bytes:
        return _DONE_EVENT

    def error_body(self, message: str, status: int) -> bytes:
        return error_body(message, status=status)

    def stream_error(self, message: str, status: int) -> bytes:
        return sse_error_event(message, status=status)
