"""A server running as an ordinary user runs a rollout on an image (the Debian base).

The test (root) makes a user of its own, a state and cache directory it owns, and the base
in the shared cache (a hit once built on this machine); it starts the real server as that
user with no capability (`setpriv`), the base's store directory bound read-only at its
cache's `images/` in a mount namespace of the server's own (as a Kubernetes pod would mount
a volume a root filled ahead). Everything else is the server's own doing: it copies the
base into its state dir at first use (`service.images.owned`), and each image sandbox's
spawner makes a user namespace, mounts the overlay there and starts bwrap.
A Harbor task's Dockerfile is built by the server itself, rootless: buildah in a user
namespace of its own (`service.images.rootless`), on the base it imports from the one made ahead.
Skipped only where the host forbids unprivileged user namespaces, saying why.
"""

from __future__ import annotations

import asyncio
import errno
import json
import os
import pwd
import shutil
import signal
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from google.protobuf import json_format
from grpc_health.v1 import health_pb2, health_pb2_grpc
from rollout.v1 import rollout_pb2 as pb
from rollout.v1 import rollout_pb2_grpc as pb_grpc

from service.config import Settings
from service.images import ImageStore, rootless
from testing.server_process import ServerProcess, running
from testing.specs import command_spec

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(
        os.geteuid() != 0, reason="makes a user, and the base image, as root (needs root)"
    ),
]
_BASE: dict[str, Any] = {"sandbox": {"image": "rollout/base"}}
_HOST: dict[str, Any] = {"sandbox": {"image": "host"}}
_ROOTS = pytest.mark.parametrize("root", [_BASE, _HOST], ids=["base", "host"])


@pytest.fixture(scope="module")
def user() -> Iterator[pwd.struct_passwd]:
    """An ordinary user of the test's own, removed after."""
    name = f"rollout-up-{uuid.uuid4().hex[:6]}"
    subprocess.run(["useradd", "--no-create-home", "--shell", "/bin/sh", name], check=True)
    try:
        yield pwd.getpwnam(name)
    finally:
        subprocess.run(["userdel", name], check=True)


def _as_user(user: pwd.struct_passwd) -> list[str]:
    return [
        "setpriv",
        f"--reuid={user.pw_uid}",
        f"--regid={user.pw_gid}",
        "--init-groups",
        "--inh-caps=-all",
        "--bounding-set=-all",
        "--",
    ]


@pytest.fixture(scope="module")
def user_namespaces(user: pwd.struct_passwd) -> None:
    """Skip, saying why, if the host lets the user make no user namespace."""
    probe = subprocess.run(
        [*_as_user(user), "unshare", "--user", "--map-root-user", "--mount", "true"],
        capture_output=True,
        text=True,
    )
    if probe.returncode != 0:
        pytest.skip(f"the host forbids unprivileged user namespaces: {probe.stderr.strip()}")


@pytest.fixture(scope="module")
def home(user: pwd.struct_passwd) -> Iterator[Path]:
    """The user's own directory for the server's state and cache (outside root's 0700 tmp)."""
    directory = Path(tempfile.mkdtemp(prefix="rollout-unprivileged-", dir="/tmp"))
    for path in (
        directory,
        directory / "state",
        directory / "cache",
        directory / "cache/images",
        directory / "tasks",
    ):
        path.mkdir(exist_ok=True)
        os.chown(path, user.pw_uid, user.pw_gid)
    yield directory
    shutil.rmtree(directory)


@pytest.fixture(scope="module")
def server(user: pwd.struct_passwd, user_namespaces: None, home: Path) -> Iterator[ServerProcess]:
    store = ImageStore(Path(Settings().cache_dir))
    asyncio.run(store.base())
    cache = home / "cache"
    mount = f'mount --bind -o ro {store.directory} {cache / "images"} && exec "$@"'
    command = [
        "unshare",
        "--mount",
        "--propagation=private",
        "--",
        "sh",
        "-c",
        mount,
        "sh",
        *_as_user(user),
        sys.executable,
        "-m",
        "service.server",
    ]
    env = {
        "ROLLOUT_CACHE_DIR": str(cache),
        "ROLLOUT_SANDBOX_IMAGE": "rollout/base",
        "ROLLOUT_TASK_ROOTS": json.dumps([str(home / "tasks")]),
        "HOME": str(home),
    }
    server = ServerProcess(home / "state", env=env, command=command)
    with running(server):
        yield server


