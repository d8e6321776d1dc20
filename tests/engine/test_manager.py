"""The rollout manager on an in-memory sandbox and a real SQLite store: admission refused
and given back, a cancel while queued, and shutdown. No server, no bwrap."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import NoReturn

import pytest

from service.config import Settings
from service.engine.events import EventHub
from service.engine.manager import RolloutManager
from service.engine.model_access import ModelRouter
from service.errors import CapacityError, ShuttingDownError
from service.models import AgentSpec, ErrorKind, Phase, RolloutSpec, RolloutStatus, TaskSpec
from service.proxy.server import CaptureProxy
from service.store.sqlite import SqliteStore
from testing.fakes.memory_sandbox import MemoryBackend, MemorySandbox

_HOLD = "hold-step"
"""An agent command that runs until it is killed."""


async def _forever() -> NoReturn:
    await asyncio.sleep(3600)
    raise AssertionError("a held agent was never killed")


def _spec(command: str = "true", request_id: str = "") -> RolloutSpec:
    return RolloutSpec(
        task=TaskSpec(instruction="x", verify=("true",)),
        agent=AgentSpec(name="command", command=command),
        request_id=request_id,
    )


class _Server:
    """A manager on one memory backend, which it knows as its default ("local")."""

    def __init__(self, settings: Settings, store: SqliteStore, hub: EventHub) -> None:
        self.backend = MemoryBackend(self._run)
        models = ModelRouter(CaptureProxy(settings), {}, settings)  # no spec names an endpoint
        self.manager = RolloutManager(
            settings, store, hub, models, backends={"local": self.backend}
        )
        self._held = asyncio.Event()

    async def _run(self, _: MemorySandbox, command: str) -> int:
        if _HOLD in command:
            self._held.set()
            await _forever()
        return 0

    async def submit_held(self) -> str:
        """Submit a rollout and wait until its agent runs (and holds its running slot)."""
        self._held.clear()
        rollout = await self.manager.submit(_spec(_HOLD))
        async with asyncio.timeout(5):
            await self._held.wait()
        return rollout.id


@pytest.fixture
async def server(tmp_path: Path) -> AsyncIterator[_Server]:
    settings = Settings(max_running=1, max_queued=1, state_dir=tmp_path)
    store = SqliteStore(tmp_path / "rollouts.db")
    await store.open()
    hub = EventHub(store)
    await hub.start()
    server = _Server(settings, store, hub)
    try:
        yield server
    finally:
        await server.manager.shutdown(grace_s=0)
        await hub.stop()
        await store.close()


async def test_a_full_server_refuses_until_a_place_is_freed(server: _Server) -> None:
    manager = server.manager
    running = await server.submit_held()
    queued = await manager.submit(_spec())
    with pytest.raises(CapacityError, match="2 rollouts running or queued"):
        await manager.submit(_spec())
    cancelled = await manager.cancel(running, "enough")
    assert cancelled.status is RolloutStatus.CANCELLED
    assert cancelled.result.error is not None
    assert cancelled.result.error.message == "cancelled: enough"
    assert (await manager.wait(queued.id)).status is RolloutStatus.SUCCEEDED
    again = await manager.run(_spec())
    assert again.status is RolloutStatus.SUCCEEDED
    assert [sandbox.kills for sandbox in server.backend.sandboxes] == [1, 1, 1]


async def test_a_cancel_while_queued_ends_it_without_a_sandbox_and_stores_it(
    server: _Server,
) -> None:
    manager = server.manager
    await server.submit_held()
    queued = await manager.submit(_spec())
    ended = await manager.cancel(queued.id)
    assert ended.status is RolloutStatus.CANCELLED
    assert ended.result.error is not None
    assert ended.result.error.kind is ErrorKind.CANCELLED
    assert len(server.backend.sandboxes) == 1, "the queued rollout made a sandbox"
    stored = await manager.get(queued.id)
    assert stored.status is RolloutStatus.CANCELLED
    assert stored.phase is Phase.DONE


async def test_the_same_request_id_is_the_same_rollout(server: _Server) -> None:
    first = await server.manager.submit(_spec(request_id="once"))
    second = await server.manager.submit(_spec(request_id="once"))
    assert second.id == first.id


async def test_shutdown_cancels_what_runs_and_admits_nothing_after(server: _Server) -> None:
    manager = server.manager
    running = await server.submit_held()
    await manager.shutdown(grace_s=0)
    ended = await manager.get(running)
    assert ended.status is RolloutStatus.CANCELLED
    assert ended.result.error is not None
    assert ended.result.error.message == "cancelled: server shutting down"
    assert [sandbox.kills for sandbox in server.backend.sandboxes] == [1]
    with pytest.raises(ShuttingDownError):
        await manager.submit(_spec())
