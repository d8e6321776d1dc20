"""The terminal environment through the real front door and server, driven by openenv's own
GenericEnvClient over the WebSocket: reset opens a session (an inline task, a Harbor task by
name or by archive), each step is an Exec with its output and exit code, a verify step ends it
with the reward, and a client that leaves takes its session (and sandbox) with it."""

from __future__ import annotations

import base64
import os
import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from openenv.core.generic_client import GenericEnvClient
from rollout.v1 import rollout_pb2 as pb
from rollout_client import RolloutClient
from rollout_client.harbor_pack import pack_task_dir

from testing.server_process import ServerProcess, running
from tests.e2e.processes import eventually, processes_with

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(1200)]
TASKS = Path(__file__).parent.parent / "harbor" / "tasks"
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="image sandboxes need a root server")
INLINE = {
    "instruction": "Make answer.txt say 42",
    "setup": ["echo 6 > a.txt; echo 7 > b.txt"],
    "verify": ["grep -qx 42 answer.txt"],
}
SOLVE_NEEDS_ROOT = [
    "groupadd --system builders",
    "useradd --system --gid builders --no-create-home ci",
    "install -d -o ci -g builders -m 2770 /srv/build",
]


@pytest.fixture(scope="module")
def task_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("harbor") / "tasks"
    shutil.copytree(TASKS / "needs_root", root / "needs_root")
    return root


@pytest.fixture(scope="module")
def rollout_server(
    tmp_path_factory: pytest.TempPathFactory, task_root: Path
) -> Iterator[ServerProcess]:
    """The conftest's server, with Harbor task roots (the front door fixture uses this one)."""
    server = ServerProcess(
        tmp_path_factory.mktemp("rollout-state"), env={"ROLLOUT_TASK_ROOTS": f'["{task_root}"]'}
    )
    with running(server):
        yield server


@pytest.fixture
def terminal(door_url: str) -> GenericEnvClient:
    return GenericEnvClient(base_url=f"{door_url}/terminal", message_timeout_s=900)


def session_of(target: str, session_id: str) -> pb.Session:
    with RolloutClient(target) as client:
        return client.get_session(session_id)


async def step(env: GenericEnvClient, command: str, **fields: Any) -> dict[str, Any]:
    result = await env.step({"command": command, **fields})
    assert not result.done
    observation: dict[str, Any] = result.observation
    return observation


async def test_an_inline_task_stepped_and_verified_to_its_reward(
    terminal: GenericEnvClient, rollout_server: ServerProcess
) -> None:
    async with terminal as env:
        opened = await env.reset(task=INLINE)
        assert opened.observation["instruction"] == "Make answer.txt say 42"
        session_id = opened.observation["session_id"]
        assert session_of(rollout_server.target, session_id).status == pb.SESSION_STATUS_READY

        shown = await step(env, "cat a.txt b.txt")
        assert (shown["stdout"], shown["stderr"], shown["exit_code"]) == ("6\n7\n", "", 0)
        failed = await step(env, "echo oops >&2; exit 3")
        assert (failed["stderr"], failed["exit_code"], failed["timed_out"]) == ("oops\n", 3, False)
        slow = await step(env, "sleep 30", timeout_s=1)
        assert slow["timed_out"]
        assert slow["exit_code"] == -1
        await step(env, "echo $(( $(cat a.txt) * $(cat b.txt) )) > answer.txt")

        verified = await env.step({"verify": True})
        assert (verified.done, verified.reward) == (True, 1.0)
        assert verified.observation["error"] is None
        state = await env.state()
        assert state["verified"]
        assert state["session_id"] is None
        assert state["step_count"] == 5

        again = await env.reset(task=INLINE)  # a new episode on the same connection
        unsolved = await env.step({"verify": True})
        assert (unsolved.done, unsolved.reward) == (True, 0.0)
    ended = session_of(rollout_server.target, session_id)
    assert ended.status == pb.SESSION_STATUS_VERIFIED
    assert ended.commands == 4
    assert again.observation["session_id"] != session_id


@needs_root
async def test_a_harbor_task_by_name_solved_scores_one(
    terminal: GenericEnvClient, rollout_server: ServerProcess
) -> None:
    async with terminal as env:
        opened = await env.reset(harbor_task="needs_root")
        assert "builders" in opened.observation["instruction"]
        for command in SOLVE_NEEDS_ROOT:
            assert (await step(env, command))["exit_code"] == 0
        shown = await step(env, "stat -c '%U:%G %a' /srv/build")
        assert shown["stdout"] == "ci:builders 2770\n"
        verified = await env.step({"verify": True})
    assert (verified.done, verified.reward) == (True, 1.0), verified.observation
    session = session_of(rollout_server.target, opened.observation["session_id"])
    assert session.status == pb.SESSION_STATUS_VERIFIED


@needs_root
async def test_a_harbor_archive_left_undone_scores_zero(
    terminal: GenericEnvClient, task_root: Path
) -> None:
    archive = base64.b64encode(pack_task_dir(task_root / "needs_root")).decode()
    async with terminal as env:
        opened = await env.reset(harbor_archive=archive)
        assert "builders" in opened.observation["instruction"]
        assert (await step(env, "id -gn ci"))["exit_code"] != 0
        verified = await env.step({"verify": True})
    assert (verified.done, verified.reward) == (True, 0.0), verified.observation


@pytest.mark.parametrize("leaving", ["close", "disconnect"])
async def test_a_client_that_leaves_takes_its_session_and_sandbox(
    terminal: GenericEnvClient, rollout_server: ServerProcess, leaving: str
) -> None:
    marker = f"terminal-daemon-{uuid.uuid4().hex[:8]}"
    env = terminal
    await env.connect()
    opened = await env.reset(task=INLINE)
    daemon = f"(setsid bash -c 'exec -a {marker} sleep 300' >/dev/null 2>&1 &)"
    assert (await step(env, daemon))["exit_code"] == 0
    await eventually(lambda: processes_with(marker))
    if leaving == "close":
        await env.close()  # the `close` message, then the socket
    else:
        await env.disconnect()  # the socket only
    session_id = opened.observation["session_id"]
    await eventually(
        lambda: session_of(rollout_server.target, session_id).status == pb.SESSION_STATUS_CLOSED
    )
    # Killed with its sandbox; the kernel may take a moment to take a SIGKILLed process away.
    await eventually(lambda: not processes_with(marker), timeout_s=5)
    await env.close()


async def test_a_failed_setup_or_a_step_before_reset_is_the_calls_error(
    terminal: GenericEnvClient,
) -> None:
    async with terminal as env:
        with pytest.raises(RuntimeError, match="call reset first"):
            await env.step({"command": "true"})
        with pytest.raises(RuntimeError, match=r"did not open \(FAILED\): SETUP: "):
            await env.reset(task={**INLINE, "setup": ["exit 3"]})
        with pytest.raises(RuntimeError, match="exactly one of harbor_task"):
            await env.reset()
