"""Dockerfile builds on the Debian base: instructions honoured, cached by content, built once."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

import pytest

from service.errors import ImageError
from service.images import Image, ImageProgress, ImageStore
from service.images.names import qualify

# The first test that needs the base builds it (mmdebstrap: minutes), once per cache.
pytestmark = pytest.mark.timeout(1800)

DOCKERFILE = """\
FROM debian:bookworm
ARG FLAVOUR=plain
ENV GREETING=hi
WORKDIR /app
COPY greeting.txt ./greeting.txt
ADD data/ /app/data/
RUN echo "$GREETING $FLAVOUR" > /app/out.txt && useradd -m tester
USER tester
RUN id -un > /home/tester/who && pwd > /home/tester/where
"""


def _context(tmp_path: Path, dockerfile: str = DOCKERFILE) -> Path:
    """A build context whose greeting is unique, so its first build is never a cache hit."""
    context = tmp_path / "context"
    (context / "data").mkdir(parents=True)
    (context / "Dockerfile").write_text(dockerfile)
    (context / "greeting.txt").write_text(f"hello {uuid.uuid4().hex}\n")
    (context / "data" / "table.csv").write_text("a,b\n1,2\n")
    return context


async def test_instructions_are_honoured(shared_store: ImageStore, tmp_path: Path) -> None:
    context = _context(tmp_path)
    seen: list[ImageProgress] = []
    image = await shared_store.build(
        context, "tests/honoured", build_args={"FLAVOUR": "spicy"}, on_progress=seen.append
    )
    rootfs = image.rootfs
    greeting = (context / "greeting.txt").read_text()
    assert (rootfs / "app" / "greeting.txt").read_text() == greeting
    assert (rootfs / "app" / "data" / "table.csv").read_text() == "a,b\n1,2\n"
    assert (rootfs / "app" / "out.txt").read_text() == "hi spicy\n"
    assert (rootfs / "home" / "tester" / "who").read_text() == "tester\n"
    assert (rootfs / "home" / "tester" / "where").read_text() == "/app\n"
    assert (rootfs / "usr" / "bin" / "python3").exists()
    assert image.config.env["GREETING"] == "hi"
    assert image.config.workdir == "/app"
    assert image.config.user == "tester"
    assert [o.result for o in shared_store.outcomes] == ["built"]
    assert any(p.step.startswith("RUN id -un") for p in seen)


async def test_second_build_is_a_hit(shared_store: ImageStore, tmp_path: Path) -> None:
    context = _context(tmp_path)
    first = await shared_store.build(context, "tests/rebuilt")
    again = await ImageStore(shared_store.directory.parent).build(context, "tests/rebuilt-too")
    second = await shared_store.build(context, "tests/rebuilt")
    assert [o.result for o in shared_store.outcomes] == ["built", "hit"]
    assert first.id == second.id == again.id
    assert "docker.io/tests/rebuilt-too:latest" in again.names

    changed_greeting = f"changed {uuid.uuid4().hex}\n"
    (context / "greeting.txt").write_text(changed_greeting)
    changed = await shared_store.build(context, "tests/rebuilt")
    assert shared_store.outcomes[-1].result == "built"
    assert (changed.rootfs / "app" / "greeting.txt").read_text() == changed_greeting


async def test_concurrent_builds_of_one_image_build_once(
    shared_store: ImageStore, tmp_path: Path
) -> None:
    context = _context(tmp_path)
    seen: list[list[ImageProgress]] = [[], []]
    first, second = await asyncio.gather(
        *(shared_store.build(context, "tests/once", on_progress=seen[i].append) for i in (0, 1))
    )
    assert first == second
    assert [o.result for o in shared_store.outcomes] == ["built"]
    waits = [p.message for progress in seen for p in progress if p.step == "wait"]
    assert waits == ["joined a build under way"]
    assert all(any(p.step.startswith("RUN") for p in progress) for progress in seen)


async def test_from_an_unknown_image_fails_naming_it(
    shared_store: ImageStore, tmp_path: Path
) -> None:
    context = _context(tmp_path, "FROM tests/nowhere:1\nRUN true\n")
    with pytest.raises(
        ImageError,
        match=r"no such image in the store; looked for docker.io/tests/nowhere:1; import it with",
    ) as raised:
        await shared_store.build(context, "tests/orphan")
    assert raised.value.step == "FROM tests/nowhere:1"
    assert shared_store.outcomes == []


async def test_a_failing_step_is_named(shared_store: ImageStore, tmp_path: Path) -> None:
    context = _context(tmp_path, "FROM rollout/base\nRUN echo fine\nRUN echo broken >&2; exit 3\n")
    with pytest.raises(ImageError, match="broken") as raised:
        await shared_store.build(context, "tests/broken")
    assert raised.value.step == "step 'RUN echo broken >&2; exit 3'"
    assert raised.value.image == "tests/broken"
    # A build's working containers carry the name it tags (other tests build in this store
    # at the same time: theirs are not this build's leak).
    containers = await shared_store.storage.query("containers", "--json") or []
    leaked = [c for c in containers if qualify("tests/broken") in c.get("imagename", "")]
    assert not leaked, "a container leaked"


async def test_a_missing_dockerfile_is_named(shared_store: ImageStore, tmp_path: Path) -> None:
    with pytest.raises(ImageError, match="cannot read") as raised:
        await shared_store.build(tmp_path, "tests/empty")
    assert raised.value.step == "Dockerfile"


def test_base_is_debian_with_the_promised_packages(base_image: Image) -> None:
    rootfs = base_image.rootfs
    assert "bookworm" in (rootfs / "etc" / "os-release").read_text()
    for tool in ("python3", "bash", "git", "ls"):
        assert (rootfs / "usr" / "bin" / tool).exists(), tool
    assert (rootfs / "etc" / "ssl" / "certs" / "ca-certificates.crt").is_file()
    assert "docker.io/rollout/base:latest" in base_image.names  # debian:bookworm: made once
    assert base_image.config.env["PATH"].startswith("/usr/local/sbin")


async def test_base_is_made_once(shared_store: ImageStore, base_image: Image) -> None:
    again = await shared_store.get("debian:bookworm")
    assert again.id == base_image.id
    assert [o.result for o in shared_store.outcomes] == ["hit"]


async def test_a_registry_name_is_kept_and_a_from_finds_it(
    shared_store: ImageStore, tmp_path: Path
) -> None:
    """`ghcr.io/...` was stored as `localhost/ghcr.io/...`, which no FROM ever found."""
    base = await shared_store.build(
        _context(tmp_path / "base", "FROM debian:bookworm\nWORKDIR /app\n"), "ghcr.io/tests/base:1"
    )
    assert "ghcr.io/tests/base:1" in base.names
    child = await shared_store.build(
        _context(tmp_path / "child", "FROM ghcr.io/tests/base:1\nRUN pwd > where\n"), "tests/child"
    )
    assert (child.rootfs / "app" / "where").read_text() == "/app\n"
    assert child.config.workdir == "/app"
    assert (await shared_store.config("ghcr.io/tests/base:1")) == base.config


async def test_an_alias_stands_for_a_local_image_in_from_and_get(
    shared_store: ImageStore, tmp_path: Path
) -> None:
    base = await shared_store.build(
        _context(tmp_path / "base", "FROM debian:bookworm\nWORKDIR /srv\n"), "ghcr.io/tests/base:2"
    )
    store = ImageStore(
        shared_store.directory.parent,
        aliases={"ghcr.io/t-bench/*": "ghcr.io/tests/*", "python:3.13": "ghcr.io/tests/base:2"},
    )
    assert (await store.get("ghcr.io/t-bench/base:2")).id == base.id
    assert (await store.get("docker.io/library/python:3.13")).id == base.id
    child = await store.build(
        _context(tmp_path / "child", "FROM ghcr.io/t-bench/base:2\nRUN pwd > where\n"),
        "tests/aliased",
    )
    assert (child.rootfs / "srv" / "where").read_text() == "/srv\n"
    with pytest.raises(ImageError) as raised:
        await store.get("ghcr.io/t-bench/python-3-13:9")
    tried = "ghcr.io/t-bench/python-3-13:9, ghcr.io/tests/python-3-13:9 (alias ghcr.io/t-bench/*)"
    assert f"looked for {tried};" in raised.value.detail
    assert await shared_store.resolve("ghcr.io/t-bench/base:2") is None  # a store without


async def test_an_image_buildah_named_localhost_is_found_by_its_short_name(
    shared_store: ImageStore, base_image: Image
) -> None:
    """Local builds by buildah or podman, and this store's own before names kept a registry
    host, are `localhost/<name>`."""
    await shared_store.storage.run(
        ["tag", base_image.id, "localhost/tests/legacy:1"],
        image="tests/legacy", step="tag", on_progress=lambda _: None,
    )  # fmt: skip
    assert (await shared_store.get("tests/legacy:1")).id == base_image.id
    await shared_store.remove("tests/legacy:1")
    assert await shared_store.resolve("tests/legacy:1") is None
