"""Upstream failures, translated once into what the agent sees: OpenAI-style errors.

Before a stream has started the agent gets a JSON error body with a fitting status
(the upstream's own 4xx/5xx, 502 for an unreachable or malformed upstream, 504 for a
timeout). Once SSE chunks have gone out, it gets an in-band `data: {"error": ...}` event
followed by `data: [DONE]`: never a silently empty or truncated stream.
"""

from __future__ import annotations

import orjson

from service.proxy.transport.upstream import UpstreamConnectionError

__all__ = ["error_body", "sse_error_event", "transport_failure", "upstream_error_message"]

_MAX_MESSAGE_CHARS = 2000


def error_body(message: str, *, status: int, kind: str = "upstream_error") -> bytes:
    """An OpenAI-style error object."""
    return orjson.dumps(
        {"error": {"message": message, "type": kind, "param": None, "code": status}}
    )


def sse_error_event(message: str, *, status: int = 502) -> bytes:
    """An in-band stream error the OpenAI SDKs surface, then the end of the stream."""
    return b"data: " + error_body(message, status=status) + b"\n\ndata: [DONE]\n\n"


def transport_failure(
    exc: TimeoutError | UpstreamConnectionError, timeout_s: float
) -> tuple[int, str]:
    """(status for the agent, message) for a failure talking to the upstream."""
    if isinstance(exc, TimeoutError):
        return 504, f"upstream timed out after {timeout_s:g}s"
    return 502, str(exc)


def upstream_error_message(status: int, body: bytes) -> str:
    """A short message for an upstream error response, from its OpenAI-style body if any."""
    try:
        doc = orjson.loads(body)
    except orjson.JSONDecodeError:
        doc = None
    if isinstance(doc, dict):
        error = doc.get("error", doc)
        if isinstance(error, dict):
            error = error.get("message") or error.get("detail")
        if isinstance(error, str):
            return f"upstream HTTP {status}: {error[:_MAX_MESSAGE_CHARS]}"
    text = body[:_MAX_MESSAGE_CHARS].decode("utf-8", "replace").strip()
    return f"upstream HTTP {status}: {text or 'empty body'}"
