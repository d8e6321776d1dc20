"""Specs as people write them: short enum names and seconds, in mappings, files and flags."""

from __future__ import annotations

from pathlib import Path

import pytest
from rollout.v1 import rollout_pb2 as pb
from rollout_client import SpecError, reward_of, status_name, to_spec
from rollout_client.specfile import SpecOverrides, build_spec


def test_the_readme_spelling_network_full_is_accepted() -> None:
    # Was rejected with "Invalid enum value FULL".
    spec = to_spec({"task": {"instruction": "x"}, "sandbox": {"network": "FULL"}})
    assert spec.sandbox.network == pb.NETWORK_POLICY_FULL


@pytest.mark.parametrize("value", ["none", "None", "NETWORK_POLICY_NONE", 1])
def test_enum_values_in_any_spelling(value: object) -> None:
    assert to_spec({"sandbox": {"network": value}}).sandbox.network == pb.NETWORK_POLICY_NONE


def test_capture_mode_in_camel_case_field_names_too() -> None:
    spec = to_spec({"capture": {"mode": "black_box"}})
    assert spec.capture.mode == pb.CAPTURE_MODE_BLACK_BOX


def test_durations_as_numbers_of_seconds() -> None:
    # Was rejected with "Duration JSON value not a string".
    spec = to_spec({"agent_timeout": 5, "commandTimeout": 1.5})
    assert spec.agent_timeout.ToTimedelta().total_seconds() == 5
    assert spec.command_timeout.ToTimedelta().total_seconds() == 1.5
    assert to_spec({"agent_timeout": "90s"}).agent_timeout.seconds == 90


def test_an_unknown_enum_name_lists_the_choices_and_names_the_field() -> None:
    with pytest.raises(
        SpecError, match=r"spec\.sandbox\.network: unknown value 'wide' \(one of: NONE, FULL\)"
    ):
        to_spec({"sandbox": {"network": "wide"}})


def test_a_boolean_is_not_a_duration() -> None:
    with pytest.raises(SpecError, match="agent_timeout"):
        to_spec({"agent_timeout": True})


def test_maps_and_options_are_left_as_written() -> None:
    spec = to_spec({"labels": {"network": "FULL"}, "agent": {"options": {"mode": "black_box"}}})
    assert spec.labels["network"] == "FULL"
    assert spec.agent.options["mode"] == "black_box"


def test_a_spec_file_with_short_names_and_seconds(tmp_path: Path) -> None:
    spec_file = tmp_path / "task.yaml"
    spec_file.write_text(
        "task: {instruction: x}\nsandbox: {network: FULL}\nagent_timeout: 5\ncommand_timeout: 2\n"
    )
    spec = build_spec(spec_file, SpecOverrides())
    assert spec.sandbox.network == pb.NETWORK_POLICY_FULL
    assert spec.agent_timeout.seconds == 5
    assert spec.command_timeout.seconds == 2


def test_flags_for_the_network_the_endpoint_and_the_command_timeout() -> None:
    overrides = SpecOverrides(
        instruction="x",
        network="full",
        command_timeout_s=30,
        endpoint_kind="vllm",
        base_url="http://gpu:8000/v1",
        model="m",
        api_key="k",
    )
    spec = build_spec(None, overrides)
    assert spec.sandbox.network == pb.NETWORK_POLICY_FULL
    assert spec.command_timeout.seconds == 30
    assert spec.endpoint == pb.Endpoint(
        kind="vllm", base_url="http://gpu:8000/v1", model="m", api_key="k"
    )


def test_no_endpoint_flags_leave_no_endpoint() -> None:
    assert not build_spec(None, SpecOverrides(instruction="x")).HasField("endpoint")


def test_status_names_and_an_unset_reward() -> None:
    # The README's example printed "4 0.0": a number, and 0.0 for a reward that was unset.
    failed = pb.Rollout(status=pb.ROLLOUT_STATUS_FAILED)
    assert (status_name(failed.status), reward_of(failed)) == ("FAILED", None)
    scored = pb.Rollout(status=pb.ROLLOUT_STATUS_SUCCEEDED, result=pb.RolloutResult(reward=0.0))
    assert (status_name(scored.status), reward_of(scored)) == ("SUCCEEDED", 0.0)


def test_raw_bytes_are_bytes_in_any_bytes_field() -> None:
    # Read as base64: "Incorrect padding", or silently other bytes when the length fit.
    archive = bytes(range(256)) * 3
    spec = to_spec(
        {
            "harbor_task": {"archive": archive},
            "task": {"files": {"a.bin": b"abcd", "b.txt": bytearray(b"hi")}, "env": {"K": "dg=="}},
        }
    )
    assert spec.harbor_task.archive == archive
    assert dict(spec.task.files) == {"a.bin": b"abcd", "b.txt": b"hi"}
    assert dict(spec.task.env) == {"K": "dg=="}, "string maps are left as written"
    assert to_spec({"task": {"files": {"c": "aGk="}}}).task.files["c"] == b"hi", "base64 still"
