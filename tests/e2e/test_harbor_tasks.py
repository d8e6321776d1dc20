"""Through the real server: Harbor task directories of our own, by path and uploaded.

Each task reaches reward 1 with the oracle agent and 0 with a no-op agent. The images are
built by the server's store in its shared cache (Debian and PyPI reached only by the
Dockerfile's RUN steps; a second run is a cache hit). On main none of this exists: the
spec has no `harbor_task`, and no agent is called "oracle".
"""

from __future__ import annotations

import io
import json
import os
import shutil
import tarfile
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from google.protobuf import json_format
from rollout.v1 import rollout_pb2 as pb
from rollout.v1 import rollout_pb2_grpc as pb_grpc
from rollout_client.cli import app
from typer.testing import CliRunner

from service.config import Settings
from service.harbor.mapping import HARBOR_VERIFY
from service.images import ImageStore
from testing.server_process import ServerProcess, running

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.timeout(1800),  # a cold build of the pytest task reaches Debian and PyPI
    pytest.mark.skipif(os.geteuid() != 0, reason="image sandboxes need a root server"),
]
TASKS = Path(__file__).parent.parent / "harbor" / "tasks"
_HOST_CA = Path("/etc/ssl/certs/ca-certificates.crt")
ORACLE: dict[str, Any] = {"name": "oracle"}
NO_OP: dict[str, Any] = {"name": "command", "command": "true"}


@pytest.fixture(scope="module")
def task_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("harbor") / "tasks"
    shutil.copytree(TASKS, root)
    # The build trusts the host's CA bundle (this network re-signs TLS): see the Dockerfile.
    shutil.copy(_HOST_CA, root / "pytest_task" / "environment" / "host-ca.crt")
    return root


@pytest.fixture(scope="module")
def harbor_server(
    tmp_path_factory: pytest.TempPathFactory, task_root: Path
) -> Iterator[ServerProcess]:
    server = ServerProcess(
        tmp_path_factory.mktemp("harbor-state"),
        env={"ROLLOUT_TASK_ROOTS": f'["{task_root}"]', "ROLLOUT_IMAGE_BUILD_TIMEOUT_S": "1500"},
    )
    with running(server):
        yield server


@pytest.fixture
async def harbor_stub(
    harbor_server: ServerProcess,
) -> AsyncIterator[pb_grpc.RolloutServiceAsyncStub]:
    async with grpc.aio.insecure_channel(harbor_server.target) as channel:
        yield pb_grpc.RolloutServiceStub(channel)


def _spec(agent: dict[str, Any], **fields: Any) -> pb.RolloutSpec:
    return json_format.ParseDict({"agent": agent, **fields}, pb.RolloutSpec())


async def _run(stub: pb_grpc.RolloutServiceAsyncStub, spec: pb.RolloutSpec) -> pb.Rollout:
    response = await stub.RunRollout(pb.RunRolloutRequest(spec=spec))
    rollout: pb.Rollout = response.rollout
    return rollout


async def _rewards(stub: pb_grpc.RolloutServiceAsyncStub, **fields: Any) -> list[pb.Rollout]:
    rollouts = [await _run(stub, _spec(agent, **fields)) for agent in (ORACLE, NO_OP)]
    for rollout in rollouts:
        assert rollout.status == pb.ROLLOUT_STATUS_SUCCEEDED, (
            rollout.result.error,
            rollout.result.verify_results,
            rollout.result.agent_log_tail,
        )
    assert [r.result.reward for r in rollouts] == [1.0, 0.0]
    return rollouts


async def test_debian_and_pypi_packages_in_the_image_and_pytest_verifies(
    harbor_stub: pb_grpc.RolloutServiceAsyncStub,
) -> None:
    oracle, _ = await _rewards(harbor_stub, harborTask={"path": "pytest_task"})
    spec = oracle.spec  # the resolved spec is on the rollout
    assert spec.harbor_task.path == "pytest_task"
    assert len(spec.harbor_task.digest) == 64
    assert spec.sandbox.image.startswith("harbor/task:")
    assert spec.task.workdir == "/app"
    assert "/tests/test_wordcount.py" in spec.task.verifier_files
    assert spec.agent_timeout.seconds == 120
    assert spec.verify_timeout.seconds == 300
    assert "counts.json" in oracle.result.files  # collected from the workdir, /app
    assert "/tests/test_wordcount.py" not in oracle.result.files


