"""The host's own programs an image sandbox's machinery runs on, whatever the image holds.

The sandbox's plumbing must not depend on what an image happens to contain: an image
without `sleep` would lose its holder, one without the server's python3.X its proxy
forwarder. So the few host files the plumbing needs are bound read-only under KIT_DIR, a
private prefix no image uses, and run through the host's own dynamic loader with the host's
library directories (`--inhibit-cache`: never the image's ld.so.cache, nor its libraries):

    KIT_DIR/lib/<n>                  each host directory holding the loader, libc, libm or
                                     libpython (as the server's process maps them)
    KIT_DIR/bin/sh, KIT_DIR/bin/sleep   the host's: the holder's readiness line and idle
    KIT_DIR/python/bin/python3.X     the server's interpreter, its standard library at
    KIT_DIR/python/lib/python3.X     the path Python looks for beside it (no PYTHONHOME)
    KIT_DIR/forward.py               the proxy's forwarder (`local.forward`)

Nothing here shadows a path of the image; the image's own tools stay the agent's.
"""

from __future__ import annotations

import functools
import os
import shutil
import sys
from dataclasses import dataclass

from service.host_python import host_python
from service.sandboxes.local import forward

__all__ = ["KIT_DIR", "HostKit", "forwarder_argv", "host_kit"]

KIT_DIR = "/.rollout/host"
"""Where an image sandbox finds the host's programs its machinery runs on."""
_LIBRARY_PREFIXES = ("ld-", "libc.so", "libm.so", "libpython")
"""Mapped files whose directories the kit's programs load their libraries from."""
_PYTHON = f"python3.{sys.version_info.minor}"


@dataclass(frozen=True)
class HostKit:
    """Host paths -> where an image sandbox sees them, and how to run what they hold."""

    binds: tuple[tuple[str, str], ...]
    """(host path, path inside), bound read-only (`image_view`)."""
    loader: str
    """The host's dynamic loader, inside."""
    library_path: str
    """The host's library directories, inside, `:`-separated."""

    def argv(self, program: str, *args: str) -> list[str]:
        """Run the kit's `program` (a path inside) on the host's loader and libraries."""
        loader = [self.loader, "--inhibit-cache", "--library-path", self.library_path]
        return [*loader, program, *args]


def _mapped_libraries() -> list[str]:
    """The loader and the libraries the server's interpreter runs on, as it maps them."""
    with open("/proc/self/maps") as maps:
        paths = {line.split(maxsplit=5)[-1].strip() for line in maps}
    return sorted(
        path
        for path in paths
        if path.startswith("/") and os.path.basename(path).startswith(_LIBRARY_PREFIXES)
    )


def _loader(libraries: list[str], directories: list[str]) -> str:
    """The loader among the mapped files (ld-linux-x86-64.so.2 and the like), inside."""
    for path in libraries:
        name = os.path.basename(path)
        if name.startswith("ld-") and ".so" in name:
            index = directories.index(os.path.dirname(os.path.realpath(path)))
            return f"{KIT_DIR}/lib/{index}/{name}"
    raise RuntimeError("the server's dynamic loader is not among its mapped files")


def _program(name: str) -> str:
    found = shutil.which(name, path=os.defpath)
    if found is None:
        raise RuntimeError(f"the host has no {name} on {os.defpath}")
    return os.path.realpath(found)


@functools.cache
def host_kit() -> HostKit:
    """The kit of this server's host (computed once)."""
    python = host_python()
    libraries = _mapped_libraries()
    directories = list(dict.fromkeys(os.path.dirname(os.path.realpath(p)) for p in libraries))
    binds = [(path, f"{KIT_DIR}/lib/{index}") for index, path in enumerate(directories)]
    binds += [(_program("sh"), f"{KIT_DIR}/bin/sh"), (_program("sleep"), f"{KIT_DIR}/bin/sleep")]
    binds += [
        (os.path.realpath(python.executable), f"{KIT_DIR}/python/bin/{_PYTHON}"),
        (os.path.realpath(python.stdlib), f"{KIT_DIR}/python/lib/{_PYTHON}"),
        (os.path.realpath(forward.__file__), f"{KIT_DIR}/forward.py"),
    ]
    library_path = ":".join(inside for _, inside in binds[: len(directories)])
    return HostKit(tuple(binds), _loader(libraries, directories), library_path)


def forwarder_argv(*, on_image: bool) -> list[str]:
    """How the proxy's forwarder runs in a local sandbox: on the server's interpreter,
    from the kit on an image, at its host path on the host's root (which shows it)."""
    if on_image:
        kit = host_kit()
        return kit.argv(f"{KIT_DIR}/python/bin/{_PYTHON}", "-I", "-S", f"{KIT_DIR}/forward.py")
    return [host_python().executable, "-I", "-S", os.path.realpath(forward.__file__)]
