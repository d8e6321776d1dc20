"""Incremental splitting of a server-sent-event byte stream into whole events.

The proxy forwards each event's raw bytes as soon as the event is complete (never the
whole stream at once), which lets it check each `data:` payload before the agent sees it.
"""

from __future__ import annotations

__all__ = ["DONE", "SseSplitter", "event_data"]

DONE = b"[DONE]"


def _boundary(buffer: bytes, start: int) -> tuple[int, int]:
    """(position, length) of the first blank line at or after `start`; (-1, 0) if none.

    `bytes.find` rather than a regex: an event can be 60 KB (vLLM's prompt ids), and a
    regex that may begin with "\\r" scans it byte by byte."""
    lf = buffer.find(b"\n\n", start)
    crlf = buffer.find(b"\r\n\r\n", start, lf + 2 if lf >= 0 else len(buffer))
    if crlf >= 0:
        return crlf, 4
    return (lf, 2) if lf >= 0 else (-1, 0)


class SseSplitter:
    """Feed bytes as they arrive; get back the events they complete."""

    def __init__(self) -> None:
        self._pending = b""

    def feed(self, data: bytes) -> list[bytes]:
        """Complete events (each with its terminating blank line) ended by `data`."""
        buffer = self._pending + data if self._pending else data
        # A boundary split across the old and new bytes starts at most 3 bytes back.
        search_from = max(0, len(self._pending) - 3)
        events: list[bytes] = []
        start = 0
        while True:
            position, length = _boundary(buffer, max(start, search_from))
            if position < 0:
                break
            events.append(buffer[start : position + length])
            start = position + length
        self._pending = buffer[start:]
        return events

    @property
    def pending(self) -> bytes:
        """Bytes of an event not yet terminated."""
        return self._pending


def event_data(event: bytes) -> bytes | None:
    """The event's `data` field (lines joined), or None for comments and data-less events."""
    if event.startswith(b"data:") and event.count(b"\n") <= 2 and b"\r" not in event:
        return event[5:].strip()
    lines = [line[5:] for line in event.splitlines() if line.startswith(b"data:")]
    if not lines:
        return None
    return b"\n".join(line[1:] if line.startswith(b" ") else line for line in lines).strip()
