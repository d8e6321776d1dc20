"""Routes for dialect tests: the agent is the vendor's SDK, the endpoint native or translated."""

from __future__ import annotations

from typing import Protocol

import anthropic
import openai
import pytest

from service.models import CaptureSpec, DialectMode
from service.proxy import CaptureProxy, ResolvedEndpoint
from testing.fakes.llm_upstream import FakeUpstream
from tests.proxy.conftest import UPSTREAM_KEY, UPSTREAM_MODEL, Rollout


class OpenDialectRoute(Protocol):
    def __call__(
        self, mode: DialectMode = DialectMode.TRANSLATED, *, capture: CaptureSpec | None = None
    ) -> Rollout: ...


@pytest.fixture
def open_route(proxy: CaptureProxy, upstream: FakeUpstream) -> OpenDialectRoute:
    """A token route to the scripted upstream in the given dialect mode."""

    def open_(
        mode: DialectMode = DialectMode.TRANSLATED, *, capture: CaptureSpec | None = None
    ) -> Rollout:
        endpoint = ResolvedEndpoint(upstream.base_url, UPSTREAM_KEY, UPSTREAM_MODEL, mode)
        rollout = Rollout()
        rollout.route = proxy.open_route(
            "rollout-1", endpoint, capture or CaptureSpec(), rollout.on_turn
        )
        rollout.base_url = f"{proxy.url}/r/{rollout.route.token}/v1"
        return rollout

    return open_


def anthropic_client(rollout: Rollout) -> anthropic.AsyncAnthropic:
    """claude-code's SDK, keyed with the route token as an agent is."""
    root = rollout.base_url.removesuffix("/v1")
    return anthropic.AsyncAnthropic(base_url=root, api_key=rollout.route.token, max_retries=0)


def openai_client(rollout: Rollout) -> openai.AsyncOpenAI:
    """The OpenAI SDK (codex's wire), keyed with the route token."""
    return openai.AsyncOpenAI(base_url=rollout.base_url, api_key=rollout.route.token, max_retries=0)
