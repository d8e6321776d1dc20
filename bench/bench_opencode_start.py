"""Where opencode's start-up goes: the pinned binary run directly (no sandbox, no server), each
start in a fresh state directory as a rollout's is, against the scripted upstream.

- `--version`: the floor of any start (the binary and its bundled JavaScript loaded);
- `run`, as the harness starts it, with the empty models.dev cache (current) and without it
  (baseline): wall time and CPU time (user + system, all threads) to the first model call;
- `run` started ahead, stdin a pipe left open until its start is done (CPU idle), then handed
  the prompt: what `ROLLOUT_LOCAL_WARM_AGENTS` leaves on the rollout's path (`opencode_warm`);
- `serve` started ahead and warmed (`/config`, then the tool list), then handed a session and
  the prompt over HTTP: what a pre-started opencode would leave on the rollout's path.

Writes bench/results/opencode_start.json.

    python bench/bench_opencode_start.py [--runs 5]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path

import aiohttp

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from service.agents import XDG_ROOT, OpencodeInstaller, opencode_env, seed_files
from service.config import Settings
from service.models import ModelAccess
from testing.fakes.llm_upstream import FakeUpstream

RESULTS = Path(__file__).parent / "results"
MODEL = "policy"
INSTRUCTION = "Say hi."
_TICKS = os.sysconf("SC_CLK_TCK")


def cpu_s(pid: int) -> float:
    """User + system CPU seconds of a live process, all its threads."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _TICKS


def fresh_state(root: Path, upstream: FakeUpstream, empty_models_cache: bool) -> dict[str, str]:
    """A new XDG directory seeded as prepare() seeds one; the environment `run` gets."""
    xdg = Path(tempfile.mkdtemp(dir=root))
    for path, data in seed_files(INSTRUCTION, empty_models_cache=empty_models_cache).items():
        target = xdg / Path(path).relative_to(XDG_ROOT)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
    model = ModelAccess(base_url=upstream.base_url, api_key="sk", model=MODEL, small_model=MODEL)
    env = {k: v.replace(XDG_ROOT, str(xdg)) for k, v in opencode_env(model, {}).items()}
    return {"PATH": os.environ["PATH"], "HOME": str(xdg), **env}


async def version(binary: str) -> dict[str, float]:
    before = _children_cpu_s()
    began = time.perf_counter()
    process = await asyncio.create_subprocess_exec(binary, "--version", stdout=-1)
    await process.communicate()
    return {"wall": time.perf_counter() - began, "cpu": _children_cpu_s() - before}


