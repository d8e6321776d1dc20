"""Fixtures for the capture proxy: the real proxy on loopback (TCP and Unix socket) in
front of the scripted upstream, and an HTTP client playing the agent."""

from __future__ import annotations

import asyncio
import tempfile
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import httpx
import pytest

from service.config import Settings
from service.models import CaptureSpec, Turn
from service.proxy import MAIN_MODEL_ALIAS, CaptureProxy, ResolvedEndpoint, Route
from testing.fakes.llm_upstream import FakeUpstream

UPSTREAM_KEY = "sk-upstream-secret-9c4d"
"""The upstream's real key: only the proxy may send it, and only upstream."""
UPSTREAM_MODEL = "fake-policy-7b"


@pytest.fixture
def state_dir() -> Iterator[Path]:
    """A short state directory, so tests can connect to the proxy's Unix socket directly."""
    with tempfile.TemporaryDirectory(prefix="px-", dir="/tmp") as directory:
        yield Path(directory)


@pytest.fixture
async def upstream() -> AsyncIterator[FakeUpstream]:
    async with FakeUpstream(api_key=UPSTREAM_KEY, model=UPSTREAM_MODEL) as upstream:
        yield upstream


@pytest.fixture
async def proxy(state_dir: Path, request: pytest.FixtureRequest) -> AsyncIterator[CaptureProxy]:
    """The proxy, its upstream timeout 30 s (a loaded machine's ordinary call must never hit
    it), or what a test's `upstream_timeout_s` marker says (the tests of the timeout itself)."""
    marker = request.node.get_closest_marker("upstream_timeout_s")
    timeout_s = float(marker.args[0]) if marker else 30.0
    settings = Settings(
        state_dir=state_dir, proxy_listen="127.0.0.1:0", upstream_timeout_s=timeout_s
    )
    proxy = CaptureProxy(settings)
    await proxy.start()
    try:
        yield proxy
    finally:
        await proxy.stop()


@pytest.fixture
async def agent() -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(timeout=10.0) as client:
        yield client


@dataclass
class Rollout:
    """One route through the proxy, with the turns its callback saw."""

    base_url: str = ""
    route: Route = field(init=False)
    published: list[Turn] = field(default_factory=list)
    completed: asyncio.Queue[Turn] = field(default_factory=asyncio.Queue)
    """Each turn as its callback got it, for tests that wait on one."""

    def on_turn(self, turn: Turn) -> None:
        self.published.append(turn)
        self.completed.put_nowait(turn)

    @property
    def chat_url(self) -> str:
        return f"{self.base_url}/chat/completions"

    @property
    def headers(self) -> dict[str, str]:
        """What an agent sends: its route token as the key."""
        return {"Authorization": f"Bearer {self.route.token}"}


class OpenRollout(Protocol):
    def __call__(
        self,
        rollout_id: str = "rollout-1",
        *,
        capture: CaptureSpec | None = None,
        base_url: str | None = None,
    ) -> Rollout: ...


@pytest.fixture
def open_rollout(proxy: CaptureProxy, upstream: FakeUpstream) -> OpenRollout:
    """Opens a route to the scripted upstream (or to `base_url`)."""

    def open_(
        rollout_id: str = "rollout-1",
        *,
        capture: CaptureSpec | None = None,
        base_url: str | None = None,
    ) -> Rollout:
        endpoint = ResolvedEndpoint(base_url or upstream.base_url, UPSTREAM_KEY, UPSTREAM_MODEL)
        rollout = Rollout()
        rollout.route = proxy.open_route(
            rollout_id, endpoint, capture or CaptureSpec(), rollout.on_turn
        )
        rollout.base_url = f"{proxy.url}/r/{rollout.route.token}/v1"
        return rollout

    return open_


def chat(*contents: str, stream: bool = False, **extra: Any) -> dict[str, Any]:
    """A chat request with alternating user/assistant messages."""
    roles = ("user", "assistant")
    messages = [{"role": roles[i % 2], "content": c} for i, c in enumerate(contents)]
    return {"model": MAIN_MODEL_ALIAS, "messages": messages, "stream": stream, **extra}


async def stream_events(
    client: httpx.AsyncClient, rollout: Rollout, body: dict[str, Any]
) -> list[str]:
    """The `data:` payloads of a streamed call, in order."""
    events: list[str] = []
    async with client.stream(
        "POST", rollout.chat_url, json=body, headers=rollout.headers
    ) as response:
        assert response.status_code == 200
        async for line in response.aiter_lines():
            if line.startswith("data: "):
                events.append(line[len("data: ") :])
    return events
