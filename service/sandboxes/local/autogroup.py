"""The CPU weight of a command's session: its autogroup's nice value.

Every command a local sandbox runs is a session of its own (`process`), and the kernel's
scheduler (`sched_autogroup_enabled`, on by default) shares the CPU between sessions first,
then between the threads of each: a nice value on a process weighs only against its own
session's, the autogroup's weighs against everyone's. An agent started ahead in a warm
sandbox runs at `BACKGROUND` while rollouts run and until its own claims it (`warm_agent`),
so that its ~2 s of start-up CPU never slows theirs (their hand-over and first model call);
claimed, or with no rollout running, it is at `FOREGROUND`, as every other command.

A command's pid is known before its child has called setsid(): until then its autogroup is
the spawner's (shared by every sandbox's), so the weight is set only once it leads its own.
Writing another process's autogroup needs root (warm agents do). A process that has ended,
or a kernel without autogroups, leaves it as it was: the weight is a preference, never a
limit, so it is logged and not raised.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Callable
from pathlib import Path

__all__ = ["BACKGROUND", "FOREGROUND", "weigh", "weigh_once_leading"]

_log = logging.getLogger(__name__)

BACKGROUND = 19
"""The lowest weight: ~1.5% of a CPU another session wants."""
FOREGROUND = 0
"""Every session's own."""
_LEADER_WAIT_S = 1.0
_LEADER_POLL_S = 0.001


def weigh(pid: int, nice: int) -> bool:
    """Give the session host process `pid` leads the weight of `nice`; False if it leads
    none (yet). The caller keeps `pid` from being reaped meanwhile."""
    try:
        if os.getsid(pid) != pid:
            return False
        Path(f"/proc/{pid}/autogroup").write_text(f"{nice}\n")
    except OSError as exc:
        _log.debug("could not set the autogroup nice of %d to %d: %s", pid, nice, exc)
    return True


async def weigh_once_leading(pid: int, nice: Callable[[], int]) -> None:
    """`weigh` a command just spawned, once it leads its session, with `nice()` then."""
    for _ in range(int(_LEADER_WAIT_S / _LEADER_POLL_S)):
        if weigh(pid, nice()):
            return
        await asyncio.sleep(_LEADER_POLL_S)
    _log.debug("process %d leads no session: its weight is left as it is", pid)
