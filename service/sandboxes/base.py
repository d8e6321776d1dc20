"""The `Sandbox` protocol: an isolated machine for one rollout, and its backends.

Backends match these shapes without inheriting from them (mini-swe-agent style).
Every path a backend is given is an absolute path inside the sandbox.
"""

from __future__ import annotations

import shlex
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import ClassVar, Protocol

from service.models import SandboxSpec

__all__ = [
    "HOME",
    "LIST_MAX_DEPTH",
    "PROXY_DIR",
    "PROXY_SOCKET",
    "REWARD_JSON",
    "REWARD_TXT",
    "SOLUTION_DIR",
    "VERIFIER_DIR",
    "WORKDIR",
    "BackgroundProcess",
    "Capabilities",
    "ExecResult",
    "FileEntry",
    "OutputCallback",
    "OutputStream",
    "Reclaimed",
    "Sandbox",
    "SandboxBackend",
    "SandboxRequest",
    "Snapshot",
    "in_workdir",
]

HOME = "/home/user"
"""The sandbox user's home; private to the rollout."""
WORKDIR = f"{HOME}/workdir"
"""Where task files are staged and every command runs."""
VERIFIER_DIR = f"{HOME}/logs/verifier"
"""The verifier's output directory, made fresh and empty by the service before verification."""
REWARD_TXT = f"{VERIFIER_DIR}/reward.txt"
"""A float written here by a verify command is the reward."""
REWARD_JSON = f"{VERIFIER_DIR}/reward.json"
"""Else the reward and metrics are read from here (`service.verifier.reward`)."""
PROXY_DIR = "/run/rollout"
"""A local sandbox's own proxy directory (read-only inside); the proxy's socket for the
sandbox's route appears in it once the route is open."""
PROXY_SOCKET = f"{PROXY_DIR}/proxy.sock"
"""Where the capture proxy's socket for this sandbox's route is, inside the sandbox."""
SOLUTION_DIR = "/solution"
"""Where a task's solution files are staged, for the oracle agent only (Harbor's path)."""
LIST_MAX_DEPTH = 64
"""`Sandbox.list_files` lists no path of more components than this (nor descends further)."""


def in_workdir(workdir: str, command: str) -> str:
    """`command` run in `workdir` (a sandbox starts commands in WORKDIR); "" is WORKDIR."""
    if not workdir:
        return command
    return f"cd -- {shlex.quote(workdir)} || exit 1\n{command}"


class OutputStream(StrEnum):
    STDOUT = "stdout"
    STDERR = "stderr"


OutputCallback = Callable[[OutputStream, bytes], None]
"""Receives output chunks as they arrive; must not block."""


@dataclass(frozen=True)
class ExecResult:
    """How a command ended. Output is bounded: head and tail kept, middle elided."""

    exit_code: int
    """Exit code; -1 when the command was killed (timeout, cancel) or never ran."""
    stdout: str
    stderr: str
    stdout_bytes: int
    """Total bytes written to stdout, elided ones included."""
    stderr_bytes: int
    duration_s: float
    timed_out: bool = False


@dataclass(frozen=True)
class FileEntry:
    """A regular file found by `Sandbox.list_files`."""

    path: str
    """Relative to the listed directory, "/"-separated; valid UTF-8."""
    size: int
    """Bytes, when it was listed."""


@dataclass(frozen=True)
class Reclaimed:
    """What `Sandbox.reclaim` found and removed."""

    processes: int
    """Processes killed."""
    removed: tuple[str, ...]
    """The paths asked for at which something was removed."""


@dataclass(frozen=True)
class SandboxRequest:
    """What the engine asks a backend for."""

    rollout_id: str
    spec: SandboxSpec
    lifetime_s: float
    """Upper bound on the sandbox's life (a remote provider kills it after this)."""
    on_progress: Callable[[str], None] | None = None
    """Told what a slow creation is doing (an image built at first use), for the events."""
    snapshot: Snapshot | None = None
    """Start from this backend's snapshot of a sandbox of the same spec (a group member)."""
    carried: Snapshot | None = None
    """Paths another of this backend's sandboxes left, laid over `snapshot`
    (`carry.PathCarrier`: the agent's workdir in a FRESH verifier's sandbox)."""
    verifier_follows: bool = False
    """A FRESH verifier's sandbox (`carried`) will be asked for while this one lives: a
    backend with a cap on live sandboxes keeps room for it (E2B's `guard.SandboxSlots`)."""
    agent: str = ""
    """The agent the rollout runs in it ("": none, a group's template): an agent a warm local
    sandbox started ahead (`local.warm_agent`) is killed unless it is this one."""


class Snapshot(Protocol):
    """A sandbox's filesystem frozen by `SandboxBackend.snapshot`: sandboxes of the same
    spec start from it, copy-on-write, until it is released."""

    async def release(self) -> None:
        """Free it; every sandbox started from it must be gone."""
        ...


class BackgroundProcess(Protocol):
    """A command started with `Sandbox.spawn`."""

    async def wait(self) -> ExecResult:
        """Wait for the process to exit. Cancelling the wait does not kill it."""
        ...

    async def kill(self) -> None:
        """Kill the process and everything it started. Idempotent."""
        ...


