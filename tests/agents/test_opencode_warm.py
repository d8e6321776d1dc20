"""opencode started ahead in a warm sandbox (`ROLLOUT_LOCAL_WARM_AGENTS`): real opencode in real
bwrap sandboxes through the real capture proxy to the scripted upstream. The warm path is
proven taken by the agent's count of hand-overs, never by timing."""

from __future__ import annotations

import dataclasses
import json
import logging
import re
import subprocess
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from service.agents.base import AgentContext, AgentOutcome
from service.agents.harness import HarnessAgent
from service.agents.opencode import OpencodeAgent
from service.agents.opencode_config import XDG_ROOT
from service.agents.opencode_warm import OPENCODE_WARM
from service.agents.warm_start import holder_script
from service.config import Settings
from service.models import AgentOutput, CaptureSpec, NetworkPolicy, SandboxSpec, Turn
from service.proxy.access import host_socket_access, start_forwarder
from service.proxy.endpoints import ResolvedEndpoint
from service.proxy.server import CaptureProxy
from service.sandboxes.base import SandboxRequest
from service.sandboxes.local.backend import LocalBackend, LocalSandbox
from testing.fakes.llm_upstream import FakeUpstream, Reply, ToolCallReply, has_tools
from tests.agents.conftest import UPSTREAM_KEY, UPSTREAM_MODEL

pytestmark = pytest.mark.opencode


def _look_command(secret: str = "SECRET-") -> str:
    """What opencode's bash tool shows the model: opencode's own environment and argv, its
    private directories, every process, and any file holding `secret` (written so that the
    command itself, kept in opencode's session store, does not match)."""
    pattern = secret.replace("-", "[-]", 1)
    return (
        "tr '\\0' '\\n' < /proc/$PPID/environ | sort; tr '\\0' ' ' < /proc/$PPID/cmdline; echo; "
        "ls -A ~/.opencode-xdg ~/.opencode-xdg/config/opencode /tmp; ps -eo args --sort=args; "
        f"echo \"FOUND:$(grep -rl '{pattern}' ~ /tmp 2>/dev/null | sort | tr '\\n' ' ')END\""
    )


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    return Settings(
        state_dir=tmp_path / "state", proxy_listen="127.0.0.1:0", local_warm_agents=True
    )


@dataclass
class Run:
    outcome: AgentOutcome
    turns: list[Turn]
    outputs: list[AgentOutput]
    warm: bool


@dataclass
class Rollouts:
    settings: Settings
    backend: LocalBackend
    proxy: CaptureProxy
    upstream: FakeUpstream
    agent: HarnessAgent

    async def run(
        self,
        instruction: str,
        *,
        env: Mapping[str, str] | None = None,
        setup: Callable[[LocalSandbox], Awaitable[Any]] | None = None,
    ) -> Run:
        """One rollout as the engine runs it: sandbox, route, forwarder, prepare, the
        task's setup, run; its sandbox killed after."""
        rollout_id = f"ocw-{uuid.uuid4().hex[:12]}"
        turns: list[Turn] = []
        outputs: list[AgentOutput] = []
        endpoint = ResolvedEndpoint(
            base_url=self.upstream.base_url, api_key=UPSTREAM_KEY, model=UPSTREAM_MODEL
        )
        spec = SandboxSpec(network=NetworkPolicy.NONE)
        request = SandboxRequest(rollout_id, spec, lifetime_s=600, agent=self.agent.name)
        sandbox = await self.backend.create(request)
        before = self.agent.warm_runs
        try:
            route = await self.proxy.open_sandbox_route(
                rollout_id, endpoint, CaptureSpec(), turns.append, sandbox.proxy_socket_path
            )
            try:
                await start_forwarder(sandbox, sandbox.forwarder_argv)
                context = AgentContext(
                    rollout_id=rollout_id,
                    instruction=instruction,
                    command="",
                    options={},
                    timeout_s=120.0,
                    model=host_socket_access(),
                    env=dict(env or {}),
                )
                await self.agent.prepare(sandbox, context)
                if setup is not None:
                    await setup(sandbox)
                outcome = await self.agent.run(sandbox, context, outputs.append)
            finally:
                self.proxy.close_route(route)
        finally:
            await sandbox.kill()
        assert outcome.exit_code == 0, outcome.log_tail
        return Run(outcome, turns, outputs, self.agent.warm_runs == before + 1)

    async def look_in_another_agents(self, agent: str, command: str) -> str:
        """The stdout of `command` in a sandbox claimed for `agent` ("": none, a template)."""
        spec = SandboxSpec(network=NetworkPolicy.NONE)
        name = f"ocw-other-{uuid.uuid4().hex[:8]}"
        sandbox = await self.backend.create(SandboxRequest(name, spec, 60, agent=agent))
        try:
            return (await sandbox.exec(command, timeout_s=30)).stdout
        finally:
            await sandbox.kill()

    async def renew_warm(self) -> None:
        """Use up the ready sandbox made before the plan was learnt; wait for the next."""
        spec = SandboxSpec(network=NetworkPolicy.NONE)
        request = SandboxRequest(f"ocw-spare-{uuid.uuid4().hex[:8]}", spec, lifetime_s=60)
        await (await self.backend.create(request)).kill()
        await self.backend.warm_up()


