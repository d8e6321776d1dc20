"""OCI sources: an image layout, an `oci-archive`, a `docker save`/`podman save` tarball, or a
registry reference, copied into the store's container storage by skopeo.

A source is a skopeo transport string (`oci:DIR[:TAG]`, `oci-archive:FILE[:TAG]`,
`docker-archive:FILE[:NAME:TAG]`, `docker://REGISTRY/NAME:TAG`) or a bare path, whose kind is
read from its content: a directory holding `oci-layout` is a layout; a tarball holding
`manifest.json` is a `docker save` archive, one holding `oci-layout` an oci-archive.
"""

from __future__ import annotations

import tarfile
from pathlib import Path

from service.errors import ImageError
from service.images.models import ProgressCallback
from service.images.process import run_tool
from service.images.storage import ContainerStorage

__all__ = ["TRANSPORTS", "import_oci", "skopeo_source"]

TRANSPORTS = ("oci:", "oci-archive:", "docker-archive:", "docker://")


def skopeo_source(source: str) -> str:
    """The skopeo transport string of `source` (see the module docstring)."""
    if source.startswith(TRANSPORTS):
        return source
    path = Path(source)
    if path.is_dir():
        if not (path / "oci-layout").is_file():
            raise ImageError(source, "import", "a directory source must be an OCI image layout")
        return f"oci:{path.resolve()}"
    if path.is_file():
        return f"{_archive_kind(path)}:{path.resolve()}"
    raise ImageError(
        source, "import", f"no such file or directory, and not one of {', '.join(TRANSPORTS)}"
    )


def _archive_kind(path: Path) -> str:
    try:
        with tarfile.open(path) as archive:
            members = {name.lstrip("./") for name in archive.getnames()}
    except (tarfile.TarError, OSError) as exc:
        raise ImageError(str(path), "import", f"not a readable tar archive: {exc}") from exc
    if "manifest.json" in members:
        return "docker-archive"
    if "oci-layout" in members:
        return "oci-archive"
    raise ImageError(str(path), "import", "a tarball with neither manifest.json nor oci-layout")


async def import_oci(
    storage: ContainerStorage,
    source: str,
    name: str,
    on_progress: ProgressCallback,
) -> str:
    """Copy `source` into the storage as `name`; return its image id."""
    storage.root.mkdir(parents=True, exist_ok=True)
    await run_tool(
        ["skopeo", "copy", skopeo_source(source), storage.transport(name)],
        image=name,
        step="import",
        on_progress=on_progress,
        timeout_s=storage.timeout_s,
    )
    image_id = await storage.image_id(name)
    if image_id is None:
        raise ImageError(name, "import", f"skopeo copied {source} but the storage lacks it")
    return image_id