async def _run(target: str, spec: pb.RolloutSpec) -> pb.Rollout:
    async with grpc.aio.insecure_channel(target) as channel:
        stub = pb_grpc.RolloutServiceStub(channel)
        return (await stub.RunRollout(pb.RunRolloutRequest(spec=spec))).rollout


async def _refusal(target: str, spec: pb.RolloutSpec) -> grpc.aio.AioRpcError:
    with pytest.raises(grpc.aio.AioRpcError) as raised:
        await _run(target, spec)
    return raised.value


def _processes_of(uid: int) -> list[str]:
    found = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and entry.stat().st_uid == uid:
                found.append((entry / "stat").read_text())
        except OSError:
            continue  # gone meanwhile
    return found


def _mounts_under(directory: Path) -> list[str]:
    """Mount lines naming `directory` in any process's mount table."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit():
                text = (entry / "mountinfo").read_text()
                found += [line for line in text.splitlines() if str(directory) in line]
        except OSError:
            continue
    return found


async def test_an_unprivileged_server_runs_an_image_rollout(
    server: ServerProcess, user: pwd.struct_passwd, home: Path
) -> None:
    assert "running unprivileged" in server.text()
    spec = command_spec(
        "id -u > uid.txt; head -1 /etc/os-release > os.txt; echo made > /tmp/made; "
        "cp /tmp/made made.txt; cp /app/input.txt copied.txt; "
        "dpkg-query -W -f='${Status}' bash > dpkg.txt; stat -c %u /usr/bin > owner.txt",
        setup=(
            "mkdir /app && echo 'staged at an absolute path' > /app/input.txt",
            "echo tool > /usr/local/bin/tool && chown 0:0 /usr/local/bin/tool",
            "echo changed > /etc/motd",
        ),
        verify=('test "$(cat made.txt)" = made && test -s /usr/local/bin/tool',),
        **_BASE,
    )
    rollout = await _run(server.target, spec)
    assert rollout.status == pb.ROLLOUT_STATUS_SUCCEEDED, rollout.result.error.message
    assert rollout.result.reward == 1.0
    files = rollout.result.files
    assert files["uid.txt"] == b"0\n"  # root inside, the server's uid outside
    assert b"bookworm" in files["os.txt"]  # the image's root, not the host's
    assert files["copied.txt"] == b"staged at an absolute path\n"
    assert files["dpkg.txt"] == b"install ok installed"
    assert files["owner.txt"] == b"0\n"  # the server's copy of the image: root's inside
    copies = list((home / "state" / "images").iterdir())
    assert [copy.stat().st_uid for copy in copies] == [user.pw_uid]


async def test_an_unprivileged_server_runs_a_rollout_on_the_hosts_root(
    server: ServerProcess,
) -> None:
    """`host` (the fallback without a base made ahead): the spawner's own user namespace
    owns the sandbox's mounts, so it can enter them; the server's PATH names root's
    installs (/root/...), which it cannot see and so does not bind."""
    spec = command_spec(
        "id -u > uid.txt; touch /usr/planted 2> ro.txt; echo made > /tmp/made; "
        "cp /tmp/made made.txt; test -x /bin/bash && echo host > root.txt",
        verify=('test "$(cat made.txt)" = made',),
        **_HOST,
    )
    rollout = await _run(server.target, spec)
    assert rollout.status == pb.ROLLOUT_STATUS_SUCCEEDED, rollout.result.error.message
    assert rollout.result.reward == 1.0
    files = rollout.result.files
    assert files["uid.txt"] == b"0\n"  # root of a user namespace mapping the server's uid
    assert b"Read-only file system" in files["ro.txt"]  # the host's root, read-only
    assert files["root.txt"] == b"host\n"


async def test_root_inside_has_no_other_id(server: ServerProcess) -> None:
    """One id is mapped (the server's, as root): another owner is refused, not faked."""
    rollout = await _run(
        server.target, command_spec("chown 42 /etc/motd 2> chown.txt; true", **_BASE)
    )
    assert b"Invalid argument" in rollout.result.files["chown.txt"]


async def test_what_needs_root_is_refused_naming_the_field(server: ServerProcess) -> None:
    disk = await _refusal(
        server.target, command_spec("true", sandbox={"resources": {"diskMb": 128}})
    )
    assert disk.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "spec.sandbox.resources.disk_mb" in (disk.details() or "")
    other = await _refusal(server.target, command_spec("true", sandbox={"image": "task/other"}))
    assert other.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "spec.sandbox.image" in (other.details() or "")
    assert "no image 'task/other' in the store" in (other.details() or "")


_TASK = {
    "task.toml": "[agent]\ntimeout_sec = 60.0\n",
    "instruction.md": "Write /app/answer.txt.\n",
    "environment/Dockerfile": (
        "FROM rollout/base\n"
        "RUN apt-get update -qq && apt-get install -y -qq --no-install-recommends file "
        "&& file --brief /bin/bash > /opt/file.txt && echo built > /opt/built.txt\n"
        "COPY greeting.txt /app/greeting.txt\n"
        "WORKDIR /app\n"
    ),
    "environment/greeting.txt": "hello from the context\n",
    "solution/solve.sh": "#!/bin/bash\ncat /opt/built.txt greeting.txt > answer.txt\n",
    "tests/test.sh": (
        "#!/bin/bash\n"
        'ok=0; [ "$(cat /app/answer.txt)" = "$(printf \'built\\nhello from the context\')" ] '
        "&& grep -q '^ELF 64-bit' /opt/file.txt && ok=1\n"
        'echo "$ok" > /logs/verifier/reward.txt\n'
    ),
}


def _rootless_buildah(user: pwd.struct_passwd, home: Path, *args: str) -> Any:
    """A query of the server's rootless container storage, run as its user, as it runs it."""
    storage = home / "state" / "rootless" / "images"
    argv = [
        *_as_user(user), sys.executable, "-I", rootless.__file__, str(storage / "containers-run"),
        "buildah",
        "--root", str(storage / "containers"), "--runroot", str(storage / "containers-run"),
        "--storage-driver", "overlay", *args,
    ]  # fmt: skip
    done = subprocess.run(argv, capture_output=True, text=True, env={"HOME": "/"})
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout or "null")


