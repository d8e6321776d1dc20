"""OCI sources: a layout, a docker-save tarball and an oci-archive, imported and unpacked."""

from __future__ import annotations

import asyncio
import io
import json
import os
import subprocess
import tarfile
from pathlib import Path

import pytest

from service.errors import ImageError
from service.images import Image, ImageProgress, ImageStore
from service.images.oci import archive_images, skopeo_source


def _skopeo_copy(source: str, destination: str) -> None:
    subprocess.run(["skopeo", "copy", "--quiet", source, destination], check=True)


def _assert_tiny(image: Image) -> None:
    assert (image.rootfs / "etc" / "hello").read_text() == "hello from oci\n"
    assert (image.rootfs / "usr" / "bin" / "tool").stat().st_mode & 0o777 == 0o755
    assert image.config.env["GREETING"] == "oci"
    assert image.config.workdir == "/work"
    assert image.config.user == "1000:1000"
    assert image.config.entrypoint == ["/usr/bin/tool"]


async def test_import_layout_unpacks_files_and_config(tmp_path: Path, oci_layout: Path) -> None:
    store = ImageStore(tmp_path / "cache")
    seen: list[ImageProgress] = []
    image = await store.import_oci(f"oci:{oci_layout}:tiny", "tests/tiny", seen.append)
    _assert_tiny(image)
    assert "docker.io/tests/tiny:latest" in image.names
    assert image.rootfs == tmp_path / "cache" / "images" / "unpacked" / image.id / "rootfs"
    assert {p.step for p in seen} >= {"import", "unpack"}
    assert (await store.get("tests/tiny")).id == image.id


async def test_import_docker_save_and_oci_archive_by_path(tmp_path: Path, oci_layout: Path) -> None:
    docker_tar, oci_tar = tmp_path / "saved.tar", tmp_path / "image.oci.tar"
    _skopeo_copy(f"oci:{oci_layout}:tiny", f"docker-archive:{docker_tar}:tests/tiny:1")
    _skopeo_copy(f"oci:{oci_layout}:tiny", f"oci-archive:{oci_tar}:tiny")
    store = ImageStore(tmp_path / "cache")
    from_docker = await store.import_oci(str(docker_tar), "tests/from-docker")
    from_oci = await store.import_oci(str(oci_tar), "tests/from-oci")
    _assert_tiny(from_docker)
    _assert_tiny(from_oci)


async def test_bad_sources_fail_naming_them(tmp_path: Path) -> None:
    store = ImageStore(tmp_path / "cache")
    not_a_layout = tmp_path / "plain"
    not_a_layout.mkdir()
    with pytest.raises(ImageError, match="OCI image layout") as raised:
        await store.import_oci(str(not_a_layout), "tests/x")
    assert raised.value.step == "import"
    with pytest.raises(ImageError, match="no such file"):
        await store.import_oci(str(tmp_path / "missing.tar"), "tests/x")
    with pytest.raises(ImageError, match="no spaces"):
        await store.import_oci(str(not_a_layout), "bad name")


async def test_get_unknown_image_says_how_to_provide_it(tmp_path: Path) -> None:
    with pytest.raises(ImageError, match=r"no such image.*import it with") as raised:
        await ImageStore(tmp_path / "cache").get("tests/never-made")
    assert raised.value.image == "tests/never-made"


async def test_list_remove_prune(tmp_path: Path, oci_layout: Path) -> None:
    store = ImageStore(tmp_path / "cache")
    image = await store.import_oci(f"oci:{oci_layout}:tiny", "tests/tiny")
    listed = {summary.id: summary for summary in await store.list()}
    assert listed[image.id].unpacked
    assert "docker.io/tests/tiny:latest" in listed[image.id].names

    assert (await store.prune()).unpacked_removed == []
    assert image.rootfs.is_dir()

    await store.remove("tests/tiny")
    report = await store.prune()
    assert report.unpacked_removed == [image.id]
    assert not image.rootfs.exists()
    assert await store.list() == []
    with pytest.raises(ImageError, match="no such image"):
        await store.remove("tests/tiny")


