"""A rollout-service server and its OpenEnv front door, one of each for a test module."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from testing.front_door import front_door
from testing.server_process import ServerProcess, running


@pytest.fixture(scope="module")
def rollout_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    server = ServerProcess(tmp_path_factory.mktemp("rollout-state"))
    with running(server):
        yield server


@pytest.fixture(scope="module")
def door_url(
    rollout_server: ServerProcess, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    """http://host:port of a front door to the module's server."""
    door = front_door(tmp_path_factory.mktemp("door-state"), rollout_server.target)
    url = door.start()
    yield url
    door.stop()
    assert "Traceback" not in door.text(), door.text()
