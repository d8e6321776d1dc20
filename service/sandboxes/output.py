"""Bounded capture of command output: a command that prints gigabytes costs kilobytes."""

from __future__ import annotations

import time

from service.sandboxes.base import ExecResult, OutputCallback, OutputStream

__all__ = ["HeadTailBuffer", "OutputCapture"]


class HeadTailBuffer:
    """Keeps the first `head_bytes` and the last `tail_bytes` of a stream, counting the rest."""

    def __init__(self, head_bytes: int, tail_bytes: int) -> None:
        self._head_limit = head_bytes
        self._tail_limit = tail_bytes
        self._head = bytearray()
        self._tail = bytearray()
        self.total_bytes = 0

    def feed(self, chunk: bytes) -> None:
        """Add a chunk; memory stays within head_bytes + 2 * tail_bytes."""
        self.total_bytes += len(chunk)
        room = self._head_limit - len(self._head)
        if room > 0:
            self._head += chunk[:room]
            chunk = chunk[room:]
        if not chunk or self._tail_limit <= 0:
            return
        self._tail += chunk[-self._tail_limit :]
        if len(self._tail) > 2 * self._tail_limit:
            del self._tail[: len(self._tail) - self._tail_limit]

    @property
    def elided_bytes(self) -> int:
        return self.total_bytes - len(self._head) - min(len(self._tail), self._tail_limit)

    def text(self) -> str:
        """The kept output as text, with a marker where the middle was dropped."""
        tail = bytes(self._tail[-self._tail_limit :]) if self._tail_limit > 0 else b""
        head = bytes(self._head).decode("utf-8", errors="replace")
        if self.elided_bytes <= 0:
            return head + tail.decode("utf-8", errors="replace")
        marker = f"\n[... {self.elided_bytes} bytes elided ...]\n"
        return head + marker + tail.decode("utf-8", errors="replace")


class OutputCapture:
    """One command's output: a bounded buffer per stream, the live callback, its duration."""

    def __init__(self, head_bytes: int, tail_bytes: int, on_output: OutputCallback | None) -> None:
        self._buffers = {stream: HeadTailBuffer(head_bytes, tail_bytes) for stream in OutputStream}
        self._on_output = on_output
        self._started_s = time.monotonic()
        self._ended_s: float | None = None

    def feed(self, stream: OutputStream, data: bytes) -> None:
        self._buffers[stream].feed(data)
        if self._on_output is not None:
            self._on_output(stream, data)

    def close(self) -> None:
        """The command ended: fix its duration."""
        if self._ended_s is None:
            self._ended_s = time.monotonic()

    def result(self, exit_code: int, *, timed_out: bool = False) -> ExecResult:
        out, err = self._buffers[OutputStream.STDOUT], self._buffers[OutputStream.STDERR]
        return ExecResult(
            exit_code=exit_code,
            stdout=out.text(),
            stderr=err.text(),
            stdout_bytes=out.total_bytes,
            stderr_bytes=err.total_bytes,
            duration_s=(self._ended_s or time.monotonic()) - self._started_s,
            timed_out=timed_out,
        )