async def test_remove_waits_for_the_builds_under_way(tmp_path: Path, oci_layout: Path) -> None:
    """buildah's rmi also deletes the image's unnamed parents, the layer caches a build under
    way in another process may be reading: a remove waits until no build is."""
    store = ImageStore(tmp_path / "cache")
    await store.import_oci(f"oci:{oci_layout}:tiny", "tests/tiny")
    other_process = ImageStore(tmp_path / "cache")
    async with other_process.building():
        removing = asyncio.create_task(store.remove("tests/tiny"))
        await asyncio.sleep(1.0)
        assert not removing.done()
        names = [summary.names for summary in await store.list()]
        assert names == [["docker.io/tests/tiny:latest"]]
    await asyncio.wait_for(removing, 30)
    assert await store.list() == []


async def test_prune_leaves_an_image_a_sandbox_holds(tmp_path: Path, oci_layout: Path) -> None:
    """A sandbox's root is an unpacked image: pruning it from under the sandbox (another
    process, e.g. `python -m service.images prune`) would empty the sandbox's root."""
    store = ImageStore(tmp_path / "cache")
    image = await store.import_oci(f"oci:{oci_layout}:tiny", "tests/tiny")
    hold = store.hold(image.id)
    try:
        await store.remove("tests/tiny")
        other_process = ImageStore(tmp_path / "cache")
        assert (await other_process.prune()).unpacked_removed == []
        assert (image.rootfs / "etc" / "hello").read_text() == "hello from oci\n"
    finally:
        os.close(hold)
    assert (await store.prune()).unpacked_removed == [image.id]
    assert not image.rootfs.exists()


@pytest.fixture
def two_images(oci_layout: Path) -> Path:
    """The tiny layout holding a second image, `other`, whose workdir is /other."""
    subprocess.run(
        ["umoci", "config", "--image", f"{oci_layout}:tiny", "--tag", "other",
         "--config.workingdir", "/other"],
        check=True, capture_output=True,
    )  # fmt: skip
    return oci_layout


async def test_a_source_of_two_images_lists_them_and_imports_the_one_picked(
    tmp_path: Path, two_images: Path
) -> None:
    """skopeo failed on such an archive, with no way to choose."""
    archive = tmp_path / "two.oci.tar"
    with tarfile.open(archive, "w") as tar:
        tar.add(two_images, arcname=".")
    store = ImageStore(tmp_path / "cache")
    for source in (str(two_images), str(archive)):
        with pytest.raises(ImageError, match=r"holds 2 images \(.*\); pick one with --image REF"):
            await store.import_oci(source, "tests/two")
        with pytest.raises(ImageError, match=r"holds no image 'third'; it holds: (tiny|other); "):
            await store.import_oci(source, "tests/two", select="third")
    assert (await store.import_oci(str(archive), "tests/other", select="other")).config.workdir == (
        "/other"
    )
    _assert_tiny(await store.import_oci(str(two_images), "tests/tiny", select="tiny"))


def test_a_docker_save_of_two_images_lists_each_by_its_tags(tmp_path: Path) -> None:
    manifest = [{"RepoTags": ["a:1", "a:latest"]}, {"RepoTags": None}]
    archive = tmp_path / "saved.tar"
    with tarfile.open(archive, "w") as tar:
        data = json.dumps(manifest).encode()
        member = tarfile.TarInfo("manifest.json")
        member.size = len(data)
        tar.addfile(member, io.BytesIO(data))
    assert archive_images(archive) == [("a:1", "a:latest"), ("@1",)]
    with pytest.raises(ImageError, match=r"holds 2 images \(a:1 = a:latest; @1\)"):
        skopeo_source(str(archive))
    assert skopeo_source(str(archive), "a:latest") == f"docker-archive:{archive}:a:latest"
