"""The cost of the local sandbox alone: `true` through bwrap against a plain subprocess.

Both are measured in the same run, interleaved so a busy machine slows both alike:
N plain `asyncio.create_subprocess_exec("true")` (the baseline), N `LocalSandbox.exec("true")`
(one fork of the sandbox's spawner, inside its namespaces, per command), and a sandbox's
whole life (create, one exec, kill), made on the spot and taken warm (the warm one is made
before the clock starts, as it is while the previous rollout runs), under network NONE
and FULL (a network namespace routed by pasta: `local.network`). Prints a markdown
table and writes bench/results/sandbox.json.

    python bench/bench_sandbox.py [-n 300]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from service.config import Settings
from service.models import NetworkPolicy, SandboxSpec
from service.sandboxes import LocalBackend, LocalSandbox, SandboxRequest

RESULTS = Path(__file__).parent / "results"
Case = Callable[[], Awaitable[None]]


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def plain_true() -> None:
    process = await asyncio.create_subprocess_exec("true")
    await process.wait()


def sandboxed_true(sandbox: LocalSandbox) -> Case:
    async def run() -> None:
        result = await sandbox.exec("true", timeout_s=30)
        assert result.exit_code == 0, result.stderr

    return run


def sandbox_life(
    backend: LocalBackend,
    name: str,
    network: NetworkPolicy = NetworkPolicy.NONE,
    creates: list[float] | None = None,
) -> Case:
    """Create, exec `true`, kill; the create alone (ms) is appended to `creates`."""
    count = 0
    spec = SandboxSpec(network=network)

    async def run() -> None:
        nonlocal count
        count += 1
        began = time.perf_counter()
        sandbox = await backend.create(SandboxRequest(f"{name}-{count}", spec, 60))
        if creates is not None:
            creates.append((time.perf_counter() - began) * 1000)
        await sandbox.exec("true", timeout_s=30)
        await sandbox.kill()

    return run


async def measure(
    cases: dict[str, Case], rounds: int, warm: LocalBackend
) -> dict[str, list[float]]:
    """Milliseconds per call of each case, one call of each per round."""
    timings: dict[str, list[float]] = {name: [] for name in cases}
    for _ in range(rounds):
        for name, case in cases.items():
            await warm.warm_up()
            await warm.warm_up(NetworkPolicy.FULL)
            began = time.perf_counter()
            await case()
            timings[name].append((time.perf_counter() - began) * 1000)
    return timings


async def main(rounds: int) -> dict[str, dict[str, float]]:
    with tempfile.TemporaryDirectory(prefix="bench-sandbox-") as scratch:
        settings = Settings(
            state_dir=Path(scratch) / "state",
            cache_dir=Path(scratch) / "cache",
            local_warm_sandboxes=0,
        )
        cold = LocalBackend(settings)
        warm = LocalBackend(settings.model_copy(update={"local_warm_sandboxes": 1}))
        sandbox = await cold.create(SandboxRequest("bench", SandboxSpec(), 3600))
        creates: dict[str, list[float]] = {
            "create alone (made now), network NONE": [],
            "create alone (made now), network FULL": [],
        }
        none_creates, full_creates = creates.values()
        cases = {
            "plain subprocess `true` (baseline)": plain_true,
            "LocalSandbox.exec(`true`)": sandboxed_true(sandbox),
            "create (made now) + exec `true` + kill": sandbox_life(
                cold, "cold", creates=none_creates
            ),
            "create (warm, renamed) + exec `true` + kill": sandbox_life(warm, "warm"),
            "network FULL: create (made now) + exec `true` + kill": sandbox_life(
                cold, "cold-full", NetworkPolicy.FULL, full_creates
            ),
            "network FULL: create (warm, renamed) + exec `true` + kill": sandbox_life(
                warm, "warm-full", NetworkPolicy.FULL
            ),
        }
        await measure(cases, 5, warm)  # warm-up: page cache, first bwrap
        for values in creates.values():
            values.clear()
        timings = {**await measure(cases, rounds, warm), **creates}
        await cold.close()
        await warm.close()
    baseline = percentile(timings["plain subprocess `true` (baseline)"], 0.5)
    return {
        name: {
            "n": len(values),
            "p50_ms": round(percentile(values, 0.5), 2),
            "p99_ms": round(percentile(values, 0.99), 2),
            "ratio_p50": round(percentile(values, 0.5) / baseline, 2),
        }
        for name, values in timings.items()
    }


def report(results: dict[str, dict[str, float]]) -> str:
    lines = ["| case | n | p50 ms | p99 ms | p50 / baseline |", "| --- | --- | --- | --- | --- |"]
    for name, row in results.items():
        lines.append(
            f"| {name} | {row['n']:.0f} | {row['p50_ms']} | {row['p99_ms']} | {row['ratio_p50']} |"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", "--rounds", type=int, default=300, help="calls per case")
    arguments = parser.parse_args()
    figures = asyncio.run(main(arguments.rounds))
    print(report(figures))
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "sandbox.json").write_text(json.dumps(figures, indent=2) + "\n")
