"""Images: root filesystems for local sandboxes, made from Debian, OCI images or Dockerfiles.

Work in progress: the store makes images; sandboxes do not use them yet (the next step mounts
`Image.rootfs` read-only as the lower layer of each sandbox's overlay).

| source                             | made by                    | named / cached                |
| ---------------------------------- | -------------------------- | ----------------------------- |
| Debian base (`rollout/base`, alias | mmdebstrap minbase +       | both names; made once per     |
| `debian:bookworm`), base.py        | python3 bash coreutils     | recipe (suite + packages)     |
|                                    | ca-certificates git        |                               |
| OCI layout dir, `oci-archive`,     | skopeo copy (one image of  | the given name; layers shared |
| `docker save` tar, `docker://`     | several picked by name)    | by digest; re-run each import |
| (oci.py)                           |                            |                               |
| Dockerfile + context               | buildah build --layers,    | the given name; each step's   |
| (dockerfile.py)                    | chroot isolation           | layer by buildah; the whole   |
|                                    |                            | build by content key (store)  |

Names are spelled as Docker spells them, a registry host kept (`ghcr.io/org/base:1` is stored
and found as itself, `debian:bookworm` as `docker.io/library/debian:bookworm`), and the
operator's aliases map public names onto local images: names.py.

Every image lands in `<cache_dir>/images/containers` (container storage) and is unpacked once
per content id into `<cache_dir>/images/unpacked/<id>/rootfs` with its config in `image.json`
(rootfs.py). Layout and cache records: store.py. Operator command: `python -m service.images`.
"""

from __future__ import annotations

from service.images.base import BASE_NAMES
from service.images.dockerfile import final_stage, from_images
from service.images.models import (
    BuildOutcome,
    Image,
    ImageConfig,
    ImageProgress,
    ImageSummary,
    ProgressCallback,
    PruneReport,
)
from service.images.names import qualify
from service.images.owned import owned_copy
from service.images.store import BASE_NOT_MADE, ImageStore

__all__ = [
    "BASE_NAMES",
    "BASE_NOT_MADE",
    "BuildOutcome",
    "Image",
    "ImageConfig",
    "ImageProgress",
    "ImageStore",
    "ImageSummary",
    "ProgressCallback",
    "PruneReport",
    "final_stage",
    "from_images",
    "owned_copy",
    "qualify",
]
