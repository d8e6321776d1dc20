"""The listening connection notices a peer gone without a reset within seconds, not hours."""

from __future__ import annotations

import os
import socket
import uuid
from urllib.parse import urlsplit

from service.store.postgres_notify import Notices


def _tcp_idle_of_sockets_to(port: int) -> list[int]:
    """TCP_KEEPIDLE of each of this process's sockets whose peer is `port` (0: keepalive off)."""
    idles = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:  # closed since the listing
            continue
        if not target.startswith("socket:"):
            continue
        sock = socket.socket(fileno=os.dup(int(fd)))
        try:
            if sock.family != socket.AF_INET or sock.type != socket.SOCK_STREAM:
                continue
            try:
                peer_port = sock.getpeername()[1]
            except OSError:
                continue
            if peer_port != port:
                continue
            on = sock.getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE)
            idles.append(sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE) if on else 0)
        finally:
            sock.close()
    return idles


async def test_the_listening_connection_probes_an_idle_peer_within_seconds(
    postgres_url: str,
) -> None:
    port = urlsplit(postgres_url).port
    assert port is not None
    before = _tcp_idle_of_sockets_to(port)
    owner = uuid.uuid4().hex
    notices = Notices(owner)
    await notices.start(postgres_url, owner)
    try:
        idles = _tcp_idle_of_sockets_to(port)
    finally:
        await notices.stop()
    assert len(idles) == len(before) + 1, idles
    assert sorted(idles) != sorted(before)
    assert 10 in idles, f"keepalive idle of the listening connection: {idles}"
