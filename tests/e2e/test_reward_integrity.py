"""End to end over gRPC on real bwrap: an agent paid for reward cannot forge, pre-seed or
influence what the verifier reads, nor turn its loss into an infrastructure failure."""

from __future__ import annotations

import grpc
import pytest
from rollout.v1 import rollout_pb2 as pb
from rollout.v1 import rollout_pb2_grpc as pb_grpc

from testing.specs import command_spec
from tests.e2e.cheats import DAEMON, FORGE, HIDDEN, failing_task, notices

pytestmark = pytest.mark.e2e


async def run(stub: pb_grpc.RolloutServiceAsyncStub, spec: pb.RolloutSpec) -> pb.Rollout:
    response = await stub.RunRollout(pb.RunRolloutRequest(spec=spec))
    return response.rollout


@pytest.mark.parametrize("source", ["default", "REWARD_SOURCE_FILE"])
async def test_a_reward_the_agent_wrote_is_never_read(
    stub: pb_grpc.RolloutServiceAsyncStub, source: str
) -> None:
    task = {} if source == "default" else {"rewardSource": source}
    rollout = await run(stub, failing_task(FORGE, **task))
    if source == "default":
        assert rollout.status == pb.ROLLOUT_STATUS_SUCCEEDED, rollout.result.error
        assert rollout.result.reward == 0.0  # passed/total: the hidden test failed
    else:  # the verifier should have written the reward and did not
        assert rollout.status == pb.ROLLOUT_STATUS_FAILED
        assert rollout.result.error.kind == pb.ERROR_KIND_VERIFIER
        assert "reward file" in rollout.result.error.message
        assert not rollout.result.HasField("reward")
    found = await notices(stub, rollout.id)
    assert "reward.txt" in found["verifier.leftovers"]


@pytest.mark.parametrize("started_by", ["agent", "setup"])
async def test_a_daemon_cannot_touch_the_verifier_files(
    stub: pb_grpc.RolloutServiceAsyncStub, started_by: str
) -> None:
    agent, setup = (DAEMON, ()) if started_by == "agent" else ("true", (DAEMON,))
    spec = failing_task(agent, setup=list(setup))
    spec.task.verify[:] = [f"sleep 1; bash {HIDDEN}"]  # time enough for a live daemon

    rollout = await run(stub, spec)

    assert rollout.status == pb.ROLLOUT_STATUS_SUCCEEDED, rollout.result.error
    assert rollout.result.reward == 0.0
    assert "stolen.txt" not in rollout.result.files
    found = await notices(stub, rollout.id)
    assert "killed" in found["verifier.processes_killed"]


_IN_THE_WAY = {
    "a directory at the file's path": f"mkdir -p {HIDDEN}/inner && touch {HIDDEN}/inner/x",
    "a file where its directory goes": "echo no > tests",
    "a link at the file's path": f"mkdir tests && ln -s /etc/hostname {HIDDEN}",
    "a link where its directory goes": "ln -s /etc tests",
    "a read-only file in a read-only directory": (
        f"mkdir tests && echo 'exit 0' > {HIDDEN} && chmod 444 {HIDDEN} && chmod 555 tests"
    ),
    "a directory too deep to recurse into": (
        f"d={HIDDEN}; for i in $(seq 1200); do d=$d/d; done; mkdir -p $d"
    ),
}


@pytest.mark.parametrize("planted", list(_IN_THE_WAY), ids=list(_IN_THE_WAY))
async def test_what_the_agent_put_in_the_way_of_a_verifier_file_is_removed_and_scored(
    stub: pb_grpc.RolloutServiceAsyncStub, planted: str
) -> None:
    rollout = await run(stub, failing_task(_IN_THE_WAY[planted]))

    assert rollout.status == pb.ROLLOUT_STATUS_SUCCEEDED, rollout.result.error
    assert rollout.result.reward == 0.0  # the hidden test ran, as staged, and failed
    assert [r.exit_code for r in rollout.result.verify_results] == [1]


async def test_a_reward_file_must_be_a_regular_file(
    stub: pb_grpc.RolloutServiceAsyncStub,
) -> None:
    link = "echo 1 > /tmp/one && ln -s /tmp/one ~/logs/verifier/reward.txt"
    spec = command_spec(verify=(link,), task={"rewardSource": "REWARD_SOURCE_FILE"})
    rollout = await run(stub, spec)
    assert rollout.result.error.kind == pb.ERROR_KIND_VERIFIER
    assert not rollout.result.HasField("reward")


async def test_plain_verify_commands_still_score_passed_over_total(
    stub: pb_grpc.RolloutServiceAsyncStub,
) -> None:
    rollout = await run(stub, command_spec(verify=("true", "false")))
    assert rollout.status == pb.ROLLOUT_STATUS_SUCCEEDED, rollout.result.error
    assert rollout.result.reward == 0.5


_HARBOR_METRICS = """echo '{"accuracy": 0.5, "f1": 0.25}' > ~/logs/verifier/reward.json"""


async def test_harbor_reward_json_with_several_keys_and_none_named_has_no_reward(
    stub: pb_grpc.RolloutServiceAsyncStub,
) -> None:
    rollout = await run(stub, command_spec(verify=(_HARBOR_METRICS,)))
    assert rollout.status == pb.ROLLOUT_STATUS_SUCCEEDED, rollout.result.error
    assert not rollout.result.HasField("reward")
    assert rollout.result.reward_key == ""
    assert dict(rollout.result.metrics) == {"accuracy": 0.5, "f1": 0.25}
    found = await notices(stub, rollout.id)
    assert "none named" in found["verifier.reward_unset"]


async def test_harbor_reward_json_reward_is_the_key_the_spec_names(
    stub: pb_grpc.RolloutServiceAsyncStub,
) -> None:
    spec = command_spec(verify=(_HARBOR_METRICS,), task={"rewardKey": "f1"})
    rollout = await run(stub, spec)
    assert (rollout.result.reward, rollout.result.reward_key) == (0.25, "f1")
    assert dict(rollout.result.metrics) == {"accuracy": 0.5, "f1": 0.25}


async def test_a_reward_key_with_commands_as_the_source_is_invalid_argument(
    stub: pb_grpc.RolloutServiceAsyncStub,
) -> None:
    task = {"rewardKey": "f1", "rewardSource": "REWARD_SOURCE_COMMANDS"}
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await run(stub, command_spec(verify=("true",), task=task))
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "spec.task.reward_key" in (caught.value.details() or "")


async def test_commands_as_the_source_ignore_a_reward_file(
    stub: pb_grpc.RolloutServiceAsyncStub,
) -> None:
    write = "echo 1 > ~/logs/verifier/reward.txt"
    spec = command_spec(verify=(write, "false"), task={"rewardSource": "REWARD_SOURCE_COMMANDS"})
    rollout = await run(stub, spec)
    assert rollout.result.reward == 0.5
