"""Looking at host processes from a test: what a sandbox left running."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from collections.abc import Callable
from pathlib import Path

__all__ = ["eventually", "kill_namespace_holder", "kill_sandbox_holder", "processes_with"]


def processes_with(marker: str) -> list[int]:
    """Host pids whose command line contains `marker` (sandboxed processes included)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            if marker.encode() in (entry / "cmdline").read_bytes():
                found.append(int(entry.name))
        except OSError:
            continue
    return found


async def eventually(predicate: Callable[[], object], timeout_s: float = 15.0) -> None:
    """Wait until `predicate()` is truthy; fail the test if it never is."""
    for _ in range(int(timeout_s / 0.05)):
        if predicate():
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"condition never held within {timeout_s}s")


def kill_sandbox_holder(state_dir: Path, sandbox_id: str) -> None:
    """SIGKILL the bwrap that holds the sandbox's namespaces: the sandbox dies under the
    rollout, as it would if the host killed it."""
    needle = f"/sandboxes/{sandbox_id.removeprefix('local-')}/".encode()
    killed = 0
    for entry in Path("/proc").iterdir():
        with contextlib.suppress(OSError, ValueError):
            argv = (entry / "cmdline").read_bytes().split(b"\0")
            if Path(argv[0].decode()).name == "bwrap" and any(needle in a for a in argv):
                os.kill(int(entry.name), signal.SIGKILL)
                killed += 1
    assert killed, f"no holder found for sandbox {sandbox_id} under {state_dir}"


def kill_namespace_holder(marker: str) -> None:
    """SIGKILL the bwrap nearest above the process whose command line has `marker`: the
    init of its sandbox's pid namespace, so the whole sandbox dies (whatever directory a
    warm sandbox was made in)."""
    (pid,) = processes_with(marker)
    while pid > 1:
        status = Path(f"/proc/{pid}/status").read_text()
        fields = dict(line.split(":\t", 1) for line in status.splitlines() if ":\t" in line)
        if fields["Name"].strip() == "bwrap":
            os.kill(pid, signal.SIGKILL)
            return
        pid = int(fields["PPid"])
    raise AssertionError(f"no bwrap above the process with {marker!r}")
