"""The image store's container storage: buildah and skopeo pointed at one directory of the cache.

Images live as layers in a containers/storage tree (overlay driver) under the store's own
directory, never in the machine's /var/lib/containers, so the service's images are its own and
removing the cache removes them. Names are spelled by `names.qualify` (`debian:bookworm` is
stored as `docker.io/library/debian:bookworm`); nothing is ever pulled, so every name, with a
registry host or not, means an image of the store, never a registry's.

A rootless storage (an unprivileged server's own) runs every tool through `rootless.py`: as
root of a user namespace mapping the server's ids alone, so its layers are the server's files.
A layer's other owners (an imported image's `_apt`, uid 42) have no id there: overlay's
`ignore_chown_errors` makes them root's, as the owned copy of the base has them (owned.py).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from service.errors import ImageError
from service.host_python import host_python
from service.images import rootless
from service.images.models import ImageConfig, ImageProgress, ProgressCallback
from service.images.names import candidates, qualify
from service.images.process import run_tool

__all__ = ["ContainerStorage"]

_QUERY_TIMEOUT_S = 120.0
_ROOTLESS_OPTION = "overlay.ignore_chown_errors=true"
_LIST_TRIES = 5
_VANISHED = ("image not known", 'locating item named "manifest"')
"""What buildah says of an image removed while it was reading it: gone, or its record
still there and its manifest already deleted."""


def _ignore(_: ImageProgress) -> None:
    """Progress sink of queries (listing, inspecting): their output is data, not progress."""


@dataclass(frozen=True)
class ContainerStorage:
    """buildah/skopeo argv builders and queries for the storage rooted at `root`."""

    root: Path
    runroot: Path
    timeout_s: float
    rootless: bool = False

    def tool(self, argv: Sequence[str]) -> list[str]:
        """`argv` as run on this storage: in a user namespace of its own if rootless."""
        if not self.rootless:
            return list(argv)
        return [host_python().executable, "-I", rootless.__file__, str(self.runroot), *argv]

    def buildah(self, *args: str) -> list[str]:
        return self.tool(self.plain_buildah(*args))

    def plain_buildah(self, *args: str) -> list[str]:
        """buildah's argv on this storage, run as it is (`buildah` wraps it in `tool`)."""
        return [
            "buildah",
            "--root", str(self.root),
            "--runroot", str(self.runroot),
            "--storage-driver", "overlay",
            *(["--storage-opt", _ROOTLESS_OPTION] if self.rootless else []),
            *args,
        ]  # fmt: skip

    def transport(self, name: str) -> str:
        """The skopeo transport string of a local name in this storage."""
        option = f":{_ROOTLESS_OPTION}" if self.rootless else ""
        return f"containers-storage:[overlay@{self.root}+{self.runroot}{option}]{qualify(name)}"

    async def run(
        self, args: Sequence[str], *, image: str, step: str, on_progress: ProgressCallback
    ) -> list[str]:
        return await run_tool(
            self.buildah(*args),
            image=image,
            step=step,
            on_progress=on_progress,
            timeout_s=self.timeout_s,
        )

    async def query(self, *args: str, image: str = "", step: str = "query") -> Any:
        """A buildah command whose output is JSON."""
        lines = await run_tool(
            self.buildah(*args),
            image=image,
            step=step,
            on_progress=_ignore,
            timeout_s=_QUERY_TIMEOUT_S,
        )
        return json.loads("\n".join(lines) or "null")

    async def images(self) -> list[dict[str, Any]]:
        """Every named image: `id` (full), `names`, `size` (layer-cache images left out).

        buildah lists the ids, then reads each image: one removed in between, by another
        process sharing the cache (a prune, `images rm`, another server), fails the whole
        listing (`vanished`). The listing is then taken again, a few times.
        """
        if not self.root.exists():
            return []
        for attempt in range(1, _LIST_TRIES + 1):
            try:
                listed = await self.query("images", "--json", "--no-trunc")
                break
            except ImageError as exc:
                if not vanished(exc) or attempt == _LIST_TRIES:
                    raise
        images = list(listed or [])
        for image in images:
            # A bare hex id: buildah takes it as is, and a path holding it can be an overlay
            # lowerdir (where ":" separates layers).
            image["id"] = str(image["id"]).removeprefix("sha256:")
        return images

    async def image_id(self, name: str) -> str | None:
        """The id a local name points at, or None."""
        found = await self.find(name)
        return found[0] if found else None

    async def find(self, name: str) -> tuple[str, str] | None:
        """(id, stored name) of the first of `name`'s spellings (`names.candidates`) held."""
        images = await self.images()
        for spelling in candidates(name):
            for image in images:
                if spelling in (image.get("names") or []):
                    return str(image["id"]), spelling
        return None

    async def config(self, image_id: str) -> ImageConfig | None:
        """The image's config; None when it was removed meanwhile (`vanished`)."""
        try:
            inspected = await self.query("inspect", "--type", "image", image_id, image=image_id)
        except ImageError as exc:
            if vanished(exc):
                return None
            raise
        return image_config(inspected["OCIv1"].get("config") or {})


def vanished(error: ImageError) -> bool:
    """Whether buildah failed because the image it read was being removed."""
    return any(marker in str(error) for marker in _VANISHED)


def image_config(oci: dict[str, Any]) -> ImageConfig:
    """The runtime part of an OCI image config."""
    env = dict(item.split("=", 1) for item in oci.get("Env") or [] if "=" in item)
    return ImageConfig(
        env=env,
        workdir=oci.get("WorkingDir") or "/",
        user=oci.get("User") or "",
        entrypoint=list(oci.get("Entrypoint") or []),
        cmd=list(oci.get("Cmd") or []),
    )
