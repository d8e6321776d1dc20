"""The seed's `run_rollout` arguments mapped onto a RolloutSpec, each in one place.

    argument              spec field
    endpoint              endpoint.kind (vllm, openai, hf_router: the server's own variables)
    base_url/api_key/model endpoint.base_url / api_key / model (explicit fields win)
    instruction           task.instruction (required)
    setup / verify        task.setup / task.verify
    task_id               task_id
    mode                  capture.mode (transparent_proxy, black_box)
    disable_thinking      capture.disable_thinking
    max_tokens_cap        capture.max_tokens_cap (0: no cap)
    top_logprobs          capture.top_logprobs
    agent_timeout_s       agent_timeout
    template              sandbox.template (an E2B template; empty: the server's default)
    agent, agent_command  agent.name / agent.command: not the seed's (its agent is always
                          opencode); the default keeps it so

The seed resolved endpoint shorthands itself; here the server does, from its environment
(docs/agents.md#endpoint-shorthands), so a key held by the server never crosses this door.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from google.protobuf.duration_pb2 import Duration
from rollout.v1 import rollout_pb2 as pb

__all__ = ["ENDPOINT_KINDS", "MODES", "RolloutArguments", "spec_of"]

ENDPOINT_KINDS = ("vllm", "openai", "hf_router")
MODES = {
    "transparent_proxy": pb.CAPTURE_MODE_TRANSPARENT_PROXY,
    "black_box": pb.CAPTURE_MODE_BLACK_BOX,
}


@dataclass(frozen=True)
class RolloutArguments:
    """`run_rollout`'s arguments, with the seed's names and defaults."""

    instruction: str
    endpoint: str = ""
    base_url: str = ""
    api_key: str = ""
    model: str = ""
    setup: Sequence[str] = field(default_factory=tuple)
    verify: Sequence[str] = field(default_factory=tuple)
    task_id: str = ""
    mode: str = "transparent_proxy"
    disable_thinking: bool | None = None
    max_tokens_cap: int = 4096
    top_logprobs: int = 5
    agent_timeout_s: float = 600.0
    template: str = ""
    agent: str = "opencode"
    agent_command: str = ""


def spec_of(arguments: RolloutArguments) -> pb.RolloutSpec:
    """The RolloutSpec these arguments describe; ValueError naming the argument when one is
    wrong in a way the server would not say as plainly."""
    _check(arguments)
    spec = pb.RolloutSpec(
        task_id=arguments.task_id,
        task=pb.Task(
            instruction=arguments.instruction,
            setup=list(arguments.setup),
            verify=list(arguments.verify),
        ),
        agent=pb.Agent(name=arguments.agent, command=arguments.agent_command),
        capture=pb.Capture(
            mode=MODES[arguments.mode],
            max_tokens_cap=max(arguments.max_tokens_cap, 0),
            top_logprobs=arguments.top_logprobs,
            disable_thinking=bool(arguments.disable_thinking),
        ),
        sandbox=pb.SandboxSpec(template=arguments.template),
    )
    if arguments.endpoint or arguments.base_url or arguments.model or arguments.api_key:
        spec.endpoint.CopyFrom(
            pb.Endpoint(
                kind=arguments.endpoint,
                base_url=arguments.base_url,
                api_key=arguments.api_key,
                model=arguments.model,
            )
        )
    timeout = Duration()
    timeout.FromNanoseconds(round(arguments.agent_timeout_s * 1e9))
    spec.agent_timeout.CopyFrom(timeout)
    return spec


def _check(arguments: RolloutArguments) -> None:
    if not arguments.instruction:
        raise ValueError("instruction is required")
    if arguments.mode not in MODES:
        raise ValueError(f"mode must be one of {sorted(MODES)}, got {arguments.mode!r}")
    if arguments.endpoint and arguments.endpoint not in ENDPOINT_KINDS:
        raise ValueError(
            f"endpoint must be one of {list(ENDPOINT_KINDS)}, got {arguments.endpoint!r}"
        )
    if arguments.agent == "opencode" and not (
        arguments.endpoint or (arguments.base_url and arguments.model)
    ):
        raise ValueError(
            f"must provide either endpoint (one of {list(ENDPOINT_KINDS)}) "
            "or base_url and model (and api_key, if the endpoint wants one)"
        )
    if arguments.agent_timeout_s <= 0:
        raise ValueError(f"agent_timeout_s must be positive, got {arguments.agent_timeout_s}")
