"""Groups from the Python clients, the `rollout group` command line, reflection and buf curl,
against the session's real server."""

from __future__ import annotations

import asyncio
import json
import subprocess
import uuid
from pathlib import Path

import grpc
import pytest
from grpc_reflection.v1alpha.proto_reflection_descriptor_database import (
    ProtoReflectionDescriptorDatabase,
)
from rollout.v1 import rollout_pb2 as pb
from rollout_client import AsyncRolloutClient, RolloutClient
from rollout_client.cli import app
from rollout_client.messages import group_spec
from typer.testing import CliRunner

pytestmark = pytest.mark.e2e

BUF = Path(__file__).resolve().parents[2] / ".tools" / "node_modules" / ".bin" / "buf"
SPEC = {
    "task": {"instruction": "x", "setup": ["echo hi > a.txt"], "verify": ["test -f b.txt"]},
    "agent": {"name": "command", "command": "cp a.txt b.txt"},
}
GROUP_RPCS = {"RunGroup", "StartGroup", "WatchGroup", "GetGroup", "ListGroups", "CancelGroup"}


def test_the_sync_client_runs_watches_gets_and_cancels_groups(server_target: str) -> None:
    with RolloutClient(server_target) as client:
        group = client.run_group(group_spec(SPEC, 2, deadline_s=600))
        assert group.status == pb.GROUP_STATUS_COMPLETED
        assert group.spec.deadline.seconds == 600
        replayed = list(client.watch_group(group.id))
        assert [r.WhichOneof("event") for r in replayed] == ["member", "member", "group"]
        assert client.get_group(group.id) == group
        assert client.cancel_group(group.id) == group  # terminal: returned unchanged


async def test_the_async_client_starts_and_follows_a_group(server_target: str) -> None:
    async with AsyncRolloutClient(server_target) as client:
        started = await client.start_group(group_spec(SPEC, 2, min_complete=1))
        events = [r async for r in client.watch_group(started.id)]
        group = events[-1].group
        assert group.status == pb.GROUP_STATUS_COMPLETED
        assert group.stats.counted >= 1
        assert (await client.get_group(started.id)).status == group.status
        member = await client.get(group.members[0].rollout_id)
        assert member.group_id == started.id


async def test_the_clients_list_groups_by_label_and_status(server_target: str) -> None:
    labels = {"suite": uuid.uuid4().hex}
    spec = group_spec({**SPEC, "labels": labels}, 1)
    with RolloutClient(server_target) as client:
        older, newer = client.run_group(spec), client.run_group(spec)
        everything = list(client.list_all_groups(labels=labels, page_size=1))
        assert [group.id for group in everything] == [newer.id, older.id]
        assert everything[0] == newer
        assert not client.list_groups(labels=labels, statuses=["running"]).groups
        with pytest.raises(ValueError, match="unknown group_status 'done'"):
            client.list_groups(statuses=["done"])
    async with AsyncRolloutClient(server_target) as aclient:
        page = await aclient.list_groups(labels=labels, statuses=["COMPLETED"], page_size=1)
        assert [group.id for group in page.groups] == [newer.id]
        assert page.next_page_token
        listed = [group.id async for group in aclient.list_all_groups(labels=labels)]
        assert listed == [newer.id, older.id]


def test_the_command_line_runs_and_shows_a_group(server_target: str, tmp_path: Path) -> None:
    spec_file = tmp_path / "spec.json"
    suite = f"suite={uuid.uuid4().hex}"
    spec_file.write_text(json.dumps({**SPEC, "labels": dict([suite.split("=")])}))
    runner = CliRunner()
    ran = runner.invoke(
        app, ["group", "run", str(spec_file), "--n", "2", "--target", server_target]
    )
    assert ran.exit_code == 0, ran.output
    lines = ran.stdout.splitlines()
    assert lines[0].startswith("group ")
    assert sum(line.startswith("member ") for line in lines) == 2
    assert (
        "counted 2, rewarded 2, reward mean 1 stddev 0, refills 0, template setups 1" in ran.stdout
    )
    group_id = lines[0].split()[1]
    shown = runner.invoke(app, ["group", "get", group_id, "--json", "--target", server_target])
    assert json.loads(shown.stdout)["status"] == "GROUP_STATUS_COMPLETED"
    watched = runner.invoke(app, ["group", "watch", group_id, "--target", server_target])
    assert watched.exit_code == 0
    assert f"group {group_id}: COMPLETED" in watched.stdout
    missing = runner.invoke(app, ["group", "get", "nope", "--target", server_target])
    assert missing.exit_code == 1
    listed = runner.invoke(
        app, ["group", "list", "--json", "--label", suite, "--target", server_target]
    )
    assert group_id in [group["id"] for group in json.loads(listed.stdout)["groups"]]
    table = runner.invoke(
        app,
        ["group", "list", "--status", "completed", "--label", suite, "--target", server_target],
    )
    assert table.exit_code == 0, table.output
    assert "COMPLETED" in table.stdout
    assert "2/2" in table.stdout
    assert group_id in table.stdout
    bad = runner.invoke(app, ["group", "list", "--status", "done", "--target", server_target])
    assert bad.exit_code == 2
    assert "unknown group_status 'done'" in bad.output


def test_reflection_describes_the_group_rpcs(server_target: str) -> None:
    with grpc.insecure_channel(server_target) as channel:
        database = ProtoReflectionDescriptorDatabase(channel)
        file = database.FindFileContainingSymbol("rollout.v1.RolloutService")
    [service] = [s for s in file.service if s.name == "RolloutService"]
    assert {method.name for method in service.method} >= GROUP_RPCS


async def test_buf_curl_runs_a_group_with_no_proto_files(server_target: str) -> None:
    request = {"spec": {"spec": SPEC, "n": 2}}
    command = [
        str(BUF), "curl", "--protocol", "grpc", "--http2-prior-knowledge",
        "--data", json.dumps(request),
        f"http://{server_target}/rollout.v1.RolloutService/RunGroup",
    ]  # fmt: skip
    done = await asyncio.to_thread(subprocess.run, command, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    group = json.loads(done.stdout)["group"]
    assert group["status"] == "GROUP_STATUS_COMPLETED"
    assert group["stats"]["rewardMean"] == 1.0
