"""End to end over gRPC: phases, reward rules, timeouts and failure kinds, on real bwrap."""

from __future__ import annotations

import base64

import pytest
from google.protobuf import json_format
from rollout.v1 import rollout_pb2 as pb
from rollout.v1 import rollout_pb2_grpc as pb_grpc

from testing.specs import command_spec

pytestmark = pytest.mark.e2e


async def run(stub: pb_grpc.RolloutServiceAsyncStub, spec: pb.RolloutSpec) -> pb.Rollout:
    response = await stub.RunRollout(pb.RunRolloutRequest(spec=spec))
    return response.rollout


async def test_reward_from_passed_over_total(stub: pb_grpc.RolloutServiceAsyncStub) -> None:
    rollout = await run(
        stub,
        command_spec(
            "cat a.txt > b.txt",
            setup=("echo hello > a.txt",),
            verify=("grep -q hello b.txt", "test -f missing.txt", "true", "false"),
        ),
    )
    assert rollout.status == pb.ROLLOUT_STATUS_SUCCEEDED, rollout.result.error
    assert rollout.result.HasField("reward")
    assert rollout.result.reward == pytest.approx(0.5)
    assert [r.exit_code for r in rollout.result.verify_results] == [0, 1, 0, 1]
    assert rollout.result.files["b.txt"] == b"hello\n"
    assert rollout.result.agent_exit_code == 0
    assert rollout.phase == pb.PHASE_DONE


async def test_reward_txt_wins_over_passed_count(stub: pb_grpc.RolloutServiceAsyncStub) -> None:
    rollout = await run(
        stub,
        command_spec(
            verify=("mkdir -p ~/logs/verifier && echo 0.25 > ~/logs/verifier/reward.txt", "false")
        ),
    )
    assert rollout.result.reward == pytest.approx(0.25)


async def test_reward_json_gives_reward_and_metrics(stub: pb_grpc.RolloutServiceAsyncStub) -> None:
    write = (
        "mkdir -p ~/logs/verifier && "
        """echo '{"reward": 0.75, "tests_passed": 3, "note": "x"}' > ~/logs/verifier/reward.json"""
    )
    rollout = await run(stub, command_spec(verify=(write,)))
    assert rollout.result.reward == pytest.approx(0.75)
    assert dict(rollout.result.metrics) == {"reward": 0.75, "tests_passed": 3.0}
    assert rollout.result.reward_key == "reward"


async def test_no_verify_commands_means_no_reward(stub: pb_grpc.RolloutServiceAsyncStub) -> None:
    rollout = await run(stub, command_spec())
    assert rollout.status == pb.ROLLOUT_STATUS_SUCCEEDED
    assert not rollout.result.HasField("reward")


async def test_unparseable_reward_txt_is_a_verifier_error(
    stub: pb_grpc.RolloutServiceAsyncStub,
) -> None:
    rollout = await run(
        stub,
        command_spec(
            verify=("mkdir -p ~/logs/verifier && echo lots > ~/logs/verifier/reward.txt",)
        ),
    )
    assert rollout.status == pb.ROLLOUT_STATUS_FAILED
    assert rollout.result.error.kind == pb.ERROR_KIND_VERIFIER
    assert not rollout.result.HasField("reward")


async def test_setup_failure_stops_before_the_agent(stub: pb_grpc.RolloutServiceAsyncStub) -> None:
    rollout = await run(
        stub,
        command_spec(
            "touch agent-ran",
            setup=("echo one", "exit 3", "echo never"),
            verify=("true",),
        ),
    )
    assert rollout.status == pb.ROLLOUT_STATUS_FAILED
    assert rollout.result.error.kind == pb.ERROR_KIND_SETUP
    assert [r.exit_code for r in rollout.result.setup_results] == [0, 3]
    assert not rollout.result.HasField("agent_exit_code")
    assert len(rollout.result.verify_results) == 0
    assert "agent-ran" not in rollout.result.files