async def test_a_second_run_hits_the_image_cache(
    harbor_stub: pb_grpc.RolloutServiceAsyncStub,
) -> None:
    spec = _spec(ORACLE, harborTask={"path": "pytest_task"})
    first = await _run(harbor_stub, spec)
    events = [
        response.event
        async for response in harbor_stub.WatchRollout(
            pb.WatchRolloutRequest(rollout_id=(await _run(harbor_stub, spec)).id)
        )
    ]
    messages = [e.phase.message for e in events if e.HasField("phase")]
    assert first.result.reward == 1.0
    assert not any(": STEP " in m or "RUN " in m for m in messages), messages


async def test_a_cold_build_shows_its_progress_as_phase_messages(
    harbor_stub: pb_grpc.RolloutServiceAsyncStub, task_root: Path
) -> None:
    task = task_root / f"fresh_{uuid.uuid4().hex[:8]}"
    shutil.copytree(task_root / "needs_root", task)
    marker = uuid.uuid4().hex
    (task / "environment" / "Dockerfile").write_text(f"FROM rollout/base\nRUN echo {marker}\n")
    started = await harbor_stub.StartRollout(
        pb.StartRolloutRequest(spec=_spec(ORACLE, harborTask={"path": task.name}))
    )
    request = pb.WatchRolloutRequest(rollout_id=started.rollout.id)
    events = [response.event async for response in harbor_stub.WatchRollout(request)]
    image = started.rollout.spec.sandbox.image
    try:
        building = [
            e.phase.message
            for e in events
            if e.HasField("phase") and e.phase.phase == pb.PHASE_CREATING_SANDBOX
        ]
        assert any(m.startswith(f"image {image}: ") and marker in m for m in building), building
        assert events[-1].finished.result.reward == 1.0
    finally:
        await ImageStore(Settings().cache_dir).remove(image)


async def test_multi_dimensional_reward_json(harbor_stub: pb_grpc.RolloutServiceAsyncStub) -> None:
    oracle, no_op = await _rewards(
        harbor_stub, harborTask={"path": "multi_reward"}, task={"rewardKey": "passed"}
    )
    assert dict(oracle.result.metrics) == {"passed": 1.0, "heading": 1.0, "mentions_done": 1.0}
    assert dict(no_op.result.metrics) == {"passed": 0.0, "heading": 0.0, "mentions_done": 0.0}


async def test_a_solution_that_needs_root(harbor_stub: pb_grpc.RolloutServiceAsyncStub) -> None:
    await _rewards(harbor_stub, harborTask={"path": "needs_root"})


def test_rollout_run_shows_the_verify_step_as_the_task_wrote_it(
    harbor_server: ServerProcess,
) -> None:
    # The service runs test.sh inside a wrapper linking /logs/verifier to its own verifier
    # directory; the result and `rollout run` show the step the task wrote.
    argv = ["run", "--harbor-task", "multi_reward", "--agent", "command", "--agent-command", "true"]
    ran = CliRunner().invoke(app, [*argv, "--json", "--target", harbor_server.target])
    assert ran.exit_code == 0, ran.output
    [verify] = json.loads(ran.stdout)["result"]["verifyResults"]
    assert verify["displayCommand"] == "bash /tests/test.sh"
    assert verify["command"] == HARBOR_VERIFY

    shown = CliRunner().invoke(app, [*argv, "--target", harbor_server.target])
    assert shown.exit_code == 0, shown.output
    lines = [line for line in shown.stdout.splitlines() if "verify[0]" in line]
    assert lines, shown.stdout  # the live line, then the summary's
    assert all("verify[0] ok   bash /tests/test.sh  exit 0" in line for line in lines), lines
    assert "rm -rf /logs" not in shown.stdout
    # test.sh exits 0 whatever it scored: what it printed says why, under its line.
    assert "out | heading=0 mentions_done=0" in shown.stdout, shown.stdout


