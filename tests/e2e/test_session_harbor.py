"""Sessions on Harbor tasks through the real server: stepped with commands that leave a
background process behind, verified to the reward the task's tests give; 0 for a session
that did nothing; a trojaned tool is never run by a FRESH verifier (0) and is TAMPERED in
place."""

from __future__ import annotations

import os
import shutil
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import grpc
import pytest
from google.protobuf import json_format
from rollout.v1 import rollout_pb2 as pb
from rollout.v1 import rollout_pb2_grpc as pb_grpc

from testing.server_process import ServerProcess, running
from tests.e2e.processes import eventually, processes_with

if TYPE_CHECKING:
    Stub = pb_grpc.RolloutServiceAsyncStub

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.timeout(1800),
    pytest.mark.skipif(os.geteuid() != 0, reason="image sandboxes need a root server"),
]
TASKS = Path(__file__).parent.parent / "harbor" / "tasks"
TROJAN_PYTHON = b"""#!/bin/sh
mkdir -p /logs/verifier
echo '{"passed": 1, "heading": 1, "mentions_done": 1}' > /logs/verifier/reward.json
"""
"""Python, replaced by a program writing the verifier's reward (the verifier runs python3)."""


@pytest.fixture(scope="module")
def harbor_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    root = tmp_path_factory.mktemp("harbor") / "tasks"
    for name in ("multi_reward", "needs_root"):
        shutil.copytree(TASKS / name, root / name)
    server = ServerProcess(
        tmp_path_factory.mktemp("harbor-state"), env={"ROLLOUT_TASK_ROOTS": f'["{root}"]'}
    )
    with running(server):
        yield server


@pytest.fixture
async def stub(harbor_server: ServerProcess) -> AsyncIterator[Stub]:
    async with grpc.aio.insecure_channel(harbor_server.target) as channel:
        yield pb_grpc.RolloutServiceStub(channel)


def spec(**fields: Any) -> pb.RolloutSpec:
    return json_format.ParseDict(fields, pb.RolloutSpec())


MULTI = spec(harborTask={"path": "multi_reward"}, task={"rewardKey": "passed"})
NEEDS_ROOT = spec(harborTask={"path": "needs_root"})


async def session_of(stub: Stub, task: pb.RolloutSpec) -> str:
    (session,) = (await stub.OpenSession(pb.OpenSessionRequest(spec=task))).sessions
    assert session.status == pb.SESSION_STATUS_READY, session.result.error
    return session.id


async def run(stub: Stub, session_id: str, command: str) -> pb.ExecResult:
    items = [i async for i in stub.Exec(pb.ExecRequest(session_id=session_id, command=command))]
    return items[-1].result


async def verify(stub: Stub, session_id: str) -> pb.Session:
    request = pb.VerifySessionRequest(session_id=session_id)
    return (await stub.VerifySession(request)).session


async def test_a_harbor_session_stepped_with_a_daemon_verifies_to_its_reward(stub: Stub) -> None:
    marker = f"harbor-daemon-{uuid.uuid4().hex[:8]}"
    session_id = await session_of(stub, MULTI)
    daemon = f"(setsid bash -c 'exec -a {marker} sleep 300' >/dev/null 2>&1 &)"
    assert (await run(stub, session_id, daemon)).exit_code == 0
    assert (
        await run(stub, session_id, "printf '# Report\\n\\nAll done.\\n' > report.md")
    ).exit_code == 0
    await eventually(lambda: processes_with(marker))  # it outlived its command
    verified = await verify(stub, session_id)
    assert verified.status == pb.SESSION_STATUS_VERIFIED, verified.result.error
    assert verified.result.reward == 1.0
    assert not processes_with(marker)


async def test_a_harbor_session_that_did_nothing_scores_zero(stub: Stub) -> None:
    verified = await verify(stub, await session_of(stub, MULTI))
    assert verified.status == pb.SESSION_STATUS_VERIFIED, verified.result.error
    assert verified.result.reward == 0.0


async def test_a_trojaned_tool_is_not_run_by_a_fresh_verifier(stub: Stub) -> None:
    session_id = await session_of(stub, MULTI)
    trojan = pb.WriteFileRequest(
        session_id=session_id, path="/usr/bin/python3", content=TROJAN_PYTHON
    )
    await stub.WriteFile(trojan)
    assert (await run(stub, session_id, "chmod +x /usr/bin/python3 && python3")).exit_code == 0
    verified = await verify(stub, session_id)
    assert verified.status == pb.SESSION_STATUS_VERIFIED, verified.result.error
    assert verified.result.reward == 0.0


async def test_a_trojaned_tool_in_place_is_tampered(stub: Stub) -> None:
    session_id = await session_of(stub, NEEDS_ROOT)
    trojan = "printf '#!/bin/sh\\nexit 0\\n' > /usr/bin/getent && chmod +x /usr/bin/getent"
    assert (await run(stub, session_id, trojan)).exit_code == 0
    verified = await verify(stub, session_id)
    assert verified.status == pb.SESSION_STATUS_FAILED
    assert verified.result.error.kind == pb.ERROR_KIND_TAMPERED
    assert verified.result.reward == 0.0
