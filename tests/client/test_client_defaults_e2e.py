"""The Python client as a trainer first writes it: no target (ROLLOUT_TARGET says where), and
a spec mapping holding raw bytes. Real servers, real sandboxes."""

from __future__ import annotations

import io
import os
import tarfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from rollout.v1 import rollout_pb2 as pb
from rollout_client import AsyncRolloutClient, RolloutClient

from testing.server_process import ServerProcess

pytestmark = pytest.mark.e2e

NEEDS_ROOT = Path(__file__).resolve().parents[1] / "harbor" / "tasks" / "needs_root"
COPY = {
    "task": {"instruction": "copy", "files": {"a.txt": b"hi\n"}, "verify": ["grep -qx hi b.txt"]},
    "agent": {"name": "command", "command": "cp a.txt b.txt"},
}


def test_the_sync_client_finds_the_server_through_rollout_target(
    server_target: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The client ignored ROLLOUT_TARGET and dialled 127.0.0.1:50051.
    monkeypatch.setenv("ROLLOUT_TARGET", server_target)
    with RolloutClient() as client:
        rollout = client.run(COPY)
    assert client.target == server_target
    assert rollout.status == pb.ROLLOUT_STATUS_SUCCEEDED, rollout.result.error
    assert rollout.result.reward == 1.0
    assert rollout.result.files["b.txt"] == b"hi\n", "raw bytes in task.files arrive as written"


async def test_the_async_client_finds_the_server_through_rollout_target(
    server_target: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ROLLOUT_TARGET", server_target)
    async with AsyncRolloutClient() as client:
        listed = await client.list(page_size=1)
    assert isinstance(listed, pb.ListRolloutsResponse)


@pytest.fixture(scope="module")
def upload_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A server that builds uploaded Harbor tasks' images (needs_root's is FROM the base)."""
    server = ServerProcess(
        tmp_path_factory.mktemp("upload-state"),
        env={"ROLLOUT_HARBOR_UPLOAD_BUILDS": "true", "ROLLOUT_IMAGE_BUILD_TIMEOUT_S": "1500"},
    )
    yield server.start()
    assert server.stop() == 0, server.text()


@pytest.mark.skipif(os.geteuid() != 0, reason="image sandboxes need a root server")
def test_raw_archive_bytes_in_a_mapping_spec_reach_reward_1(upload_server: str) -> None:
    # protobuf's JSON parser read the bytes as base64: the server saw "not a gzip file".
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        tar.add(NEEDS_ROOT, arcname="needs_root")
    spec = {"harbor_task": {"archive": buffer.getvalue()}, "agent": {"name": "oracle"}}
    with RolloutClient(upload_server) as client:
        rollout = client.run(spec)
    assert rollout.status == pb.ROLLOUT_STATUS_SUCCEEDED, rollout.result.error
    assert rollout.result.reward == 1.0, rollout.result.verify_results