async def test_an_unprivileged_server_builds_a_harbor_tasks_dockerfile(
    server: ServerProcess, user: pwd.struct_passwd, home: Path
) -> None:
    """FROM the base made ahead, a RUN step installing a Debian package (apt's downloads as
    root: its `_apt` has no id there, see owned.py) and a COPY, built by the server as its own
    user; the oracle reaches reward 1 on it, and the build leaves no container or mount."""
    task = home / "tasks" / f"built-{uuid.uuid4().hex[:6]}"
    for relative, text in _TASK.items():
        path = task / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        path.chmod(0o755 if relative.endswith(".sh") else 0o644)
    for path in [task, *task.rglob("*")]:
        os.chown(path, user.pw_uid, user.pw_gid)
    spec = json_format.ParseDict(
        {"agent": {"name": "oracle"}, "harborTask": {"path": task.name}}, pb.RolloutSpec()
    )
    rollout = await _run(server.target, spec)
    assert rollout.status == pb.ROLLOUT_STATUS_SUCCEEDED, (
        rollout.result.error.message,
        rollout.result.verify_results,
    )
    assert rollout.result.reward == 1.0
    assert rollout.spec.sandbox.image.startswith("harbor/task:")
    images = _rootless_buildah(user, home, "images", "--json")
    names = [name for image in images for name in image.get("names") or []]
    assert any(rollout.spec.sandbox.image in name for name in names), names
    assert not _rootless_buildah(user, home, "containers", "--json")  # --force-rm, rm
    containers = home / "state" / "rootless" / "images" / "containers"
    assert _mounts_under(containers) == []  # each in a namespace now gone


def _archive_of_several_owners(store: ImageStore, directory: Path) -> Path:
    """An oci-archive of the base with a file of uid 42 on top, made in root's store (the
    caller holds its builds lock: a server starting meanwhile sweeps working containers)."""
    shared = store.storage
    (directory / "owned.txt").write_text("of uid 42\n")
    archive = directory / "several-owners.tar"

    def run(*argv: str) -> str:
        return subprocess.run(argv, check=True, capture_output=True, text=True).stdout.strip()

    container = run(*shared.buildah("from", "--quiet", "--pull=never", "rollout/base"))
    try:
        run(*shared.buildah("copy", "--chown", "42:42", container, str(directory / "owned.txt")))
        run(*shared.buildah("commit", "--quiet", container, f"oci-archive:{archive}"))
    finally:
        run(*shared.buildah("rm", container))
    archive.chmod(0o644)
    return archive


