"""The capture proxy packed for a remote sandbox: its sources and the libraries they import.

The standalone proxy (`service.proxy.remote.standalone`) needs Python >= 3.11 and, beyond the
standard library, the compiled libraries httptools, orjson and pydantic (with
pydantic-core). A proxy directory in a sandbox is laid out as

    <dir>/src/service/...   this service's `service/__init__.py`, `door.py`, `errors.py`,
                            `listen_address.py`, `models/`, `proxy/`
    <dir>/lib/...           those libraries (absent when the sandbox's python has them)
    <dir>/DIGEST            `source_digest()` of src, written by the template build

and is kept apart from the sandbox's own site-packages, so a task that pins other versions
of pydantic is untouched. The libraries come from the template (`scripts/build_e2b_template.py`
pip-installs `requirements()` into `<dir>/lib`), or else are packed from this service's own
installed copies, which load only where the sandbox's python has the host's ABI (`host_abi()`).
"""

from __future__ import annotations

import functools
import hashlib
import importlib.metadata
import importlib.util
import io
import re
import sys
import sysconfig
import tarfile
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path

import service

__all__ = [
    "IMPORTS",
    "host_abi",
    "libraries_tarball",
    "requirements",
    "source_digest",
    "source_files",
    "sources_tarball",
]

IMPORTS = ("httptools", "orjson", "pydantic_core", "pydantic")
"""Modules the standalone proxy imports beyond the standard library."""
_DISTRIBUTIONS = ("httptools", "orjson", "pydantic")
"""The distributions that provide IMPORTS (with their dependencies)."""
_SPEEDUPS = ("uvloop",)
"""Used by the proxy when present: worth a template's disk, not a per-rollout upload."""
_SOURCE_PARTS = ("__init__.py", "door.py", "errors.py", "listen_address.py", "models", "proxy")
"""What of the `service` package the standalone proxy imports."""
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
_GZIP_LEVEL = 6


def source_files() -> dict[str, Path]:
    """The proxy's sources by path under `src/` (e.g. `service/proxy/core.py`)."""
    package = Path(service.__file__).resolve().parent
    files: dict[str, Path] = {}
    for part in _SOURCE_PARTS:
        path = package / part
        # Recursive: the proxy has subpackages (`proxy/dialects`).
        for file in sorted(path.rglob("*.py")) if path.is_dir() else [path]:
            files[file.relative_to(package.parent).as_posix()] = file
    return files


@functools.cache
def source_digest() -> str:
    """Names the proxy's source tree: equal digests, same proxy."""
    digest = hashlib.sha256()
    for name, path in sorted(source_files().items()):
        data = path.read_bytes()
        digest.update(b"%d:%s\0%d:" % (len(name), name.encode(), len(data)) + data)
    return digest.hexdigest()[:32]


@functools.cache
def sources_tarball() -> bytes:
    """`src/...` and `DIGEST`, as a gzipped tar to unpack into a proxy directory."""
    files = [(f"src/{name}", path) for name, path in source_files().items()]
    return _pack(_with_bytecode(files), {"DIGEST": source_digest().encode() + b"\n"})


@functools.cache
def libraries_tarball() -> bytes:
    """`lib/...`: this service's installed copies of the proxy's libraries (host ABI only)."""
    files = [(f"lib/{name}", path) for name, path in _library_files()]
    return _pack(_with_bytecode(files), {})


def host_abi() -> str:
    """What a sandbox's python must report for `libraries_tarball()` to load there."""
    return f"{sys.implementation.cache_tag}-{sysconfig.get_platform()}"


def requirements() -> list[str]:
    """Pinned requirements (this service's versions) for a template's `pip install`."""
    pinned = []
    for name in (*_DISTRIBUTIONS, *_SPEEDUPS):
        try:
            pinned.append(f"{name}=={importlib.metadata.version(name)}")
        except importlib.metadata.PackageNotFoundError:
            if name not in _SPEEDUPS:
                raise
    return pinned


def _with_bytecode(files: list[tuple[str, Path]]) -> list[tuple[str, Path]]:
    """`files` and this interpreter's compiled caches of the .py among them: the sandbox's
    python (same ABI) then imports them without compiling (pydantic: ~0.6 s saved). Each
    file keeps its mtime in the tarball, which is what a cache is checked against."""
    compiled = []
    for name, path in files:
        if path.suffix == ".py":
            cache = Path(importlib.util.cache_from_source(str(path)))
            if cache.is_file():
                compiled.append((f"{name.rpartition('/')[0]}/__pycache__/{cache.name}", cache))
    return files + compiled


def _pack(files: Iterable[tuple[str, Path]], extra: Mapping[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz", compresslevel=_GZIP_LEVEL) as tar:
        for name, path in files:
            data = path.read_bytes()
            info = tarfile.TarInfo(name)
            info.size, info.mode, info.mtime = len(data), 0o644, int(path.stat().st_mtime)
            tar.addfile(info, io.BytesIO(data))
        for name, data in extra.items():
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), 0o644
            tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def _library_files() -> Iterator[tuple[str, Path]]:
    """(path under lib/, installed file) of every file of the libraries and their
    dependencies, compiled caches and console scripts left out."""
    for distribution in _closure(_DISTRIBUTIONS):
        for file in distribution.files or []:
            if file.parts[0] == ".." or "__pycache__" in file.parts:
                continue
            yield file.as_posix(), Path(str(distribution.locate_file(file)))


def _closure(names: Iterable[str]) -> list[importlib.metadata.Distribution]:
    """The installed distributions `names` need, extras and unmet markers left out."""
    found: dict[str, importlib.metadata.Distribution] = {}
    todo = list(names)
    while todo:
        requirement = todo.pop()
        match = _NAME.match(requirement)
        name = match.group().lower().replace("_", "-") if match else ""
        if not name or name in found or "extra ==" in requirement:
            continue
        try:
            distribution = importlib.metadata.distribution(name)
        except importlib.metadata.PackageNotFoundError:
            if ";" in requirement:
                continue  # a marker that does not hold here (e.g. an older python)
            raise
        found[name] = distribution
        todo.extend(distribution.requires or [])
    return list(found.values())
