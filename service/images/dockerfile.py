"""Dockerfiles, built by buildah into cached layers on images the store already has.

Why buildah: it is a Debian package, runs as root here with `--isolation chroot` (its `oci`
isolation fails on these machines: crun refuses hybrid cgroups), honours every instruction
(RUN, COPY/ADD, WORKDIR, ENV, ARG, USER, ...) and caches each step's layer by content with
`--layers` (the instruction, its inputs' digests, the parent layer). Pulling is off: `FROM`
must name an image of the store, which this module checks first so the error says how to
provide it. RUN steps run as root in a chroot with the host's network: a Dockerfile is
operator input, not the agent's.

Above buildah's step cache, the store keys a whole build by content (`build_key`): the
Dockerfile, the build args, every file of the context and the ids of the FROM images. A
rebuild with the same key needs no buildah run at all.
"""

from __future__ import annotations

import hashlib
import os
import re
from pathlib import Path

from service.errors import ImageError
from service.images.models import ImageProgress, ProgressCallback
from service.images.storage import ContainerStorage, qualify

__all__ = ["build_dockerfile", "build_key", "context_digest", "from_images"]

_CONTINUATION = re.compile(r"\\\s*\n")
_VARIABLE = re.compile(r"\$(?:\{(\w+)(?::-([^}]*))?\}|(\w+))")
_STEP = re.compile(r"^STEP \d+/\d+: ")


def from_images(dockerfile: str, build_args: dict[str, str], *, image: str) -> list[str]:
    """The images the FROM lines name (ARGs expanded), leaving out earlier stages and scratch."""
    args: dict[str, str] = {}
    stages: set[str] = {"scratch"}
    images: list[str] = []
    saw_from = False
    for line in _CONTINUATION.sub(" ", dockerfile).splitlines():
        words = line.split()
        if not words or words[0].startswith("#"):
            continue
        instruction = words[0].upper()
        if instruction == "ARG" and not saw_from and len(words) > 1:
            key, _, default = words[1].partition("=")
            args[key] = build_args.get(key, default)
        elif instruction == "FROM":
            saw_from = True
            operands = [w for w in words[1:] if not w.startswith("--")]
            if not operands:
                raise ImageError(image, line, "FROM names no image")
            named = _expand(operands[0], args)
            if named.lower() not in stages:
                images.append(named)
            if len(operands) >= 3 and operands[1].lower() == "as":
                stages.add(operands[2].lower())
    if not saw_from:
        raise ImageError(image, "FROM", "the Dockerfile has no FROM line")
    return images


def _expand(text: str, args: dict[str, str]) -> str:
    def value(match: re.Match[str]) -> str:
        return args.get(match[1] or match[3]) or (match[2] or "")

    return _VARIABLE.sub(value, text)


def context_digest(context: Path) -> str:
    """sha256 over every path, mode, symlink target and file content under `context`."""
    digest = hashlib.sha256()
    for directory, dirnames, filenames in os.walk(context):
        dirnames.sort()
        for name in sorted(filenames + [d for d in dirnames if Path(directory, d).is_symlink()]):
            path = Path(directory, name)
            stat = path.lstat()
            digest.update(f"{path.relative_to(context)}\0{stat.st_mode:o}\0".encode())
            if path.is_symlink():
                digest.update(os.readlink(path).encode())
            elif path.is_file():
                digest.update(_file_digest(path))
            digest.update(b"\0")
    return digest.hexdigest()


def _file_digest(path: Path) -> bytes:
    with path.open("rb") as file:
        return hashlib.file_digest(file, "sha256").digest()


def build_key(
    dockerfile: str, build_args: dict[str, str], context: str, parent_ids: list[str]
) -> str:
    """Content key of a build: same key, same image."""
    parts = [dockerfile, repr(sorted(build_args.items())), context, *parent_ids]
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()


async def build_dockerfile(
    storage: ContainerStorage,
    *,
    name: str,
    context: Path,
    dockerfile: Path,
    build_args: dict[str, str],
    on_progress: ProgressCallback,
) -> None:
    """buildah-build `dockerfile` in `context`, tagged `name`; an ImageError names the step."""
    current = ["FROM"]

    def track(progress: ImageProgress) -> None:
        if _STEP.match(progress.message):
            current[0] = _STEP.sub("", progress.message)
        on_progress(progress.model_copy(update={"step": current[0]}))

    # --force-rm: a failed step's container (and its overlay mount) would otherwise stay behind.
    argv = ["build", "--layers", "--force-rm", "--isolation", "chroot", "--pull=never"]
    argv += ["--format", "oci"]
    argv += [f"--build-arg={key}={value}" for key, value in sorted(build_args.items())]
    argv += ["-f", str(dockerfile), "-t", qualify(name), str(context)]
    try:
        await storage.run(argv, image=name, step="build", on_progress=track)
    except ImageError as exc:
        raise ImageError(name, f"step {current[0]!r}", exc.detail) from exc
