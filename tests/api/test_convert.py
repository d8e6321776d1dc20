"""proto <-> domain translation: what a request says is what the engine gets, minus secrets."""

from __future__ import annotations

from datetime import UTC, datetime

from google.protobuf import json_format
from rollout.v1 import rollout_pb2 as pb

from service.api.convert import event_to_proto, rollout_to_proto
from service.api.inbound import spec_from_proto
from service.models import (
    CaptureMode,
    NetworkPolicy,
    Notice,
    RewardSource,
    Rollout,
    RolloutEvent,
    RolloutResult,
    Turn,
)

REQUEST = {
    "taskId": "t-1",
    "task": {
        "instruction": "fix it",
        "setup": ["a"],
        "verify": ["b"],
        "files": {"x.txt": "aGk="},
        "verifierFiles": {"t.py": "dA=="},
        "rewardSource": "REWARD_SOURCE_FILE",
        "rewardKey": "f1",
    },
    "agent": {"name": "opencode", "options": {"disabled_tools": ["bash"]}},
    "endpoint": {"kind": "vllm", "baseUrl": "http://h/v1", "apiKey": "sk-secret", "model": "m"},
    "sandbox": {"backend": "e2b", "network": "NETWORK_POLICY_FULL", "resources": {"memoryMb": 512}},
    "capture": {"mode": "CAPTURE_MODE_BLACK_BOX", "maxTokensCap": 64, "topLogprobs": 0},
    "agentTimeout": "90s",
    "commandTimeout": "1.5s",
    "labels": {"team": "rl"},
    "requestId": "req-1",
}


def test_every_spec_field_reaches_the_domain_model() -> None:
    spec = spec_from_proto(json_format.ParseDict(REQUEST, pb.RolloutSpec()))
    assert spec.task.files == {"x.txt": b"hi"}
    assert spec.task.verifier_files == {"t.py": b"t"}
    assert (spec.task.reward_source, spec.task.reward_key) == (RewardSource.FILE, "f1")
    assert spec.agent.options == {"disabled_tools": ["bash"]}
    assert spec.endpoint.api_key == "sk-secret"
    assert spec.sandbox.network is NetworkPolicy.FULL
    assert spec.sandbox.resources.memory_mb == 512
    assert spec.capture.mode is CaptureMode.BLACK_BOX
    assert spec.capture.top_logprobs == 0  # explicitly set, so not the default of 1
    assert (spec.agent_timeout_s, spec.command_timeout_s) == (90.0, 1.5)
    assert (spec.labels, spec.request_id, spec.task_id) == ({"team": "rl"}, "req-1", "t-1")


def test_unset_fields_take_documented_defaults() -> None:
    spec = spec_from_proto(pb.RolloutSpec(task=pb.Task(instruction="x")))
    assert spec.agent.name == "command"
    assert spec.sandbox.network is NetworkPolicy.NONE
    assert spec.capture.mode is CaptureMode.TRANSPARENT_PROXY
    assert spec.capture.top_logprobs == 1
    assert spec.agent_timeout_s is None
    assert spec.task.reward_source is RewardSource.AUTO


def test_a_rollout_round_trips_the_spec_without_the_key_and_slim_drops_bulk() -> None:
    spec = spec_from_proto(json_format.ParseDict(REQUEST, pb.RolloutSpec()))
    result = RolloutResult(reward=0.0, turns=[Turn(index=0)], files={"a": b"1"}, agent_log_tail="t")
    rollout = Rollout(id="r", spec=spec, result=result, create_time=datetime.now(UTC))
    full = rollout_to_proto(rollout)
    assert full.spec.endpoint.api_key == ""
    assert b"sk-secret" not in full.SerializeToString()
    assert spec_from_proto(full.spec) == spec.redacted()
    assert full.result.HasField("reward")
    assert full.result.reward == 0.0
    slim = rollout_to_proto(rollout, slim=True)
    assert (len(slim.result.turns), len(slim.result.files), slim.result.agent_log_tail) == (
        0,
        0,
        "",
    )
    assert slim.result.turn_count == 1


def test_the_final_event_carries_the_slim_rollout() -> None:
    spec = spec_from_proto(pb.RolloutSpec(task=pb.Task(instruction="x")))
    rollout = Rollout(
        id="r",
        spec=spec,
        result=RolloutResult(turns=[Turn(index=0)]),
        create_time=datetime.now(UTC),
    )
    event = RolloutEvent(rollout_id="r", seq=9, time=datetime.now(UTC), payload=rollout)
    message = event_to_proto(event)
    assert message.WhichOneof("payload") == "finished"
    assert message.finished.result.turn_count == 1
    assert len(message.finished.result.turns) == 0


def test_a_notice_event_reaches_the_wire() -> None:
    notice = Notice(topic="verifier.leftovers", message="removed")
    event = RolloutEvent(rollout_id="r", seq=3, time=datetime.now(UTC), payload=notice)
    message = event_to_proto(event)
    assert (message.notice.topic, message.notice.message) == ("verifier.leftovers", "removed")
