"""What the agent changed of the system a verifier executes: the `SystemSeal` capability.

A backend that can tell, after the agent, which entries of the sandbox's system trees
changed since setup ended (a local image sandbox reads its overlay's upper layer)
implements `SystemSeal`; the verifier's rules (`service.verifier.integrity`) decide
which of those changes mean the verifier would run the agent's code. A backend that
cannot tell does not implement it; where the system is read-only to the agent (a local
sandbox on the host's root) there is nothing to tell.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Protocol, runtime_checkable

__all__ = ["SYSTEM_TREES", "EntryKind", "PathState", "SystemChange", "SystemDiff", "SystemSeal"]

SYSTEM_TREES = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc", "/opt")
"""Where what a verifier executes lives: programs, the loader and libc, interpreters and
their libraries, and the configuration the loader and interpreters read at start."""


class EntryKind(StrEnum):
    FILE = "file"
    LINK = "link"
    DIR = "dir"
    EMPTIED_DIR = "emptied_dir"
    """A directory that hides everything below it that was there before (overlay's
    opaque directory: the agent removed it and made it again)."""
    OTHER = "other"


@dataclass(frozen=True)
class PathState:
    """One entry as it was or is."""

    kind: EntryKind
    executable: bool = False
    """A regular file with an execute bit."""


@dataclass(frozen=True)
class SystemChange:
    """An entry that differs from what it was when the system was sealed."""

    path: str
    """Absolute, in the sandbox."""
    before: PathState | None
    """None: there was nothing at the path."""
    after: PathState | None
    """None: there is nothing at the path now."""
    shadows: str = ""
    """For a new entry in a directory of the verifier's PATH: the program of the same
    name, there before, that it now hides (a later PATH directory's)."""


@dataclass(frozen=True)
class SystemDiff:
    changes: tuple[SystemChange, ...]
    ld_cache: tuple[bytes, bytes] | None = None
    """/etc/ld.so.cache as sealed and as now, when it changed."""
    complete: bool = True
    """False when the agent left more entries than a check reads: nothing is known."""


@runtime_checkable
class SystemSeal(Protocol):
    """A sandbox that can say what changed in its system trees since `seal_system`."""

    async def seal_system(self, *, exempt: Sequence[str] = ()) -> None:
        """Record the system trees as they are (setup done, agent not yet started);
        changes under `exempt` (the task's workdir, when it lies in a system tree) are
        never reported."""
        ...

    async def system_changes(self, *, path: str | None = None) -> SystemDiff:
        """What changed since `seal_system`; every command must be reclaimed. `path` is
        the verifier's PATH when the task sets one (else the sandbox's own)."""
        ...
