"""Pure parts of the store: local names, FROM resolution, the build context's digest."""

from __future__ import annotations

from pathlib import Path

import pytest

from service.errors import ConfigError, ImageError
from service.images.dockerfile import context_digest, final_stage, from_images, pin_from
from service.images.names import ImageAliases, candidates, qualify

_DIGEST = "sha256:" + "ab" * 32


@pytest.mark.parametrize(
    ("name", "qualified"),
    [
        ("rollout/base", "docker.io/rollout/base:latest"),
        ("debian:bookworm", "docker.io/library/debian:bookworm"),
        ("docker.io/library/debian:bookworm", "docker.io/library/debian:bookworm"),
        ("index.docker.io/library/debian", "docker.io/library/debian:latest"),
        ("ghcr.io/org/base:1", "ghcr.io/org/base:1"),
        ("ghcr.io/laude-institute/t-bench/python-3-13:20250620",
         "ghcr.io/laude-institute/t-bench/python-3-13:20250620"),
        ("localhost:5000/x", "localhost:5000/x:latest"),
        ("localhost/x:1", "localhost/x:1"),
        (f"task@{_DIGEST}", f"docker.io/library/task@{_DIGEST}"),
    ],
)  # fmt: skip
def test_names_are_spelled_as_docker_spells_them(name: str, qualified: str) -> None:
    assert qualify(name) == qualified


@pytest.mark.parametrize("name", ["", " x", "Upper/case", "x:bad tag", "x@sha256:zz", "a//b"])
def test_malformed_names_are_refused(name: str) -> None:
    with pytest.raises(ImageError) as raised:
        qualify(name)
    assert raised.value.step == "name"


def test_a_short_name_also_finds_local_builds() -> None:
    assert candidates("tests/x") == ["docker.io/tests/x:latest", "localhost/tests/x:latest"]
    assert candidates("docker.io/tests/x") == ["docker.io/tests/x:latest"]
    assert candidates("ghcr.io/org/base:1") == ["ghcr.io/org/base:1"]


def test_aliases_exact_before_patterns_with_star_substituted() -> None:
    aliases = ImageAliases(
        {
            "ghcr.io/laude-institute/t-bench/*": "mirror.local/t-bench/*",
            "python:*": "rollout/base",
            "ghcr.io/laude-institute/t-bench/python-3-13:1": "tests/py",
        }
    )
    assert aliases.targets("ghcr.io/laude-institute/t-bench/python-3-13:1") == [
        ("ghcr.io/laude-institute/t-bench/python-3-13:1", "docker.io/tests/py:latest"),
        ("ghcr.io/laude-institute/t-bench/*", "mirror.local/t-bench/python-3-13:1"),
    ]
    assert aliases.targets("python:3.11") == [("python:*", "docker.io/rollout/base:latest")]
    assert aliases.targets("docker.io/library/python") == [
        ("python:*", "docker.io/rollout/base:latest")
    ]
    assert aliases.targets("pythonic:1") == []


def test_an_alias_making_no_image_name_is_named() -> None:
    aliases = ImageAliases({"ghcr.io/org/*": "mirror/org:*"})
    with pytest.raises(ImageError, match=r"alias ghcr.io/org/\* -> mirror/org:\* makes") as raised:
        aliases.targets("ghcr.io/org/base:1")
    assert raised.value.step == "alias"


@pytest.mark.parametrize("aliases", [{"a/*/*": "b"}, {"a": "b/*"}, {"a": "B"}, {"a b": "c"}])
def test_bad_aliases_are_refused_naming_the_setting(aliases: dict[str, str]) -> None:
    with pytest.raises(ConfigError, match="ROLLOUT_IMAGE_ALIASES"):
        ImageAliases(aliases)


def test_pin_from_names_images_by_id_and_keeps_the_rest() -> None:
    dockerfile = (
        "ARG BASE=ghcr.io/org/base:1\n"
        "FROM --platform=linux/amd64 ${BASE} AS build\nRUN make \\\n  all\n"
        "FROM \\\n  debian:bookworm\nCOPY --from=build /x /x\nFROM build\nFROM scratch\n"
    )
    ids = {"ghcr.io/org/base:1": "1" * 64, "debian:bookworm": "2" * 64}
    assert pin_from(dockerfile, {}, ids, image="t") == (
        "ARG BASE=ghcr.io/org/base:1\n"
        f"FROM --platform=linux/amd64 {'1' * 64} AS build\nRUN make \\\n  all\n"
        f"FROM {'2' * 64}\nCOPY --from=build /x /x\nFROM build\nFROM scratch\n"
    )


def test_final_stage_follows_the_stages_it_builds_on() -> None:
    dockerfile = "FROM a AS one\nWORKDIR /x\nFROM b AS two\nFROM one\nUSER u\n"
    assert final_stage(dockerfile, {}, image="t") == ("a", [("WORKDIR", "/x"), ("USER", "u")])
    assert final_stage("FROM scratch\nCOPY a /\n", {}, image="t") == (None, [("COPY", "a /")])


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
