"""The command lines of a local sandbox, and what of the host it shows.

`holder_argv` is the one bwrap run per sandbox that makes its namespaces and mounts;
each command is then forked inside them by the sandbox's spawner (`forkserver`).

Mounts inside a local sandbox on the host's root (`spec.sandbox.image: host`; a sandbox on
an image sees what `image_view` lays out instead), in order (a later mount covers an
earlier one):

    /                      the host root, read-only: the host's bash, python, git, node
    /dev, /proc            fresh; /proc shows only the sandbox's own pid namespace
    /etc                   the host's, live, read-only, under files of its own
                           (`etc_overlay`); the host's mounts below /etc bound again:
      passwd, group        the host's plus a line naming the sandbox user (an unprivileged
                           server's sandbox keeps the host's: it runs as the server's uid)
      resolv.conf          the one resolver a FULL sandbox can reach (`network`); under
                           NONE nothing, until its verifier runs under FULL
    /root, /home, /run     empty tmpfs: host homes (keys, tokens) and host sockets are gone
    <install roots>        read-only again: the tool installs the server's PATH points into
                           under a hidden home (e.g. /root/.pyenv), the server's own
                           interpreter and code
    <state dir>            empty tmpfs when still visible: the db and other sandboxes' dirs
    /tmp, /home/user       the sandbox's own, writable (HOME; WORKDIR is inside it)
    <install roots>        again, read-only, for those under the host's /tmp (and the state
                           dir hidden again below them)
    <cache dir>            the service's downloads (opencode), read-only, wherever it lives;
                           always bound (the backend makes it first): a later install shows
    PROXY_DIR              the sandbox's own proxy directory, read-only: the capture proxy
                           binds its route's socket there (PROXY_SOCKET) once the route
                           opens, so a warm sandbox made before any route gets it too; no
                           other sandbox sees it, and no route is reachable any other way

What else a sandbox has of its own, and where that is decided:

    network namespace      always (bwrap --unshare-net): loopback only under NONE; under
                           FULL the internet through pasta, never the host's loopback,
                           its own addresses or private ranges (`network`)
    home and /tmp          on a size-limited filesystem of its own when the server is
                           root: ENOSPC past `disk_mb` (`disk`)
    mounts                 none of another sandbox's disks (`holder_start`)
    user namespaces        none can be made inside: unshare and clone with
                           CLONE_NEWUSER fail with EPERM (`seccomp`)
    per-user counts        under an unprivileged server and on an image, a share of the
                           server uid's inotify and fanotify limits, set in a user
                           namespace its commands cannot write (`user_counts`); on a
                           root server's host root, its own uid's

When the server runs as root, every sandboxed process runs as a host uid of its own
(`sandbox_uid`), dropped to by the spawner's child inside the namespaces: no capability,
no_new_privs, no access to root-only files, and RLIMIT_NPROC (counted per real uid)
then counts this sandbox alone. Its only supplementary group is its command's tag
(`command_tag`).
An unprivileged server's spawner makes a user namespace of its own instead, mapping
only its uid, as root (`overlay_start.enter_own_user_namespace`), and starts bwrap there;
commands run as root of one nested in it, on the host's root as on an image's.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from service.config import Settings
from service.errors import MissingDependencyError
from service.sandboxes.base import HOME, PROXY_DIR, WORKDIR
from service.sandboxes.local.mounts import SANDBOX_DISK, mount_points_below

__all__ = [
    "HIDDEN_TREES",
    "SANDBOX_USER",
    "HostView",
    "SandboxLayout",
    "bind_args",
    "command_tag",
    "etc_overlay",
    "holder_argv",
    "host_view",
    "require_bwrap",
    "sandbox_env",
    "sandbox_uid",
]

HIDDEN_TREES: Mapping[str, int] = {"/root": 1, "/home": 2, "/run": 1}
"""Host trees covered by an empty tmpfs -> how deep below them an install root sits."""
SANDBOX_USER = "user"
_UID_BASE = 0x6000_0000
_UID_SPAN = 1 << 24
_TAG_BASE = 0x6100_0000


def require_bwrap() -> str:
    """Path of `bwrap`; raises naming the Debian package when it is not on PATH.

    Cheap (a PATH lookup): the server calls it at startup and refuses to start without.
    """
    found = shutil.which("bwrap")
    if found is None:
        raise MissingDependencyError(
            "the local sandbox needs bwrap, which is not on PATH: install it "
            "(Debian/Ubuntu: apt-get install bubblewrap); commands are never run unsandboxed"
        )
    return found


def sandbox_uid(state_dir: Path, rollout_id: str) -> int:
    """The host uid a sandbox runs as: far above real users, stable for its rollout."""
    digest = hashlib.sha256(f"{state_dir}\0{rollout_id}".encode()).digest()
    return _UID_BASE + int.from_bytes(digest[:4], "big") % _UID_SPAN


@dataclass(frozen=True)
class SandboxLayout:
    """Where one sandbox's private state lives on the host, and who it runs as."""

    root: Path
    """`<state_dir>/sandboxes/<rollout_id>`."""
    uid: int | None
    """Host uid (and gid) of every sandboxed process; None keeps the server's own."""

    @property
    def disk(self) -> Path:
        """Everything the sandbox can write lives here: its own size-limited filesystem
        when the server may mount one (`disk`), else a plain directory."""
        return self.root / SANDBOX_DISK

    @property
    def disk_image(self) -> Path:
        return self.root / "disk.img"

    @property
    def home(self) -> Path:
        return self.disk / "home"

    @property
    def tmp(self) -> Path:
        return self.disk / "tmp"

    @property
    def etc(self) -> Path:
        """The sandbox's own /etc files, over the host's on the host's root (`etc_overlay`)."""
        return self.root / "etc"

    @property
    def etc_view(self) -> Path:
        """Where its spawner mounts the overlay of its /etc (`etc_overlay`)."""
        return self.root / "etc-view"

    @property
    def passwd(self) -> Path:
        return self.etc / "passwd"

    @property
    def group(self) -> Path:
        return self.etc / "group"

    @property
    def resolv_conf(self) -> Path:
        """/etc/resolv.conf: FULL's resolver, whatever the network (`network`)."""
        return self.etc / "resolv.conf"

    @property
    def network_ready(self) -> Path:
        """A FIFO pasta writes its pid to once the sandbox's interface exists."""
        return self.root / "network.ready"

    @property
    def network_log(self) -> Path:
        """pasta's errors, read when it fails to start."""
        return self.root / "network.log"

    @property
    def proxy_dir(self) -> Path:
        """Bound at PROXY_DIR; the capture proxy's socket for this sandbox goes here."""
        return self.root / "proxy"


