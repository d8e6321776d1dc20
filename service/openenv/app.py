"""One ASGI app holding every environment, each OpenEnv's own app under its name.

    /opencode_env/...   create_app(OpenCodeEnvironment, CallToolAction, CallToolObservation)
    /terminal/...       create_app(TerminalEnvironment, TerminalAction, TerminalObservation)
    /health             the front door itself (each environment has its own /health too)

An OpenEnv client takes the environment's URL as its base (`http://host:port/opencode_env`)
and adds `/ws`, `/mcp`, `/reset`, ... to it, so a mounted app is all a client sees.
"""

from __future__ import annotations

import functools

from fastapi import FastAPI
from openenv.core.env_server.http_server import create_app
from openenv.core.env_server.mcp_types import CallToolAction, CallToolObservation
from rollout_client import RolloutClient

from service.openenv.opencode_env import OpenCodeEnvironment, OpenCodeState
from service.openenv.sessions import RolloutSessions
from service.openenv.terminal_env import TerminalEnvironment
from service.openenv.terminal_models import TerminalAction, TerminalObservation, TerminalState
from service.openenv.upstream import RolloutTarget

__all__ = ["ENVIRONMENTS", "front_door_app"]

ENVIRONMENTS = ("opencode_env", "terminal")
"""The environments served, each at /<name>."""


def front_door_app(upstream: RolloutTarget, max_sessions: int) -> FastAPI:
    """The app serving every environment against `upstream`, each with at most
    `max_sessions` concurrent sessions (WebSocket or MCP)."""
    app = FastAPI(title="rollout-service OpenEnv front door", docs_url=None, redoc_url=None)
    opencode = create_app(
        functools.partial(OpenCodeEnvironment, upstream),
        CallToolAction,
        CallToolObservation,
        env_name="opencode_env",
        max_concurrent_envs=max_sessions,
        state_cls=OpenCodeState,
    )
    app.mount("/opencode_env", opencode)
    # One blocking channel for every terminal: OpenEnv runs each session's calls on a thread
    # of its own, and a sync channel is safe across threads (an asyncio one is not).
    client = RolloutClient(upstream.target, token=upstream.token or "")
    terminal = create_app(
        functools.partial(TerminalEnvironment, RolloutSessions(client)),
        TerminalAction,
        TerminalObservation,
        env_name="terminal",
        max_concurrent_envs=max_sessions,
        state_cls=TerminalState,
    )
    app.mount("/terminal", terminal)
    app.router.on_shutdown.append(client.close)

    @app.get("/health")
    async def health() -> dict[str, object]:
        return {"status": "healthy", "environments": list(ENVIRONMENTS)}

    return app
