"""opencode's `run --format json` stdout, turned into live `AgentOutput` events.

opencode 1.18 writes one JSON object per line: `{"type": ..., "timestamp": ...,
"sessionID": ..., "part"|"error": {...}}` with these types:

- `text`: a finished piece of model text (`part.text`);
- `tool_use`: a finished tool call (`part.tool`, `part.state.status` "completed" or
  "error", `part.state.input`, `part.state.output` / `part.state.error`);
- `reasoning`: model thinking (only with `--thinking`);
- `step_start` / `step_finish`: bookkeeping around each model call (not published);
- `error`: the session failed (`error.name`, `error.data.message`).

Anything else on stdout (a line that is not JSON, an unknown type) is published raw.
"""

from __future__ import annotations

import json
from typing import Any

from service.agents.base import EmitOutput
from service.models import AgentOutput, AgentOutputKind

__all__ = ["OpencodeEventStream", "translate_event"]

_QUIET_TYPES = frozenset({"step_start", "step_finish"})
MAX_LINE_BYTES = 4 * 1024 * 1024
"""A longer stdout line is not parsed (its head is published raw)."""
MAX_TEXT_CHARS = 8 * 1024
"""Text of one event beyond this is cut (tool inputs and outputs can be large)."""
MAX_EVENTS = 20_000
"""Events published per run; then one TRUNCATED event and silence."""


def _clip(text: str, limit: int = MAX_TEXT_CHARS) -> str:
    if len(text) <= limit:
        return text
    return f"{text[:limit]} [... {len(text) - limit} chars cut]"


def _json(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def _tool_call(part: dict[str, Any]) -> AgentOutput:
    state = part.get("state") or {}
    text = _json(state.get("input", {}))
    if state.get("status") == "error":
        text = f"{text}\nerror: {_json(state.get('error', ''))}"
    return AgentOutput(
        kind=AgentOutputKind.TOOL_CALL, tool_name=str(part.get("tool", "")), text=_clip(text)
    )


def _error(error: Any) -> AgentOutput:
    message = ""
    if isinstance(error, dict):
        data = error.get("data")
        message = str(data.get("message", "")) if isinstance(data, dict) else ""
        message = message or str(error.get("name", ""))
    return AgentOutput(kind=AgentOutputKind.ERROR, text=_clip(message or _json(error)))


def translate_event(event: dict[str, Any]) -> AgentOutput | None:
    """The live output for one parsed event line; None for bookkeeping and empty text."""
    kind = event.get("type")
    part = event.get("part")
    if kind in _QUIET_TYPES:
        return None
    if kind in ("text", "reasoning") and isinstance(part, dict):
        text = str(part.get("text", ""))
        return AgentOutput(kind=AgentOutputKind.TEXT, text=_clip(text)) if text.strip() else None
    if kind == "tool_use" and isinstance(part, dict):
        return _tool_call(part)
    if kind == "error":
        return _error(event.get("error"))
    return AgentOutput(kind=AgentOutputKind.STDOUT, text=_clip(_json(event)))


class OpencodeEventStream:
    """Splits stdout chunks into lines and publishes each line's event through `emit`."""

    def __init__(self, emit: EmitOutput) -> None:
        self._emit = emit
        self._partial = bytearray()
        self._overflowed = False
        self._published = 0

    def feed(self, chunk: bytes) -> None:
        """Take the next stdout chunk; complete lines are published at once."""
        while chunk:
            line, newline, chunk = chunk.partition(b"\n")
            self._append(line)
            if newline:
                self._end_line()

    def stderr(self, chunk: bytes) -> None:
        """Publish a stderr chunk as is."""
        self._publish(AgentOutput(kind=AgentOutputKind.STDERR, text=chunk.decode(errors="replace")))

    def close(self) -> None:
        """Publish a last line that had no newline."""
        if self._partial or self._overflowed:
            self._end_line()

    def _append(self, piece: bytes) -> None:
        if self._overflowed:
            return
        self._partial += piece
        if len(self._partial) > MAX_LINE_BYTES:
            head = self._partial[:MAX_TEXT_CHARS].decode(errors="replace")
            self._publish(AgentOutput(kind=AgentOutputKind.STDOUT, text=f"{head} [... line cut]"))
            self._partial.clear()
            self._overflowed = True

    def _end_line(self) -> None:
        line, overflowed = bytes(self._partial), self._overflowed
        self._partial.clear()
        self._overflowed = False
        if overflowed or not line.strip():
            return
        try:
            event = json.loads(line)
        except ValueError:
            event = None
        if isinstance(event, dict):
            output = translate_event(event)
        else:
            text = _clip(line.decode(errors="replace"))
            output = AgentOutput(kind=AgentOutputKind.STDOUT, text=text)
        if output is not None:
            self._publish(output)

    def _publish(self, output: AgentOutput) -> None:
        self._published += 1
        if self._published <= MAX_EVENTS:
            self._emit(output)
        elif self._published == MAX_EVENTS + 1:
            self._emit(
                AgentOutput(
                    kind=AgentOutputKind.TRUNCATED,
                    text=f"opencode events beyond {MAX_EVENTS} are not published",
                )
            )
