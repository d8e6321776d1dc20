"""A stand-in for a host on the internet, for sandboxes under network FULL.

The machine has no internet, and a FULL sandbox must never reach the host's loopback or
a private address, so a test server for FULL sandboxes lives in a network namespace of
its own behind a veth pair, at a documentation address (a /30 of 198.51.100.0/24)
routed from the host. `listen()` makes a listening socket inside that namespace (a
socket stays in the namespace it was made in), which the test then serves in-process.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import random
import socket
import subprocess
import threading
from collections.abc import Iterator
from dataclasses import dataclass

__all__ = ["PublicHost", "public_host"]

_CLONE_NEWNET = 0x40000000


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True)


@dataclass(frozen=True)
class PublicHost:
    """The test host: its address, and a private address on the host's side (10/8)."""

    namespace: str
    address: str
    private_address: str

    def listen(self) -> socket.socket:
        """A TCP socket listening on the test host's address, on a free port."""
        made: list[socket.socket | BaseException] = []

        def inside() -> None:  # setns moves only this thread
            try:
                with open(f"/run/netns/{self.namespace}") as netns:
                    if ctypes.CDLL(None, use_errno=True).setns(netns.fileno(), _CLONE_NEWNET):
                        raise OSError(ctypes.get_errno(), "setns")
                made.append(socket.create_server((self.address, 0)))
            except BaseException as exc:  # noqa: BLE001 - handed to the caller
                made.append(exc)

        thread = threading.Thread(target=inside)
        thread.start()
        thread.join()
        if isinstance(made[0], BaseException):
            raise made[0]
        return made[0]


@contextlib.contextmanager
def public_host() -> Iterator[PublicHost]:
    """Make the namespace, the veth pair and the addresses; remove them afterwards."""
    if os.geteuid() != 0:
        import pytest

        pytest.skip("making a test host needs root")
    tag = f"{random.randrange(16**6):06x}"
    namespace, outside, inside = f"rt-{tag}", f"rto{tag}", f"rti{tag}"
    block = random.randrange(64) * 4
    host_side, far_side = f"198.51.100.{block + 1}", f"198.51.100.{block + 2}"
    private = f"10.{random.randrange(256)}.{random.randrange(256)}.{random.randrange(1, 255)}"
    _ip("netns", "add", namespace)
    try:
        _ip("link", "add", outside, "type", "veth", "peer", "name", inside)
        _ip("link", "set", inside, "netns", namespace)
        _ip("address", "add", f"{host_side}/30", "dev", outside)
        _ip("address", "add", f"{private}/32", "dev", outside)
        _ip("link", "set", outside, "up")
        _ip("-n", namespace, "address", "add", f"{far_side}/30", "dev", inside)
        _ip("-n", namespace, "link", "set", inside, "up")
        _ip("-n", namespace, "route", "add", "default", "via", host_side)
        yield PublicHost(namespace, far_side, private)
    finally:
        subprocess.run(["ip", "link", "delete", outside], check=False, capture_output=True)
        _ip("netns", "delete", namespace)