@pytest.fixture
async def rollouts(
    settings: Settings, proxy: CaptureProxy, upstream: FakeUpstream
) -> AsyncIterator[Rollouts]:
    backend = LocalBackend(settings)
    try:
        await backend.warm_up()
        yield Rollouts(settings, backend, proxy, upstream, OpencodeAgent(settings))
    finally:
        await backend.close()


def _look(upstream: FakeUpstream, secret: str = "SECRET-") -> None:
    arguments = json.dumps({"command": _look_command(secret), "description": "Look around"})
    upstream.script(Reply(tool_calls=[ToolCallReply("bash", arguments)]), match=has_tools)


_VARYING = {"latency_s", "time_to_first_token_s", "start_time", "usage", "paused_s"}
_TOKENS = {"prompt_token_ids", "completion_token_ids", "logprobs", "completion_tokens"}


def _same(value: Any) -> Any:
    """`value` with what differs between any two runs blanked: ids, pids, session, times."""
    if isinstance(value, str):
        value = re.sub(r"\b(call|ses|msg|prt)_[A-Za-z0-9]+|\b1[0-9]{12}\b", "<id>", value)
        # Sandbox directories, and the library bun unpacks under a random name at each start.
        value = re.sub(r"warm-[0-9a-f]{16}|\.[0-9a-f]{16}-0+\.so", "<random>", value)
        # The one known difference: the hand-over's command and the holder end after the
        # last command the spawner started, which alone reaps ended ones (`spawner.release`),
        # so the agent's `ps` may list them as zombies until the verifier's first command.
        return re.sub(r"\[(bash|cat)\] <defunct>\n", "", value)
    if isinstance(value, dict):
        return {key: _same(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_same(item) for item in value]
    return value


def _captured(run: Run) -> tuple[list[Any], list[Any]]:
    turns = [
        _same(turn.model_dump(mode="json", exclude=_VARYING | _TOKENS | {"top_logprobs"}))
        for turn in run.turns
    ]
    outputs = [(o.kind, o.tool_name, _same(o.text)) for o in run.outputs]
    return turns, outputs


def _tool_result(run: Run) -> str:
    for turn in run.turns:
        for message in turn.request_messages:
            if message.get("role") == "tool":
                return str(message.get("content", ""))
    raise AssertionError("no tool result reached the model")


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
    assert _captured(warm) == _captured(cold)
    look = _tool_result(warm)
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
    assert "TASK_FLAG=1" in _tool_result(other_env)

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
    assert "FOUND:END" in _tool_result(second)  # no file in its home or /tmp holds it


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
