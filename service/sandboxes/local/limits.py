"""Resource limits of a local sandbox: resolved from the spec, applied as rlimits.

Rlimits are set on each command's first process inside the sandbox (by the spawner's
child, `forkserver`), before privileges drop, so every process of the command
inherits them.

- memory: RLIMIT_DATA (heap and private writable mappings), per process. Not RLIMIT_AS:
  Node and Bun reserve large address ranges up front and WebAssembly fails under it.
  The memory cgroup, where the host allows one, bounds the sandbox as a whole.
- CPU seconds and file size: per process.
- disk: the size of the sandbox's own filesystem (`disk`), fixed at birth.
- processes: RLIMIT_NPROC counts every process of the real uid, that is of the whole
  sandbox when the server runs as root (each sandbox has a host uid of its own), and in a
  user namespace of the sandbox's own under an unprivileged server.
- pending signals and POSIX message queue bytes: RLIMIT_SIGPENDING and RLIMIT_MSGQUEUE
  are counted per uid too (per user namespace and on up to the server's uid, like
  `user_counts`' counts, but checked against the charging task's rlimit): a share of the
  server's own (`share_of_own`), so that no sandbox takes the uid's whole allowance from
  the others and the server. The server's RLIMIT_NPROC, which every sandbox's processes
  count in too, is bounded by `max_processes` per sandbox.
"""

from __future__ import annotations

import resource
from dataclasses import dataclass

from service.config import Settings
from service.models import Resources

__all__ = ["Limits", "share_of_own"]

_MIB = 1024 * 1024


@dataclass(frozen=True)
class Limits:
    """The limits one sandbox runs under."""

    memory_bytes: int
    cpu_seconds: int
    max_processes: int
    max_file_bytes: int
    disk_bytes: int
    """Quota of the sandbox's filesystem (`disk`)."""
    pending_signals: int
    """RLIMIT_SIGPENDING: the sandbox's share of the server's."""
    message_queue_bytes: int
    """RLIMIT_MSGQUEUE: the sandbox's share of the server's."""

    @classmethod
    def resolve(cls, resources: Resources, settings: Settings) -> Limits:
        """The spec's resources, with 0 (or less) meaning the server default."""

        def pick(asked: int, default: int) -> int:
            return asked if asked > 0 else default

        return cls(
            memory_bytes=pick(resources.memory_mb, settings.sandbox_memory_mb) * _MIB,
            cpu_seconds=pick(resources.cpu_seconds, settings.sandbox_cpu_seconds),
            max_processes=pick(resources.max_processes, settings.sandbox_max_processes),
            max_file_bytes=pick(resources.max_file_size_mb, settings.sandbox_max_file_size_mb)
            * _MIB,
            disk_bytes=pick(resources.disk_mb, settings.sandbox_disk_mb) * _MIB,
            pending_signals=share_of_own(resource.RLIMIT_SIGPENDING, settings.max_running),
            message_queue_bytes=share_of_own(resource.RLIMIT_MSGQUEUE, settings.max_running),
        )

    @property
    def rlimits(self) -> dict[str, int]:
        """The rlimits (soft and hard alike) by `forkserver`'s names for them."""
        return {
            "data": self.memory_bytes,
            "cpu": self.cpu_seconds,
            "nproc": self.max_processes,
            "fsize": self.max_file_bytes,
            "sigpending": self.pending_signals,
            "msgqueue": self.message_queue_bytes,
        }


def share_of_own(limit: int, sandboxes: int) -> int:
    """The server's own soft `limit` split in `sandboxes` + 1 shares (one kept for the
    server), at least 1; unlimited stays unlimited."""
    soft, _ = resource.getrlimit(limit)
    return soft if soft == resource.RLIM_INFINITY else max(1, soft // (sandboxes + 1))
