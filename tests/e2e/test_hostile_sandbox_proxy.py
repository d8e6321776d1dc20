"""Through the real server: what a hostile sandbox can do to the capture proxy (issue 9).

- Its environment, printed, holds no route secret: the route is its own socket.
- It opens 20,500 connections to its proxy socket: the server holds at most its per-sandbox
  limit of them, its gRPC port keeps serving, and a concurrent rollout succeeds.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import pytest
from rollout.v1 import rollout_pb2 as pb
from rollout.v1 import rollout_pb2_grpc as pb_grpc

from service.proxy.access import SOCKET_ROUTE_KEY
from service.sandboxes.base import PROXY_SOCKET
from service.sandboxes.local.bwrap import SandboxLayout
from testing.fakes.llm_upstream import FakeUpstream
from testing.server_process import ServerProcess
from testing.specs import terminal
from tests.e2e.processes import eventually

pytestmark = pytest.mark.e2e

KEY = "sk-hostile-3b7e"
CONNECTIONS = 20_500
PER_SANDBOX = 64

HOLD = f"""python3 - <<'PY'
import os, resource, socket, time
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
held = []
for _ in range({CONNECTIONS}):
    try:
        s = socket.socket(socket.AF_UNIX)
        s.connect("{PROXY_SOCKET}")
    except OSError:
        break
    held.append(s)
print("HELD", len(held), flush=True)
for _ in range(1200):
    if os.path.exists("go"):
        break
    time.sleep(0.1)
PY"""


def endpoint(upstream: FakeUpstream) -> pb.Endpoint:
    return pb.Endpoint(base_url=upstream.base_url, api_key=KEY, model="m")


@pytest.fixture
async def upstream() -> AsyncIterator[FakeUpstream]:
    async with FakeUpstream(api_key=KEY) as upstream:
        yield upstream


@pytest.fixture
async def server(fresh_server: ServerProcess) -> AsyncIterator[pb_grpc.RolloutServiceAsyncStub]:
    fresh_server.env["ROLLOUT_PROXY_MAX_CONNECTIONS_PER_SANDBOX"] = str(PER_SANDBOX)
    fresh_server.start()
    async with grpc.aio.insecure_channel(fresh_server.target) as channel:
        yield pb_grpc.RolloutServiceStub(channel)


def output_text(events: list[pb.RolloutEvent]) -> str:
    return "".join(e.output.text for e in events if e.HasField("output"))


async def test_printed_environment_holds_no_route_secret(
    stub: pb_grpc.RolloutServiceAsyncStub, upstream: FakeUpstream
) -> None:
    spec = pb.RolloutSpec(
        task=pb.Task(instruction="print env"),
        agent=pb.Agent(name="command", command="env | grep OPENAI_"),
        endpoint=endpoint(upstream),
    )
    started = await stub.StartRollout(pb.StartRolloutRequest(spec=spec))
    request = pb.WatchRolloutRequest(rollout_id=started.rollout.id)
    events = [response.event async for response in stub.WatchRollout(request)]
    printed = output_text(events)
    assert f"OPENAI_API_KEY={SOCKET_ROUTE_KEY}\n" in printed
    assert "OPENAI_BASE_URL=http://127.0.0.1:48080/v1\n" in printed  # no token in the path
    assert KEY not in printed


def open_fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


async def test_a_sandbox_flooding_its_proxy_socket_cannot_exhaust_the_server(
    server: pb_grpc.RolloutServiceAsyncStub,
    fresh_server: ServerProcess,
    upstream: FakeUpstream,
) -> None:
    before = open_fds(fresh_server.pid)
    spec = pb.RolloutSpec(
        task=pb.Task(instruction="hold connections"),
        agent=pb.Agent(name="command", command=HOLD),
        endpoint=endpoint(upstream),
    )
    hostile = (await server.StartRollout(pb.StartRolloutRequest(spec=spec))).rollout
    events: list[pb.RolloutEvent] = []

    async def watch() -> None:
        request = pb.WatchRolloutRequest(rollout_id=hostile.id)
        async for response in server.WatchRollout(request):
            events.append(response.event)

    watching = asyncio.create_task(watch())
    await eventually(lambda: "HELD" in output_text(events), timeout_s=300)
    held = int(output_text(events).split("HELD", 1)[1].split()[0])
    # The last accept batch (up to the listen backlog) is refused a loop turn after it is
    # accepted: what the server holds settles at its bound while the sandbox holds on.
    bound = PER_SANDBOX + 32  # its connections, a sandbox's pipes, slack
    await eventually(lambda: open_fds(fresh_server.pid) - before <= bound, timeout_s=30)
    during = open_fds(fresh_server.pid)
    # The gRPC port serves, and another rollout through the proxy succeeds meanwhile.
    calm = pb.RolloutSpec(
        task=pb.Task(instruction="call", verify=["true"]),
        agent=pb.Agent(name="command", command="true"),
        endpoint=endpoint(upstream),
    )
    other = (await server.RunRollout(pb.RunRolloutRequest(spec=calm), timeout=300)).rollout
    layout = SandboxLayout(Path(fresh_server.state_dir) / "sandboxes" / hostile.id, uid=None)
    workdir = layout.home / "workdir"
    (workdir / "go").write_text("")
    await asyncio.wait_for(watching, 300)
    final = await server.GetRollout(pb.GetRolloutRequest(rollout_id=hostile.id))
    after = open_fds(fresh_server.pid)
    print(f"connections opened {held}, server fds before {before} during {during} after {after}")
    assert held >= 1000  # it did flood (bounded only by the sandbox's own fd limit)
    assert during - before <= bound
    assert other.status == pb.ROLLOUT_STATUS_SUCCEEDED, other.result.error
    assert terminal(final.rollout)
    assert after - before <= 16
