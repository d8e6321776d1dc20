"""Fixtures of the local backend's tests."""

from __future__ import annotations

import asyncio

import pytest

from service.config import Settings
from service.images import Image, ImageStore


@pytest.fixture(scope="module")
def base_image() -> Image:
    """The Debian base of the server's shared cache (a hit once built on this machine)."""
    return asyncio.run(ImageStore(Settings().cache_dir).base())
