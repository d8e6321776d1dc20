"""Resource limits of a local sandbox, and bounded memory for huge output."""

from __future__ import annotations

import asyncio
import resource
from pathlib import Path

from service.config import Settings
from service.models import Resources
from service.sandboxes.base import OutputStream
from service.sandboxes.local.backend import LocalSandbox
from tests.sandboxes.conftest import MakeSandbox

_MIB = 1024 * 1024

_FORK_BOMB = """
import subprocess
children = []
try:
    for _ in range(64):
        children.append(subprocess.Popen(["sleep", "30"]))
except OSError as exc:
    print("refused after", len(children), exc.strerror)
"""


async def test_process_limit(make_local_sandbox: MakeSandbox) -> None:
    sandbox = await make_local_sandbox(resources=Resources(max_processes=16))
    result = await sandbox.exec(f"python3 -c '{_FORK_BOMB}'", timeout_s=60)
    assert result.stdout.startswith("refused after"), result.stderr
    assert int(result.stdout.split()[2]) < 16


async def test_file_size_limit(make_local_sandbox: MakeSandbox) -> None:
    sandbox = await make_local_sandbox(resources=Resources(max_file_size_mb=1))
    result = await sandbox.exec("head -c 2M /dev/zero > big; echo $?; stat -c %s big", timeout_s=60)
    status, size = result.stdout.split()
    assert status != "0"
    assert int(size) == _MIB


async def test_memory_limit(make_local_sandbox: MakeSandbox) -> None:
    sandbox = await make_local_sandbox(resources=Resources(memory_mb=64))
    result = await sandbox.exec(
        "python3 -c 'b = bytearray(256 * 1024 * 1024)' && echo allocated", timeout_s=60
    )
    assert result.exit_code != 0
    assert "allocated" not in result.stdout


async def test_memory_cgroup_holds_the_sandbox(make_local_sandbox: MakeSandbox) -> None:
    sandbox = await make_local_sandbox(resources=Resources(memory_mb=96))
    line = (await sandbox.exec("grep :memory: /proc/self/cgroup", timeout_s=30)).stdout
    path = line.strip().split(":", 2)[-1]
    if "/rollout-" not in path:
        return  # this host gives us no writable memory cgroup: rlimits alone apply
    group = Path("/sys/fs/cgroup/memory", path.lstrip("/"))
    assert _read_int(group / "memory.limit_in_bytes") == 96 * _MIB
    await sandbox.kill()
    assert not _exists(group)


_FOUR_HOGS = """
for i in 1 2 3 4; do python3 -c "import time; b = b'x' * (30 << 20); time.sleep(1)" & done
killed=0; for job in $(jobs -p); do wait $job || killed=$((killed + 1)); done; echo $killed
"""


async def test_memory_cgroup_bounds_the_sandbox_as_a_whole(make_local_sandbox: MakeSandbox) -> None:
    sandbox = await make_local_sandbox(resources=Resources(memory_mb=64))
    line = (await sandbox.exec("grep :memory: /proc/self/cgroup", timeout_s=30)).stdout
    if "/rollout-" not in line:
        return  # no writable memory cgroup here: each process is still bound by RLIMIT_DATA
    result = await sandbox.exec(_FOUR_HOGS, timeout_s=60)  # each fits its rlimit; not all four
    assert int(result.stdout) >= 1, result.stderr


async def test_cpu_limit(make_local_sandbox: MakeSandbox) -> None:
    sandbox = await make_local_sandbox(resources=Resources(cpu_seconds=1))
    result = await sandbox.exec("python3 -c 'while True: pass'", timeout_s=60)
    assert result.exit_code > 128  # killed by SIGXCPU/SIGKILL
    assert not result.timed_out


def _read_int(path: Path) -> int:
    return int(path.read_text())


def _exists(path: Path) -> bool:
    return path.exists()


def _rss_bytes() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS in /proc/self/status")


async def test_a_gigabyte_of_output_costs_bounded_memory(local_sandbox: LocalSandbox) -> None:
    streamed = 0

    def on_output(stream: OutputStream, chunk: bytes) -> None:
        nonlocal streamed
        streamed += len(chunk)

    baseline, peak_before = _rss_bytes(), resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    samples: list[int] = []
    run = asyncio.create_task(
        local_sandbox.exec("head -c 1G /dev/zero", timeout_s=120, on_output=on_output)
    )
    while not run.done():
        samples.append(_rss_bytes())
        await asyncio.sleep(0.01)
    result = await run
    assert result.stdout_bytes == streamed == 1 << 30
    assert len(result.stdout) < 10_000
    assert max(samples) - baseline < 100 * _MIB
    peak_growth_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - peak_before
    assert peak_growth_kib < 100 * 1024


async def test_per_user_rlimits_are_a_share_of_the_servers(make_local_sandbox: MakeSandbox) -> None:
    """Pending signals and message queue bytes are counted per uid, on up the user
    namespaces to the server's: each sandbox gets max_running + 1'th of the server's."""
    sandbox = await make_local_sandbox()
    result = await sandbox.exec("ulimit -Hi; ulimit -Hq", timeout_s=30)
    sandboxes = Settings().max_running + 1
    signals = resource.getrlimit(resource.RLIMIT_SIGPENDING)[0] // sandboxes
    queues = resource.getrlimit(resource.RLIMIT_MSGQUEUE)[0] // sandboxes
    assert result.stdout.split() == [str(signals), str(queues)], result.stderr
