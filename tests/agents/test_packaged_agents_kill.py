"""Each packaged agent, real, in a real sandbox: killed with every child at its timeout or when
its run is cancelled, while a tool it started (a `sleep`) is still running."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Callable

import pytest

from service.agents.claude_code import ClaudeCodeAgent
from service.agents.codex import CodexAgent
from service.agents.harness import HarnessAgent
from service.agents.mini_swe_agent import MiniSweAgent
from service.config import Settings
from service.sandboxes.local.backend import LocalBackend
from testing.fakes.llm_upstream import FakeUpstream, Reply, ToolCallReply, has_tools
from tests.agents.conftest import Rig
from tests.agents.processes import TIMEOUT_S, running, until

pytestmark = [pytest.mark.agents, pytest.mark.timeout(900)]


def _call(name: str, **arguments: str) -> Reply:
    return Reply(tool_calls=[ToolCallReply(name, json.dumps(arguments))])


def _indirect(sleep: str) -> str:
    argv = json.dumps(sleep.split())
    return f"python3 -c 'import subprocess; subprocess.run({argv})'"


AGENTS: dict[str, tuple[Callable[[Settings], HarnessAgent], Callable[[str], Reply]]] = {
    "mini-swe-agent": (MiniSweAgent, lambda sleep: _call("bash", command=sleep)),
    # claude-code refuses a standalone `sleep` in its Bash tool; a program that sleeps it runs.
    "claude-code": (ClaudeCodeAgent, lambda sleep: _call("Bash", command=_indirect(sleep))),
    # codex's exec_command hands a long command back after a while and asks the model again:
    # that call hangs, so codex is still running (its sleep too) at the deadline.
    "codex": (CodexAgent, lambda sleep: _call("exec_command", cmd=sleep)),
}


async def _ready(rig: Rig, upstream: FakeUpstream, name: str, marker: str) -> HarnessAgent:
    make, sleep_call = AGENTS[name]
    upstream.script(
        sleep_call(marker), Reply(text="Waiting.", hold_after_first=True), match=has_tools
    )
    agent = make(rig.settings)
    await agent.provision(LocalBackend.capabilities, lambda line: None)
    return agent


@pytest.mark.parametrize("name", sorted(AGENTS))
async def test_timeout_kills_the_agent_and_its_children(
    rig: Rig, upstream: FakeUpstream, name: str
) -> None:
    marker = f"sleep {5000 + uuid.uuid4().int % 1000}"
    agent = await _ready(rig, upstream, name, marker)
    context = rig.context("Wait.", timeout_s=TIMEOUT_S)
    await agent.prepare(rig.sandbox, context)
    sleeping = asyncio.Event()

    async def watch() -> None:
        await until(lambda: running(marker))
        sleeping.set()

    watcher = asyncio.create_task(watch())
    outcome = await agent.run(rig.sandbox, context, rig.outputs.append)
    watcher.cancel()

    assert sleeping.is_set(), (
        f"the sleep never started; the timeout proved nothing\n{outcome.log_tail}"
    )
    assert (outcome.exit_code, outcome.timed_out) == (None, True)
    assert rig.survivors() == []


@pytest.mark.parametrize("name", sorted(AGENTS))
async def test_cancelling_run_kills_the_agent_and_its_children(
    rig: Rig, upstream: FakeUpstream, name: str
) -> None:
    marker = f"sleep {6000 + uuid.uuid4().int % 1000}"
    agent = await _ready(rig, upstream, name, marker)
    context = rig.context("Wait.", timeout_s=300.0)
    await agent.prepare(rig.sandbox, context)

    run = asyncio.create_task(agent.run(rig.sandbox, context, rig.outputs.append))
    await until(lambda: running(marker))
    assert rig.survivors()
    run.cancel()
    with pytest.raises(asyncio.CancelledError):
        await run

    assert rig.survivors() == []
