"""Through the real server: rollouts on images (`spec.sandbox.image`).

The session's server pins `host` as its default (tests/conftest.py); these name the image,
or start a server on the shipped default. On main the field does not exist: the sandbox
runs on the host's root, read-only, so none of these could pass there.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from rollout.v1 import rollout_pb2 as pb
from rollout.v1 import rollout_pb2_grpc as pb_grpc

from service.config import Settings
from service.images import ImageStore
from testing.server_process import ServerProcess, running
from testing.specs import command_spec

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(os.geteuid() != 0, reason="image sandboxes need a root server"),
]
_BASE: dict[str, Any] = {"sandbox": {"image": "rollout/base"}}
_HOST_CA = "/etc/ssl/certs/ca-certificates.crt"


@pytest.fixture(scope="module", autouse=True)
def base_image() -> None:
    """The Debian base of the server's shared cache (a hit once built on this machine)."""
    asyncio.run(ImageStore(Settings().cache_dir).base())


async def _run(stub: pb_grpc.RolloutServiceAsyncStub, spec: pb.RolloutSpec) -> pb.Rollout:
    response = await stub.RunRollout(pb.RunRolloutRequest(spec=spec))
    return response.rollout


async def test_root_inside_and_files_at_absolute_paths(
    stub: pb_grpc.RolloutServiceAsyncStub,
) -> None:
    spec = command_spec(
        "id -u > uid.txt; cp /app/input.txt copied.txt; echo tool > /usr/local/bin/tool; "
        "dpkg-query -W -f='${Status}' bash > dpkg.txt",
        setup=("mkdir /app && echo 'staged at an absolute path' > /app/input.txt",),
        verify=("test -s /usr/local/bin/tool",),
        **{**_BASE, "task": {"verifyMode": "VERIFY_MODE_IN_PLACE"}},
    )
    rollout = await _run(stub, spec)
    assert rollout.status == pb.ROLLOUT_STATUS_SUCCEEDED, rollout.result.error
    files = rollout.result.files
    assert files["uid.txt"] == b"0\n"
    assert files["copied.txt"] == b"staged at an absolute path\n"
    assert files["dpkg.txt"] == b"install ok installed"
    assert rollout.result.reward == 1.0  # in place, the verify command saw the agent's /usr/local


async def test_agent_cannot_read_a_host_marker(stub: pb_grpc.RolloutServiceAsyncStub) -> None:
    marker = Path("/srv") / f"rollout-solution-{uuid.uuid4().hex}"
    marker.write_text("the reference solution\n")
    try:
        rollout = await _run(
            stub,
            command_spec(
                f"cat {marker} > leak.txt 2>/dev/null; ls /srv /home /root >> leak.txt 2>&1",
                **_BASE,
            ),
        )
    finally:
        marker.unlink()
    leak = rollout.result.files["leak.txt"]
    assert b"reference solution" not in leak
    assert marker.name.encode() not in leak


async def test_unknown_image_is_invalid_argument(stub: pb_grpc.RolloutServiceAsyncStub) -> None:
    spec = command_spec("true", sandbox={"image": f"nowhere/{uuid.uuid4().hex}"})
    with pytest.raises(grpc.aio.AioRpcError) as raised:
        await stub.RunRollout(pb.RunRolloutRequest(spec=spec))
    assert raised.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "spec.sandbox.image" in (raised.value.details() or "")
    assert "python -m service.images" in (raised.value.details() or "")


async def test_apt_and_pip_install_under_network_full(
    stub: pb_grpc.RolloutServiceAsyncStub,
) -> None:
    # This machine's egress re-signs TLS with a CA only the host trusts: the task brings
    # it along, as a task on such a network would (the image's own bundle lacks it).
    install = (
        "apt-get update -qq && apt-get install -y -qq --no-install-recommends python3-pip "
        "> apt.log 2>&1 && pip install -q --break-system-packages --cert host-ca.crt "
        "--isolated six > pip.log 2>&1 && python3 -c 'import six; print(six.__name__)' > six.txt"
    )
    spec = command_spec(
        install,
        sandbox={"image": "rollout/base", "network": "NETWORK_POLICY_FULL"},
        agentTimeout="600s",
    )
    spec.task.files["host-ca.crt"] = Path(_HOST_CA).read_bytes()
    rollout = await _run(stub, spec)
    files = rollout.result.files
    assert files.get("six.txt") == b"six\n", (files.get("apt.log"), files.get("pip.log"))


