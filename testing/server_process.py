"""A real rollout-service server in a subprocess, on a loopback port, for end-to-end tests.

The suite's servers, and the suite itself, never see the ROLLOUT_* settings of whoever runs
it (`forget_inherited_settings`): a shell with ROLLOUT_LISTEN or ROLLOUT_SANDBOX_IMAGE set must
not change what a test means. A test gives its server settings through `env`.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

__all__ = [
    "HARNESS_VARIABLES",
    "ServerProcess",
    "forget_inherited_settings",
    "resident_bytes",
    "running",
]

_LISTENING = re.compile(r"listening on (\S+)")
_START_TIMEOUT_S = 30.0

HARNESS_VARIABLES = frozenset({"ROLLOUT_CACHE_DIR", "ROLLOUT_LLAMA_PYTHON"})
"""ROLLOUT_* variables passed on purpose: where downloads are cached (CI gives each run an
empty one, .ci/run) and the real-model tests' interpreter (`make test-real-model`)."""
_forgotten = False


def forget_inherited_settings() -> None:
    """Remove from os.environ every ROLLOUT_* variable this process inherited, but the
    HARNESS_VARIABLES. Only the first call removes anything, so that variables the suite
    sets afterwards (conftest, monkeypatch) stay."""
    global _forgotten
    if _forgotten:
        return
    _forgotten = True
    for name in [name for name in os.environ if name.startswith("ROLLOUT_")]:
        if name not in HARNESS_VARIABLES:
            del os.environ[name]


class ServerProcess:
    """Starts `python -m service.server` (or `command`, e.g. `make run`), learns its port, and
    keeps its output for assertions. Its environment is this process's, without inherited
    ROLLOUT_* settings, with `env` on top."""

    def __init__(
        self,
        state_dir: Path,
        env: Mapping[str, str] | None = None,
        command: Sequence[str] | None = None,
    ) -> None:
        self.state_dir = state_dir
        forget_inherited_settings()
        self.env = {**os.environ, "ROLLOUT_STATE_DIR": str(state_dir), **(env or {})}
        self.command = list(command or (sys.executable, "-m", "service.server"))
        self.target = ""
        self.output: list[str] = []
        self._process: subprocess.Popen[str] | None = None
        self._reader: threading.Thread | None = None

    def start(self) -> str:
        """Start (or restart) the server; returns its host:port."""
        self.env.setdefault("ROLLOUT_LISTEN", "127.0.0.1:0")
        self.target = ""
        self._process = subprocess.Popen(
            self.command,
            env=self.env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        started = threading.Event()
        self._reader = threading.Thread(target=self._read, args=(started,), daemon=True)
        self._reader.start()
        if not started.wait(_START_TIMEOUT_S) or not self.target:
            self.stop()
            raise RuntimeError("server did not start:\n" + "".join(self.output))
        return self.target

    def _read(self, started: threading.Event) -> None:
        assert self._process is not None
        assert self._process.stdout is not None
        for line in self._process.stdout:
            self.output.append(line)
            match = _LISTENING.search(line)
            if match and not self.target:
                self.target = match.group(1)
                started.set()
        started.set()

    @property
    def pid(self) -> int:
        assert self._process is not None
        return self._process.pid

    def stop(self, sig: int = signal.SIGTERM, timeout_s: float = 60.0) -> int:
        """Signal the server and wait for it; returns its exit code."""
        if self._process is None:
            return 0
        if self._process.poll() is None:
            self._process.send_signal(sig)
        try:
            code = self._process.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self._process.kill()
            code = self._process.wait()
        if self._reader is not None:
            self._reader.join(5)
        self._process = None
        return code

    def text(self) -> str:
        """Everything the server printed so far (logs and, if enabled, spans)."""
        time.sleep(0)
        return "".join(self.output)


def resident_bytes(pid: int) -> int:
    """The resident memory of process `pid` (VmRSS), in bytes."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError(f"no VmRSS for pid {pid}")


@contextlib.contextmanager
def running(server: ServerProcess) -> Iterator[ServerProcess]:
    """`server` started, then stopped, which must end it cleanly (exit 0): a fixture's server
    is `with running(server): yield server`."""
    server.start()
    yield server
    assert server.stop() == 0, server.text()


@contextlib.contextmanager
def running_all(servers: Sequence[ServerProcess]) -> Iterator[Sequence[ServerProcess]]:
    """`running` of each of `servers` (replicas, say): all started, then all stopped."""
    with contextlib.ExitStack() as stack:
        for server in servers:
            stack.enter_context(running(server))
        yield servers
