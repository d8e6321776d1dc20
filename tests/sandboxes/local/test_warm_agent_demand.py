"""How many agents warm local sandboxes start ahead: as many as a kind's rollouts were alive at
once, decaying to none when idle, within the settings' maximum and the host's available memory
(`warm_agent.Demand`, `LocalBackend._warm_size`), one at a time and at the lowest CPU weight
while rollouts run (`autogroup`). Real bwrap sandboxes; the agent is a `sleep` with a marker,
counted among the host's processes."""

from __future__ import annotations

import asyncio
import math
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import pytest

from service.config import Settings
from service.models import NetworkPolicy, SandboxSpec
from service.sandboxes import prestart
from service.sandboxes.base import SandboxRequest
from service.sandboxes.local import warm
from service.sandboxes.local.backend import LocalBackend, LocalSandbox
from service.sandboxes.local.warm_agent import Demand, available_memory_mb
from tests.e2e.processes import eventually

AGENT = "sleeper"


def test_a_group_of_eight_wants_eight_for_a_while_after_then_none() -> None:
    demand = Demand(decay_s=60.0)
    for _ in range(8):
        demand.add(1, now=0.0)
    for _ in range(8):
        demand.add(-1, now=100.0)  # it ran 100 s: the peak is held from its end
    assert demand.wanted(100.0 + 59.0) == 8
    assert demand.wanted(100.0 + 60.0 + 60.0 * math.log(2)) == 4
    assert demand.wanted(100.0 + 60.0 + 60.0 * math.log(16) + 1) == 0


def test_one_rollout_after_another_wants_one() -> None:
    demand = Demand(decay_s=60.0)
    for second in range(100):
        demand.add(1, now=float(second))
        demand.add(-1, now=second + 0.9)
    assert demand.wanted(100.0) == 1


def test_available_memory_is_read_from_meminfo(tmp_path: Path) -> None:
    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemTotal:       24683520 kB\nMemAvailable:    2097152 kB\n")
    assert available_memory_mb(meminfo) == 2048
    meminfo.write_text("MemTotal:       24683520 kB\n")
    assert available_memory_mb(meminfo) == 0
    assert available_memory_mb() > 0  # this host's


def _sleeper_pids(marker: str) -> list[int]:
    """Host processes running the plan's agent (`sleep <marker>`)."""
    pids = []
    for entry in Path("/proc").iterdir():
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if argv[:2] == [b"sleep", marker.encode()]:
            pids.append(int(entry.name))
    return pids


def _sleepers(marker: str) -> int:
    return len(_sleeper_pids(marker))


def _started_again(marker: str, claimed: int) -> int:
    """How many sleepers run; -1 while the one that was claimed (`claimed`) is among them."""
    pids = _sleeper_pids(marker)
    return -1 if claimed in pids else len(pids)


def _session_nice(pid: int) -> int:
    """The nice value of the autogroup (session) of host process `pid`."""
    return int(Path(f"/proc/{pid}/autogroup").read_text().split()[-1])


def _plan(marker: str, *, settles: bool = True) -> prestart.AgentPlan:
    holder = f'echo "ready $$"; {"echo settled; " if settles else ""}exec sleep 3600'
    return prestart.AgentPlan.of({}, holder, f"exec sleep {marker}", {}, agent=AGENT)


def _request(agent: str = AGENT) -> SandboxRequest:
    spec = SandboxSpec(network=NetworkPolicy.NONE)
    return SandboxRequest(f"dm-{uuid.uuid4().hex[:12]}", spec, lifetime_s=300, agent=agent)


Backends = Callable[..., Awaitable[LocalBackend]]
"""Makes a warm local backend with these settings changed, closed after the test."""


