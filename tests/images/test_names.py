"""Pure parts of the store: local names, FROM resolution, the build context's digest."""

from __future__ import annotations

from pathlib import Path

import pytest

from service.errors import ImageError
from service.images.dockerfile import context_digest, from_images
from service.images.storage import qualify


@pytest.mark.parametrize(
    ("name", "qualified"),
    [
        ("rollout/base", "localhost/rollout/base:latest"),
        ("debian:bookworm", "localhost/debian:bookworm"),
        ("localhost/x:1", "localhost/x:1"),
        ("task@sha256:ab", "localhost/task@sha256:ab"),
    ],
)
def test_names_are_always_local(name: str, qualified: str) -> None:
    assert qualify(name) == qualified


def test_from_lines_expand_args_and_skip_stages() -> None:
    dockerfile = (
        "ARG BASE=debian\nARG TAG\n"
        "FROM --platform=linux/amd64 ${BASE}:${TAG:-bookworm} AS build\nRUN make\n"
        "FROM \\\n  build\nFROM scratch\nFROM tools/$NAME\n"
    )
    assert from_images(dockerfile, {"TAG": "12"}, image="t") == ["debian:12", "tools/"]
    assert from_images(dockerfile, {}, image="t") == ["debian:bookworm", "tools/"]
    # Only ARGs before the first FROM reach FROM lines.
    assert from_images("FROM scratch\nARG X=y\nFROM img:$X\n", {}, image="t") == ["img:"]
    with pytest.raises(ImageError, match="no FROM"):
        from_images("RUN true\n", {}, image="t")


def test_context_digest_sees_content_modes_and_links(tmp_path: Path) -> None:
    (tmp_path / "a").write_text("1")
    before = context_digest(tmp_path)
    assert context_digest(tmp_path) == before
    (tmp_path / "a").chmod(0o755)
    moded = context_digest(tmp_path)
    (tmp_path / "link").symlink_to("a")
    linked = context_digest(tmp_path)
    (tmp_path / "a").write_text("2")
    assert len({before, moded, linked, context_digest(tmp_path)}) == 4