async def test_an_unprivileged_server_runs_an_image_it_imported(
    server: ServerProcess, user: pwd.struct_passwd, home: Path
) -> None:
    """The operator's command, run as the server's user, imports into the server's rootless
    store an image with a file of another owner (uid 42, which has no id there: root's now)."""
    scratch = Path(tempfile.mkdtemp(dir=home))
    os.chown(scratch, user.pw_uid, user.pw_gid)
    store = ImageStore(Path(Settings().cache_dir))
    async with store.building():
        archive = await asyncio.to_thread(_archive_of_several_owners, store, scratch)
    env = {
        "ROLLOUT_STATE_DIR": str(home / "state"),
        "ROLLOUT_CACHE_DIR": str(home / "cache"),
        "HOME": str(home),
        "PATH": os.environ["PATH"],
    }
    command = [*_as_user(user), sys.executable, "-m", "service.images", "import"]
    command += [f"oci-archive:{archive}", "--name", "local/imported"]
    done = await asyncio.to_thread(subprocess.run, command, capture_output=True, text=True, env=env)
    assert done.returncode == 0, done.stderr
    spec = command_spec(
        "cat /owned.txt > owned.txt; stat -c %u /owned.txt > owner.txt",
        sandbox={"image": "local/imported"},
    )
    rollout = await _run(server.target, spec)
    assert rollout.status == pb.ROLLOUT_STATUS_SUCCEEDED, rollout.result.error.message
    assert rollout.result.files["owned.txt"] == b"of uid 42\n"
    assert rollout.result.files["owner.txt"] == b"0\n"


async def test_nothing_is_left_after_the_server_stops(
    server: ServerProcess, user: pwd.struct_passwd, home: Path
) -> None:
    rollout = await _run(server.target, command_spec("sleep 1000 &", **_BASE))
    assert rollout.status == pb.ROLLOUT_STATUS_SUCCEEDED, rollout.result.error
    assert server.stop() == 0, server.text()
    for _ in range(200):  # its spawners see the server's sockets close, and exit
        if not _processes_of(user.pw_uid):
            break
        await asyncio.sleep(0.05)
    assert _processes_of(user.pw_uid) == []
    assert _mounts_under(home) == []
    assert list((home / "state" / "sandboxes").iterdir()) == []
    server.start()  # for the module fixture's own stop


async def test_network_full_reaches_the_internet_not_the_host(server: ServerProcess) -> None:
    port = server.target.rsplit(":", 1)[1]
    spec = command_spec(
        "(exec 3<>/dev/tcp/deb.debian.org/80 && echo reached) > net.txt 2>&1; "
        f"(exec 3<>/dev/tcp/127.0.0.1/{port} && echo reached) > host.txt 2>&1; true",
        sandbox={"image": "rollout/base", "network": "NETWORK_POLICY_FULL"},
    )
    rollout = await _run(server.target, spec)
    assert rollout.status == pb.ROLLOUT_STATUS_SUCCEEDED, rollout.result.error.message
    files = rollout.result.files
    assert files["net.txt"] == b"reached\n"  # pasta, started by the unprivileged spawner
    assert b"reached" not in files["host.txt"]  # the server's port: the sandbox's own loopback


async def test_the_verifier_network_opens_after_an_offline_agent(server: ServerProcess) -> None:
    spec = command_spec(
        "(exec 3<>/dev/tcp/deb.debian.org/80 && echo reached) > agent.txt 2>&1; true",
        verify=("exec 3<>/dev/tcp/deb.debian.org/80",),
        sandbox={"image": "rollout/base", "verifierNetwork": "NETWORK_POLICY_FULL"},
    )
    rollout = await _run(server.target, spec)
    assert rollout.status == pb.ROLLOUT_STATUS_SUCCEEDED, rollout.result.error.message
    assert b"reached" not in rollout.result.files["agent.txt"]
    assert rollout.result.reward == 1.0  # pasta attached to the sandbox's namespace for it


