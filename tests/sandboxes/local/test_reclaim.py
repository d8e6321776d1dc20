"""`LocalSandbox.reclaim`: every process the sandbox's commands started dies, however it
hid, the sandbox lives on, and what is in the way is removed host-side without following
a link."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from service.models import Resources
from service.sandboxes.base import HOME, VERIFIER_DIR, WORKDIR
from service.sandboxes.local.backend import LocalSandbox
from service.sandboxes.local.reclaim import SandboxProcesses, _state
from tests.sandboxes.conftest import LEADER_LEAVES, MakeSandbox, SleepMarker, threads_named

_HIDING = {
    "new session": "setsid {sleep} &",
    "double fork": "( ( {sleep} & ) & )",
    "SIGTERM ignored": "( trap '' TERM HUP INT; exec {sleep} ) &",
    "nested pid namespace": "setsid unshare -Upf {sleep} &",
}


async def test_reclaim_kills_every_daemon_and_keeps_the_sandbox(
    local_sandbox: LocalSandbox, sleep_marker: SleepMarker
) -> None:
    for how, command in _HIDING.items():
        started = await local_sandbox.exec(
            command.format(sleep=sleep_marker.command) + " >/dev/null 2>&1", timeout_s=30
        )
        assert started.exit_code == 0, (how, started.stderr)
    # The sandbox refuses user namespaces, so the nested one fails: its `unshare`, which names
    # the marker too, may still be exiting here. The other three hiders are certain.
    certain = len(_HIDING) - 1
    await sleep_marker.wait_running(certain)

    reclaimed = await local_sandbox.reclaim()

    assert sleep_marker.pids() == []
    assert reclaimed.processes >= certain
    after = await local_sandbox.exec("echo alive", timeout_s=30)
    assert after.stdout == "alive\n"  # init and holder were spared


async def test_the_cgroup_finds_what_a_scan_of_every_process_finds(
    local_sandbox: LocalSandbox, sleep_marker: SleepMarker
) -> None:
    if local_sandbox.cgroup is None:
        pytest.skip("no memory cgroups here: reclaim scans every process")
    hidden = f"( setsid {sleep_marker.command} & ( {sleep_marker.command} & ) & ) >/dev/null 2>&1"
    assert (await local_sandbox.exec(hidden, timeout_s=30)).exit_code == 0
    await sleep_marker.wait_running()
    namespace = os.readlink(f"/proc/{sleep_marker.pids()[0]}/ns/pid")

    by_cgroup = SandboxProcesses(namespace, local_sandbox.cgroup.path).find()

    assert by_cgroup == SandboxProcesses(namespace).find()
    assert set(sleep_marker.pids()) <= by_cgroup


async def test_reclaim_of_an_idle_sandbox_kills_nothing(local_sandbox: LocalSandbox) -> None:
    assert (await local_sandbox.exec("true", timeout_s=30)).exit_code == 0
    reclaimed = await local_sandbox.reclaim()
    assert reclaimed.processes == 0
    assert reclaimed.removed == ()


async def test_reclaim_spares_other_sandboxes(
    make_local_sandbox: MakeSandbox, sleep_marker: SleepMarker
) -> None:
    ours, theirs = await make_local_sandbox("ours"), await make_local_sandbox("theirs")
    try:
        await theirs.exec(f"setsid {sleep_marker.command} >/dev/null 2>&1 &", timeout_s=30)
        await sleep_marker.wait_running()
        assert (await ours.reclaim()).processes == 0
        assert sleep_marker.pids() != []
    finally:
        await ours.kill()
        await theirs.kill()


async def test_reclaim_empties_a_directory_and_clears_paths_in_the_way(
    local_sandbox: LocalSandbox, tmp_path: Path
) -> None:
    outside = tmp_path / "outside.txt"
    outside.write_text("host")
    planted = (
        f"mkdir -p {VERIFIER_DIR}/deep && echo 1 > {VERIFIER_DIR}/reward.txt && "
        f"chmod 000 {VERIFIER_DIR}/deep && "
        "mkdir -p tests/test_a.py/inner && "  # a directory where a file goes
        f"ln -s {outside} linked.py && "  # a link where a file goes
        "echo x > readonly.py && chmod 444 readonly.py && "
        "echo not-a-dir > pkg && "  # a file where a directory goes
        "d=tree; for i in $(seq 300); do d=$d/d; done; mkdir -p $d"  # deep
    )
    assert (await local_sandbox.exec(planted, timeout_s=60)).exit_code == 0
    paths = [f"{WORKDIR}/{p}" for p in ("tests/test_a.py", "linked.py", "readonly.py")]
    paths += [f"{WORKDIR}/pkg/module.py", f"{WORKDIR}/tree", f"{WORKDIR}/absent/x.py"]

    reclaimed = await local_sandbox.reclaim(remove=paths, empty_dirs=[VERIFIER_DIR])

    assert set(reclaimed.removed) == {*paths[:-1], VERIFIER_DIR}
    assert outside.read_text() == "host"  # the link went, never its target
    listed = await local_sandbox.exec(
        f"ls -A {VERIFIER_DIR}; stat -c %U {VERIFIER_DIR}; ls -A", timeout_s=30
    )
    assert listed.stdout.split() == ["user", "tests"]  # empty, the sandbox user's; tests/ stays
    await local_sandbox.write_files({f"{WORKDIR}/pkg/module.py": b"ok", f"{HOME}/x": b""})


async def test_reclaim_ends_a_fork_bomb(make_local_sandbox: MakeSandbox) -> None:
    sandbox = await make_local_sandbox("bomb", resources=Resources(max_processes=64))
    try:
        # Forks until the process limit, and keeps trying: a bomb that is still going (the
        # classic `b | b &` may burn itself out at the limit before reclaim runs).
        # It has forked once the first `sleep` runs (under load, not yet when exec returns).
        bomb = "(while :; do sleep 60 & done) >/dev/null 2>&1 &"
        forked = "until grep -qsx sleep /proc/[0-9]*/comm; do sleep 0.01; done"
        seen = "ps -e --no-headers -o pid=,ppid=,stat=,args= | head -8"
        started = await sandbox.exec(f"{bomb} {forked}; {seen}", timeout_s=30)
        reclaimed = await sandbox.reclaim()
        # The loop and at least one of its children (what the sandbox listed just before).
        assert reclaimed.processes > 1, started.stdout
        # A killed process is waited for until it exits, not until init reaps it: on a
        # loaded host its zombie may still be listed (it runs nothing), so they are left out.
        running = "ps -e --no-headers -o stat= | grep -vc '^Z'"
        left = await sandbox.exec(running, timeout_s=30)
        assert left.stdout.strip() == "5"  # init, holder, and this bash, ps and grep
    finally:
        await sandbox.kill()


def test_a_process_that_has_exited_or_is_exiting_is_not_one_to_kill() -> None:
    """A process killed just before (the forwarder, as the agent's model access ends) is
    never counted as the agent's, however long a loaded machine takes to end it."""
    child = subprocess.Popen(["sleep", "300"])
    try:
        assert _state(child.pid) == (False, child.pid)
        child.kill()
        while Path(f"/proc/{child.pid}/status").read_text().split("State:")[1].split()[0] != "Z":
            os.sched_yield()  # until a zombie (SIGKILL pending and in exit pass too fast to catch)
        assert _state(child.pid) == (True, child.pid)
    finally:
        child.kill()
        child.wait()


def test_a_zombie_leader_with_live_threads_is_one_to_kill() -> None:
    """A process whose leader thread left alone (SYS_exit) is a zombie by its status, and
    its other threads run on: it is not dying."""
    child = subprocess.Popen(["/usr/bin/python3", "-c", LEADER_LEAVES.format(name="zl-unit")])
    try:
        while "Z" not in Path(f"/proc/{child.pid}/status").read_text().split("State:")[1][:3]:
            os.sched_yield()
        assert _state(child.pid) == (False, child.pid)
    finally:
        child.kill()
        child.wait()


async def test_reclaim_kills_a_process_whose_leader_thread_left(
    local_sandbox: LocalSandbox,
) -> None:
    """The agent cannot hide a process from reclaim by ending its leader thread alone."""
    name = f"zl-{os.getpid()}"
    script = LEADER_LEAVES.format(name=name)
    left = "until grep -qs 'Z (zombie)' /proc/[0-9]*/status; do sleep 0.01; done"
    started = await local_sandbox.exec(
        f'setsid /usr/bin/python3 -c "$SCRIPT" >/dev/null 2>&1 & {left}',
        timeout_s=30,
        env={"SCRIPT": script},
    )
    assert started.exit_code == 0, started.stderr
    assert threads_named(name) != []

    reclaimed = await local_sandbox.reclaim()

    assert reclaimed.processes >= 1
    assert threads_named(name) == []
