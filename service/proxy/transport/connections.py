"""Bounds on the connections a client of the proxy can hold open.

A sandbox is an adversary: one opened 20,500 connections to its proxy socket and took the
server to its file-descriptor limit, so that new gRPC connections timed out. Each listener
therefore admits at most `limit` connections at once (a sandbox's own socket: its limit
alone; the shared TCP listener: one limit for all its clients), refusing more by closing
them at once, and every connection must deliver a whole request within the idle timeout
of becoming idle (`httpserver`), which also ends slow-header clients.
"""

from __future__ import annotations

from typing import Protocol

__all__ = ["Closable", "ConnectionLimit"]


class Closable(Protocol):
    def close(self) -> None: ...


class ConnectionLimit:
    """The connections open on one listener, at most `limit` of them."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._open: set[Closable] = set()
        self.refused = 0
        """Connections closed on arrival because `limit` were open."""

    def __len__(self) -> int:
        return len(self._open)

    def admit(self, connection: Closable) -> bool:
        """Count a new connection in; False (and counted as refused) when full."""
        if len(self._open) >= self.limit:
            self.refused += 1
            return False
        self._open.add(connection)
        return True

    def release(self, connection: Closable) -> None:
        self._open.discard(connection)

    def close_all(self) -> None:
        """Close every open connection (its route closed)."""
        for connection in list(self._open):
            connection.close()