@pytest.fixture(scope="module")
def default_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """A server on the shipped defaults: no image setting at all."""
    server = ServerProcess(tmp_path_factory.mktemp("default-image-state"))
    server.env.pop("ROLLOUT_SANDBOX_IMAGE", None)
    with running(server):
        yield server


async def test_the_default_is_the_debian_base(default_server: ServerProcess) -> None:
    async with grpc.aio.insecure_channel(default_server.target) as channel:
        stub = pb_grpc.RolloutServiceStub(channel)
        rollout = await _run(stub, command_spec("id -u > uid.txt; cat /etc/hostname > name.txt"))
    assert rollout.status == pb.ROLLOUT_STATUS_SUCCEEDED, rollout.result.error
    assert rollout.result.files["uid.txt"] == b"0\n"
    assert rollout.result.files["name.txt"] == b"sandbox\n"


async def _events(stub: pb_grpc.RolloutServiceAsyncStub, rollout_id: str) -> list[pb.RolloutEvent]:
    request = pb.WatchRolloutRequest(rollout_id=rollout_id)
    return [response.event async for response in stub.WatchRollout(request)]


async def test_first_use_of_an_image_shows_progress_and_unpacks_once(
    stub: pb_grpc.RolloutServiceAsyncStub, tmp_path: Path
) -> None:
    name = f"test/progress-{uuid.uuid4().hex[:12]}"
    (tmp_path / "Dockerfile").write_text(f"FROM rollout/base\nRUN echo {name} > /image-name\n")
    store = ImageStore(Settings().cache_dir)
    image = await store.build(tmp_path, name)
    shutil.rmtree(image.rootfs.parent)  # as if built by another server: not unpacked yet
    try:
        spec = command_spec("cat /image-name > name.txt", sandbox={"image": name})
        started = [await stub.StartRollout(pb.StartRolloutRequest(spec=spec)) for _ in range(2)]
        watched = await asyncio.gather(*(_events(stub, s.rollout.id) for s in started))
        for events in watched:
            creating = [
                e.phase.message
                for e in events
                if e.HasField("phase") and e.phase.phase == pb.PHASE_CREATING_SANDBOX
            ]
            assert any(message.startswith(f"image {name}: ") for message in creating), creating
        for begun in started:
            got = await stub.GetRollout(pb.GetRolloutRequest(rollout_id=begun.rollout.id))
            final = got.rollout
            assert final.status == pb.ROLLOUT_STATUS_SUCCEEDED, final.result.error
            assert final.result.files["name.txt"] == f"{name}\n".encode()
        messages = [e.phase.message for events in watched for e in events if e.HasField("phase")]
        assert sum("joined a build under way" in m for m in messages) == 1
    finally:
        await store.remove(name)


def _overlay_mounts(sandboxes: Path) -> list[str]:
    """Overlay mounts, in any process's namespace, whose layers lie under `sandboxes`."""
    found: set[str] = set()
    for mountinfo in Path("/proc").glob("[0-9]*/mountinfo"):
        try:
            lines = mountinfo.read_text().splitlines()
        except OSError:
            continue  # the process exited
        found.update(line for line in lines if " overlay " in line and str(sandboxes) in line)
    return sorted(found)


