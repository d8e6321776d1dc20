"""Compiling the command launcher (`launcher.c`) once per machine, into the server's cache.

`<cache_dir>/launcher/<digest of the source>.so`, written under a temporary name and
renamed into place, so a half-written library is never loaded and servers sharing the
cache agree. The cache is bound read-only into sandboxes (`bwrap.host_view`), like the
server's own code. Without a C compiler the server still runs: each command then costs a
forked Python in its spawner, and the server says so once at start.
"""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

__all__ = ["build_launcher"]

log = logging.getLogger(__name__)

_SOURCE = Path(__file__).with_name("launcher.c")
_FLAGS = ("-O2", "-shared", "-fPIC", "-Wall", "-Werror")
_COMPILE_TIMEOUT_S = 120.0


def build_launcher(cache_dir: Path) -> str | None:
    """The compiled launcher's path, compiling it first if the cache has none; None,
    logged once, when no compiler could make it."""
    source = _SOURCE.read_bytes()
    compiler = os.environ.get("CC") or "cc"
    digest = hashlib.sha256(source + " ".join(_FLAGS).encode()).hexdigest()[:16]
    target = cache_dir / "launcher" / f"{digest}.so"
    if target.is_file():
        return str(target)
    if shutil.which(compiler) is None:
        log.warning(
            "no C compiler (%s) to build the sandbox command launcher: each command forks "
            "its spawner's Python instead, up to 65%% more CPU each; install one "
            "(Debian/Ubuntu: sudo apt-get install gcc)",
            compiler,
        )
        return None
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent) as scratch:
        built = Path(scratch) / "launcher.so"
        try:
            subprocess.run(
                [compiler, *_FLAGS, "-o", str(built), str(_SOURCE)],
                check=True,
                capture_output=True,
                text=True,
                timeout=_COMPILE_TIMEOUT_S,
            )
        except (OSError, subprocess.SubprocessError) as exc:
            detail = getattr(exc, "stderr", None) or exc
            log.warning(
                "could not build the sandbox command launcher with %s (commands fork their "
                "spawner's Python instead): %s",
                compiler,
                detail,
            )
            return None
        built.chmod(0o755)
        os.replace(built, target)
    return str(target)