async def test_agent_timeout_still_verifies(stub: pb_grpc.RolloutServiceAsyncStub) -> None:
    spec = command_spec("echo partial > work.txt; sleep 30", verify=("test -f work.txt",))
    spec.agent_timeout.FromMilliseconds(1500)
    rollout = await run(stub, spec)
    assert rollout.status == pb.ROLLOUT_STATUS_TIMED_OUT
    assert rollout.result.error.kind == pb.ERROR_KIND_AGENT_TIMEOUT
    assert rollout.result.reward == pytest.approx(1.0)
    assert len(rollout.result.verify_results) == 1


async def test_setup_command_timeout(stub: pb_grpc.RolloutServiceAsyncStub) -> None:
    spec = command_spec(setup=("sleep 30",))
    spec.command_timeout.FromMilliseconds(1000)
    rollout = await run(stub, spec)
    assert rollout.result.error.kind == pb.ERROR_KIND_SETUP
    assert rollout.result.setup_results[0].timed_out


async def test_files_staged_before_setup_and_verifier_files_after_agent(
    stub: pb_grpc.RolloutServiceAsyncStub,
) -> None:
    spec = command_spec(
        "ls > seen-by-agent.txt; cat input.txt > copy.txt",
        setup=("test -f input.txt",),
        verify=("test -f check.sh", "bash check.sh"),
    )
    spec.task.files["input.txt"] = b"payload"
    spec.task.verifier_files["check.sh"] = b"grep -q payload copy.txt\n"
    rollout = await run(stub, spec)
    assert rollout.result.reward == pytest.approx(1.0), rollout.result.verify_results
    assert b"check.sh" not in rollout.result.files["seen-by-agent.txt"]
    assert "check.sh" not in rollout.result.files


async def test_agent_output_is_streamed_and_tailed(stub: pb_grpc.RolloutServiceAsyncStub) -> None:
    rollout = await run(stub, command_spec("echo out-line; echo err-line >&2"))
    assert "out-line" in rollout.result.agent_log_tail
    assert "err-line" in rollout.result.agent_log_tail


async def test_slim_view_leaves_out_bulk(stub: pb_grpc.RolloutServiceAsyncStub) -> None:
    response = await stub.RunRollout(
        pb.RunRolloutRequest(spec=command_spec("echo x > f.txt"), view=pb.RESULT_VIEW_SLIM)
    )
    assert response.rollout.status == pb.ROLLOUT_STATUS_SUCCEEDED
    assert len(response.rollout.result.files) == 0
    full = await stub.GetRollout(pb.GetRolloutRequest(rollout_id=response.rollout.id))
    assert full.rollout.result.files["f.txt"] == b"x\n"


async def test_grpcurl_style_json_request(stub: pb_grpc.RolloutServiceAsyncStub) -> None:
    """The JSON shape outside tools send is accepted as is (bytes as base64)."""
    request = json_format.ParseDict(
        {
            "spec": {
                "task": {
                    "instruction": "x",
                    "setup": ["echo hi > a.txt"],
                    "verify": ["grep -q hi a.txt"],
                    "files": {"data.bin": base64.b64encode(b"\x00\x01").decode()},
                },
                "agent": {"name": "command", "command": "cmp -s data.bin data.bin"},
            }
        },
        pb.RunRolloutRequest(),
    )
    response = await stub.RunRollout(request)
    assert response.rollout.result.reward == pytest.approx(1.0)
    assert response.rollout.result.files["data.bin"] == b"\x00\x01"


async def test_secrets_are_cleared_from_the_returned_spec(
    stub: pb_grpc.RolloutServiceAsyncStub,
) -> None:
    spec = command_spec(
        endpoint={"baseUrl": "http://127.0.0.1:9/v1", "apiKey": "sk-topsecret", "model": "m"}
    )
    spec.capture.mode = pb.CAPTURE_MODE_BLACK_BOX
    spec.sandbox.network = pb.NETWORK_POLICY_FULL
    rollout = await run(stub, spec)
    assert rollout.spec.endpoint.api_key == ""
    assert rollout.spec.endpoint.base_url == "http://127.0.0.1:9/v1"
    got = await stub.GetRollout(pb.GetRolloutRequest(rollout_id=rollout.id))
    assert b"sk-topsecret" not in got.SerializeToString()
