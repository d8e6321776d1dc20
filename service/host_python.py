"""The interpreter the server's standard-library-only helpers run on.

The fork server, the network attach step, rootless image tools and the proxy's forwarder
are new processes of the server's Python, some of them as another uid (a sandbox's).
Usually that is `sys.executable`, but a venv made from an interpreter under a directory
other users cannot enter (pyenv in root's home) links to a program a sandbox's uid, or the
server itself once it has dropped root, cannot exec. The helpers need nothing from
site-packages, so they run on the first interpreter every user can run, the server's own or
else the host's `python3.X` of the same version; failing both, on one this uid can run;
failing that the server refuses to start, saying what to do.
"""

from __future__ import annotations

import functools
import logging
import os
import shutil
import stat
import subprocess
import sys
import sysconfig
from dataclasses import dataclass
from pathlib import Path

from service.errors import MissingDependencyError

__all__ = ["HostPython", "host_python"]

log = logging.getLogger(__name__)

_VERSION = f"python{sys.version_info.major}.{sys.version_info.minor}"
_ASK_STDLIB = "import sysconfig; print(sysconfig.get_paths()['stdlib'])"


@dataclass(frozen=True)
class HostPython:
    """An interpreter and its standard library's directory."""

    executable: str
    stdlib: str


@functools.cache
def host_python() -> HostPython:
    """The interpreter the helpers run on (computed once; see the module docstring)."""
    own = HostPython(sys.executable, sysconfig.get_paths()["stdlib"])
    if _open_to_all(own.executable):
        return own
    host = _host_interpreter()
    if host is not None and _open_to_all(host.executable):
        return host
    for candidate in (own, host):
        if candidate is not None and os.access(candidate.executable, os.X_OK):
            log.warning(
                "the sandbox helpers run on %s (%s), which other users cannot run, and no %s "
                "on %s every user can: a helper started as a sandbox's uid, or by a server "
                "that drops root, fails; make the venv from an interpreter every user can "
                "reach (make install PYTHON=/usr/bin/python3)",
                candidate.executable,
                os.path.realpath(candidate.executable),
                _VERSION,
                os.defpath,
            )
            return candidate
    raise MissingDependencyError(
        f"the server's interpreter {sys.executable} ({os.path.realpath(sys.executable)}) "
        f"cannot be run by uid {os.geteuid()}, nor can a {_VERSION} on {os.defpath}: make "
        "the venv from an interpreter every user can reach (make install PYTHON=/usr/bin/python3)"
    )


def _open_to_all(path: str) -> bool:
    """Whether any uid may exec `path`: it and every directory above it are others-x."""
    real = Path(os.path.realpath(path))
    try:
        return all(p.stat().st_mode & stat.S_IXOTH for p in (real, *real.parents))
    except OSError:
        return False


def _host_interpreter() -> HostPython | None:
    """The host's `python3.X` of the server's version, if it runs."""
    found = shutil.which(_VERSION, path=os.defpath)
    if found is None:
        return None
    try:
        ran = subprocess.run(
            [found, "-S", "-E", "-s", "-c", _ASK_STDLIB],
            capture_output=True,
            text=True,
            timeout=30,
            env={},
            check=True,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return HostPython(found, ran.stdout.strip())
