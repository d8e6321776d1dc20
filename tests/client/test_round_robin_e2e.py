"""`channel_options` reach the client's channel: with gRPC's round_robin over a target that
names two real servers, calls go to both (a Kubernetes headless Service's pods, in small).

Each server has its own store, so a rollout run on one is found by some calls and NOT_FOUND
by others only when calls are spread; pick_first (gRPC's default, what the client used before
`channel_options`) sends every call to one server."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator

import pytest
from rollout_client import AsyncRolloutClient, RolloutClient
from rollout_client.errors import NotFoundError

from testing.server_process import ServerProcess

pytestmark = pytest.mark.e2e

ROUND_ROBIN = [("grpc.lb_policy_name", "round_robin")]
NOOP = {"task": {"instruction": "nothing"}, "agent": {"name": "command", "command": "true"}}
_MAX_CALLS = 500
_PAUSE_S = 0.01
"""Calls until both servers answered, this far apart: round_robin alternates once both are
connected, and until then sends every call to the first ready (50 calls back to back once
all went to one server while the other connection was still being made, in a CI run)."""


@pytest.fixture(scope="module")
def two_servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str]]:
    """Two real servers on loopback, each with its own store; a rollout run on the first."""
    servers = [ServerProcess(tmp_path_factory.mktemp(f"server-{n}")) for n in (1, 2)]
    try:
        for server in servers:
            server.start()
        with RolloutClient(servers[0].target) as first:
            rollout_id = first.run(NOOP).id
        yield rollout_id, "ipv4:" + ",".join(server.target for server in servers)
    finally:
        for server in servers:
            server.stop()


def _found(client: RolloutClient, rollout_id: str) -> bool:
    try:
        client.get(rollout_id)
    except NotFoundError:
        return False
    return True


def test_the_sync_client_spreads_calls_with_round_robin(two_servers: tuple[str, str]) -> None:
    rollout_id, target = two_servers
    answers: set[bool] = set()
    with RolloutClient(target, channel_options=ROUND_ROBIN) as client:
        for _ in range(_MAX_CALLS):
            answers.add(_found(client, rollout_id))
            if len(answers) == 2:
                break
            time.sleep(_PAUSE_S)
    assert answers == {True, False}, "every call reached one server: round_robin was not used"


def test_without_round_robin_every_call_reaches_one_server(two_servers: tuple[str, str]) -> None:
    # The control: gRPC's default pick_first, so the test above can tell the option's effect.
    rollout_id, target = two_servers
    with RolloutClient(target) as client:
        answers = {_found(client, rollout_id) for _ in range(10)}
    assert len(answers) == 1


async def test_the_async_client_spreads_calls_with_round_robin(
    two_servers: tuple[str, str],
) -> None:
    rollout_id, target = two_servers
    answers: set[bool] = set()
    async with AsyncRolloutClient(target, channel_options=ROUND_ROBIN) as client:
        for _ in range(_MAX_CALLS):
            try:
                await client.get(rollout_id)
                answers.add(True)
            except NotFoundError:
                answers.add(False)
            if len(answers) == 2:
                break
            await asyncio.sleep(_PAUSE_S)
    assert answers == {True, False}, "every call reached one server: round_robin was not used"
