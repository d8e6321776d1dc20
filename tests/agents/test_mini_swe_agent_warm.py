"""mini-swe-agent started ahead through the warm-start seam (`MINI_WARM`): real mini-swe-agent
in real bwrap sandboxes through the real capture proxy to the scripted upstream, with the
opencode tests' rollouts (`warm_rollouts.Rollouts`). The warm path is proven taken by
the agent's count of hand-overs, never by timing."""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import AsyncIterator, Sequence
from pathlib import Path

import pytest

from service.agents.mini_swe_agent import MiniSweAgent
from service.config import Settings
from service.models import AgentOutput
from service.proxy.server import CaptureProxy
from service.sandboxes.local.backend import LocalSandbox
from testing.fakes.llm_upstream import FakeUpstream, Reply, ToolCallReply, has_tools
from tests.agents.warm_rollouts import Rollouts, look_command, started, tool_result, warm_settings

pytestmark = [pytest.mark.agents, pytest.mark.timeout(900)]

SUBMIT = "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"


def _bash(command: str) -> Reply:
    return Reply(
        text="Running.", tool_calls=[ToolCallReply("bash", json.dumps({"command": command}))]
    )


def _look(upstream: FakeUpstream, secret: str = "SECRET-") -> None:
    """The model looks at mini's files, every process and any file holding `secret`."""
    look = look_command("~/.mini-swe-agent /tmp", secret, own=False)
    upstream.script(_bash(look), _bash(SUBMIT), match=has_tools)


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    return warm_settings(tmp_path)


@pytest.fixture
async def rollouts(
    settings: Settings, proxy: CaptureProxy, upstream: FakeUpstream
) -> AsyncIterator[Rollouts]:
    async with started(settings, proxy, upstream, MiniSweAgent(settings)) as made:
        yield made


async def test_a_warm_mini_sends_and_prints_what_a_cold_one_does(
    rollouts: Rollouts, upstream: FakeUpstream
) -> None:
    _look(upstream)
    cold = await rollouts.run("Look around.")
    await rollouts.renew_warm()
    _look(upstream)
    warm = await rollouts.run("Look around.")

    assert (cold.warm, warm.warm) == (False, True)
    assert warm.turns[0].request_messages[:2] == cold.turns[0].request_messages[:2]
    assert _by_kind(warm.outputs) == _by_kind(cold.outputs)
    assert "warm-go" not in tool_result(warm)


def _by_kind(outputs: Sequence[AgentOutput]) -> dict[str, list[str]]:
    """Each kind's texts in order but STDOUT's (mini's own log): stderr and the parsed
    turns come through two pipes, whose interleaving no two processes share."""
    texts: dict[str, list[str]] = {}
    for output in outputs:
        if output.kind.name != "STDOUT":
            texts.setdefault(output.kind.name, []).append(output.text)
    return texts


async def test_a_rollout_sees_nothing_of_the_one_before(
    rollouts: Rollouts, upstream: FakeUpstream
) -> None:
    secret = f"SECRET-{uuid.uuid4().hex}"
    _look(upstream)
    first = await rollouts.run(f"Remember {secret}.")
    await rollouts.renew_warm()
    _look(upstream, secret)
    second = await rollouts.run("Look around.")

    assert second.warm
    assert secret in json.dumps([t.request_messages for t in first.turns])
    assert secret not in json.dumps([t.model_dump(mode="json") for t in second.turns])
    assert secret not in second.outcome.log_tail
    assert "FOUND:END" in tool_result(second)  # no file in its home or /tmp holds it


async def test_what_setup_adds_that_mini_reads_at_its_start_runs_cold(
    rollouts: Rollouts, upstream: FakeUpstream, caplog: pytest.LogCaptureFixture
) -> None:
    """mini reads `.env` in its config directory, and Python imports from its script's
    directory: one started ahead before the setup wrote them would not see them."""
    _look(upstream)
    await rollouts.run("Look around.")
    for planted in ("config/.env", "sitecustomize.py"):
        await rollouts.renew_warm()
        _look(upstream)

        async def plant(sandbox: LocalSandbox, name: str = planted) -> None:
            await sandbox.exec(f"echo '# planted' > ~/.mini-swe-agent/{name}", timeout_s=30)

        with caplog.at_level(logging.INFO, logger="service.agents.harness"):
            caplog.clear()
            run = await rollouts.run("Look around.", setup=plant)
        assert not run.warm, planted
        assert "was not handed over" in caplog.text  # one was started, with this very plan


async def test_a_sandbox_claimed_without_mini_keeps_nothing_started_ahead(
    rollouts: Rollouts, upstream: FakeUpstream
) -> None:
    _look(upstream)
    await rollouts.run("Look around.")
    await rollouts.renew_warm()
    for agent in ("", "codex"):
        look = await rollouts.look_in_another_agents(agent, "ps -eo args; ls -A ~")
        assert "runner.py" not in look
        assert ".mini-swe-agent" not in look
    _look(upstream)
    assert (await rollouts.run("Look around.")).warm  # the sandbox had one, kept for it