def _children_cpu_s() -> float:
    """CPU seconds of this process's waited-for children (only one runs at a time here)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


async def start_run(binary: str, env: dict[str, str], workdir: Path) -> asyncio.subprocess.Process:
    """`opencode run` as the harness starts it, its prompt still to come on stdin."""
    return await asyncio.create_subprocess_exec(
        *(binary, "run", "--pure", "--format", "json"),
        cwd=workdir,
        env=env,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.DEVNULL,
    )


async def prompt_to_first_call(
    process: asyncio.subprocess.Process,
    upstream: FakeUpstream,
    seen: int,
    since: float,
    cpu_since: float,
) -> dict[str, float]:
    """Hand a started `run` its prompt; wall time from `since` and CPU time from `cpu_since`
    to the model call after the `seen` first, then wait for `run` to end."""
    assert process.stdin is not None
    process.stdin.write(INSTRUCTION.encode())
    process.stdin.close()
    await upstream.wait_for_requests(seen + 1)
    figures = {"wall": time.perf_counter() - since, "cpu": cpu_s(process.pid) - cpu_since}
    if await process.wait() != 0:
        raise RuntimeError("opencode run failed")
    return figures


async def run_to_first_call(
    binary: str, root: Path, upstream: FakeUpstream, empty_models_cache: bool
) -> dict[str, float]:
    env = fresh_state(root, upstream, empty_models_cache)
    workdir = Path(tempfile.mkdtemp(dir=root))
    seen = len(upstream.requests)
    began = time.perf_counter()
    process = await start_run(binary, env, workdir)
    return await prompt_to_first_call(process, upstream, seen, began, 0.0)


async def prestarted_first_call(
    binary: str, root: Path, upstream: FakeUpstream
) -> dict[str, float]:
    env = fresh_state(root, upstream, empty_models_cache=True)
    workdir = Path(tempfile.mkdtemp(dir=root))
    process = await start_run(binary, env, workdir)
    used = -1.0
    while used != cpu_s(process.pid):  # until it blocks on its prompt
        used = cpu_s(process.pid)
        await asyncio.sleep(0.5)
    seen = len(upstream.requests)
    handed = time.perf_counter()
    return await prompt_to_first_call(process, upstream, seen, handed, used)


async def served_first_call(binary: str, root: Path, upstream: FakeUpstream) -> dict[str, float]:
    env = fresh_state(root, upstream, empty_models_cache=True)
    workdir = Path(tempfile.mkdtemp(dir=root))
    began = time.perf_counter()
    process = await asyncio.create_subprocess_exec(
        *(binary, "serve", "--hostname", "127.0.0.1", "--port", "0"),
        cwd=workdir,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    assert process.stdout is not None
    url = ""
    while not url:
        line = (await process.stdout.readline()).decode()
        if not line:
            raise RuntimeError("opencode serve ended before listening")
        match = re.search(r"http://127\.0\.0\.1:\d+", line)
        url = match.group(0) if match else ""
    figures = {"listening": time.perf_counter() - began}
    try:
        async with aiohttp.ClientSession() as http:
            for warm in ("/config", f"/experimental/tool?provider=rollout&model={MODEL}"):
                async with http.get(url + warm) as response:
                    await response.read()
            figures["warm"] = time.perf_counter() - began
            seen = len(upstream.requests)
            handed, handed_cpu = time.perf_counter(), cpu_s(process.pid)
            async with http.post(url + "/session", json={}) as response:
                session = (await response.json())["id"]
            body = {"parts": [{"type": "text", "text": INSTRUCTION}]}
            prompt = asyncio.create_task(http.post(f"{url}/session/{session}/message", json=body))
            await upstream.wait_for_requests(seen + 1)
            figures["wall"] = time.perf_counter() - handed
            figures["cpu"] = cpu_s(process.pid) - handed_cpu
            (await prompt).release()
    finally:
        process.terminate()
        await process.wait()
    return figures


def summary(samples: list[dict[str, float]]) -> dict[str, float]:
    return {key: round(statistics.median(s[key] for s in samples), 3) for key in samples[0]}


async def measure(binary: str, runs: int) -> dict[str, dict[str, float]]:
    samples: dict[str, list[dict[str, float]]] = {
        "version": [],
        "run_baseline": [],
        "run_current": [],
        "run_ahead": [],
        "serve_warm": [],
    }
    with tempfile.TemporaryDirectory() as scratch:
        root = Path(scratch)
        async with FakeUpstream(api_key="sk", model=MODEL) as upstream:
            for _ in range(runs):  # interleaved, so each sees the same load
                samples["version"].append(await version(binary))
                samples["run_baseline"].append(
                    await run_to_first_call(binary, root, upstream, empty_models_cache=False)
                )
                samples["run_current"].append(
                    await run_to_first_call(binary, root, upstream, empty_models_cache=True)
                )
                samples["run_ahead"].append(await prestarted_first_call(binary, root, upstream))
                samples["serve_warm"].append(await served_first_call(binary, root, upstream))
    return {name: summary(values) for name, values in samples.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    settings = Settings()
    installer = OpencodeInstaller(
        Path(os.path.realpath(settings.cache_dir)), settings.opencode_version
    )
    binary = str(asyncio.run(installer.ensure(print)))
    figures = asyncio.run(measure(binary, args.runs))
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "opencode_start.json").write_text(json.dumps(figures, indent=2))
    base, now, served = figures["run_baseline"], figures["run_current"], figures["serve_warm"]
    print(f"opencode {settings.opencode_version} start-up, median of {args.runs}, seconds:\n")
    print("| start | to first model call (wall) | CPU to first model call |")
    print("|---|---|---|")
    floor = figures["version"]
    print(f"| `--version` only (floor of any start) | {floor['wall']:.2f} | {floor['cpu']:.2f} |")
    print(f"| `run`, baseline (no models cache) | {base['wall']:.2f} | {base['cpu']:.2f} |")
    print(f"| `run`, empty models cache (current) | {now['wall']:.2f} | {now['cpu']:.2f} |")
    ahead = figures["run_ahead"]
    print(
        f"| `run` started ahead, from the prompt on stdin | {ahead['wall']:.2f} | "
        f"{ahead['cpu']:.2f} |"
    )
    print(
        f"| `serve` warmed ahead, from the prompt over HTTP | {served['wall']:.2f} | "
        f"{served['cpu']:.2f} |"
    )
    print(
        f"\nbaseline/current: {base['wall'] / now['wall']:.2f}x wall, "
        f"{base['cpu'] / now['cpu']:.2f}x CPU; serve: listening after "
        f"{served['listening']:.2f} s, warmed after {served['warm']:.2f} s"
    )


if __name__ == "__main__":
    main()
