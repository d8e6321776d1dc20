"""Through the real server: Harbor tasks whose FROM names an image by its registry name.

Every Terminal-Bench task starts `FROM ghcr.io/laude-institute/t-bench/...`. Before image
names kept their registry host, `build --name ghcr.io/example/base:1` stored
`localhost/ghcr.io/example/base:1`: admission accepted the task and the build failed as
SANDBOX "image not known". The FROM image's WORKDIR was never the task's workdir either, and
no operator could say "this public image is that local one".
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from google.protobuf import json_format
from rollout.v1 import rollout_pb2 as pb
from rollout.v1 import rollout_pb2_grpc as pb_grpc

from service.config import Settings
from service.images import ImageStore
from testing.server_process import ServerProcess, running

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.timeout(900),
    pytest.mark.skipif(os.geteuid() != 0, reason="image sandboxes need a root server"),
]
FROM_IMAGE = "ghcr.io/example/base:1"
USER_IMAGE = "ghcr.io/example/user:1"
ALIASES = {
    "ghcr.io/laude-institute/t-bench/*": FROM_IMAGE,
    "ghcr.io/other/*": "ghcr.io/mirror/*",
}
_TESTS = (
    'if [ "$(cat /app/where.txt 2>/dev/null)" = /app ]; then r=1; else r=0; fi\n'
    "echo $r > /logs/verifier/reward.txt\n"
)
_FROM = {
    "plain": f"FROM {FROM_IMAGE}\n",
    "aliased": "FROM ghcr.io/laude-institute/t-bench/python-3-13:20250620\n",
    "missing": "FROM ghcr.io/other/missing:1\n",
    "user": f"FROM {FROM_IMAGE}\nUSER nobody\n",
    "user_reset": f"FROM {USER_IMAGE}\nUSER root\n",
}


@pytest.fixture(scope="module")
def task_root(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The FROM image (`WORKDIR /app`) in the server's store, and a task per FROM line."""
    root = tmp_path_factory.mktemp("tasks")
    context = tmp_path_factory.mktemp("from-image")
    (context / "Dockerfile").write_text("FROM rollout/base\nWORKDIR /app\n")
    store = ImageStore(Settings().cache_dir)
    asyncio.run(store.build(context, FROM_IMAGE))
    (context / "Dockerfile").write_text(f"FROM {FROM_IMAGE}\nUSER nobody\n")
    asyncio.run(store.build(context, USER_IMAGE))
    for name, dockerfile in _FROM.items():
        files = {
            "instruction.md": "Write the directory you start in to where.txt.\n",
            "task.toml": "[agent]\ntimeout_sec = 60.0\n",
            "environment/Dockerfile": dockerfile,
            "tests/test.sh": _TESTS,
            "solution/solve.sh": "#!/bin/bash\npwd > where.txt\n",
        }
        for path, text in files.items():
            (root / name / path).parent.mkdir(parents=True, exist_ok=True)
            (root / name / path).write_text(text)
    yield root
    for image in (FROM_IMAGE, USER_IMAGE):
        asyncio.run(store.remove(image))


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, task_root: Path) -> Iterator[ServerProcess]:
    env = {
        "ROLLOUT_TASK_ROOTS": json.dumps([str(task_root)]),
        "ROLLOUT_IMAGE_ALIASES": json.dumps(ALIASES),
    }
    process = ServerProcess(tmp_path_factory.mktemp("state"), env=env)
    with running(process):
        yield process


@pytest.fixture
async def names_stub(server: ServerProcess) -> AsyncIterator[pb_grpc.RolloutServiceAsyncStub]:
    async with grpc.aio.insecure_channel(server.target) as channel:
        yield pb_grpc.RolloutServiceStub(channel)


async def _oracle(stub: pb_grpc.RolloutServiceAsyncStub, path: str, **fields: Any) -> pb.Rollout:
    spec = {"agent": {"name": "oracle"}, "harborTask": {"path": path}, **fields}
    request = pb.RunRolloutRequest(spec=json_format.ParseDict(spec, pb.RolloutSpec()))
    rollout: pb.Rollout = (await stub.RunRollout(request)).rollout
    return rollout


@pytest.mark.parametrize("task", ["plain", "aliased", "user_reset"])
async def test_a_registry_named_from_image_builds_and_its_workdir_holds(
    names_stub: pb_grpc.RolloutServiceAsyncStub, task: str
) -> None:
    rollout = await _oracle(names_stub, task)
    assert rollout.status == pb.ROLLOUT_STATUS_SUCCEEDED, rollout.result.error
    assert rollout.spec.task.workdir == "/app"  # the FROM image's WORKDIR
    assert rollout.result.files["where.txt"] == b"/app\n"
    assert rollout.result.reward == 1.0


async def test_the_caller_sets_the_workdir_beside_a_task(
    names_stub: pb_grpc.RolloutServiceAsyncStub,
) -> None:
    rollout = await _oracle(names_stub, "plain", task={"workdir": "/srv/work"})
    assert rollout.status == pb.ROLLOUT_STATUS_SUCCEEDED, rollout.result.error
    assert rollout.spec.task.workdir == "/srv/work"
    assert rollout.result.files["where.txt"] == b"/srv/work\n"


@pytest.mark.parametrize(
    ("task", "detail"),
    [
        (
            "missing",
            "FROM ghcr.io/other/missing:1: no image 'ghcr.io/other/missing:1' in the store; "
            "looked for ghcr.io/other/missing:1, ghcr.io/mirror/missing:1 (alias ghcr.io/other/*)",
        ),
        ("user", "the task's image sets USER nobody; not supported"),
    ],
)
async def test_what_cannot_run_is_refused_at_admission(
    names_stub: pb_grpc.RolloutServiceAsyncStub, task: str, detail: str
) -> None:
    with pytest.raises(grpc.aio.AioRpcError) as error:
        await _oracle(names_stub, task)
    assert error.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert detail in (error.value.details() or "")


async def test_an_image_that_sets_a_user_is_refused_at_admission(
    names_stub: pb_grpc.RolloutServiceAsyncStub,
) -> None:
    """Its USER was ignored: every command ran as root."""
    spec = {
        "agent": {"name": "command", "command": "true"},
        "task": {"instruction": "nothing"},
        "sandbox": {"image": USER_IMAGE},
    }
    request = pb.RunRolloutRequest(spec=json_format.ParseDict(spec, pb.RolloutSpec()))
    with pytest.raises(grpc.aio.AioRpcError) as error:
        await names_stub.RunRollout(request)
    assert error.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    details = error.value.details() or ""
    assert f"spec.sandbox.image: image {USER_IMAGE!r} sets USER nobody; not supported" in details