async def test_the_tampering_check_reads_the_unprivileged_overlay(server: ServerProcess) -> None:
    site = "/home/user/.local/lib/python3.11/site-packages"
    spec = command_spec(
        f"mkdir -p {site} && echo 'import os' > {site}/hook.pth",
        verify=("true",),
        **_BASE,
    )
    rollout = await _run(server.target, spec)
    assert rollout.status == pb.ROLLOUT_STATUS_FAILED
    assert rollout.result.error.kind == pb.ERROR_KIND_TAMPERED, rollout.result.error.message
    assert rollout.result.reward == 0.0


_FORKS = """
import os, time
n = 0
try:
    while n < 100:
        if os.fork() == 0:
            time.sleep(30)
            os._exit(0)
        n += 1
except OSError:
    pass
print(n)
"""


async def test_max_processes_counts_the_sandbox_alone(server: ServerProcess) -> None:
    """Every sandbox runs as the server's uid, yet RLIMIT_NPROC counts per user namespace:
    16 bounds this sandbox (its spawner, bwrap and holder included), never the server's
    own threads nor another sandbox's processes."""
    spec = command_spec(
        f"python3 -c '{_FORKS}' > forks.txt; true",
        sandbox={"image": "rollout/base", "resources": {"maxProcesses": 16}},
    )
    rollout = await _run(server.target, spec)
    assert rollout.status == pb.ROLLOUT_STATUS_SUCCEEDED, rollout.result.error.message
    assert 0 < int(rollout.result.files["forks.txt"]) < 16


_INOTIFY = """
import ctypes, sys, time
libc = ctypes.CDLL(None, use_errno=True)
held = []
while len(held) < 1000:
    fd = libc.inotify_init1(0)
    if fd < 0:
        break
    held.append(fd)
print("HELD", len(held), flush=True)
if sys.argv[1:] == ["hold"]:
    time.sleep(600)
"""


async def _held_by(stub: pb_grpc.RolloutServiceAsyncStub, rollout_id: str) -> int:
    """The count a rollout running `_INOTIFY` printed, once it printed it."""
    printed = ""
    async for response in stub.WatchRollout(pb.WatchRolloutRequest(rollout_id=rollout_id)):
        printed += response.event.output.text
        if "HELD" in printed and printed.endswith("\n"):
            return int(printed.split("HELD", 1)[1].split()[0])
        assert not response.event.HasField("finished"), printed
    raise AssertionError(f"the stream ended before the count: {printed!r}")


async def _cancelled(stub: pb_grpc.RolloutServiceAsyncStub, rollout_id: str) -> None:
    await stub.CancelRollout(pb.CancelRolloutRequest(rollout_id=rollout_id))
    async for response in stub.WatchRollout(pb.WatchRolloutRequest(rollout_id=rollout_id)):
        if response.event.HasField("finished"):
            return


@_ROOTS
async def test_a_sandbox_gets_only_its_share_of_inotify_instances(
    server: ServerProcess, user: pwd.struct_passwd, root: dict[str, Any]
) -> None:
    """Every sandbox is the server's uid, and inotify instances are counted per uid, up
    the user namespaces: a sandbox taking all it can, and holding them, gets its share of
    the uid's pool (`user_counts`); another sandbox, a process of the server's uid and the
    server's health still get theirs."""
    pool = int(Path("/proc/sys/user/max_inotify_instances").read_text())
    share = pool // (Settings().max_running + 1)
    async with grpc.aio.insecure_channel(server.target) as channel:
        stub = pb_grpc.RolloutServiceStub(channel)
        greedy = command_spec(f"python3 -c '{_INOTIFY}' hold", **root)
        started = (await stub.StartRollout(pb.StartRolloutRequest(spec=greedy))).rollout
        try:
            held = await _held_by(stub, started.id)
            spec = command_spec(f"python3 -c '{_INOTIFY}' > count.txt", **root)
            other = (await stub.RunRollout(pb.RunRolloutRequest(spec=spec))).rollout
            command = [*_as_user(user), sys.executable, "-c", _INOTIFY]
            own = await asyncio.to_thread(subprocess.run, command, capture_output=True, text=True)
            health = health_pb2_grpc.HealthStub(channel)
            checked = await health.Check(health_pb2.HealthCheckRequest())
        finally:
            await _cancelled(stub, started.id)
    assert 0 < held <= share, (held, share)
    assert other.status == pb.ROLLOUT_STATUS_SUCCEEDED, other.result.error.message
    assert int(other.result.files["count.txt"].split()[1]) == held  # a share of its own
    assert int(own.stdout.split()[1]) >= pool - 2 * share, own  # what sandboxes left
    assert checked.status == health_pb2.HealthCheckResponse.SERVING