class Sandbox(Protocol):
    """A running sandbox. Cancelling any call kills what that call started."""

    @property
    def id(self) -> str: ...

    async def exec(
        self,
        command: str,
        *,
        timeout_s: float,
        env: Mapping[str, str] | None = None,
        on_output: OutputCallback | None = None,
    ) -> ExecResult:
        """Run `bash -c command` in WORKDIR; kill it (timed_out=True) at the deadline."""
        ...

    async def spawn(
        self,
        command: str,
        *,
        env: Mapping[str, str] | None = None,
        on_output: OutputCallback | None = None,
    ) -> BackgroundProcess:
        """Start `bash -c command` in WORKDIR in the background, streaming its output."""
        ...

    async def write_files(self, files: Mapping[str, bytes]) -> None:
        """Write files at absolute sandbox paths, creating parent directories."""
        ...

    async def read_file(self, path: str, *, max_bytes: int) -> bytes | None:
        """Read up to max_bytes of a file; None when it does not exist."""
        ...

    async def list_files(
        self, directory: str, *, max_entries: int, exclude: Collection[str] = ()
    ) -> list[FileEntry]:
        """The first regular files beneath `directory`, recursively, in byte order of path.

        Left out: symbolic links, which are never followed (`directory` itself included);
        names that are not UTF-8, with everything beneath them; paths of more than
        LIST_MAX_DEPTH components; everything beneath a directory of `exclude` (paths
        relative to `directory`, "/"-separated), which is never entered, so it spends none
        of the bounds however much it holds. Of the rest, the listing is a prefix of the
        sorted whole (`LC_ALL=C sort`): at most `max_entries` entries, fewer where a
        backend's walk reaches a bound of its own (see the backend). A missing directory
        lists as empty.
        """
        ...

    async def reclaim(
        self, *, remove: Sequence[str] = (), empty_dirs: Sequence[str] = ()
    ) -> Reclaimed:
        """Take the sandbox back from its commands before trusting what it holds.

        Kills every process any command started, however it hid (new session, double
        fork, signals ignored, sudo), and waits until they are gone; the sandbox's own
        machinery lives on. Then removes whatever is at each path of `remove` and of
        `empty_dirs`, and every non-directory on the way to one, never following a link;
        last, makes each of `empty_dirs` an empty directory the sandbox's user owns.
        """
        ...

    async def kill(self) -> None:
        """Destroy the sandbox and every process in it. Idempotent; never raises."""
        ...


@dataclass(frozen=True)
class Capabilities:
    """What a backend's sandboxes can do, declared by the backend: the engine asks the backend
    (`SandboxBackend.capabilities`), never guesses from its name."""

    host_socket: bool = False
    """Its sandboxes share this host, so the service's capture proxy socket can be bound into
    them (else the proxy is reached at a public URL or runs inside the sandbox)."""
    host_cache: bool = False
    """Its sandboxes see the service's cache directory (read-only), so an agent installed
    there on the host runs in them (else it is installed in each sandbox)."""
    store_images: bool = False
    """Its sandboxes run on images of the service's image store, whose root is the sandbox's
    own (a Harbor task's Dockerfile is built into one)."""
    task_templates: bool = False
    """Its sandboxes start from templates the backend builds (a Harbor task's Dockerfile is
    built into one, whose root is the sandbox's own)."""


class SandboxBackend(Protocol):
    """Creates sandboxes of one kind."""

    name: str
    capabilities: ClassVar[Capabilities]

    def check_ready(self) -> None:
        """Raise SpecError (field spec.sandbox.backend) if this backend cannot take rollouts now."""
        ...

    async def check_spec(self, spec: SandboxSpec) -> None:
        """Raise SpecError for what only the backend knows is wrong (e.g. an image it lacks)."""
        ...

    def can_snapshot(self, spec: SandboxSpec) -> bool:
        """Whether `snapshot` works for sandboxes of this spec (a group's set-up-once fork)."""
        ...

    async def snapshot(self, sandbox: Sandbox) -> Snapshot:
        """Freeze all `sandbox` (one of this backend's, its commands reclaimed) wrote, for
        `SandboxRequest.snapshot`; raises SandboxError."""
        ...

    async def create(self, request: SandboxRequest) -> Sandbox:
        """Create a sandbox; raises SandboxError on infrastructure failure."""
        ...

    async def sweep_orphans(self, live_rollout_ids: set[str]) -> int:
        """Kill sandboxes left by an earlier run of this service; returns how many."""
        ...

    async def sweep_rollouts(self, rollout_ids: set[str]) -> int:
        """Kill what is left of the sandboxes of these rollouts, which another server that is
        gone ran (a replica whose lease expired); returns how many."""
        ...

    @property
    def live_sandboxes(self) -> int:
        """Sandboxes this backend holds now, warm ones included (the metrics' count: a
        sandbox a rollout failed to kill stays in it)."""
        ...

    async def close(self) -> None:
        """Kill every sandbox this backend still holds (shutdown)."""
        ...