async def test_an_uploaded_archive_runs_like_the_directory(
    harbor_stub: pb_grpc.RolloutServiceAsyncStub, task_root: Path
) -> None:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        tar.add(task_root / "needs_root", arcname="needs_root")
    by_path = await _run(harbor_stub, _spec(ORACLE, harborTask={"path": "needs_root"}))
    spec = _spec(ORACLE)
    spec.harbor_task.archive = buffer.getvalue()
    uploaded = await _run(harbor_stub, spec)
    assert uploaded.result.reward == 1.0, uploaded.result.error
    assert uploaded.spec.harbor_task.digest == by_path.spec.harbor_task.digest
    assert not uploaded.spec.harbor_task.archive  # cleared once resolved


@pytest.mark.parametrize(
    ("harbor_task", "field"),
    [
        ({"path": "../needs_root"}, "spec.harbor_task.path"),
        ({"path": "absent"}, "spec.harbor_task.path"),
        ({"archive": "bm90IGEgdGFyYmFsbA=="}, "spec.harbor_task.archive"),
        ({}, "spec.harbor_task: give a path or an archive"),
    ],
)
async def test_bad_task_sources_are_invalid_argument(
    harbor_stub: pb_grpc.RolloutServiceAsyncStub, harbor_task: dict[str, str], field: str
) -> None:
    with pytest.raises(grpc.aio.AioRpcError) as error:
        await _run(harbor_stub, _spec(ORACLE, harborTask=harbor_task))
    assert error.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert field in (error.value.details() or "")


async def test_an_unknown_backend_is_named_not_an_internal_error(
    harbor_stub: pb_grpc.RolloutServiceAsyncStub,
) -> None:
    spec = _spec(ORACLE, harborTask={"path": "needs_root"}, sandbox={"backend": "\x00"})
    with pytest.raises(grpc.aio.AioRpcError) as error:
        await _run(harbor_stub, spec)
    assert error.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "spec.sandbox.backend" in (error.value.details() or "")


async def test_a_from_the_server_lacks_is_named_with_how_to_provide_it(
    harbor_stub: pb_grpc.RolloutServiceAsyncStub, task_root: Path
) -> None:
    task = task_root / "from_unknown"
    shutil.copytree(task_root / "needs_root", task)
    (task / "environment" / "Dockerfile").write_text("FROM example/not-here:1\n")
    with pytest.raises(grpc.aio.AioRpcError) as error:
        await _run(harbor_stub, _spec(ORACLE, harborTask={"path": "from_unknown"}))
    details = error.value.details() or ""
    assert error.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "FROM example/not-here:1" in details
    assert "python -m service.images" in details


def _novel_archive(task_root: Path, tmp_path: Path) -> bytes:
    """needs_root with a Dockerfile no one has built: its RUN step would run at build time."""
    task = tmp_path / "novel_task"
    shutil.copytree(task_root / "needs_root", task)
    with (task / "environment" / "Dockerfile").open("a") as dockerfile:
        dockerfile.write(f"RUN echo {uuid.uuid4().hex} > /etc/build-marker\n")
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        tar.add(task, arcname="novel_task")
    return buffer.getvalue()


async def test_an_uploaded_dockerfile_is_not_built_by_default(
    harbor_stub: pb_grpc.RolloutServiceAsyncStub, task_root: Path, tmp_path: Path
) -> None:
    """A build's RUN steps run as root on the host: a caller's upload must not reach them."""
    spec = _spec(ORACLE)
    spec.harbor_task.archive = _novel_archive(task_root, tmp_path)
    with pytest.raises(grpc.aio.AioRpcError) as raised:
        await _run(harbor_stub, spec)
    assert raised.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    details = raised.value.details() or ""
    assert "spec.harbor_task.archive" in details
    assert "ROLLOUT_HARBOR_UPLOAD_BUILDS" in details


async def test_an_operator_may_allow_uploaded_builds(task_root: Path, tmp_path: Path) -> None:
    server = ServerProcess(
        tmp_path / "state",
        env={"ROLLOUT_HARBOR_UPLOAD_BUILDS": "true", "ROLLOUT_IMAGE_BUILD_TIMEOUT_S": "1500"},
    )
    server.start()
    try:
        async with grpc.aio.insecure_channel(server.target) as channel:
            spec = _spec(ORACLE)
            spec.harbor_task.archive = _novel_archive(task_root, tmp_path)
            rollout = await _run(pb_grpc.RolloutServiceStub(channel), spec)
    finally:
        assert server.stop() == 0, server.text()
    assert rollout.result.reward == 1.0, rollout.result.error
