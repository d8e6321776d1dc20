"""The seed's `opencode_env`: one MCP tool, `run_rollout`, backed by RunRollout.

Its arguments and result JSON are the seed's (`opencode_task`, `opencode_result`), so a
trainer that used the seed changes only its URL. The rollout itself is the service's: setup
before the agent, verifier files only after it, the reward by the service's rules, every
model call a turn with its token ids and logprobs.
"""

from __future__ import annotations

from typing import Any
from uuid import uuid4

from fastmcp import FastMCP
from fastmcp.exceptions import ToolError
from openenv.core.env_server.mcp_environment import MCPEnvironment
from openenv.core.env_server.types import Action, Observation, State
from rollout_client import AsyncRolloutClient, RolloutError

from service.openenv.opencode_result import result_of
from service.openenv.opencode_task import RolloutArguments, spec_of
from service.openenv.upstream import RolloutTarget

__all__ = ["OpenCodeEnvironment", "OpenCodeState"]

RUN_ROLLOUT_TIMEOUT_S = 900.0
"""A step's budget for a tool call (OpenEnv's default is 30 s; a rollout takes minutes)."""


class OpenCodeState(State):
    """What one session of the environment has done."""

    rollouts_completed: int = 0
    last_reward: float | None = None
    last_task_id: str | None = None
    last_sandbox_id: str | None = None
    last_rollout_id: str | None = None


class OpenCodeEnvironment(MCPEnvironment):
    """One session: `run_rollout` as often as the caller likes, each a rollout of its own."""

    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(self, upstream: RolloutTarget) -> None:
        self._upstream = upstream
        self._state = OpenCodeState(episode_id=str(uuid4()))
        mcp = FastMCP("opencode_env")
        mcp.tool(self.run_rollout)
        super().__init__(mcp)

    async def run_rollout(
        self,
        endpoint: str = "",
        base_url: str = "",
        api_key: str = "",
        model: str = "",
        instruction: str = "",
        setup: list[str] | None = None,
        verify: list[str] | None = None,
        task_id: str = "",
        mode: str = "transparent_proxy",
        disable_thinking: bool | None = None,
        max_tokens_cap: int = 4096,
        top_logprobs: int = 5,
        agent_timeout_s: float = 600.0,
        template: str = "",
        agent: str = "opencode",
        agent_command: str = "",
    ) -> str:
        """Run one rollout end to end and return its result as JSON.

        `endpoint` is a shorthand (vllm, openai, hf_router) the server resolves from its own
        environment; or give base_url, api_key and model. `setup` commands run before the
        agent, `verify` commands after it; the reward is ~/logs/verifier/reward.txt when a
        verify command writes it, else passed/total. `agent` (default opencode) and
        `agent_command` (for the command agent) are this service's additions.
        """
        arguments = RolloutArguments(
            instruction=instruction,
            endpoint=endpoint,
            base_url=base_url,
            api_key=api_key,
            model=model,
            setup=tuple(setup or ()),
            verify=tuple(verify or ()),
            task_id=task_id,
            mode=mode,
            disable_thinking=disable_thinking,
            max_tokens_cap=max_tokens_cap,
            top_logprobs=top_logprobs,
            agent_timeout_s=agent_timeout_s,
            template=template,
            agent=agent,
            agent_command=agent_command,
        )
        # A bad argument, or a call the server refused, is the caller's tool error (FastMCP
        # sends its message, logged without a traceback); a rollout that failed is a result.
        try:
            spec = spec_of(arguments)
            # A channel per call: the tool runs in whichever event loop serves the request.
            async with AsyncRolloutClient(
                self._upstream.target, token=self._upstream.token or ""
            ) as client:
                rollout = await client.run(spec)
        except (ValueError, RolloutError) as exc:
            raise ToolError(str(exc)) from exc
        result = result_of(rollout, mode)
        self._state.rollouts_completed += 1
        self._state.last_reward = result.reward
        self._state.last_task_id = task_id or None
        self._state.last_sandbox_id = result.sandbox_id or None
        self._state.last_rollout_id = result.rollout_id
        return result.model_dump_json()

    def reset(
        self, seed: int | None = None, episode_id: str | None = None, **_: Any
    ) -> Observation:
        self._state = OpenCodeState(episode_id=episode_id or str(uuid4()))
        return Observation(
            done=False,
            reward=None,
            metadata={
                "status": "ready",
                "message": "opencode_env ready: call run_rollout(...) with a task.",
            },
        )

    def _step_impl(self, action: Action, timeout_s: float | None = None, **_: Any) -> Observation:
        return Observation(
            done=False,
            reward=None,
            metadata={
                "error": f"unknown action type {type(action).__name__}: "
                "use CallToolAction(tool_name='run_rollout', arguments={...})"
            },
        )

    def step(self, action: Action, timeout_s: float | None = None, **kwargs: Any) -> Observation:
        budget = RUN_ROLLOUT_TIMEOUT_S if timeout_s is None else timeout_s
        return super().step(action, timeout_s=budget, **kwargs)

    async def step_async(
        self, action: Action, timeout_s: float | None = None, **kwargs: Any
    ) -> Observation:
        budget = RUN_ROLLOUT_TIMEOUT_S if timeout_s is None else timeout_s
        return await super().step_async(action, timeout_s=budget, **kwargs)

    @property
    def state(self) -> OpenCodeState:
        return self._state
