"""OCI sources: an image layout, an `oci-archive`, a `docker save`/`podman save` tarball, or a
registry reference, copied into the store's container storage by skopeo.

A source is a skopeo transport string (`oci:DIR[:TAG]`, `oci-archive:FILE[:TAG]`,
`docker-archive:FILE[:NAME:TAG]`, `docker://REGISTRY/NAME:TAG`) or a bare path, whose kind is
read from its content: a directory holding `oci-layout` is a layout; a tarball holding
`manifest.json` is a `docker save` archive, one holding `oci-layout` an oci-archive.

A layout or archive may hold several images: skopeo then needs to be told which. The images
are listed (a `docker save` archive's RepoTags, an OCI index's `ref.name` annotations) and
one is picked by `select`; with none picked, the error lists them.
"""

from __future__ import annotations

import json
import tarfile
from pathlib import Path
from typing import Any

from service.errors import ImageError
from service.images.models import ProgressCallback
from service.images.process import run_tool
from service.images.storage import ContainerStorage

__all__ = ["TRANSPORTS", "archive_images", "import_oci", "skopeo_source"]

TRANSPORTS = ("oci:", "oci-archive:", "docker-archive:", "docker://")
_REF_NAME = "org.opencontainers.image.ref.name"


def skopeo_source(source: str, select: str = "") -> str:
    """The skopeo transport string of `source` (see the module docstring), naming the image
    `select` of a layout or archive; one that holds several images needs `select`."""
    if source.startswith(TRANSPORTS):
        if select:
            raise ImageError(source, "import", "a transport string names its image itself")
        return source
    path = Path(source)
    if path.is_dir():
        if not (path / "oci-layout").is_file():
            raise ImageError(source, "import", "a directory source must be an OCI image layout")
        kind = "oci"
    elif path.is_file():
        kind = _archive_kind(path)
    else:
        raise ImageError(
            source, "import", f"no such file or directory, and not one of {', '.join(TRANSPORTS)}"
        )
    images = archive_images(path)
    listed = "; ".join(" = ".join(names) for names in images) or "no image"
    if select and not any(select in names for names in images):
        raise ImageError(source, "import", f"it holds no image {select!r}; it holds: {listed}")
    if not select and len(images) > 1:
        raise ImageError(
            source, "import", f"it holds {len(images)} images ({listed}); pick one with --image REF"
        )
    return f"{kind}:{path.resolve()}" + (f":{select}" if select else "")


def archive_images(path: Path) -> list[tuple[str, ...]]:
    """Each image a layout or archive holds, by its names (a docker save archive's RepoTags,
    an OCI index's ref.name annotation; `@N` for an unnamed one, N its index)."""
    if path.is_dir():
        return _index_images(_json(path, (path / "index.json").read_bytes))
    with tarfile.open(path) as archive:
        members = {member.name.lstrip("./"): member for member in archive.getmembers()}
        member = members.get("manifest.json") or members.get("index.json")
        file = archive.extractfile(member) if member is not None else None
        data = _json(path, file.read) if file is not None else None
    if isinstance(data, list):  # a docker save manifest: one entry per image
        return [tuple(entry.get("RepoTags") or [f"@{i}"]) for i, entry in enumerate(data)]
    return _index_images(data)


def _index_images(index: Any) -> list[tuple[str, ...]]:
    manifests = (index or {}).get("manifests") or []
    return [
        ((manifest.get("annotations") or {}).get(_REF_NAME) or f"@{i}",)
        for i, manifest in enumerate(manifests)
    ]


def _json(path: Path, read: Any) -> Any:
    try:
        return json.loads(read())
    except (OSError, ValueError) as exc:
        raise ImageError(str(path), "import", f"cannot read its image list: {exc}") from exc


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
    *,
    select: str = "",
) -> str:
    """Copy `source` (its image `select`, if it holds several) into the storage as `name`;
    return its image id."""
    transport = skopeo_source(source, select)
    storage.root.mkdir(parents=True, exist_ok=True)
    await run_tool(
        storage.tool(["skopeo", "copy", transport, storage.transport(name)]),
        image=name,
        step="import",
        on_progress=on_progress,
        timeout_s=storage.timeout_s,
    )
    image_id = await storage.image_id(name)
    if image_id is None:
        raise ImageError(name, "import", f"skopeo copied {source} but the storage lacks it")
    return image_id
