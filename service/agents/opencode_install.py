"""Installing the pinned `opencode-ai` npm package, once per machine.

The `opencode-ai` package carries a JS shim plus one optional dependency per platform
(`opencode-linux-x64`, `...-baseline`, `...-musl`, ...), each holding the same prebuilt
binary. We install with `--ignore-scripts` (no package code runs at install time) and
call the platform binary directly: the shim only adds start-up time. Which binary works
is decided by running `--version` on each candidate, so a CPU without AVX2 falls through
to the baseline build. The same shell script installs on the host (into the service's
cache, seen read-only by local sandboxes) and, for remote sandboxes, inside the sandbox.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import logging
import os
import shlex
import shutil
import time
from collections.abc import AsyncIterator
from pathlib import Path

from service.errors import AgentError

__all__ = ["OpencodeInstaller", "install_script", "npm_error_message"]

log = logging.getLogger(__name__)

_MARKER = "installed-binary"
"""Written last in the install directory: the binary's path, so a half install is redone."""
_LOCK_POLL_S = 0.1
_ERROR_TAIL_CHARS = 2000


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

    async def ensure(self) -> Path:
        """The host path of the opencode binary, installing it first if needed."""
        binary = self.installed_binary()
        if binary is not None:
            return binary
        async with self._lock:
            self.directory.parent.mkdir(parents=True, exist_ok=True)
            async with _file_lock(self.directory.with_name(f"{self.version}.lock")):
                binary = self.installed_binary()
                if binary is None:
                    binary = await self._install()
        return binary

    async def _install(self) -> Path:
        shutil.rmtree(self.directory, ignore_errors=True)
        self.directory.mkdir(parents=True)
        log.info("installing opencode-ai@%s into %s", self.version, self.directory)
        started = time.monotonic()
        stdout, stderr, code = await _run_bash(install_script(self.version, str(self.directory)))
        if code != 0:
            message = npm_error_message(stderr.decode(errors="replace"))
            raise AgentError(
                f"installing opencode-ai@{self.version} failed (exit {code}): {message}"
            )
        binary = Path(stdout.decode().strip().splitlines()[-1])
        (self.directory / _MARKER).write_text(f"{binary}\n")
        log.info(
            "installed opencode-ai@%s in %.1fs: %s",
            self.version,
            time.monotonic() - started,
            binary,
        )
        return binary


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
        raise AgentError(f"cannot run the opencode install: {exc}") from exc
    try:
        stdout, stderr = await process.communicate()
    except BaseException:
        # Cancelled mid-install: npm must not keep writing into the cache behind us.
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, 9)
        await process.wait()
        raise
    return stdout, stderr, process.returncode or 0


@contextlib.asynccontextmanager
async def _file_lock(path: Path) -> AsyncIterator[None]:
    """An exclusive flock on `path`, polled so that waiting for it stays cancellable."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                await asyncio.sleep(_LOCK_POLL_S)
        yield
    finally:
        os.close(fd)
