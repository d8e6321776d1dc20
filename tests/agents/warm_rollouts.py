"""What the warm-start tests of every harness share: a rollout run as the engine runs it
(`Rollouts`), the command the model runs to look around, and what of two runs must be equal.

The harness's own ids and random names are blanked by each test (`same`'s `patterns`); the
warm path is proven taken by the agent's count of hand-overs, never by timing.
"""

from __future__ import annotations

import contextlib
import re
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from service.agents.base import AgentContext, AgentOutcome
from service.agents.harness import HarnessAgent
from service.config import Settings
from service.models import AgentOutput, CaptureSpec, NetworkPolicy, SandboxSpec, Turn
from service.proxy.access import host_socket_access, start_forwarder
from service.proxy.endpoints import ResolvedEndpoint
from service.proxy.server import CaptureProxy
from service.sandboxes.base import SandboxRequest
from service.sandboxes.local.backend import LocalBackend, LocalSandbox
from testing.fakes.llm_upstream import FakeUpstream
from tests.agents.conftest import UPSTREAM_KEY, UPSTREAM_MODEL

__all__ = [
    "Rollouts",
    "Run",
    "captured",
    "look_command",
    "same",
    "started",
    "tool_result",
    "warm_settings",
]

Patterns = Sequence[tuple[str, str]]
_VARYING = {"latency_s", "time_to_first_token_s", "start_time", "usage", "paused_s"}
_TOKENS = {"prompt_token_ids", "completion_token_ids", "logprobs", "completion_tokens"}


def look_command(
    listed: str, secret: str = "SECRET-", *, own: bool = True, hidden: str = ""
) -> str:
    """What the model runs to look around: the agent's own environment (less `hidden`, a
    regex of variable names) and argv unless not `own`, the directories `listed`, every
    process, and any file holding `secret` (written so that the command itself, which the
    agent may keep in its session store, does not match)."""
    pattern = secret.replace("-", "[-]", 1)
    environ = "tr '\\0' '\\n' < /proc/$PPID/environ"
    environ += f" | grep -v -E '^({hidden})='" if hidden else ""
    process = f"{environ} | sort; tr '\\0' ' ' < /proc/$PPID/cmdline; echo; " if own else ""
    return (
        f"{process}ls -A {listed}; ps -eo args --sort=args; "
        f"echo \"FOUND:$(grep -rl '{pattern}' ~ /tmp 2>/dev/null | sort | tr '\\n' ' ')END\""
    )


def same(value: Any, patterns: Patterns = ()) -> Any:
    """`value` with what differs between any two runs blanked: ids, pids, session, times,
    and `patterns` (regex, replacement) first, a harness's own."""
    if isinstance(value, str):
        for pattern, replacement in patterns:
            value = re.sub(pattern, replacement, value)
        value = re.sub(r"\b(call|ses|msg|prt)_[A-Za-z0-9]+|\b1[0-9]{12}\b", "<id>", value)
        # Sandbox directories, and the library bun unpacks under a random name at each start.
        value = re.sub(r"warm-[0-9a-f]{16}|\.[0-9a-f]{16}-0+\.so", "<random>", value)
        # The one known difference: the hand-over's command and the holder end after the
        # last command the spawner started, which alone reaps ended ones (`spawner.release`),
        # so the agent's `ps` may list them as zombies until the verifier's first command.
        return re.sub(r"\[(bash|cat)\] <defunct>\n", "", value)
    if isinstance(value, dict):
        return {key: same(item, patterns) for key, item in value.items()}
    if isinstance(value, list):
        return [same(item, patterns) for item in value]
    return value


def captured(run: Run, patterns: Patterns = ()) -> tuple[list[Any], list[Any]]:
    """What the model was sent and what the agent printed, as `same` leaves them. The turns
    are in order within a lane (a requested model, as the capture's history keeps them),
    their `index` dropped: calls of two lanes may race (opencode's title and its first
    answer), and arrival order across lanes is not what a warm start must keep."""
    exclude = _VARYING | _TOKENS | {"top_logprobs", "index"}
    turns = [same(turn.model_dump(mode="json", exclude=exclude), patterns) for turn in run.turns]
    turns.sort(key=lambda turn: str(turn["requested_model"]))  # stable: a lane keeps its order
    outputs = [(o.kind, o.tool_name, same(o.text, patterns)) for o in run.outputs]
    return turns, outputs


def tool_result(run: Run) -> str:
    """The first tool result the model was sent."""
    for turn in run.turns:
        for message in turn.request_messages:
            if message.get("role") == "tool":
                return str(message.get("content", ""))
    raise AssertionError("no tool result reached the model")


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


def warm_settings(tmp_path: Path) -> Settings:
    """A backend's settings with agents started ahead, the proxy on a free port."""
    return Settings(
        state_dir=tmp_path / "state", proxy_listen="127.0.0.1:0", local_warm_agents=True
    )


@contextlib.asynccontextmanager
async def started(
    settings: Settings, proxy: CaptureProxy, upstream: FakeUpstream, agent: HarnessAgent
) -> AsyncIterator[Rollouts]:
    """Rollouts of `agent`, installed, on a local backend whose warm pool is filled."""
    backend = LocalBackend(settings)
    await agent.provision(LocalBackend.capabilities, lambda line: None)
    try:
        await backend.warm_up()
        yield Rollouts(settings, backend, proxy, upstream, agent)
    finally:
        await backend.close()
