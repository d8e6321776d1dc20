"""codex started ahead through the warm-start seam (`CODEX_WARM`): the real codex binary in
real bwrap sandboxes through the real capture proxy (Responses translated) to the scripted
upstream, with the opencode tests' rollouts (`warm_rollouts.Rollouts`). The
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

from service.agents.codex import CODEX_HOME, CODEX_WARM, KEY_VARIABLE, CodexAgent
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
    """The model looks at codex's own argv and environment, its files, every process, and
    any file holding `secret` (written so that the command itself does not match)."""
    command = look_command("~ ~/.codex-rollout /tmp", secret, hidden=KEY_VARIABLE)
    arguments = json.dumps({"cmd": command})
    upstream.script(Reply(tool_calls=[ToolCallReply("exec_command", arguments)]), match=has_tools)


_OWN = (
    (r"Chunk ID: [0-9a-f]+", "Chunk ID: <random>"),
    (r"Wall time: [0-9.]+ seconds", "Wall time: <s> seconds"),
    (r"[0-9a-f]{8}(-[0-9a-f]{4}){3}-[0-9a-f]{12}", "<u>"),
    (r"\b(toolu|call|msg)_[A-Za-z0-9_-]+", "<id>"),
    (r"\b[0-9]+\.(json|sock)\b", "<pid>"),
    # codex counts the output's tokens, and so what the patterns blank (names, times).
    (r"Original token count: [0-9]+", "Original token count: <n>"),
)
"""codex's own, which `same` does not blank: threads, calls, uuids, its output chunks' random
ids, and the wall time it reports of a command."""


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    return warm_settings(tmp_path)


@pytest.fixture
async def rollouts(
    settings: Settings, proxy: CaptureProxy, upstream: FakeUpstream
) -> AsyncIterator[Rollouts]:
    async with started(settings, proxy, upstream, CodexAgent(settings)) as made:
        yield made


async def test_a_warm_codex_sends_and_prints_what_a_cold_one_does(
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
    assert "CODEX_HOME=" in look
    assert " exec --json " in look
    assert "warm-go" not in look
    assert "\n/bin/bash -lc " in look  # never a shell snapshot, whose commands run as -c


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


async def test_a_git_repo_or_codex_dir_made_by_setup_runs_cold(
    rollouts: Rollouts, upstream: FakeUpstream, caplog: pytest.LogCaptureFixture
) -> None:
    """codex looks for `.git` above its workdir and for the workdir's `.codex` before it reads
    its prompt: one started ahead before the setup made them would not look again."""
    _look(upstream)
    await rollouts.run("Look around.")
    for made in ("git init -q .", "mkdir .codex"):
        await rollouts.renew_warm()
        _look(upstream)

        async def plant(sandbox: LocalSandbox, command: str = made) -> None:
            await sandbox.exec(command, timeout_s=30)

        with caplog.at_level(logging.INFO, logger="service.agents.harness"):
            caplog.clear()
            run = await rollouts.run("Look around.", setup=plant)
        assert not run.warm, made
        assert "was not handed over" in caplog.text  # one was started, with this very plan


async def test_an_agents_md_made_by_setup_reaches_a_warm_codex(
    rollouts: Rollouts, upstream: FakeUpstream
) -> None:
    """codex reads AGENTS.md after its prompt, so one made by setup needs no cold start."""
    marker = f"MARKER-{uuid.uuid4().hex[:8]}"
    _look(upstream)
    await rollouts.run("Look around.")
    await rollouts.renew_warm()
    _look(upstream)

    async def plant(sandbox: LocalSandbox) -> None:
        await sandbox.exec(f"echo '# {marker}' > AGENTS.md", timeout_s=30)

    run = await rollouts.run("Look around.", setup=plant)
    assert run.warm
    assert marker in json.dumps([t.request_messages for t in run.turns])


async def test_a_sandbox_claimed_without_codex_keeps_nothing_started_ahead(
    rollouts: Rollouts, upstream: FakeUpstream
) -> None:
    _look(upstream)
    await rollouts.run("Look around.")
    await rollouts.renew_warm()
    for agent in ("", "claude-code"):
        look = await rollouts.look_in_another_agents(agent, "ps -eo args; ls -A ~ /tmp")
        assert " exec --json " not in look
        assert ".codex-rollout" not in look
    _look(upstream)
    assert (await rollouts.run("Look around.")).warm  # the sandbox had one, kept for it


def test_the_holder_gives_up_on_a_codex_that_never_settles(tmp_path: Path) -> None:
    """No endless poll in a pooled sandbox: the holder exits once the server stops waiting."""
    warm = dataclasses.replace(CODEX_WARM, settle_rounds=3, unchanged="")
    script = holder_script(warm).replace(CODEX_HOME, str(tmp_path))
    done = subprocess.run(
        ["bash", "-c", script], cwd=tmp_path, capture_output=True, text=True, timeout=30
    )
    assert done.returncode == 4, done
    assert done.stdout.startswith("ready ")
    assert "settled" not in done.stdout
