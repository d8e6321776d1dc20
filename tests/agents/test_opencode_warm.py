"""opencode started ahead in a warm sandbox (`ROLLOUT_LOCAL_WARM_AGENTS`): real opencode in real
bwrap sandboxes through the real capture proxy to the scripted upstream. The warm path is
proven taken by the agent's count of hand-overs, never by timing."""

from __future__ import annotations

import dataclasses
import json
import logging
import subprocess
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from service.agents.opencode import OpencodeAgent
from service.agents.opencode_config import XDG_ROOT
from service.agents.opencode_warm import OPENCODE_WARM
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

pytestmark = pytest.mark.opencode


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    return warm_settings(tmp_path)


@pytest.fixture
async def rollouts(
    settings: Settings, proxy: CaptureProxy, upstream: FakeUpstream
) -> AsyncIterator[Rollouts]:
    async with started(settings, proxy, upstream, OpencodeAgent(settings)) as made:
        yield made


def _look(upstream: FakeUpstream, secret: str = "SECRET-") -> None:
    """opencode's bash tool shows the model opencode's own environment and argv, its private
    directories, every process and any file holding `secret`."""
    command = look_command("~/.opencode-xdg ~/.opencode-xdg/config/opencode /tmp", secret)
    arguments = json.dumps({"command": command, "description": "Look around"})
    upstream.script(Reply(tool_calls=[ToolCallReply("bash", arguments)]), match=has_tools)


async def test_a_warm_opencode_sends_and_prints_what_a_cold_one_does(
    rollouts: Rollouts, upstream: FakeUpstream
) -> None:
    _look(upstream)
    cold = await rollouts.run("Look around.")  # the first of its kind: its plan is learnt
    await rollouts.renew_warm()
    _look(upstream)
    warm = await rollouts.run("Look around.")

    assert (cold.warm, warm.warm) == (False, True)
    assert len(warm.turns) == 3  # the title, the bash call, the answer to its result
    assert captured(warm) == captured(cold)
    look = tool_result(warm)
    assert "OPENCODE_CONFIG_CONTENT=" in look
    assert " run --pure --format json" in look
    assert "warm-go" not in look


async def test_another_environment_or_a_git_repo_made_by_setup_runs_cold(
    rollouts: Rollouts, upstream: FakeUpstream, caplog: pytest.LogCaptureFixture
) -> None:
    upstream.script(Reply(text="ok"))
    await rollouts.run("Say ok.")
    await rollouts.renew_warm()

    _look(upstream)
    other_env = await rollouts.run("Look around.", env={"TASK_FLAG": "1"})
    assert not other_env.warm
    assert "TASK_FLAG=1" in tool_result(other_env)

    await rollouts.renew_warm()  # made with the first one's plan (one with an env is not learnt)
    _look(upstream)

    async def git_init(sandbox: LocalSandbox) -> None:
        await sandbox.exec("mkdir -p .git && git init -q . 2>/dev/null; true", timeout_s=30)

    with caplog.at_level(logging.INFO, logger="service.agents.harness"):
        repo = await rollouts.run("Look around.", setup=git_init)
    assert not repo.warm
    assert "was not handed over" in caplog.text  # one was started, with this very plan
    system = json.dumps([turn.request_messages for turn in repo.turns])
    assert "Is directory a git repo: yes" in system


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
    assert secret in json.dumps(first.turns[0].request_messages)
    assert secret not in json.dumps([t.model_dump(mode="json") for t in second.turns])
    assert secret not in second.outcome.log_tail
    assert "FOUND:END" in tool_result(second)  # no file in its home or /tmp holds it


async def test_a_task_environment_never_runs_in_a_sandbox_another_rollout_claims(
    rollouts: Rollouts, upstream: FakeUpstream
) -> None:
    """A task's environment is code (bash expands BASH_ENV, LD_PRELOAD loads a library):
    were its plan started ahead, it would run in a sandbox the next rollout of that kind
    claims, whoever's it is, and what it left there outlives the agent's discard."""
    planted = f"/tmp/planted-{uuid.uuid4().hex[:8]}"
    upstream.script(Reply(text="ok"))
    await rollouts.run("Say ok.", env={"BASH_ENV": f"$(touch {planted})"})
    await rollouts.renew_warm()

    seen: list[str] = []

    async def look(sandbox: LocalSandbox) -> None:
        result = await sandbox.exec(f"test -e {planted} && echo planted; true", timeout_s=30)
        seen.append(result.stdout.strip())

    upstream.script(Reply(text="ok"))
    await rollouts.run("Say ok.", setup=look)
    assert seen == [""]


async def test_a_sandbox_claimed_for_another_agent_keeps_nothing_started_ahead(
    rollouts: Rollouts, upstream: FakeUpstream
) -> None:
    """Another agent's rollout, or a group's template (no agent), takes no opencode: one
    started ahead there would run beside it (its environment readable, its memory counted
    in the sandbox's), and its files would stay (in a template, in the group's snapshot).
    Nor does it wait for one to be killed: it takes a sandbox without, and the opencode
    stays ready for the next opencode rollout."""
    upstream.script(Reply(text="ok"))
    await rollouts.run("Say ok.")
    await rollouts.renew_warm()

    for agent in ("", "codex"):
        look = await rollouts.look_in_another_agents(agent, "ps -eo args; ls -A ~ /tmp")
        assert " run --pure" not in look
        assert ".opencode-xdg" not in look
    upstream.script(Reply(text="ok"))
    assert (await rollouts.run("Say ok.")).warm  # the sandbox had one, kept for it


def test_the_holder_gives_up_on_an_opencode_that_never_settles(tmp_path: Path) -> None:
    """No endless poll in a pooled sandbox: the holder exits once the server stops waiting."""
    warm = dataclasses.replace(OPENCODE_WARM, settle_rounds=3)
    script = holder_script(warm).replace(XDG_ROOT, str(tmp_path))
    done = subprocess.run(
        ["bash", "-c", script], cwd=tmp_path, capture_output=True, text=True, timeout=30
    )
    assert done.returncode == 4, done
    assert done.stdout.startswith("ready ")
    assert "settled" not in done.stdout
