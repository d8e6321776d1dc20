"""Binding a listening Unix socket at any path, however long."""

from __future__ import annotations

import contextlib
import os
import socket
from pathlib import Path

__all__ = ["bind_unix"]

_MAX_UNIX_PATH = 100
"""sun_path holds 108 bytes; longer paths are bound through /proc/self/fd."""


def bind_unix(path: Path) -> socket.socket:
    """A listening Unix socket at `path` (replacing a stale one), however long the path.

    Mode 0666: who may connect is decided by who can reach the path (a sandbox's own proxy
    directory, bound into that sandbox alone; the sandbox user may map to any uid)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with contextlib.suppress(FileNotFoundError):
        path.unlink()
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        if len(os.fsencode(path)) < _MAX_UNIX_PATH:
            sock.bind(os.fspath(path))
        else:
            directory = os.open(path.parent, os.O_PATH | os.O_DIRECTORY)
            try:
                sock.bind(f"/proc/self/fd/{directory}/{path.name}")
            finally:
                os.close(directory)
        os.chmod(path, 0o666)
        sock.listen(1024)
    except OSError:
        sock.close()
        raise
    return sock
