"""Image fixtures: the Debian base built once per cache, and tiny OCI images made here.

The base lives in the server's cache (`Settings().cache_dir`, i.e. `ROLLOUT_CACHE_DIR`), so it
is built once per machine (mmdebstrap, minutes) and every later session is a cache hit with no
network. OCI tests use a cache of their own in tmp_path: they need no base.
"""

from __future__ import annotations

import asyncio
import shutil
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from service.config import Settings
from service.images import Image, ImageStore
from tests.images.layouts import make_layout, umoci

_TOOLS = ("mmdebstrap", "buildah", "skopeo", "umoci")
_missing = [tool for tool in _TOOLS if shutil.which(tool) is None]
if _missing:
    raise RuntimeError(f"tests/images need the Debian packages {', '.join(_missing)} installed")


@pytest.fixture(scope="session")
def shared_cache() -> Path:
    """The server's cache directory: where the base is built once and kept."""
    return Settings().cache_dir


@pytest.fixture(scope="session")
def base_image(shared_cache: Path) -> Image:
    """The Debian base, built at the first test that needs it (a hit afterwards)."""
    return asyncio.run(ImageStore(shared_cache).base())


@pytest.fixture
async def shared_store(shared_cache: Path, base_image: Image) -> AsyncIterator[ImageStore]:
    """A store on the shared cache, the base already made (its outcomes start empty).

    Afterwards the test's images (`tests/...`) are removed and pruned: each unpacked image is a
    full root filesystem, and the shared cache outlives the session.
    """
    store = ImageStore(shared_cache)
    yield store
    for summary in await store.list():
        for name in summary.names:
            if "/tests/" in name:  # docker.io/tests/..., ghcr.io/tests/..., localhost/tests/...
                await store.remove(name)
    await store.prune()


@pytest.fixture
def oci_layout(tmp_path: Path) -> Path:
    """A tiny OCI image layout (`<dir>:tiny`) made with umoci: two files and a config."""

    def fill(rootfs: Path) -> None:
        (rootfs / "etc").mkdir(parents=True)
        (rootfs / "etc" / "hello").write_text("hello from oci\n")
        tool = rootfs / "usr" / "bin" / "tool"
        tool.parent.mkdir(parents=True)
        tool.write_text("#!/bin/sh\necho tool\n")
        tool.chmod(0o755)

    layout = make_layout(tmp_path, "tiny", fill)
    umoci(
        "config", "--image", f"{layout}:tiny", "--config.env", "GREETING=oci",
        "--config.workingdir", "/work", "--config.user", "1000:1000",
        "--config.entrypoint", "/usr/bin/tool",
    )  # fmt: skip
    return layout