@pytest.fixture
async def backends(
    local_settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[Backends]:
    monkeypatch.setattr(warm, "TRIM_EVERY_S", 0.2)
    made: list[LocalBackend] = []

    async def make(**update: object) -> LocalBackend:
        settings = {"local_warm_sandboxes": 1, "local_warm_agents": True} | update
        backend = LocalBackend(local_settings.model_copy(update=settings))
        made.append(backend)
        await backend.warm_up()
        return backend

    yield make
    for backend in made:
        await backend.close()


async def _alive(
    backend: LocalBackend, n: int, marker: str, *, settles: bool = True
) -> list[LocalSandbox]:
    """n rollouts of the agent alive at once, the first teaching the plan."""
    sandboxes: list[LocalSandbox] = list(
        await asyncio.gather(*(backend.create(_request()) for _ in range(n)))
    )
    prestart.learn(sandboxes[0], _plan(marker, settles=settles))
    return sandboxes


async def _burst(backend: LocalBackend, n: int, marker: str, *, settles: bool = True) -> None:
    """n rollouts of the agent alive at once, then ended."""
    sandboxes = await _alive(backend, n, marker, settles=settles)
    await asyncio.gather(*(sandbox.kill() for sandbox in sandboxes))


async def test_four_alive_keep_four_started_ahead_then_none_when_idle(
    backends: Backends,
) -> None:
    marker = f"36{uuid.uuid4().int % 10**6}"
    backend = await backends(local_warm_agents_decay_s=1.0)
    running = await _alive(backend, 4, marker)
    await eventually(lambda: _sleepers(marker) == 4, timeout_s=60)

    claimed = await backend.create(_request())
    started = prestart.take(claimed)
    assert started is not None
    assert started.plan == _plan(marker)
    await started.kill()
    await asyncio.gather(*(sandbox.kill() for sandbox in [claimed, *running]))

    await eventually(lambda: _sleepers(marker) == 0, timeout_s=60)  # idle: decayed to none
    plain = await backend.create(_request(agent=""))
    assert prestart.take(plain) is None  # the sandbox without an agent is still kept
    await plain.kill()


async def test_another_agents_rollout_never_claims_one_started_ahead(
    backends: Backends,
) -> None:
    marker = f"36{uuid.uuid4().int % 10**6}"
    backend = await backends(local_warm_agents_decay_s=600.0)
    await _burst(backend, 1, marker)
    await eventually(lambda: _sleepers(marker) == 1, timeout_s=60)
    await backend.warm_up()
    for agent in ("", "other"):
        sandbox = await backend.create(_request(agent=agent))
        look = await sandbox.exec("ps -eo args", timeout_s=30)
        await sandbox.kill()
        assert f"sleep {marker}" not in look.stdout
    assert _sleepers(marker) == 1  # still ready for its own agent


async def test_the_maximum_bounds_the_agents_started_ahead(
    backends: Backends,
) -> None:
    marker = f"36{uuid.uuid4().int % 10**6}"
    backend = await backends(local_warm_agents_decay_s=600.0, local_warm_agents_max=2)
    await _burst(backend, 4, marker)
    await eventually(lambda: _sleepers(marker) == 2, timeout_s=60)
    await backend.warm_up()
    await asyncio.sleep(1.0)  # several trims and refills later
    assert _sleepers(marker) == 2


async def test_none_is_started_ahead_while_memory_is_short(
    backends: Backends,
) -> None:
    marker = f"36{uuid.uuid4().int % 10**6}"
    short = available_memory_mb() + 1024 * 1024
    backend = await backends(
        local_warm_agents_decay_s=600.0, local_warm_agents_min_available_mb=short
    )
    await _burst(backend, 2, marker)
    await backend.warm_up()
    await asyncio.sleep(1.0)
    assert _sleepers(marker) == 0
    sandbox = await backend.create(_request())
    assert prestart.take(sandbox) is None
    await sandbox.kill()


@pytest.mark.skipif(not Path("/proc/self/autogroup").exists(), reason="no autogroups")
async def test_an_agent_started_ahead_yields_the_cpu_to_rollouts_until_one_claims_it(
    backends: Backends,
) -> None:
    marker = f"36{uuid.uuid4().int % 10**6}"
    backend = await backends(local_warm_agents_decay_s=600.0)
    running = await _alive(backend, 1, marker)
    await eventually(lambda: _sleepers(marker) == 1, timeout_s=60)
    (ahead,) = _sleeper_pids(marker)
    await eventually(lambda: _session_nice(ahead) == 19, timeout_s=10)

    claimed = await backend.create(_request())
    started = prestart.take(claimed)
    assert started is not None
    assert _session_nice(ahead) == 0
    await started.kill()
    await asyncio.gather(*(sandbox.kill() for sandbox in [claimed, *running]))

    # Two were alive at once (the running one and the claimed one), so two start again.
    await eventually(lambda: _started_again(marker, ahead) == 2, timeout_s=60)
    idle = _sleeper_pids(marker)
    await asyncio.sleep(0.5)  # no rollout runs: nothing to yield to
    assert [_session_nice(pid) for pid in idle] == [0] * len(idle)


async def test_agents_start_ahead_one_at_a_time_only_while_rollouts_run(
    backends: Backends,
) -> None:
    marker = f"36{uuid.uuid4().int % 10**6}"
    backend = await backends(local_warm_agents_decay_s=600.0)
    running = await _alive(backend, 3, marker, settles=False)  # 3 wanted, none ever settles
    await eventually(lambda: _sleepers(marker) == 1, timeout_s=60)
    await asyncio.sleep(1.0)
    assert _sleepers(marker) == 1  # the next waits for the one before to settle
    await asyncio.gather(*(sandbox.kill() for sandbox in running))
    await eventually(lambda: _sleepers(marker) == 3, timeout_s=10)  # idle: no waiting
