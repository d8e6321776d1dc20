"""Installing the pinned `opencode-ai` npm package, once per machine.

The `opencode-ai` package carries a JS shim plus one optional dependency per platform
(`opencode-linux-x64`, `...-baseline`, `...-musl`, ...), each holding the same prebuilt
binary. We install with `--ignore-scripts` (no package code runs at install time) and
call the platform binary directly: the shim only adds start-up time. Which binary works
is decided by running `--version` on each candidate, so a CPU without AVX2 falls through
to the baseline build. The same shell script installs on the host (into the service's
cache, seen read-only by local sandboxes) and, for remote sandboxes, inside the sandbox.

A failed install is `AgentInstallError`: infrastructure (npm or its registry), retryable,
never scored as the agent's failure. The host install needs npm on the server's PATH;
without it (`npm_missing`) the server still serves other agents.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shlex
import shutil
import time
from collections.abc import AsyncIterator
from pathlib import Path

from service.agents.base import Progress
from service.errors import AgentInstallError
from service.file_lock import file_lock

__all__ = ["OpencodeInstaller", "install_script", "npm_error_message", "npm_missing"]

log = logging.getLogger(__name__)

_MARKER = "installed-binary"
"""Written last in the install directory: the binary's path, so a half install is redone."""
_ERROR_TAIL_CHARS = 2000
_PROGRESS_EVERY_S = 10.0


def install_script(version: str, prefix: str) -> str:
    """Shell that npm-installs opencode-ai@version under `prefix` and prints the binary path.

    npm's own output goes to stderr; the script fails (non-zero) with a message when no
    candidate binary answers `--version` with `version`.
    """
    v, p = shlex.quote(version), shlex.quote(prefix)
    return f"""set -e
npm install --prefix {p} --ignore-scripts --no-audit --no-fund --no-update-notifier \\
  opencode-ai@{v} >&2
case "$(uname -m)" in
  x86_64|amd64) arch=x64 ;; aarch64|arm64) arch=arm64 ;; *) arch="$(uname -m)" ;;
esac
for name in opencode-linux-$arch opencode-linux-$arch-baseline \\
            opencode-linux-$arch-musl opencode-linux-$arch-baseline-musl; do
  bin={p}/node_modules/$name/bin/opencode
  if [ -x "$bin" ] && [ "$("$bin" --version 2>/dev/null)" = {v} ]; then
    echo "$bin"; exit 0
  fi
done
echo "no opencode-linux-$arch binary under {p} runs as version {v}" >&2
exit 1
"""


def npm_missing(installer: OpencodeInstaller) -> str | None:
    """Why opencode cannot be installed on this host (no npm on PATH), or None.

    An install already in the cache needs no npm.
    """
    if installer.installed_binary() is not None or shutil.which("npm") is not None:
        return None
    return (
        f"opencode is installed with npm on first use, and npm is not on the server's PATH: "
        f"install Node.js and npm (Debian/Ubuntu: apt-get install npm), or pre-install "
        f"opencode-ai@{installer.version} into {installer.directory}"
    )


def npm_error_message(stderr: str) -> str:
    """npm's `npm error` lines (its warnings are noise here), else the end of its stderr."""
    errors = [line for line in stderr.splitlines() if line.startswith("npm error")]
    return ("\n".join(errors) or stderr.strip())[-_ERROR_TAIL_CHARS:]


class OpencodeInstaller:
    """Installs opencode-ai@version into `<cache_dir>/opencode/<version>` at first use.

    Concurrent callers in one process share an asyncio lock; other processes (another
    service on the same cache) are kept out by a file lock next to the install directory.
    """

    def __init__(self, cache_dir: Path, version: str) -> None:
        self.version = version
        self.directory = cache_dir / "opencode" / version
        self._lock = asyncio.Lock()

    def installed_binary(self) -> Path | None:
        """The binary of a completed install, or None."""
        try:
            binary = Path((self.directory / _MARKER).read_text().strip())
        except FileNotFoundError:
            return None
        return binary if binary.is_file() else None

    async def ensure(self, progress: Progress | None = None) -> Path:
        """The host path of the opencode binary, installing it first if needed.

        `progress` hears about an install (or a wait for another's) as it goes.
        """
        binary = self.installed_binary()
        if binary is not None:
            return binary
        report = progress or (lambda line: None)
        if self._lock.locked():
            report(f"waiting for the install of opencode-ai@{self.version} already under way")
        async with self._lock:
            self.directory.parent.mkdir(parents=True, exist_ok=True)
            async with contextlib.AsyncExitStack() as held:
                lock = file_lock(self.directory.with_name(f"{self.version}.lock"))
                waiting = f"waiting for another process's install ({self.directory})"
                async with _ticking(report, waiting):
                    await held.enter_async_context(lock)
                binary = self.installed_binary()
                if binary is None:
                    binary = await self._install(report)
        return binary

    async def _install(self, report: Progress) -> Path:
        shutil.rmtree(self.directory, ignore_errors=True)
        self.directory.mkdir(parents=True)
        log.info("installing opencode-ai@%s into %s", self.version, self.directory)
        report(
            f"installing opencode-ai@{self.version} with npm into {self.directory} "
            "(once per machine; usually 15-70s)"
        )
        started = time.monotonic()
        script = install_script(self.version, str(self.directory))
        async with _ticking(report, f"still installing opencode-ai@{self.version}"):
            stdout, stderr, code = await _run_bash(script)
        if code != 0:
            message = npm_error_message(stderr.decode(errors="replace"))
            raise AgentInstallError(
                f"installing opencode-ai@{self.version} failed (exit {code}): {message}"
            )
        binary = Path(stdout.decode().strip().splitlines()[-1])
        (self.directory / _MARKER).write_text(f"{binary}\n")
        took_s = time.monotonic() - started
        log.info("installed opencode-ai@%s in %.1fs: %s", self.version, took_s, binary)
        report(f"installed opencode-ai@{self.version} in {took_s:.1f}s")
        return binary


@contextlib.asynccontextmanager
async def _ticking(report: Progress, doing: str) -> AsyncIterator[None]:
    """Report `doing` with the time taken so far, every few seconds, while the block runs."""

    async def tick() -> None:
        started = time.monotonic()
        while True:
            await asyncio.sleep(_PROGRESS_EVERY_S)
            report(f"{doing}: {time.monotonic() - started:.0f}s so far")

    ticker = asyncio.create_task(tick())
    try:
        yield
    finally:
        ticker.cancel()


async def _run_bash(script: str) -> tuple[bytes, bytes, int]:
    try:
        process = await asyncio.create_subprocess_exec(
            "bash",
            "-c",
            script,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            start_new_session=True,
        )
    except OSError as exc:
        raise AgentInstallError(f"cannot run the opencode install: {exc}") from exc
    try:
        stdout, stderr = await process.communicate()
    except BaseException:
        # Cancelled mid-install: npm must not keep writing into the cache behind us.
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, 9)
        await process.wait()
        raise
    return stdout, stderr, process.returncode or 0
