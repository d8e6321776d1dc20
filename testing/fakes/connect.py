"""The bits of the Connect protocol (JSON codec) that the fake envd answers with."""

from __future__ import annotations

import json
from typing import Any

__all__ = ["END_STREAM", "RpcError", "envelope", "http_status"]

END_STREAM = 0b10
"""Envelope flag of the last message of a stream (the trailers: `{}` or `{"error": ...}`)."""

_HTTP_STATUS = {
    "invalid_argument": 400,
    "unauthenticated": 401,
    "permission_denied": 403,
    "not_found": 404,
    "already_exists": 409,
    "unimplemented": 501,
}


class RpcError(Exception):
    """A Connect error: a code such as "not_found", and a message."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code

    def body(self) -> dict[str, str]:
        return {"code": self.code, "message": str(self)}


def envelope(message: dict[str, Any], *, flags: int = 0) -> bytes:
    """One message of a Connect stream: flags, big-endian length, JSON."""
    data = json.dumps(message).encode()
    return bytes([flags]) + len(data).to_bytes(4, "big") + data


def http_status(error: RpcError) -> int:
    """The HTTP status of a unary Connect error."""
    return _HTTP_STATUS.get(error.code, 500)
