"""A local sandbox's share of the kernel's per-user counts: inotify and fanotify.

The kernel charges inotify instances and watches and fanotify groups and marks to a
`ucounts` entry per (user namespace, uid), and on up the user-namespace hierarchy to each
namespace's owner in its parent, checking the count at every level against that
namespace's own limit, `/proc/sys/user/max_*` (`inc_ucount`, kernel/ucount.c). A new
namespace's limits are INT_MAX: only the initial namespace's bind (fs.inotify.*, 128
instances by default), per uid. So every sandbox of an unprivileged server (all the
server's uid) and, on a root server, every image sandbox (its user namespace's owner is
root) draws on the server's own uid's pool: one holding all 128 inotify instances would
leave the next sandbox and the server EMFILE.

So the outermost user namespace each sandbox has of its own gets a share of the server's
limits (`sandbox_shares`), written by a task of that namespace (`limit_user_counts`):
/proc/sys/user shows the writer's own namespace's limits, writable with CAP_SYS_RESOURCE
there (`set_permissions`, kernel/ucount.c).

    unprivileged server    the spawner's namespace (`enter_own_user_namespace`); commands
                           are root of one nested in it, with no capability in it: they
                           see only their own namespace's limits, which the spawner's
                           bound from above
    root server, image     the commands' namespace (`overlay_start.make_user_namespace`),
                           written before they enter; they are root there, but without
                           CAP_SYS_RESOURCE (the spawner drops it from their bounding set,
                           `forkserver`), so they cannot raise it
    root server, host      nothing: each sandbox has a host uid of its own, counted apart

Standard library only (it runs in the fork server's processes, `forkserver`).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

__all__ = ["SHARED_COUNTS", "limit_user_counts", "sandbox_shares"]

SHARED_COUNTS = (
    "max_inotify_instances",
    "max_inotify_watches",
    "max_fanotify_groups",
    "max_fanotify_marks",
)
"""The limits split among sandboxes; a kernel without one (fanotify's: Linux 5.13+) skips it.
Namespace counts need no share: commands can make no namespace (`seccomp`)."""
_LIMITS = Path("/proc/sys/user")


def sandbox_shares(sandboxes: int, limits: Path = _LIMITS) -> dict[str, int]:
    """Each of the server's own limits in `limits`, split in `sandboxes` + 1 shares (at
    least 1): `sandboxes` each at its share leave one for the server."""
    shares = {}
    for name in SHARED_COUNTS:
        try:
            pool = int((limits / name).read_text())
        except FileNotFoundError:
            continue
        shares[name] = max(1, pool // (sandboxes + 1))
    return shares


def limit_user_counts(shares: Mapping[str, int]) -> None:
    """Set the current user namespace's limits to `shares`; the caller is a task of that
    namespace with CAP_SYS_RESOURCE in it (its creator, before anything else runs there)."""
    for name, value in shares.items():
        with open(_LIMITS / name, "w") as limit:
            limit.write(f"{value}\n")
