"""`python -m service.images`: the operator's command, run as a subprocess on a cache of its own."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path


def _images(cache: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "ROLLOUT_CACHE_DIR": str(cache)}
    command = [sys.executable, "-m", "service.images", *args]
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=120)


def test_import_list_get_prune(tmp_path: Path, oci_layout: Path) -> None:
    cache = tmp_path / "cache"
    assert json.loads(_images(cache, "list").stdout) == []

    imported = _images(cache, "import", f"oci:{oci_layout}:tiny", "--name", "tests/cli")
    assert imported.returncode == 0, imported.stderr
    image = json.loads(imported.stdout)
    assert (Path(image["rootfs"]) / "etc" / "hello").is_file()
    assert "[tests/cli] import:" in imported.stderr

    listed = json.loads(_images(cache, "list").stdout)
    assert [(row["id"], row["unpacked"]) for row in listed] == [(image["id"], True)]
    assert json.loads(_images(cache, "get", "tests/cli").stdout)["id"] == image["id"]

    assert _images(cache, "remove", "tests/cli").returncode == 0
    pruned = json.loads(_images(cache, "prune").stdout)
    assert pruned["unpacked_removed"] == [image["id"]]


def test_unknown_image_exits_1_naming_it(tmp_path: Path) -> None:
    missing = _images(tmp_path / "cache", "get", "tests/nope")
    assert missing.returncode == 1
    assert "image 'tests/nope', resolve: no such image in the store" in missing.stderr
    assert missing.stdout == ""


def test_import_picks_one_image_of_several(tmp_path: Path, oci_layout: Path) -> None:
    subprocess.run(
        ["umoci", "config", "--image", f"{oci_layout}:tiny", "--tag", "other"],
        check=True, capture_output=True,
    )  # fmt: skip
    cache = tmp_path / "cache"
    unpicked = _images(cache, "import", str(oci_layout), "--name", "tests/cli")
    assert unpicked.returncode == 1
    assert "holds 2 images" in unpicked.stderr
    assert "pick one with --image REF" in unpicked.stderr
    picked = _images(cache, "import", str(oci_layout), "--name", "tests/cli", "--image", "other")
    assert picked.returncode == 0, picked.stderr
    assert "docker.io/tests/cli:latest" in json.loads(picked.stdout)["names"]
