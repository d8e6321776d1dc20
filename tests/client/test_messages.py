"""Specs and enum names turned into request messages."""

from __future__ import annotations

import pytest
from rollout.v1 import rollout_pb2 as pb
from rollout_client import SpecError, parse_status, parse_view, to_spec
from rollout_client.messages import channel_options, list_request, run_request, watch_request


def test_a_dict_in_proto_json_shape_becomes_a_spec() -> None:
    spec = to_spec(
        {
            "task": {"instruction": "x", "setup": ["a"], "files": {"f.txt": "aGk="}},
            "agent": {"name": "command", "command": "true"},
            "agentTimeout": "2.5s",
            "sandbox": {"network": "NETWORK_POLICY_FULL"},
        }
    )
    assert spec.task.files["f.txt"] == b"hi"
    assert spec.agent_timeout.ToTimedelta().total_seconds() == 2.5
    assert spec.sandbox.network == pb.NETWORK_POLICY_FULL


def test_a_message_is_used_as_it_is() -> None:
    spec = pb.RolloutSpec(task_id="t")
    assert to_spec(spec) is spec


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ({"task": {"instruction": 3}}, "instruction"),
        ({"agent": {"nme": "command"}}, 'no field named "nme"'),
        (["task"], "not list"),
    ],
)
def test_a_bad_spec_names_the_problem(value: object, message: str) -> None:
    with pytest.raises(SpecError, match=message):
        to_spec(value)  # type: ignore[arg-type]


@pytest.mark.parametrize("name", ["FAILED", "failed", " Failed ", "ROLLOUT_STATUS_FAILED"])
def test_status_names_short_or_full(name: str) -> None:
    assert parse_status(name) == pb.ROLLOUT_STATUS_FAILED


def test_status_values_pass_and_unknown_ones_list_the_choices() -> None:
    assert parse_status(pb.ROLLOUT_STATUS_QUEUED) == pb.ROLLOUT_STATUS_QUEUED
    with pytest.raises(ValueError, match=r"unknown rollout_status 'DONE'.*SUCCEEDED"):
        parse_status("DONE")
    with pytest.raises(ValueError, match="value 42"):
        parse_status(42)


def test_views_and_requests() -> None:
    assert parse_view("slim") == pb.RESULT_VIEW_SLIM
    request = run_request({"task": {"instruction": "x"}}, "full")
    assert request.view == pb.RESULT_VIEW_FULL
    assert request.spec.task.instruction == "x"
    listing = list_request({"a": "1"}, ["failed", pb.ROLLOUT_STATUS_CANCELLED], 10, "tok", 0)
    assert list(listing.statuses) == [pb.ROLLOUT_STATUS_FAILED, pb.ROLLOUT_STATUS_CANCELLED]
    assert (dict(listing.labels), listing.page_size, listing.page_token) == ({"a": "1"}, 10, "tok")
    watching = watch_request("", 0, {"team": "rl"})
    assert (watching.rollout_id, dict(watching.labels)) == ("", {"team": "rl"})


def test_channel_options_raise_both_limits() -> None:
    assert dict(channel_options(1024)) == {
        "grpc.max_send_message_length": 1024,
        "grpc.max_receive_message_length": 1024,
    }
    with pytest.raises(ValueError, match="positive"):
        channel_options(0)
