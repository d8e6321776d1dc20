"""What an engineer with grpcurl / buf curl relies on: reflection and the health service."""

from __future__ import annotations

import asyncio
import json
import subprocess
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha.proto_reflection_descriptor_database import (
    ProtoReflectionDescriptorDatabase,
)

pytestmark = pytest.mark.e2e

BUF = Path(__file__).resolve().parents[2] / ".tools" / "node_modules" / ".bin" / "buf"


def test_reflection_lists_and_describes_the_service(server_target: str) -> None:
    with grpc.insecure_channel(server_target) as channel:
        database = ProtoReflectionDescriptorDatabase(channel)
        services = set(database.get_services())
        descriptor = database.FindFileContainingSymbol("rollout.v1.RolloutService")
    assert {"rollout.v1.RolloutService", "grpc.health.v1.Health"} <= services
    assert descriptor.package == "rollout.v1"


async def test_health_reports_serving(server_target: str) -> None:
    async with grpc.aio.insecure_channel(server_target) as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        for service in ("", "rollout.v1.RolloutService"):
            response = await stub.Check(health_pb2.HealthCheckRequest(service=service))
            assert response.status == health_pb2.HealthCheckResponse.SERVING


async def test_buf_curl_runs_a_rollout_with_no_proto_files(server_target: str) -> None:
    assert BUF.exists(), "buf is installed by `make install` into .tools/"
    request = {
        "spec": {
            "task": {"instruction": "x", "setup": ["echo hi > a.txt"], "verify": ["test -f b.txt"]},
            "agent": {"name": "command", "command": "cp a.txt b.txt"},
        }
    }
    command = [
        str(BUF), "curl", "--protocol", "grpc", "--http2-prior-knowledge",
        "--data", json.dumps(request),
        f"http://{server_target}/rollout.v1.RolloutService/RunRollout",
    ]  # fmt: skip
    done = await asyncio.to_thread(subprocess.run, command, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    rollout = json.loads(done.stdout)["rollout"]
    assert rollout["status"] == "ROLLOUT_STATUS_SUCCEEDED"
    assert rollout["result"]["reward"] == 1.0
