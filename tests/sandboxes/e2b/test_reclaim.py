"""`E2BSandbox.reclaim` through the real SDK against the fake cloud, whose sandboxes are
pid namespaces as VMs are: every process the agent left dies, envd's and init live on, and
what is in the way is removed without following a link."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from service.sandboxes.base import VERIFIER_DIR, WORKDIR
from service.sandboxes.e2b.backend import E2BBackend
from service.sandboxes.e2b.sandbox import E2BSandbox
from testing.e2b_support import eventually, make_backend, make_request
from testing.fakes.e2b_cloud import FakeE2B
from tests.sandboxes.conftest import LEADER_LEAVES, SleepMarker, threads_named


@pytest.fixture
async def sandbox(cloud: FakeE2B, tmp_path: Path) -> AsyncIterator[E2BSandbox]:
    backend: E2BBackend = make_backend(tmp_path)
    sandbox = await backend.create(make_request())
    yield sandbox
    await sandbox.kill()
    await backend.close()


async def test_reclaim_kills_every_daemon_and_keeps_the_sandbox(
    sandbox: E2BSandbox, sleep_marker: SleepMarker
) -> None:
    sleep = f"{sleep_marker.command} >/dev/null 2>&1"
    hiding = [
        f"setsid {sleep} &",  # a session of its own
        f"( ( {sleep} & ) & )",  # double fork: orphaned to init
        f"( trap '' TERM HUP INT; exec {sleep} ) &",  # SIGTERM ignored
    ]
    for command in hiding:
        started = await sandbox.exec(command, timeout_s=30)
        assert started.exit_code == 0, started.stderr
    agent = await sandbox.spawn(f"{sleep}; true")  # the agent's command itself, still running
    before = len(hiding) + 1
    await eventually(lambda: len(sleep_marker.pids()) == before, timeout_s=30)

    reclaimed = await sandbox.reclaim()

    assert sleep_marker.pids() == []
    assert reclaimed.processes >= before
    assert (await agent.wait()).exit_code != 0
    after = await sandbox.exec("echo alive", timeout_s=30)
    assert after.stdout == "alive\n"


async def test_reclaim_clears_paths_in_the_way_and_makes_an_empty_directory(
    sandbox: E2BSandbox,
) -> None:
    planted = (
        f"mkdir -p {VERIFIER_DIR}/deep && echo 1 > {VERIFIER_DIR}/reward.txt && "
        "mkdir -p tests/test_a.py/inner && "  # a directory where a file goes
        "echo keep > /tmp/target && ln -s /tmp/target linked.py && "  # a link
        "echo x > readonly.py && chmod 444 readonly.py && "
        "echo not-a-dir > pkg"  # a file where a directory goes
    )
    assert (await sandbox.exec(planted, timeout_s=30)).exit_code == 0
    paths = [f"{WORKDIR}/{p}" for p in ("tests/test_a.py", "linked.py", "readonly.py")]
    paths += [f"{WORKDIR}/pkg/module.py", f"{WORKDIR}/absent/x.py"]

    reclaimed = await sandbox.reclaim(remove=paths, empty_dirs=[VERIFIER_DIR])

    assert set(reclaimed.removed) == {*paths[:-1], VERIFIER_DIR}
    listed = await sandbox.exec(f"ls -A {VERIFIER_DIR}; cat /tmp/target; ls -A", timeout_s=30)
    assert listed.stdout.split() == ["keep", "tests"]  # empty; the link's target untouched


async def test_a_long_path_list_is_reclaimed_over_several_runs(sandbox: E2BSandbox) -> None:
    names = [f"f{i:04d}-{'x' * 60}" for i in range(1500)]  # ~100 KiB of paths
    made = "mkdir many && cd many && " + " && ".join(f"mkdir {n}" for n in names[::100])
    assert (await sandbox.exec(made, timeout_s=30)).exit_code == 0
    paths = [f"{WORKDIR}/many/{name}" for name in names]

    reclaimed = await sandbox.reclaim(remove=paths)

    assert reclaimed.removed == tuple(paths[::100])
    assert (await sandbox.exec("ls -A many", timeout_s=30)).stdout == ""


async def test_reclaim_kills_a_process_whose_leader_thread_left(sandbox: E2BSandbox) -> None:
    """The agent cannot hide a process from reclaim by ending its leader thread alone."""
    name = f"zl-e2b-{os.getpid()}"
    left = "until grep -qs 'Z (zombie)' /proc/[0-9]*/status; do sleep 0.01; done"
    started = await sandbox.exec(
        f'setsid /usr/bin/python3 -c "$SCRIPT" >/dev/null 2>&1 & {left}',
        timeout_s=30,
        env={"SCRIPT": LEADER_LEAVES.format(name=name)},
    )
    assert started.exit_code == 0, started.stderr
    assert threads_named(name) != []

    reclaimed = await sandbox.reclaim()

    assert reclaimed.processes >= 1
    assert threads_named(name) == []
