"""Whether the verifier would run the agent's code: the rules that read a `SystemDiff`.

In an image sandbox the agent is root and its changes stay for verification, so an agent
could wrap `/usr/bin/bash` to write a reward, turn `false` into `true`, or hook Python's
start-up. The verifier executes what lives in the system trees (`seal.SYSTEM_TREES`), so
after the agent, before any verifier file is staged, the service reads what the agent
changed there and refuses to verify when a change could run the agent's code in place
of what the image and setup installed:

    changed or removed   a program (a file with an execute bit), a shared library, a
                         link, Python code (.py, .pyc, .pth under a python directory),
                         the loader's configuration (/etc/ld.so.preload, ld.so.conf and
                         ld.so.conf.d), Python's (/etc/python*), or a directory
    added                /etc/ld.so.preload; a Python start-up hook (a .pth file,
                         sitecustomize or usercustomize) in any site directory, the
                         homes' user sites included; anything in Python's standard
                         library directory (it would hide installed modules); a
                         program in a PATH directory that hides one of the same name
                         further along PATH; a test runner's configuration at /
                         (conftest.py, pytest.ini ...)
    __pycache__          never counts: verify commands run with PYTHONPYCACHEPREFIX set
                         to a directory made fresh for them (`environment`), so no
                         Python they start reads a bytecode cache the agent left
    /etc/ld.so.cache     may change (installing a library rewrites it), but every
                         library it named must keep its path, and every new one must
                         lie in a system tree

What stays the agent's to change: new packages (pip, apt, npm) whose files hide nothing,
data and configuration outside those named, and everything outside the system trees:
the task's workdir (wherever it lies), the homes, /tmp, /var, /srv. A rollout that broke
a rule is TAMPERED: not verified, reward 0.
"""

from __future__ import annotations

import re
import struct

from service.errors import first_of
from service.sandboxes import SYSTEM_TREES, EntryKind, PathState, SystemDiff

__all__ = ["tampering"]

_NAMED_AT_MOST = 10
_PYTHON_CODE = (".py", ".pyc", ".pth")
_STARTUP_HOOKS = ("sitecustomize", "usercustomize")
_RUNNER_CONFIG = frozenset({"conftest.py", "pytest.ini", "pyproject.toml", "setup.cfg", "tox.ini"})
_ETC_STARTS_CODE = ("/etc/ld.so.preload", "/etc/ld.so.conf", "/etc/python", "/etc/alternatives")
"""What of /etc the loader and interpreters read, and PATH's links go through."""
_LD_CACHE_PATH = "/etc/ld.so.cache"
_STDLIB_DIR = re.compile(r"/lib/python3(\.\d+)?(/lib-dynload)?$")
_LD_CACHE_MAGIC = b"glibc-ld.so.cache1.1"
_LD_CACHE_HEADER = 48
_LD_CACHE_ENTRY = struct.Struct("<iIIIQ")


def tampering(diff: SystemDiff) -> list[str]:
    """Each change that breaks a rule (module docstring), said in a line; [] if none."""
    if not diff.complete:
        return ["the agent left more entries in the system trees than are checked"]
    reasons = []
    for change in diff.changes:
        if "/__pycache__/" in change.path or change.path == _LD_CACHE_PATH:
            continue  # never read by a verifier; checked below
        before, after = change.before, change.after
        if before is None:
            reason = _added(change.path, change.shadows)
        elif after is None:
            reason = f"removed {change.path}" if _executes(change.path, before) else ""
        elif _executes(change.path, before) or _executes(change.path, after):
            reason = f"changed {change.path}"
        else:
            reason = ""
        if reason:
            reasons.append(reason)
    if diff.ld_cache is not None:
        reasons += _ld_cache_reasons(*diff.ld_cache)
    return reasons


def _added(path: str, shadows: str) -> str:
    name = path.rsplit("/", 1)[1]
    if shadows:
        return f"added {path}, which hides {shadows} on PATH"
    if path == "/etc/ld.so.preload":
        return f"added {path}"
    if _in_site_dir(path) and (name.endswith(".pth") or name.split(".")[0] in _STARTUP_HOOKS):
        return f"added the Python start-up hook {path}"
    if _STDLIB_DIR.search(path.rsplit("/", 1)[0]) and name != "__pycache__":
        return f"added {path} to Python's standard library directory"
    if path.count("/") == 1 and name in _RUNNER_CONFIG:
        return f"added the test runner's configuration {path}"
    return ""


def _executes(path: str, state: PathState) -> bool:
    """Whether a change to what is at `path` changes what a verifier runs."""
    if state.kind is EntryKind.OTHER:
        return False
    if path == "/etc" or path.startswith("/etc/"):  # configuration: only what starts code
        return path.startswith(_ETC_STARTS_CODE)
    if state.kind is not EntryKind.FILE:
        return True  # links and directories of programs and libraries
    name = path.rsplit("/", 1)[1]
    return (
        state.executable
        or name.endswith(".so")
        or ".so." in name
        or ("/python" in path and name.endswith(_PYTHON_CODE))
    )


def _in_site_dir(path: str) -> bool:
    return "/site-packages/" in path or "/dist-packages/" in path or "/python" in path


def _ld_cache_reasons(before: bytes, after: bytes) -> list[str]:
    old, new = _ld_cache_entries(before), _ld_cache_entries(after)
    if new is None:
        return ["rewrote /etc/ld.so.cache into something the loader's format is not"]
    moved = sorted(name for name, paths in (old or {}).items() if not paths <= new.get(name, set()))
    outside = sorted(
        path
        for name, paths in new.items()
        for path in paths - (old or {}).get(name, set())
        if not path.startswith(tuple(f"{tree}/" for tree in SYSTEM_TREES))
    )
    reasons = []
    if moved:
        named = first_of(moved, _NAMED_AT_MOST)
        reasons.append(f"/etc/ld.so.cache no longer finds {named} where it did")
    if outside:
        named = first_of(outside, _NAMED_AT_MOST)
        reasons.append(f"/etc/ld.so.cache names libraries outside the system: {named}")
    return reasons


def _ld_cache_entries(data: bytes) -> dict[str, set[str]] | None:
    """soname -> paths of a glibc loader cache (the 1.1 format); None if it is not one."""
    if not data:
        return {}
    if not data.startswith(_LD_CACHE_MAGIC) or len(data) < _LD_CACHE_HEADER:
        return None
    (count,) = struct.unpack_from("<I", data, len(_LD_CACHE_MAGIC))
    if _LD_CACHE_HEADER + count * _LD_CACHE_ENTRY.size > len(data):
        return None
    entries: dict[str, set[str]] = {}
    for index in range(count):
        _, key, value, _, _ = _LD_CACHE_ENTRY.unpack_from(
            data, _LD_CACHE_HEADER + index * _LD_CACHE_ENTRY.size
        )
        name, path = _string(data, key), _string(data, value)
        if name is None or path is None:
            return None
        entries.setdefault(name, set()).add(path)
    return entries


def _string(data: bytes, offset: int) -> str | None:
    end = data.find(b"\0", offset)
    if offset >= len(data) or end < 0:
        return None
    return data[offset:end].decode("utf-8", "replace")
