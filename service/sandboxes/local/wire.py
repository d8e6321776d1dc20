"""The messages between the server and the local fork server's processes (`forkserver`).

JSON on SOCK_SEQPACKET, one datagram per message, descriptors passed as SCM_RIGHTS.
Standard library only: the fork server imports it too.
"""

from __future__ import annotations

import array
import json
import os
import socket
from typing import Any

__all__ = ["MAX_MESSAGE_BYTES", "receive", "send"]

MAX_MESSAGE_BYTES = 1 << 20
"""Largest message either side sends (a command line plus its environment)."""
_MAX_FDS = 8


def send(
    sock: socket.socket, message: dict[str, Any], fds: list[int] | tuple[int, ...] = ()
) -> None:
    """One message, with `fds` passed along."""
    data = json.dumps(message).encode()
    if len(data) > MAX_MESSAGE_BYTES:
        raise ValueError(f"message of {len(data)} bytes exceeds {MAX_MESSAGE_BYTES}")
    ancillary = [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds))] if fds else []
    sock.sendmsg([data], ancillary)


_buffer = bytearray(MAX_MESSAGE_BYTES)
"""Every message lands here: a fresh megabyte per receive costs an mmap and its faults."""


def receive(sock: socket.socket) -> tuple[dict[str, Any] | None, list[int]]:
    """One message and the descriptors that came with it; (None, []) once the peer closed.

    Not reentrant (one buffer per process): call it from one thread only.
    """
    space = socket.CMSG_SPACE(_MAX_FDS * array.array("i").itemsize)
    size, ancillary, flags, _ = sock.recvmsg_into([_buffer], space, socket.MSG_CMSG_CLOEXEC)
    fds = array.array("i")
    for level, kind, payload in ancillary:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds.frombytes(payload[: len(payload) - len(payload) % fds.itemsize])
    if flags & (socket.MSG_TRUNC | socket.MSG_CTRUNC):
        for fd in fds:
            os.close(fd)
        raise ValueError("a message was truncated")
    if not size:
        return None, list(fds)
    return json.loads(_buffer[:size]), list(fds)
