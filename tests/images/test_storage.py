"""The store's container storage under processes that share its cache."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest

from service.errors import ImageError
from service.images.models import ImageProgress
from service.images.storage import ContainerStorage, vanished
from service.sandboxes.local.mounts import detach, mount_points_below

_IMAGES = 12


def _quiet(_: ImageProgress) -> None:
    """No progress wanted from these buildah runs."""


@pytest.fixture
def storage(tmp_path: Path) -> Iterator[ContainerStorage]:
    """A storage of the test's own; buildah processes racing each other can leave its
    overlay driver's home mounted, which would keep pytest from removing tmp_path."""
    yield ContainerStorage(tmp_path / "containers", tmp_path / "run", timeout_s=120)
    for point in mount_points_below(str(tmp_path)):
        detach(point)


async def _buildah(storage: ContainerStorage, *args: str) -> str:
    lines = await storage.run(args, image="tests", step="make", on_progress=_quiet)
    return lines[-1].strip() if lines else ""


async def _layered_image(storage: ContainerStorage, name: str, content: Path) -> None:
    """An image with one layer of its own (listing an image reads its layers)."""
    container = await _buildah(storage, "from", "scratch")
    await _buildah(storage, "copy", container, str(content), "/content")
    await _buildah(storage, "config", "--label", f"name={name}", container)
    await _buildah(storage, "commit", "-q", container, f"localhost/tests/{name}")
    await _buildah(storage, "rm", container)


async def test_listing_survives_images_removed_while_it_lists(
    storage: ContainerStorage, tmp_path: Path
) -> None:
    # Another process's prune or `images rm` removing an image between buildah listing the
    # ids and reading that image failed the whole listing ("image not known") and with it
    # whatever asked: a server resolving an image for a rollout, `images list`.
    content = tmp_path / "content"
    content.mkdir()
    for index in range(64):
        (content / f"file{index}").write_bytes(bytes([index]) * 4096)
    names = [f"image{index}" for index in range(_IMAGES)]
    for name in names:
        await _layered_image(storage, name, content)
    assert len(await storage.images()) == _IMAGES
    removing = asyncio.Event()
    listings: list[int] = []

    async def list_until_removed() -> None:
        while not removing.is_set() or not listings or listings[-1]:
            listings.append(len(await storage.images()))

    listers = [asyncio.create_task(list_until_removed()) for _ in range(4)]
    await asyncio.sleep(0.2)  # the listers are under way
    removing.set()
    for name in names:
        await _buildah(storage, "rmi", f"localhost/tests/{name}")
    await asyncio.gather(*listers)
    assert listings[-1] == 0
    assert len(listings) > _IMAGES  # the listings overlapped the removals


@pytest.mark.parametrize(
    "said",
    [
        "Error: image not known",
        'Error: locating item named "manifest" for image with ID "afd31a" (consider removing '
        "the image to resolve the issue): file does not exist",
    ],
)
def test_both_ways_buildah_says_an_image_went_while_it_read_it_count_as_vanished(
    said: str,
) -> None:
    assert vanished(ImageError("x", "query", f"buildah failed (exit 125): {said}"))
    assert not vanished(ImageError("x", "query", "buildah failed (exit 125): Error: no space"))
