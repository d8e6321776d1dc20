"""How a client reaches a server that wants a bearer token, TLS, or both.

token        sent on every call as `authorization: Bearer <token>`; when the client is
             given none, the ROLLOUT_TOKEN environment variable is used if set
TLS          `tls_credentials()`: the system's roots, or `ca_file` for a private CA; with
             `cert_file` and `key_file`, a client certificate for servers that require one
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import grpc

__all__ = ["TOKEN_ENV", "auth_metadata", "read_token_file", "tls_credentials"]

TOKEN_ENV = "ROLLOUT_TOKEN"
"""The environment variable a client reads its bearer token from when given none."""

Metadata = tuple[tuple[str, str], ...]

_TOKEN = re.compile(r"[\x21-\x7e]+")


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
    ca_file: Path | None = None,
    cert_file: Path | None = None,
    key_file: Path | None = None,
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


def _read(name: str, path: Path | None) -> bytes | None:
    if path is None:
        return None
    try:
        return path.read_bytes()
    except OSError as exc:
        raise ValueError(f"{name} {str(path)!r} cannot be read: {exc.strerror}") from exc