async def test_a_killed_servers_image_sandboxes_leave_no_mount(tmp_path: Path) -> None:
    server = ServerProcess(tmp_path / "state", env={"ROLLOUT_SANDBOX_IMAGE": "rollout/base"})
    sandboxes = Path(os.path.realpath(tmp_path / "state")) / "sandboxes"
    async with grpc.aio.insecure_channel(server.start()) as channel:
        stub = pb_grpc.RolloutServiceStub(channel)
        started = await stub.StartRollout(
            pb.StartRolloutRequest(spec=command_spec("echo x > /var/x; sleep 300"))
        )
        async for response in stub.WatchRollout(
            pb.WatchRolloutRequest(rollout_id=started.rollout.id)
        ):
            if response.event.phase.phase == pb.PHASE_AGENT:
                break
    assert _overlay_mounts(sandboxes)
    server.stop(signal.SIGKILL)
    for _ in range(200):  # its spawners see the server's sockets close, and exit
        if not _overlay_mounts(sandboxes):
            break
        await asyncio.sleep(0.05)
    assert _overlay_mounts(sandboxes) == []
    async with grpc.aio.insecure_channel(server.start()) as channel:
        stub = pb_grpc.RolloutServiceStub(channel)
        rollout = await _run(stub, command_spec("id -u > uid.txt"))
    assert server.stop() == 0, server.text()
    assert rollout.result.files["uid.txt"] == b"0\n"
    assert not (sandboxes / started.rollout.id).exists()


async def test_a_group_on_an_image_sets_up_once_and_members_fork_copy_on_write(
    stub: pb_grpc.RolloutServiceAsyncStub, server_process: ServerProcess
) -> None:
    """Setup on an image may change anything on its root: each member starts from all of it
    (a file under /opt with its owner, a file of the image removed), and what a member
    writes over it is its own, seen by no other member."""
    spec = command_spec(
        "cp /opt/made.txt before.txt; stat -c %u:%g /opt/made.txt > owner.txt; "
        "if test -e /etc/debian_version; then echo present; else echo absent; fi > gone.txt; "
        "echo $RANDOM$RANDOM$$ >> /opt/made.txt; sleep 0.5; cp /opt/made.txt after.txt",
        setup=(
            "head -c 8 /dev/urandom | od -An -tx1 > /opt/made.txt",
            "chown 1000:1000 /opt/made.txt && rm /etc/debian_version",
        ),
        verify=("test -s after.txt",),
        **_BASE,
    )
    group = (await stub.RunGroup(pb.RunGroupRequest(spec=pb.GroupSpec(spec=spec, n=3)))).group
    assert group.status == pb.GROUP_STATUS_COMPLETED, group
    assert group.template_setups == 1
    files = []
    for member in group.members:
        got = await stub.GetRollout(pb.GetRolloutRequest(rollout_id=member.rollout_id))
        files.append(got.rollout.result.files)
        assert len(got.rollout.result.setup_results) == 2
    (prepared,) = {f["before.txt"] for f in files}  # one setup run: the same random bytes
    assert {f["owner.txt"] for f in files} == {b"1000:1000\n"}
    assert {f["gone.txt"] for f in files} == {b"absent\n"}
    after = [f["after.txt"] for f in files]
    assert len(set(after)) == 3
    assert all(a.startswith(prepared) and a.count(b"\n") == 2 for a in after)
    snapshots = server_process.state_dir / "snapshots"
    assert not snapshots.exists() or list(snapshots.iterdir()) == []


async def test_root_inside_cannot_mount_over_what_the_verifier_reads(
    stub: pb_grpc.RolloutServiceAsyncStub,
) -> None:
    """Root in the sandbox's user namespace owns no mount namespace: a mount over /logs or
    /tests (which would outlive the agent's processes and shadow the verifier's files) fails."""
    spec = command_spec(
        "mkdir -p /logs/verifier; "
        "mount -t tmpfs none /logs/verifier > tmpfs.txt 2>&1; echo $? >> tmpfs.txt; "
        "mount --bind /tmp /opt > bind.txt 2>&1; echo $? >> bind.txt; "
        "umount /proc > umount.txt 2>&1; echo $? >> umount.txt",
        **_BASE,
    )
    rollout = await _run(stub, spec)
    assert rollout.status == pb.ROLLOUT_STATUS_SUCCEEDED, rollout.result.error
    for name in ("tmpfs.txt", "bind.txt", "umount.txt"):
        status = rollout.result.files[name].decode().strip().splitlines()[-1]
        assert status != "0", (name, rollout.result.files[name])
