"""The image store's domain: what an image is, what a build reports, what a build decided."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

__all__ = [
    "BuildOutcome",
    "Image",
    "ImageConfig",
    "ImageProgress",
    "ImageSummary",
    "ProgressCallback",
    "PruneReport",
]

_ROOT_USERS = ("", "root", "0", "root:root", "0:0")


class ImageConfig(BaseModel):
    """What the image says a process should start with (the OCI config's runtime part)."""

    model_config = ConfigDict(frozen=True)

    env: dict[str, str] = Field(default_factory=dict)
    """Environment variables, in the image's order."""
    workdir: str = "/"
    """Working directory of the first process."""
    user: str = ""
    """User (name, uid or uid:gid) the process runs as; empty means root."""
    entrypoint: list[str] = Field(default_factory=list)
    """ENTRYPOINT, exec form."""
    cmd: list[str] = Field(default_factory=list)
    """CMD, exec form (arguments of the entrypoint when both are set)."""

    def user_refusal(self, image: str) -> str:
        """Why a sandbox cannot run `image` (as a message names it) as it asks ("" if it can):
        every command of a sandbox (setup, agent, verifier) runs as its root, so a USER would
        be ignored."""
        if self.user.strip() in _ROOT_USERS:
            return ""
        return (
            f"{image} sets USER {self.user}; not supported: setup, the agent and the "
            "verifier all run as the sandbox's root; drop the USER line (or set USER root) "
            "and have the agent's command switch user if it must"
        )


class Image(BaseModel):
    """A ready image: its content id and its unpacked root filesystem, never written again."""

    model_config = ConfigDict(frozen=True)

    id: str
    """Content id (sha256 hex of the image config, which names every layer's digest)."""
    names: list[str]
    """Local names pointing at it (e.g. "localhost/rollout/base:latest")."""
    rootfs: Path
    """Root filesystem directory; a sandbox mounts it read-only (as an overlay lower layer)."""
    config: ImageConfig


class ImageSummary(BaseModel):
    """One line of `list`."""

    id: str
    names: list[str]
    size: str
    """Size as the container storage reports it (e.g. "271 MB")."""
    unpacked: bool
    """Whether its root filesystem directory is already made."""


class ImageProgress(BaseModel):
    """One progress line of a build, import or unpack (the server turns these into events)."""

    image: str
    step: str
    """Which step: "base", "import", "build", "unpack", or a Dockerfile step ("STEP 3/7: ...")."""
    message: str


ProgressCallback = Callable[[ImageProgress], None]


class BuildOutcome(BaseModel):
    """The store's record of one request: served from its cache, or made."""

    image: str
    key: str
    """Content key of the request (source, inputs' digests, parent image ids)."""
    result: Literal["hit", "built"]
    image_id: str


class PruneReport(BaseModel):
    """What a prune removed."""

    images_removed: int
    unpacked_removed: list[str]
    """Image ids whose root filesystem directory was deleted."""
