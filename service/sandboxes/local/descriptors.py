"""Waiting on descriptors in processes that hold many of them.

The server and a fork server hold descriptors for every live sandbox (pidfds, roots,
sockets), so their numbers pass FD_SETSIZE (1024), which `select.select` refuses
("filedescriptor out of range in select()"). `poll` takes any. Standard library only (the
fork server's processes import it).
"""

from __future__ import annotations

import select

__all__ = ["readable"]


def readable(fds: list[int], timeout_s: float | None) -> set[int]:
    """Which of `fds` are readable (or hung up) within `timeout_s` (None: no limit; 0: now).

    A pidfd is readable once its process has exited."""
    poller = select.poll()
    for fd in fds:
        poller.register(fd, select.POLLIN)
    timeout_ms = None if timeout_s is None else int(timeout_s * 1000)
    return {fd for fd, _ in poller.poll(timeout_ms)}
