"""Through the real server: sandbox isolation and bounded memory under huge output."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest
from rollout.v1 import rollout_pb2 as pb
from rollout.v1 import rollout_pb2_grpc as pb_grpc

from testing.server_process import ServerProcess
from testing.specs import command_spec

pytestmark = pytest.mark.e2e


async def run(stub: pb_grpc.RolloutServiceAsyncStub, agent: str) -> pb.Rollout:
    response = await stub.RunRollout(pb.RunRolloutRequest(spec=command_spec(agent)))
    return response.rollout


async def test_sandbox_cannot_see_server_secrets_or_state(
    stub: pb_grpc.RolloutServiceAsyncStub, server_process: ServerProcess
) -> None:
    state = server_process.state_dir
    rollout = await run(
        stub,
        f"env > env.txt; ls -la {state} > state.txt 2>&1; cat {state}/rollouts.db > db.txt 2>&1; "
        "echo pwned > /etc/pwned 2>/dev/null; echo pwned > /tmp/outside.txt",
    )
    files = rollout.result.files
    assert b"canary-7d1f" not in files["env.txt"]
    assert b"rollouts.db" not in files["state.txt"]
    assert b"SQLite" not in files["db.txt"]
    assert not Path("/etc/pwned").exists()
    assert not Path("/tmp/outside.txt").exists()


async def test_network_none_cannot_reach_host_loopback(
    stub: pb_grpc.RolloutServiceAsyncStub,
) -> None:
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = listener.getsockname()[1]
        probe = f"python3 -c \"import socket; socket.create_connection(('127.0.0.1', {port}), 2)\""
        rollout = await run(stub, f"{probe} && echo reached > net.txt || echo blocked > net.txt")
    assert rollout.result.files["net.txt"] == b"blocked\n"


def _peak_rss_kb(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    raise AssertionError("no VmHWM")


async def test_gigabyte_of_output_keeps_server_memory_bounded(
    stub: pb_grpc.RolloutServiceAsyncStub, server_process: ServerProcess
) -> None:
    before = _peak_rss_kb(server_process.pid)
    spec = command_spec("head -c 1G /dev/zero | tr '\\0' 'a'", setup=("head -c 1G /dev/zero",))
    response = await stub.RunRollout(pb.RunRolloutRequest(spec=spec))
    rollout = response.rollout
    assert rollout.result.setup_results[0].stdout_bytes == 1 << 30
    assert len(rollout.result.setup_results[0].stdout) < 64 * 1024
    assert len(rollout.result.agent_log_tail) < 64 * 1024
    growth_mb = (_peak_rss_kb(server_process.pid) - before) / 1024
    assert growth_mb < 150, f"server peak RSS grew by {growth_mb:.0f} MB"
