"""Reward integrity on E2B: a real server over gRPC, its e2b SDK pointed at the fake cloud
(whose sandboxes are pid namespaces, as VMs are). A forged reward and a daemon that
replaces the hidden test during VERIFYING cannot move the reward. FRESH, the default
there: the verifier runs in a sandbox made from setup's filesystem snapshot with only the
agent's workdir carried in, so it scores the agent's work, and a cheat outside the workdir
that fools IN_PLACE (a pip.conf in HOME, from the red team's table) scores 0; the
snapshot and both sandboxes are gone at the end."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import pytest
from rollout.v1 import rollout_pb2 as pb
from rollout.v1 import rollout_pb2_grpc as pb_grpc

from testing.fakes.e2b_cloud import FakeE2B
from testing.server_process import ServerProcess
from testing.specs import command_spec
from tests.e2e.cheats import DAEMON, FORGE, PIP_INSTALL, failing_task, notices, pip_conf_cheat

pytestmark = pytest.mark.e2e


@pytest.fixture
async def stub(cloud: FakeE2B, tmp_path: Path) -> AsyncIterator[pb_grpc.RolloutServiceAsyncStub]:
    env = cloud.environment() | {"ROLLOUT_E2B_CREATES_PER_S": "0"}
    server = ServerProcess(tmp_path / "state", env=env)
    await asyncio.to_thread(server.start)  # the fake cloud shares this event loop
    async with grpc.aio.insecure_channel(server.target) as channel:
        yield pb_grpc.RolloutServiceStub(channel)
    assert await asyncio.to_thread(server.stop) == 0, server.text()


def _on_e2b(spec: pb.RolloutSpec) -> pb.RolloutSpec:
    spec.sandbox.backend = "e2b"
    spec.sandbox.template = "tmpl"
    return spec


@pytest.mark.parametrize("cheat", ["forged reward", "daemon"])
async def test_the_agent_cannot_move_its_reward_on_e2b(
    stub: pb_grpc.RolloutServiceAsyncStub, cloud: FakeE2B, cheat: str
) -> None:
    spec = _on_e2b(failing_task(FORGE if cheat == "forged reward" else DAEMON))
    spec.task.verify[:] = [f"sleep 1; {spec.task.verify[0]}"]  # time for a live daemon

    rollout = (await stub.RunRollout(pb.RunRolloutRequest(spec=spec))).rollout

    assert rollout.status == pb.ROLLOUT_STATUS_SUCCEEDED, rollout.result.error
    assert rollout.result.reward == 0.0
    assert "stolen.txt" not in rollout.result.files
    found = await notices(stub, rollout.id)
    topic = "verifier.leftovers" if cheat == "forged reward" else "verifier.processes_killed"
    assert topic in found
    assert cloud.live_ids() == set()


_SOLVE = "cp a.txt b.txt && rm stale.txt && mkdir -p sub && echo deep > sub/c.txt && ln -s a.txt ln"
_CHECK = "grep -qx setup b.txt && test ! -e stale.txt && grep -qx deep sub/c.txt && test -L ln"


def _left_nothing(cloud: FakeE2B) -> None:
    assert cloud.live_ids() == set()
    assert cloud.template_ids() == set()  # the setup snapshot deleted


@pytest.mark.parametrize("solved", [True, False], ids=["solved", "unsolved"])
async def test_fresh_on_e2b_scores_the_agents_workdir_from_setups_snapshot(
    stub: pb_grpc.RolloutServiceAsyncStub, cloud: FakeE2B, solved: bool
) -> None:
    setup = ("echo setup > a.txt && echo stale > stale.txt && echo setup > ~/home.txt",)
    agent = f"{_SOLVE} && echo agent > ~/home.txt" if solved else "echo agent > ~/home.txt"
    verify = (_CHECK, "grep -qx setup ~/home.txt")  # HOME is setup's, never the agent's
    spec = _on_e2b(command_spec(agent, setup=setup, verify=verify))

    rollout = (await stub.RunRollout(pb.RunRolloutRequest(spec=spec))).rollout

    assert rollout.status == pb.ROLLOUT_STATUS_SUCCEEDED, rollout.result.error
    assert rollout.result.reward == (1.0 if solved else 0.5), rollout.result.verify_results
    assert "/home/user/workdir" in (await notices(stub, rollout.id))["verifier.fresh"]
    [snapshot] = cloud.snapshots
    assert cloud.snapshot_bodies[0]["memory"] is False  # filesystem only: no process of its
    assert sorted(r.template for r in cloud.records.values()) == sorted(["tmpl", snapshot])
    if solved:
        assert rollout.result.files["b.txt"] == b"setup\n"  # collected from the agent's sandbox
    _left_nothing(cloud)


async def test_a_pip_conf_in_home_fools_in_place_on_e2b_and_scores_0_fresh(
    stub: pb_grpc.RolloutServiceAsyncStub, cloud: FakeE2B
) -> None:
    """The red team's pip.conf in HOME: the tests' `pip install` installs the agent's wheel,
    whose `.pth` ends every later Python with 0. E2B has no integrity check in place."""
    cheat = pip_conf_cheat("~/.config/pip/pip.conf", wheels="/home/user/.cache/zz-wheels")
    verify = (f"{PIP_INSTALL}; python3 -c 'raise SystemExit(1)'",)
    fresh = _on_e2b(command_spec(cheat, verify=verify))
    in_place = _on_e2b(
        command_spec(cheat, verify=verify, task={"verifyMode": "VERIFY_MODE_IN_PLACE"})
    )

    fooled, held = await asyncio.gather(
        *(stub.RunRollout(pb.RunRolloutRequest(spec=spec)) for spec in (in_place, fresh))
    )

    assert fooled.rollout.result.reward == 1.0, fooled.rollout.result  # the cheat is live
    found = await notices(stub, fooled.rollout.id)
    assert "no integrity check" in found["verifier.in_place"]
    assert held.rollout.status == pb.ROLLOUT_STATUS_SUCCEEDED, held.rollout.result.error
    assert held.rollout.result.reward == 0.0, held.rollout.result.verify_results
    assert "verifier.fresh" in await notices(stub, held.rollout.id)
    _left_nothing(cloud)


async def test_where_e2b_refuses_snapshots_auto_verifies_in_place_saying_why_and_fresh_fails(
    stub: pb_grpc.RolloutServiceAsyncStub, cloud: FakeE2B
) -> None:
    cloud.refuse_snapshots = True
    auto = _on_e2b(command_spec("echo hi > b.txt", verify=("grep -qx hi b.txt",)))
    fresh = _on_e2b(
        command_spec("true", verify=("true",), task={"verifyMode": "VERIFY_MODE_FRESH"})
    )

    in_place = (await stub.RunRollout(pb.RunRolloutRequest(spec=auto))).rollout
    failed = (await stub.RunRollout(pb.RunRolloutRequest(spec=fresh))).rollout

    assert in_place.result.reward == 1.0, in_place.result
    why = (await notices(stub, in_place.id))["verifier.in_place"]
    assert "setup's state could not be frozen" in why
    assert "not enabled for this team" in why
    assert failed.status == pb.ROLLOUT_STATUS_FAILED
    assert failed.result.error.kind == pb.ERROR_KIND_SANDBOX
    assert "could not snapshot E2B sandbox" in failed.result.error.message
    _left_nothing(cloud)