async def test_a_killed_server_leaves_no_process_or_mount(
    server: ServerProcess, user: pwd.struct_passwd, home: Path
) -> None:
    async with grpc.aio.insecure_channel(server.target) as channel:
        stub = pb_grpc.RolloutServiceStub(channel)
        started = await stub.StartRollout(
            pb.StartRolloutRequest(spec=command_spec("echo x > /tmp/x; sleep 300", **_BASE))
        )
        async for response in stub.WatchRollout(
            pb.WatchRolloutRequest(rollout_id=started.rollout.id)
        ):
            if response.event.phase.phase == pb.PHASE_AGENT:
                break
    assert _mounts_under(home / "state")  # the overlay, in the spawner's namespace
    server.stop(signal.SIGKILL)
    for _ in range(200):  # its spawners see the server's sockets close, and exit
        if not _processes_of(user.pw_uid):
            break
        await asyncio.sleep(0.05)
    assert _processes_of(user.pw_uid) == []
    assert _mounts_under(home / "state") == []
    server.start()  # the start-up sweep removes the killed rollout's directories
    rollout = await _run(server.target, command_spec("true", **_BASE))
    assert rollout.status == pb.ROLLOUT_STATUS_SUCCEEDED, rollout.result.error.message
    assert not (home / "state" / "sandboxes" / started.rollout.id).exists()


async def test_apt_get_install_under_network_full(server: ServerProcess) -> None:
    """apt's downloads run as root (the copy's APT config): its `_apt` is not mapped."""
    install = (
        "apt-get update -qq > apt.log 2>&1 && apt-get install -y -qq --no-install-recommends "
        "file >> apt.log 2>&1 && file --brief /bin/bash > file.txt"
    )
    spec = command_spec(
        install,
        sandbox={"image": "rollout/base", "network": "NETWORK_POLICY_FULL"},
        agentTimeout="600s",
    )
    rollout = await _run(server.target, spec)
    files = rollout.result.files
    assert files.get("file.txt", b"").startswith(b"ELF 64-bit"), files.get("apt.log")


@_ROOTS
async def test_root_inside_owns_files_not_namespaces(
    server: ServerProcess, home: Path, root: dict[str, Any]
) -> None:
    """Root's capabilities cover the sandbox's files only: the mounts and the network belong
    to the spawner's namespace, so the read-only cache, the hidden store and loopback stay."""
    cache = home / "cache"
    attempts = {
        "umount": f"umount {cache}/images",
        "remount": f"mount -o remount,rw,bind {cache}",
        "write": f"touch {cache}/planted",
        "tmpfs": "mount -t tmpfs none /mnt",
        "unshare": "unshare --mount true",
        "link": "ip link set lo down 2>&1 || python3 -c 'import socket; socket.socket("
        "socket.AF_PACKET, socket.SOCK_RAW)'",
        "caps": "grep CapEff /proc/self/status | grep -qv 0000000000000000",
    }
    script = "; ".join(
        f"({command}) >/dev/null 2>&1; echo $? > {name}.rc" for name, command in attempts.items()
    )
    rollout = await _run(server.target, command_spec(script, **root))
    assert rollout.status == pb.ROLLOUT_STATUS_SUCCEEDED, rollout.result.error.message
    codes = {name: rollout.result.files[f"{name}.rc"].strip() for name in attempts}
    assert codes.pop("caps") == b"0"  # root there has capabilities
    assert all(code != b"0" for code in codes.values()), codes
    assert not (cache / "planted").exists()


