"""Shared setup for the E2B backend tests: the fake cloud, settings, requests."""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

from service.agents import OpencodeInstaller
from service.config import Settings
from service.models import NetworkPolicy, SandboxSpec
from service.sandboxes import E2BBackend, RetryPolicy, SandboxRequest
from testing.fakes.e2b_cloud import FakeE2B

__all__ = [
    "FAST_RETRY",
    "HARBOR_BUILDS",
    "HARBOR_TASKS",
    "eventually",
    "fake_cloud",
    "make_backend",
    "make_request",
    "make_settings",
    "opencode_template",
]

FAST_RETRY = RetryPolicy(attempts=4, base_delay_s=0.01, max_delay_s=0.05)
HEALTH_INTERVAL_S = 0.2
HARBOR_TASKS = Path(__file__).parents[1] / "tests" / "harbor" / "tasks"
"""The fixture Harbor tasks, which a test copies under a fresh digest."""
HARBOR_BUILDS = [
    pytest.mark.e2e,
    pytest.mark.timeout(900),  # cold buildah builds on a loaded machine
    pytest.mark.skipif(os.geteuid() != 0, reason="the fake builds templates with buildah"),
]
"""`pytestmark` of a module whose Harbor tasks the real server builds into templates on the
fake cloud."""


@asynccontextmanager
async def fake_cloud(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[FakeE2B]:
    """A fake E2B cloud, with the SDK pointed at it through the environment."""
    cloud = await FakeE2B(tmp_path / "e2b").start()
    for name, value in cloud.environment().items():
        monkeypatch.setenv(name, value)
    try:
        yield cloud
    finally:
        await cloud.close()


def make_settings(tmp_path: Path, **overrides: Any) -> Settings:
    fields: dict[str, Any] = {
        "state_dir": tmp_path / "state",
        "instance_id": "test-instance",
        "e2b_creates_per_s": 0.0,
        "e2b_template": "base-template",
    }
    return Settings(**(fields | overrides))


def make_backend(tmp_path: Path, **overrides: Any) -> E2BBackend:
    """A backend with fast retries and health probes (the production defaults are slower)."""
    settings = make_settings(tmp_path, **overrides)
    return E2BBackend(settings, retry=FAST_RETRY, health_interval_s=HEALTH_INTERVAL_S)


def make_request(
    rollout_id: str = "rollout-1",
    *,
    network: NetworkPolicy = NetworkPolicy.NONE,
    template: str = "",
    lifetime_s: float = 120.0,
) -> SandboxRequest:
    spec = SandboxSpec(backend="e2b", template=template, network=network)
    return SandboxRequest(rollout_id=rollout_id, spec=spec, lifetime_s=lifetime_s)


async def eventually(condition: Callable[[], bool], *, timeout_s: float = 10.0) -> None:
    """Wait until `condition()` holds (a deadline for liveness, not a timing assertion)."""
    async with asyncio.timeout(timeout_s):
        while True:
            if condition():
                return
            await asyncio.sleep(0.01)


async def opencode_template() -> dict[str, tuple[bytes, int]]:
    """Files of a fake template with opencode pre-installed, as the harness sees one built by
    scripts/build_e2b_template.py: an `opencode` on the login shell's PATH that reports the
    pinned version (here, a wrapper around the host's install, made once per machine)."""
    settings = Settings()
    binary = await OpencodeInstaller(settings.cache_dir, settings.opencode_version).ensure()
    return {
        "/home/user/.profile": (b'PATH="$HOME/.local/bin:$PATH"\n', 0o644),
        "/home/user/.local/bin/opencode": (f'#!/bin/sh\nexec {binary} "$@"\n'.encode(), 0o755),
    }
