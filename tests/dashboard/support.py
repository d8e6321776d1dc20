"""The dashboard's address in a test server's output, and Debian's chromium under Playwright."""

from __future__ import annotations

import os
import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest
from playwright.async_api import Browser, async_playwright

from testing.server_process import ServerProcess

__all__ = ["CHROMIUM", "chromium", "dashboard_url"]

CHROMIUM = "/usr/bin/chromium"
"""Debian's chromium (.ci/run installs it): Playwright's own browser download is not used."""

_DASHBOARD = re.compile(r"rollout-service dashboard at (\S+)")
_ARGS = [
    "--no-sandbox",  # the tests run as root, where chromium's own sandbox refuses to start
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def dashboard_url(server: ServerProcess) -> str:
    """The URL the server printed for its dashboard (it prints it before `listening on`)."""
    match = _DASHBOARD.search(server.text())
    assert match, server.text()
    return match.group(1)


@asynccontextmanager
async def chromium() -> AsyncIterator[Browser]:
    """Headless chromium with a fresh profile (Playwright makes one per launch)."""
    if not os.access(CHROMIUM, os.X_OK):
        pytest.fail(f"{CHROMIUM} is missing: install Debian's chromium (apt-get install chromium)")
    async with async_playwright() as playwright:
        browser = await playwright.chromium.launch(
            executable_path=CHROMIUM, headless=True, args=_ARGS
        )
        try:
            yield browser
        finally:
            await browser.close()
