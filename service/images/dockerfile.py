"""Dockerfiles, built by buildah into cached layers on images the store already has.

Why buildah: it is a Debian package, runs as root here with `--isolation chroot` (its `oci`
isolation fails on these machines: crun refuses hybrid cgroups), honours every instruction
(RUN, COPY/ADD, WORKDIR, ENV, ARG, USER, ...) and caches each step's layer by content with
`--layers` (the instruction, its inputs' digests, the parent layer). Pulling is off: `FROM`
must name an image of the store, which this module checks first so the error says how to
provide it. Each FROM image is then pinned: the Dockerfile buildah reads names it by the image
id the store resolved (`pin_from`), so `names.qualify` and the operator's aliases decide what a
FROM means, never buildah's own short-name rules. RUN steps run as root in a chroot with the
host's network: a Dockerfile is operator input, not the agent's.

Above buildah's step cache, the store keys a whole build by content (`build_key`): the
Dockerfile, the build args, every file of the context and the ids of the FROM images. A
rebuild with the same key needs no buildah run at all.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import re
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from service.errors import ImageError
from service.images.models import ImageProgress, ProgressCallback
from service.images.names import qualify
from service.images.storage import ContainerStorage

__all__ = [
    "build_dockerfile",
    "build_key",
    "context_digest",
    "final_stage",
    "from_images",
    "pin_from",
]

_VARIABLE = re.compile(r"\$(?:\{(\w+)(?::-([^}]*))?\}|(\w+))")
_STEP = re.compile(r"^STEP \d+/\d+: ")


@dataclass
class _Stage:
    """One FROM line and the instructions under it."""

    line: int
    """Index of the FROM line in the Dockerfile's lines (its first, if it continues)."""
    lines: int
    """How many lines it spans."""
    image: str | None
    """The image it names (ARGs expanded), or None for scratch or an earlier stage."""
    stage_of: str | None
    """The earlier stage it starts from, if it names one."""
    alias: str | None
    """Its own `AS` name."""
    instructions: list[tuple[str, str]] = field(default_factory=list)
    """(INSTRUCTION, rest of the line), in order."""


def _stages(dockerfile: str, build_args: dict[str, str], *, image: str) -> list[_Stage]:
    """Every stage of the Dockerfile, in order (ARGs before the first FROM expanded)."""
    args: dict[str, str] = {}
    stages: list[_Stage] = []
    for index, count, line in _logical_lines(dockerfile):
        words = line.split()
        if not words or words[0].startswith("#"):
            continue
        instruction = words[0].upper()
        if instruction == "ARG" and not stages and len(words) > 1:
            key, _, default = words[1].partition("=")
            args[key] = build_args.get(key, default)
        elif instruction == "FROM":
            operands = [w for w in words[1:] if not w.startswith("--")]
            if not operands:
                raise ImageError(image, line, "FROM names no image")
            named = _expand(operands[0], args)
            earlier = {stage.alias for stage in stages}
            stage_of = named.lower() if named.lower() in earlier else None
            plain = stage_of is None and named.lower() != "scratch"
            named_as = len(operands) >= 3 and operands[1].lower() == "as"
            alias = operands[2].lower() if named_as else None
            stages.append(_Stage(index, count, named if plain else None, stage_of, alias))
        elif stages:
            stages[-1].instructions.append((instruction, line.strip()[len(words[0]) :].strip()))
    if not stages:
        raise ImageError(image, "FROM", "the Dockerfile has no FROM line")
    return stages


def _logical_lines(dockerfile: str) -> Iterator[tuple[int, int, str]]:
    """(first line index, line count, text) of each line, continuations joined."""
    lines = dockerfile.split("\n")
    index = 0
    while index < len(lines):
        count, text = 1, lines[index]
        while text.rstrip().endswith("\\") and index + count < len(lines):
            text = text.rstrip()[:-1] + " " + lines[index + count]
            count += 1
        yield index, count, text
        index += count


def from_images(dockerfile: str, build_args: dict[str, str], *, image: str) -> list[str]:
    """The images the FROM lines name (ARGs expanded), leaving out earlier stages and scratch."""
    return [stage.image for stage in _stages(dockerfile, build_args, image=image) if stage.image]


def final_stage(
    dockerfile: str, build_args: dict[str, str], *, image: str
) -> tuple[str | None, list[tuple[str, str]]]:
    """The image the last stage starts from, through the earlier stages it builds on (None
    for scratch), and the instructions of that chain of stages, in order."""
    stages = _stages(dockerfile, build_args, image=image)
    chain = [stages[-1]]
    while chain[0].stage_of is not None:
        earlier = stages[: stages.index(chain[0])]
        chain.insert(0, next(s for s in reversed(earlier) if s.alias == chain[0].stage_of))
    return chain[0].image, [step for stage in chain for step in stage.instructions]


def pin_from(
    dockerfile: str, build_args: dict[str, str], image_ids: dict[str, str], *, image: str
) -> str:
    """The Dockerfile with each FROM image replaced by its id (`image_ids`: FROM image as
    named, ARGs expanded -> id); other lines are kept as they are."""
    lines = dockerfile.split("\n")
    for stage in reversed(_stages(dockerfile, build_args, image=image)):
        if stage.image is None:
            continue
        span = lines[stage.line : stage.line + stage.lines]
        words = " ".join(line.rstrip().removesuffix("\\") for line in span).split()
        position = next(i for i, w in enumerate(words) if i and not w.startswith("--"))
        words[position] = image_ids[stage.image]
        lines[stage.line : stage.line + stage.lines] = [" ".join(words)]
    return "\n".join(lines)


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
    dockerfile: str,
    build_args: dict[str, str],
    on_progress: ProgressCallback,
    scratch: Path,
) -> None:
    """buildah-build the Dockerfile text `dockerfile` (its FROM lines pinned) in `context`,
    tagged `name`; an ImageError names the step. The text is written to a directory made
    under `scratch` (the store's, so that one a killed build left is the store's to sweep)."""
    current = ["FROM"]

    def track(progress: ImageProgress) -> None:
        if _STEP.match(progress.message):
            current[0] = _STEP.sub("", progress.message)
        on_progress(progress.model_copy(update={"step": current[0]}))

    # --force-rm: a failed step's container (and its overlay mount) would otherwise stay behind.
    argv = ["build", "--layers", "--force-rm", "--isolation", "chroot", "--pull=never"]
    argv += ["--format", "oci"]
    argv += [f"--build-arg={key}={value}" for key, value in sorted(build_args.items())]
    await asyncio.to_thread(scratch.mkdir, mode=0o700, parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=scratch) as written:
        path = Path(written, "Dockerfile")
        await asyncio.to_thread(path.write_text, dockerfile)
        argv += ["-f", str(path), "-t", qualify(name), str(context)]
        try:
            await storage.run(argv, image=name, step="build", on_progress=track)
        except ImageError as exc:
            raise ImageError(name, f"step {current[0]!r}", exc.detail) from exc