@_ROOTS
async def test_the_agent_cannot_kill_the_sandbox_to_dodge_its_reward(
    server: ServerProcess, root: dict[str, Any]
) -> None:
    """Commands share the holder's host uid here; the spawner's seccomp filter refuses
    signals to it (pid 2), to every process (-1) and to group 2: the rollout ends scored
    (reward 0, SUCCEEDED: it ran to the end), not as a sandbox failure, which is not."""
    spec = command_spec(
        "kill -9 2 2> k2.txt; kill -9 -1 2> k-1.txt; kill -9 -2 2> k-2.txt; false",
        verify=("false",),
        **root,
    )
    rollout = await _run(server.target, spec)
    assert rollout.status == pb.ROLLOUT_STATUS_SUCCEEDED, rollout.result.error.message
    assert rollout.result.error.kind == pb.ERROR_KIND_UNSPECIFIED  # not SANDBOX: scored
    assert rollout.result.reward == 0.0
    assert [result.exit_code for result in rollout.result.verify_results] == [1]  # it ran
    for name in ("k2.txt", "k-1.txt", "k-2.txt"):
        assert b"Operation not permitted" in rollout.result.files[name], name


_SIGNAL_CALLS = """
import ctypes, json, os, signal, socket
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
def call(*args):
    ctypes.set_errno(0)
    return [libc.syscall(*args), ctypes.get_errno()]
child = os.fork()
if child == 0:
    signal.pause()
    os._exit(0)
proc = os.open("/proc/2", os.O_RDONLY | os.O_DIRECTORY)
read, write = os.pipe()
sock = socket.socket()
answers = {
    "kill 2": call(62, 2, 9), "kill 1": call(62, 1, 9), "kill -1": call(62, -1, 9),
    "kill -2": call(62, -2, 9), "kill 2 (high bits set)": call(62, (1 << 32) | 2, 9),
    "tkill 2": call(200, 2, 9), "tgkill 2": call(234, 2, 2, 9),
    "tgkill 1 2": call(234, 1, 2, 9),
    "rt_sigqueueinfo 2": call(129, 2, 9, 0), "rt_tgsigqueueinfo 2": call(297, 2, 2, 9, 0),
    "pidfd_open 2": call(434, 2, 0), "pidfd_send_signal /proc/2": call(424, proc, 9, 0, 0),
    "prlimit64 1": call(302, 1, 0, 0, 0),
    "fcntl F_SETOWN 2": call(72, read, 8, 2), "fcntl F_SETOWN_EX": call(72, read, 15, 0),
    "ioctl FIOSETOWN": call(16, sock.fileno(), 0x8901, 0),
    "ioctl SIOCSPGRP": call(16, sock.fileno(), 0x8902, 0),
    "kill own child": call(62, child, 0), "pidfd_open own child": call(434, child, 0),
    "fcntl F_SETOWN own child": call(72, read, 8, child),
}
os.set_blocking(read, False)  # the owner would get SIGIO on I/O, had it been set to 2
os.write(write, b"x")
os.kill(child, signal.SIGKILL)
print(json.dumps(answers))
"""


@pytest.mark.skipif(os.uname().machine != "x86_64", reason="syscall numbers of x86_64")
async def test_every_way_to_signal_the_holder_is_refused(server: ServerProcess) -> None:
    """Each syscall that names a process, on the holder (2), init (1), all (-1), group 2 (-2),
    and a file's owner (whom the kernel signals on its I/O); the sandbox's own processes
    are signalled as before."""
    spec = command_spec(f"python3 -c '{_SIGNAL_CALLS}' > calls.json", verify=("true",), **_BASE)
    rollout = await _run(server.target, spec)
    assert rollout.status == pb.ROLLOUT_STATUS_SUCCEEDED, rollout.result.error.message
    answers = json.loads(rollout.result.files["calls.json"])
    assert answers.pop("kill own child") == [0, 0]
    assert answers.pop("pidfd_open own child")[0] >= 0
    assert answers.pop("fcntl F_SETOWN own child") == [0, 0]
    assert answers.pop("pidfd_send_signal /proc/2") == [-1, errno.ENOSYS]
    assert answers == {call: [-1, errno.EPERM] for call in answers}


