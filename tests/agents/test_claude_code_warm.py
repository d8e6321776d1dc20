"""claude-code started ahead through the warm-start seam (`CLAUDE_WARM`): the real claude
binary in real bwrap sandboxes through the real capture proxy (Messages translated) to the
scripted upstream, with the opencode tests' rollouts (`warm_rollouts.Rollouts`). The
warm path is proven taken by the agent's count of hand-overs, never by timing."""

from __future__ import annotations

import dataclasses
import json
import logging
import subprocess
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from service.agents.claude_code import CLAUDE_WARM, ROOT, ClaudeCodeAgent
from service.agents.warm_start import holder_script
from service.config import Settings
from service.proxy.server import CaptureProxy
from service.sandboxes.local.backend import LocalSandbox
from testing.fakes.llm_upstream import FakeUpstream, Reply, ToolCallReply, has_tools
from tests.agents.warm_rollouts import (
    Rollouts,
    captured,
    look_command,
    started,
    tool_result,
    warm_settings,
)

pytestmark = [pytest.mark.agents, pytest.mark.timeout(900)]


def _look(upstream: FakeUpstream, secret: str = "SECRET-") -> None:
    """The model looks at claude's own argv and environment, its files, every process, and
    any file holding `secret` (written so that the command itself does not match)."""
    command = look_command("~ ~/.claude-rollout /tmp", secret, hidden="ANTHROPIC_API_KEY")
    arguments = json.dumps({"command": command, "description": "Look around"})
    upstream.script(Reply(tool_calls=[ToolCallReply("Bash", arguments)]), match=has_tools)


_OWN = (
    (r"/tmp/claude-[0-9a-f]+-cwd|\bclaude-[0-9]+\b", "<tmp>"),
    (r"(snapshot-bash-[^ ]*-)[a-z0-9]+\.sh", r"\1<random>.sh"),
    (r"[0-9a-f]{8}(-[0-9a-f]{4}){3}-[0-9a-f]{12}", "<u>"),
    (r"\b(toolu|call|msg)_[A-Za-z0-9_-]+", "<id>"),
    (r"\b[0-9]+\.(json|sock)\b", "<pid>"),
)
"""claude's own, which `same` does not blank: sessions, tool uses, uuids, its pid's files, the
sandbox's uid in its /tmp directory, its shell snapshot's and cwd file's random names."""


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    return warm_settings(tmp_path)


@pytest.fixture
async def rollouts(
    settings: Settings, proxy: CaptureProxy, upstream: FakeUpstream
) -> AsyncIterator[Rollouts]:
    async with started(settings, proxy, upstream, ClaudeCodeAgent(settings)) as made:
        yield made


async def test_a_warm_claude_sends_and_prints_what_a_cold_one_does(
    rollouts: Rollouts, upstream: FakeUpstream
) -> None:
    instruction = 'Look "around" \\ here,\n\tthen stop. \x01\n\n'  # verbatim, as JSON
    _look(upstream)
    cold = await rollouts.run(instruction)
    await rollouts.renew_warm()
    _look(upstream)
    warm = await rollouts.run(instruction)

    assert (cold.warm, warm.warm) == (False, True)
    assert captured(warm, _OWN) == captured(cold, _OWN)
    assert json.dumps(instruction) in json.dumps([t.request_messages for t in warm.turns])
    look = tool_result(warm)
    assert "CLAUDE_CONFIG_DIR=" in look
    assert "--input-format stream-json" in look
    assert "warm-go" not in look


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


async def test_a_claude_md_made_by_setup_runs_cold(
    rollouts: Rollouts, upstream: FakeUpstream, caplog: pytest.LogCaptureFixture
) -> None:
    """claude reads the workdir's CLAUDE.md (and the like) at its start: one started ahead
    before the setup wrote it would not follow it."""
    marker = f"MARKER-{uuid.uuid4().hex[:8]}"
    _look(upstream)
    await rollouts.run("Look around.")
    await rollouts.renew_warm()
    _look(upstream)

    async def plant(sandbox: LocalSandbox) -> None:
        await sandbox.exec(f"echo 'Always say {marker}.' > CLAUDE.md", timeout_s=30)

    with caplog.at_level(logging.INFO, logger="service.agents.harness"):
        run = await rollouts.run("Look around.", setup=plant)
    assert not run.warm
    assert "was not handed over" in caplog.text  # one was started, with this very plan
    assert marker in json.dumps([t.request_messages for t in run.turns])


async def test_a_sandbox_claimed_without_claude_keeps_nothing_started_ahead(
    rollouts: Rollouts, upstream: FakeUpstream
) -> None:
    _look(upstream)
    await rollouts.run("Look around.")
    await rollouts.renew_warm()
    for agent in ("", "codex"):
        look = await rollouts.look_in_another_agents(agent, "ps -eo args; ls -A ~ /tmp")
        assert "--input-format stream-json" not in look
        assert ".claude-rollout" not in look
    _look(upstream)
    assert (await rollouts.run("Look around.")).warm  # the sandbox had one, kept for it


def test_the_holder_gives_up_on_a_claude_that_never_settles(tmp_path: Path) -> None:
    """No endless poll in a pooled sandbox: the holder exits once the server stops waiting."""
    warm = dataclasses.replace(CLAUDE_WARM, settle_rounds=3, unchanged="")
    script = holder_script(warm).replace(ROOT, str(tmp_path))
    done = subprocess.run(
        ["bash", "-c", script], cwd=tmp_path, capture_output=True, text=True, timeout=30
    )
    assert done.returncode == 4, done
    assert done.stdout.startswith("ready ")
    assert "settled" not in done.stdout
