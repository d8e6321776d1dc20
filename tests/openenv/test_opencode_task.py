"""Every argument of the seed's run_rollout lands in its spec field (opencode_task's table)."""

from __future__ import annotations

import pytest
from rollout.v1 import rollout_pb2 as pb

from service.openenv.opencode_task import RolloutArguments, spec_of


def test_every_argument_lands_in_its_field() -> None:
    spec = spec_of(
        RolloutArguments(
            instruction="do it",
            endpoint="vllm",
            base_url="http://gpu:8000/v1",
            api_key="sk-1",
            model="m",
            setup=("echo a",),
            verify=("test -f b",),
            task_id="t-1",
            mode="black_box",
            disable_thinking=True,
            max_tokens_cap=1024,
            top_logprobs=3,
            agent_timeout_s=90.5,
            template="opencode-rl",
        )
    )
    assert spec.task_id == "t-1"
    assert (spec.task.instruction, list(spec.task.setup), list(spec.task.verify)) == (
        "do it",
        ["echo a"],
        ["test -f b"],
    )
    assert spec.endpoint == pb.Endpoint(
        kind="vllm", base_url="http://gpu:8000/v1", api_key="sk-1", model="m"
    )
    assert spec.capture == pb.Capture(
        mode=pb.CAPTURE_MODE_BLACK_BOX, max_tokens_cap=1024, top_logprobs=3, disable_thinking=True
    )
    assert spec.agent_timeout.ToMilliseconds() == 90_500
    assert spec.sandbox.template == "opencode-rl"
    assert spec.agent.name == "opencode"


def test_the_command_agent_needs_no_endpoint() -> None:
    spec = spec_of(RolloutArguments(instruction="x", agent="command", agent_command="true"))
    assert not spec.HasField("endpoint")
    assert (spec.agent.name, spec.agent.command) == ("command", "true")


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"instruction": ""}, "instruction is required"),
        ({"endpoint": "vllm2"}, "endpoint must be one of"),
        ({"endpoint": "", "model": ""}, "must provide either endpoint"),
        ({"mode": "proxy"}, "mode must be one of"),
        ({"agent_timeout_s": 0}, "agent_timeout_s must be positive"),
    ],
)
def test_a_wrong_argument_is_named(changes: dict[str, object], message: str) -> None:
    arguments = {"instruction": "x", "base_url": "http://h/v1", "model": "m", **changes}
    with pytest.raises(ValueError, match=message):
        spec_of(RolloutArguments(**arguments))  # type: ignore[arg-type]