@dataclass(frozen=True)
class HostView:
    """What of the host every sandbox of a backend sees; computed once."""

    exposed: tuple[str, ...]
    """Directories under a hidden tree bound back read-only."""
    hidden: tuple[str, ...]
    """Directories covered by an empty tmpfs (the state dir, when otherwise visible)."""
    shared: tuple[str, ...]
    """Bound read-only last, wherever they live (the service's cache, e.g. opencode)."""
    path: str
    """PATH inside: the server's absolute PATH entries."""
    etc_mounts: tuple[str, ...] = ()
    """Mount points below the host's /etc, top down (a container's hosts, hostname)."""


def _within(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


def _install_root(directory: str) -> str | None:
    """The top directory of the install `directory` belongs to, if under a hidden tree."""
    for tree, depth in HIDDEN_TREES.items():
        if _within(directory, tree):
            parts = PurePosixPath(directory).relative_to(tree).parts
            return f"{tree}/{'/'.join(parts[:depth])}" if len(parts) >= depth else None
    return None


def _is_visible(path: str, exposed: Sequence[str]) -> bool:
    covered = (*HIDDEN_TREES, "/tmp")
    hidden = any(_within(path, tree) for tree in covered)
    return not hidden or any(_within(path, root) for root in exposed)


def _reachable(path: str) -> bool:
    """Whether the server may look at `path` (a missing one is: bwrap skips it). An
    unprivileged server's PATH may name root's installs (/root/.cargo/bin), which bwrap,
    running as the server, could not bind: the sandbox could not have seen them anyway."""
    try:
        os.stat(path)
    except PermissionError:
        return False
    except OSError:
        return True
    return True


def _server_install() -> list[str]:
    """The server's interpreter and code, which in-sandbox helpers (the proxy's forwarder)
    run from."""
    package_parent = Path(__file__).resolve().parents[3]
    paths = (sys.prefix, sys.base_prefix, package_parent)
    return [os.path.realpath(path) for path in paths]


def host_view(settings: Settings, search_path: str | None = None) -> HostView:
    """Decide what the sandboxes of a server with these settings may see of the host."""
    raw_path = os.environ.get("PATH", os.defpath) if search_path is None else search_path
    entries = list(dict.fromkeys(p for p in raw_path.split(os.pathsep) if p.startswith("/")))
    installs = (root for root in map(_install_root, entries) if root is not None)
    exposed = [root for root in installs if _reachable(root)]
    for path in _server_install():
        if not _is_visible(path, exposed):
            exposed.append(path)
    state = os.path.realpath(settings.state_dir)
    if state == "/":
        raise ValueError("state_dir must not be the root directory")
    hidden = (state,) if _is_visible(state, exposed) else ()
    cache = os.path.realpath(settings.cache_dir)
    if _within(state, cache):
        raise ValueError(f"state_dir {state} must not lie inside cache_dir, which sandboxes see")
    shared = (cache,)
    etc_mounts = sorted((p for p in mount_points_below("/etc") if p != "/etc"), key=len)
    return HostView(
        tuple(dict.fromkeys(exposed)), hidden, shared, os.pathsep.join(entries), tuple(etc_mounts)
    )


def sandbox_env(
    view: HostView, extra: Mapping[str, str] | None, base: Mapping[str, str] | None = None
) -> dict[str, str]:
    """The whole environment of a sandboxed command: a few basics (or `base`, an image
    sandbox's) plus the caller's."""
    env = {"PATH": view.path, "HOME": HOME, "USER": SANDBOX_USER, "LANG": "C.UTF-8", "TERM": "dumb"}
    if base is not None:
        env = dict(base)
    for name, value in (extra or {}).items():
        if not name or "=" in name or "\0" in name or "\0" in value:
            raise ValueError(f"invalid environment variable {name!r} for a sandboxed command")
        env[name] = value
    return env


def bind_args(option: str, source: str, dest: str) -> list[str]:
    """A bind mount, after a 0755 `--dir` for each ancestor of `dest`.

    bwrap 0.8 makes missing ancestors of a bind mode 0700, which the sandbox uid could
    not traverse; `--dir` leaves an existing directory alone.
    """
    ancestors = list(PurePosixPath(dest).parents)[-2::-1]  # top down, without "/"
    return [*(arg for parent in ancestors for arg in ("--dir", str(parent))), option, source, dest]


def etc_overlay(layout: SandboxLayout) -> dict[str, Any]:
    """The /etc of a sandbox on the host's root: its own files (`SandboxLayout.etc`) over
    the host's /etc, a read-only overlay its spawner mounts at `etc_view` (`overlay_start`)
    and bwrap binds at /etc.

    Why not bind its own files over the host's: the kernel detaches a mount whose mount
    point is unlinked in another namespace, so the host's `useradd` (which renames a new
    /etc/passwd into place) or a DHCP client rewriting resolv.conf would uncover the
    host's file in every live sandbox. The overlay's entries are its own: nothing on the
    host renames them, and the host's /etc stays live beneath.
    """
    own = {"source": str(layout.etc), "map": None}
    return {"target": str(layout.etc_view), "lowers": [own, {"source": "/etc", "map": None}]}


def _etc_mounts(view: HostView, layout: SandboxLayout) -> list[str]:
    """The sandbox's /etc (`etc_overlay`), then the host's mounts under it (a container's
    hosts and hostname), which the overlay shows the files beneath of."""
    files = [layout.resolv_conf, *([layout.passwd, layout.group] if layout.uid is not None else [])]
    own = {f"/etc/{file.name}" for file in files}
    args = ["--ro-bind", str(layout.etc_view), "/etc"]
    for point in view.etc_mounts:
        if point not in own:
            args += ["--ro-bind-try", point, point]
    return args


def _mounts(view: HostView, layout: SandboxLayout) -> list[str]:
    args = ["--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", *_etc_mounts(view, layout)]
    for tree in HIDDEN_TREES:
        args += ["--tmpfs", tree]
    for path in view.exposed:
        args += bind_args("--ro-bind-try", path, path)
    for path in view.hidden:
        args += ["--tmpfs", path]
    args += ["--bind", str(layout.tmp), "/tmp", "--bind", str(layout.home), HOME]
    # The sandbox's own /tmp covers the host's: bring back the server's code and interpreter
    # when they live there (a checkout in /tmp), and hide the state dir again below them.
    for path in (p for p in view.exposed if _within(p, "/tmp")):
        args += bind_args("--ro-bind-try", path, path)
    for path in (p for p in view.hidden if _within(p, "/tmp")):
        args += ["--tmpfs", path]
    for path in view.shared:
        # Never skipped: a missing directory fails the sandbox's creation, loudly.
        args += bind_args("--ro-bind", path, path)
    args += bind_args("--ro-bind", str(layout.proxy_dir), PROXY_DIR)
    return args


def command_tag(serial: int) -> int:
    """The supplementary group marking a sandbox's `serial`-th command and all it starts.

    Only the sandbox's own processes carry it, and no file belongs to it; an unprivileged
    process cannot drop it (setgroups needs CAP_SETGID), even from a session of its own.
    """
    return _TAG_BASE + serial % _UID_SPAN


def holder_argv(
    bwrap: str,
    view: HostView,
    layout: SandboxLayout,
    *,
    mounts: list[str] | None = None,
    command: list[str] | None = None,
) -> list[str]:
    """The argv of a sandbox's holder: bwrap making its namespaces, then waiting in them.

    `mounts` replaces the host root's (`_mounts`) and `command` the host's sh and sleep:
    an image sandbox's, which runs the host's from a private prefix (`image_view`).
    bwrap never makes a user namespace: under an unprivileged server the spawner made
    one already (`overlay_start.enter_own_user_namespace`), which owns the sandbox's
    namespaces so that the spawner can enter them (it could not enter the mount namespace
    of a user namespace bwrap made: bwrap's init sits in one nested below it).

    bwrap's own init is pid 1 (it reaps orphans); the holder, pid 2, prints `ready` once
    the mounts are in place and sleeps. On a root server it stays root (without any
    capability, as bwrap leaves every sandboxed process), a uid no command has, so the
    kernel refuses a command's signal to it. Under an unprivileged server every command
    shares its host uid: the spawner's seccomp filter refuses signals to pids 1 and 2 and
    to every process instead (`seccomp`).
    """
    args = [bwrap, "--die-with-parent", "--unshare-pid", "--unshare-ipc", "--unshare-uts"]
    # A network namespace of its own whatever the policy: bwrap brings up loopback only;
    # under FULL the spawner connects it to the internet (`network`).
    args += ["--hostname", "sandbox", "--unshare-net"]
    args += _mounts(view, layout) if mounts is None else mounts
    args += ["--chdir", WORKDIR, "--clearenv", "--"]
    return [*args, *(command or ["sh", "-c", "echo ready && exec sleep infinity"])]