async def test_the_holder_cannot_be_made_the_oom_killers_first_choice(
    server: ServerProcess,
) -> None:
    """A command owns the holder's and init's /proc files here (same host uid); their OOM
    scores are bound read-only, while its own stay writable."""
    targets = [f"/proc/{pid}/{name}" for pid in (1, 2) for name in ("oom_score_adj", "oom_adj")]
    script = "; ".join(
        f"(echo 15 > {path}) 2>> refused.txt; echo $? >> codes.txt" for path in targets
    )
    spec = command_spec(
        f"{script}; echo 500 > /proc/self/oom_score_adj && echo own > own.txt; "
        "cat /proc/2/oom_score_adj > holder.txt",
        **_BASE,
    )
    rollout = await _run(server.target, spec)
    assert rollout.status == pb.ROLLOUT_STATUS_SUCCEEDED, rollout.result.error.message
    files = rollout.result.files
    assert files["codes.txt"].split() == [b"1"] * len(targets)
    assert files["refused.txt"].count(b"Read-only file system") == len(targets)
    assert files["own.txt"] == b"own\n"
    assert files["holder.txt"] == b"0\n"


async def test_without_the_base_made_ahead_the_default_falls_back_to_the_hosts_root(
    user: pwd.struct_passwd, user_namespaces: None, home: Path
) -> None:
    """No base in the server's cache: it says so at start, and a rollout on the default
    image runs on the host's root."""
    bare = home / "bare"
    for path in (bare, bare / "state", bare / "cache"):
        path.mkdir()
        os.chown(path, user.pw_uid, user.pw_gid)
    env = {
        "ROLLOUT_CACHE_DIR": str(bare / "cache"),
        "ROLLOUT_SANDBOX_IMAGE": "rollout/base",  # the suite's default is host
        "HOME": str(bare),
    }
    command = [*_as_user(user), sys.executable, "-m", "service.server"]
    server = ServerProcess(bare / "state", env=env, command=command)
    server.start()
    try:
        assert "unavailable, using host" in server.text(), server.text()
        spec = command_spec("echo made > made.txt", verify=('test "$(cat made.txt)" = made',))
        rollout = await _run(server.target, spec)
        assert rollout.status == pb.ROLLOUT_STATUS_SUCCEEDED, rollout.result.error.message
        assert rollout.result.reward == 1.0
    finally:
        assert server.stop() == 0, server.text()


def _venv_on_a_closed_interpreter(directory: Path) -> Path:
    """A venv with this one's packages whose interpreter is a link into a root-only directory
    (as pyenv's under /root): the python of a venv `python3 -m venv` made from a pyenv shim."""
    closed = directory / "closed"
    closed.mkdir(mode=0o700)
    base = os.path.realpath(sys.executable)  # the interpreter our venv links to
    interpreter = closed / os.path.basename(base)
    interpreter.symlink_to(base)
    venv = directory / "venv"
    subprocess.run([str(interpreter), "-m", "venv", "--without-pip", str(venv)], check=True)
    site = next((venv / "lib").glob("python3.*/site-packages"))
    ours = next(p for p in sys.path if p.endswith("site-packages") and sys.prefix in p)
    (site / "ours.pth").write_text(f"import site; site.addsitedir({ours!r})\n")
    return venv / "bin" / "python"


async def test_a_venv_on_an_interpreter_other_users_cannot_reach_runs_rollouts(
    user: pwd.struct_passwd, user_namespaces: None, home: Path
) -> None:
    """The server cannot exec its own `sys.executable` once it runs as the user: its sandbox
    helpers (fork server, forwarder) run on the host's python3.X instead."""
    directory = home / "closed-venv"
    directory.mkdir()
    python = _venv_on_a_closed_interpreter(directory)
    for path in (directory / "state", directory / "cache"):
        path.mkdir()
        os.chown(path, user.pw_uid, user.pw_gid)
    env = {"ROLLOUT_CACHE_DIR": str(directory / "cache"), "HOME": str(directory)}
    command = [*_as_user(user), str(python), "-m", "service.server"]
    server = ServerProcess(directory / "state", env=env, command=command)
    server.start()
    try:
        spec = command_spec("echo made > made.txt", verify=('test "$(cat made.txt)" = made',))
        rollout = await _run(server.target, spec)
        assert rollout.status == pb.ROLLOUT_STATUS_SUCCEEDED, rollout.result.error.message
        assert rollout.result.reward == 1.0
    finally:
        assert server.stop() == 0, server.text()
