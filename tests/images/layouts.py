"""Tiny OCI image layouts made with umoci, for tests that need an image but not the base."""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from pathlib import Path

__all__ = ["make_layout", "umoci"]


def umoci(*args: str) -> None:
    subprocess.run(["umoci", *args], check=True, capture_output=True)


def make_layout(directory: Path, tag: str, fill: Callable[[Path], None]) -> Path:
    """An OCI image layout (`<layout>:<tag>`) under `directory` whose one layer is what
    `fill` writes into the root filesystem it is given."""
    layout, bundle = directory / "layout", directory / "bundle"
    umoci("init", "--layout", str(layout))
    umoci("new", "--image", f"{layout}:{tag}")
    umoci("unpack", "--image", f"{layout}:{tag}", str(bundle))
    fill(bundle / "rootfs")
    umoci("repack", "--image", f"{layout}:{tag}", str(bundle))
    return layout
