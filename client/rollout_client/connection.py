"""How a client finds its server, and reaches one that wants a bearer token, TLS, or both.

target       host:port; when the client is given none, the ROLLOUT_TARGET environment
             variable, else 127.0.0.1:50051 (`default_target`, read by the `rollout` CLI too)
token        sent on every call as `authorization: Bearer <token>`; when the client is
             given none, the ROLLOUT_TOKEN environment variable is used if set
TLS          `tls_credentials()`: the system's roots, or `ca_file` for a private CA; with
             `cert_file` and `key_file`, a client certificate for servers that require one
             (each a path, as str or Path, or the PEM itself as bytes)
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import grpc

from rollout_client.messages import DEFAULT_TARGET

__all__ = [
    "TARGET_ENV",
    "TOKEN_ENV",
    "PemSource",
    "auth_metadata",
    "default_target",
    "read_token_file",
    "tls_credentials",
]

TARGET_ENV = "ROLLOUT_TARGET"
"""The environment variable naming the server (host:port) when a client is given none."""
TOKEN_ENV = "ROLLOUT_TOKEN"
"""The environment variable a client reads its bearer token from when given none."""

Metadata = tuple[tuple[str, str], ...]
PemSource = str | Path | bytes
"""A PEM file's path (str or Path), or its content (bytes)."""

_TOKEN = re.compile(r"[\x21-\x7e]+")


def default_target() -> str:
    """The server to use when none is given: $ROLLOUT_TARGET if set, else 127.0.0.1:50051."""
    return os.environ.get(TARGET_ENV) or DEFAULT_TARGET


def auth_metadata(token: str | None) -> Metadata:
    """Call metadata carrying `token` (None: $ROLLOUT_TOKEN; "" or unset: no token)."""
    if token is None:
        token = os.environ.get(TOKEN_ENV, "")
    if not token:
        return ()
    if not _TOKEN.fullmatch(token):
        # Never echo it: it is a secret, and may be one pasted in the wrong place.
        raise ValueError("token: must be visible ASCII characters without spaces")
    return (("authorization", f"Bearer {token}"),)


def read_token_file(path: Path) -> str:
    """The token in a file holding only it (surrounding whitespace and newlines ignored)."""
    try:
        return path.read_text(encoding="utf-8").strip()
    except (OSError, UnicodeError) as exc:
        raise ValueError(f"token file {str(path)!r} cannot be read: {exc}") from exc


def tls_credentials(
    *,
    ca_file: PemSource | None = None,
    cert_file: PemSource | None = None,
    key_file: PemSource | None = None,
) -> grpc.ChannelCredentials:
    """TLS channel credentials: the server checked against `ca_file` (default: the system's
    roots), and a client certificate when `cert_file` and `key_file` are given."""
    if (cert_file is None) != (key_file is None):
        raise ValueError("cert_file and key_file: give both for a client certificate, or neither")
    return grpc.ssl_channel_credentials(
        root_certificates=_read("ca_file", ca_file),
        private_key=_read("key_file", key_file),
        certificate_chain=_read("cert_file", cert_file),
    )


def _read(name: str, source: PemSource | None) -> bytes | None:
    if source is None or isinstance(source, bytes):
        return source
    path = Path(source)
    try:
        return path.read_bytes()
    except OSError as exc:
        raise ValueError(f"{name} {str(path)!r} cannot be read: {exc.strerror}") from exc
