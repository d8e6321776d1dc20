"""Keeps the secrets an agent was handed out of the output a rollout publishes.

An agent that prints its environment would otherwise put its route token (or, with capture
BLACK_BOX, the upstream key) into output events, which WatchRollout serves, and into
`agent_log_tail`. Raw output arrives in chunks of any size, so a secret may straddle two:
the end of a chunk that could begin a secret is held back until the next chunk (or the end).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable
from typing import AnyStr, Generic, TypeVar

from service.models import AgentOutput, AgentOutputKind
from service.proxy import REDACTED, scrub_text

__all__ = ["REDACTED", "ByteScrubber", "OutputScrubber", "kept_secrets"]

_MIN_SECRET_CHARS = 8
"""Shorter "secrets" (a caller's placeholder key) would mangle ordinary output."""
_RAW = (AgentOutputKind.STDOUT, AgentOutputKind.STDERR)
K = TypeVar("K", bound=Hashable)


def kept_secrets(secrets: Iterable[str]) -> tuple[str, ...]:
    """The secrets worth scrubbing: each once, none too short to be one."""
    return tuple(s for s in dict.fromkeys(secrets) if len(s) >= _MIN_SECRET_CHARS)


class OutputScrubber:
    """Wraps an output sink; call `flush()` once the agent has exited."""

    def __init__(self, emit: Callable[[AgentOutput], None], secrets: Iterable[str]) -> None:
        self._emit = emit
        self.secrets = kept_secrets(secrets)
        self._held: dict[AgentOutputKind, str] = {}

    def __call__(self, output: AgentOutput) -> None:
        if not self.secrets:
            self._emit(output)
            return
        text = self._held.pop(output.kind, "") + output.text
        text = scrub_text(text, self.secrets)
        if output.kind in _RAW:
            keep = _partial_secret_at_end(text, self.secrets)
            if keep:
                text, self._held[output.kind] = text[:-keep], text[-keep:]
        if text:
            self._emit(output.model_copy(update={"text": text}))

    def flush(self) -> None:
        """Emit what was held back (it turned out to be no secret)."""
        for kind, text in self._held.items():
            self._emit(AgentOutput(kind=kind, text=text))
        self._held.clear()


class ByteScrubber(Generic[K]):
    """The same for raw bytes of several streams (a session's Exec output, as it goes back
    to its caller): `scrub` what came, `flush` each stream once it ended."""

    def __init__(self, secrets: Iterable[str]) -> None:
        self.secrets = tuple(secret.encode() for secret in kept_secrets(secrets))
        self._held: dict[K, bytes] = {}

    def scrub(self, stream: K, data: bytes) -> bytes:
        """What of `data` (after what was held of `stream`) can go now, secrets replaced."""
        if not self.secrets:
            return data
        data = self._held.pop(stream, b"") + data
        for secret in self.secrets:
            data = data.replace(secret, _REDACTED_BYTES)
        keep = _partial_secret_at_end(data, self.secrets)
        if keep:
            data, self._held[stream] = data[:-keep], data[-keep:]
        return data

    def flush(self) -> list[tuple[K, bytes]]:
        """What was held back of each stream (it turned out to be no secret)."""
        held, self._held = list(self._held.items()), {}
        return held


_REDACTED_BYTES = REDACTED.encode()


def _partial_secret_at_end(text: AnyStr, secrets: tuple[AnyStr, ...]) -> int:
    """Length of the longest end of `text` that begins some secret."""
    longest = 0
    for secret in secrets:
        for size in range(min(len(secret) - 1, len(text)), longest, -1):
            if secret.startswith(text[-size:]):
                longest = size
                break
    return longest
