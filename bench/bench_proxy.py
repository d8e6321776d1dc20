"""Capture-proxy overhead: the same upstream called directly and through the proxy.

Three processes: the fake upstream in its standalone mode (`testing.fakes.llm_upstream`: one
pre-rendered reply, as vLLM shapes it with logprobs and token ids, ~12k prompt ids
included), the proxy (`service.proxy.remote.standalone`, writing every turn as a JSON line to
/dev/null) and this load generator, which uses the proxy's own lean HTTP client for both
paths. Each request is an opencode-sized ~50 KB chat request (system prompt, a dozen tool
schemas, a conversation with tool results); every worker adds its own last message, so the
proxy records one new message per turn, as in a real rollout.

Measured in one run:
- unary latency at concurrency 1, direct and proxied calls alternating (p50, p99, and the
  proxy's addition);
- time to first token of a stream at concurrency 1, likewise;
- requests/s at concurrency 64, direct then proxied, with the proxy's CPU time per request.
With `--openenv-proxy FILE` (OpenEnv's `envs/opencode_env/sandbox/interception.py`, a
FastAPI + httpx proxy; not shipped here, it needs fastapi, uvicorn and httpx) that proxy
runs on the same upstream as the reference, its calls interleaved with the others at c1,
and each latency figure gets its ratio: this proxy's added latency over OpenEnv's.
Prints a markdown table and writes bench/results/proxy.json. The machine's other load shows
up in every figure: run it on a quiet machine.

    python bench/bench_proxy.py [--pairs 1500] [--seconds 5] [--openenv-proxy FILE]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import socket
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, Coroutine
from pathlib import Path
from typing import Any

import orjson

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from service.proxy import UpstreamPool, UpstreamTarget  # noqa: E402

RESULTS = ROOT / "bench" / "results"
API_KEY = "bench-upstream-key"
MODEL = "bench-model"
REPLY = (
    "I will read the failing test first, then fix the off-by-one error in the pagination "
    "helper and run the test suite again to confirm the fix."
)

TEXT_DELTA = b'"delta":{"content":"I'

Call = Callable[[bytes], Awaitable[float]]


def _tool(name: str, description: str, fields: list[str]) -> dict[str, Any]:
    properties = {
        f: {"type": "string", "description": f"The {f} of the {name} call. " * 3} for f in fields
    }
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": description * 4,
            "parameters": {"type": "object", "properties": properties, "required": fields[:1]},
        },
    }


TOOL_NAMES: tuple[str, ...] = ("bash", "read", "write", "edit", "glob", "grep", "list")
TOOL_NAMES += ("patch", "todowrite", "todoread", "task", "skill")
SYSTEM = "You are opencode, an interactive CLI coding agent. " + 100 * (
    "Follow the repository's conventions, keep changes minimal, run the tests, and "
    "explain what you changed in one short paragraph. Never invent APIs. "
)
SOURCE = "def paginate(items, page, size):\n    start = page * size\n    return items[start:]\n"


def _tool_round(step: int) -> list[dict[str, Any]]:
    """An assistant tool call and the file it read."""
    arguments = json.dumps({"path": f"src/m{step}.py"})
    call = {
        "id": f"call_{step}",
        "type": "function",
        "function": {"name": "read", "arguments": arguments},
    }
    return [
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": f"call_{step}", "content": SOURCE * 38},
    ]


def chat_request(worker: int, *, stream: bool) -> bytes:
    """An opencode-sized chat request (~50 KB) whose last message is the worker's own."""
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": "Fix the failing pagination test in src/pager.py."},
    ]
    for step in range(8):
        messages += _tool_round(step)
    messages.append({"role": "user", "content": f"Worker {worker}: continue."})
    tools = [
        _tool(n, f"Use {n} to work with the repository. ", ["path", "content", "pattern"])
        for n in TOOL_NAMES
    ]
    body: dict[str, Any] = {"model": MODEL, "messages": messages, "tools": tools, "stream": stream}
    body |= {"logprobs": True, "top_logprobs": 1, "return_token_ids": True}
    if stream:
        body["stream_options"] = {"include_usage": True}
    return orjson.dumps(body)


def start(
    argv: list[str], env: dict[str, str], ready_on_stderr: bool
) -> tuple[subprocess.Popen[str], str]:
    process = subprocess.Popen(
        argv,
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE if not ready_on_stderr else subprocess.DEVNULL,
        stderr=subprocess.PIPE if ready_on_stderr else None,
        text=True,
    )
    pipe = process.stderr if ready_on_stderr else process.stdout
    assert pipe is not None
    line = pipe.readline().strip()
    if not line:
        process.kill()
        raise RuntimeError(f"{argv[2]} did not start")
    return process, line


def prompt_tokens() -> int:
    """Prompt ids the upstream returns per reply: about one token per 4 bytes of request."""
    return len(chat_request(0, stream=False)) // 4


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def unary_call(pool: UpstreamPool, target: UpstreamTarget) -> Call:
    async def call(body: bytes) -> float:
        began = time.perf_counter()
        async with pool.request(target, body) as response:
            await response.read()
            if response.status != 200:
                raise RuntimeError(f"HTTP {response.status}")
        return time.perf_counter() - began

    return call


def first_token_call(pool: UpstreamPool, target: UpstreamTarget) -> Call:
    """Time until the first SSE bytes carrying generated text (the stream is then drained)."""

    async def call(body: bytes) -> float:
        began = time.perf_counter()
        first = 0.0
        async with pool.request(target, body) as response:
            async for chunk in response.iter_chunks():
                if not first and TEXT_DELTA in chunk:
                    first = time.perf_counter() - began
        if not first:
            raise RuntimeError("stream carried no text")
        return first

    return call


async def paired(
    direct: Call, proxied: list[Call], body: bytes, pairs: int
) -> tuple[list[float], list[list[float]]]:
    """A direct call before each proxied one, the proxies in turn; latencies in ms (the
    direct calls of all pairs, and each proxy's). A proxied call is always followed by a
    direct one, as an agent's call is by its tool: the proxy builds the turn after
    answering, and that work is not charged to the next proxied call."""
    direct_ms: list[float] = []
    proxied_ms: list[list[float]] = [[] for _ in proxied]
    for _ in range(pairs):
        for call, results in zip(proxied, proxied_ms, strict=True):
            direct_ms.append(await direct(body) * 1000)
            results.append(await call(body) * 1000)
    return direct_ms, proxied_ms


async def throughput(call: Call, concurrency: int, seconds: float) -> float:
    bodies = [chat_request(w, stream=False) for w in range(concurrency)]
    deadline = time.perf_counter() + seconds
    done = 0

    async def worker(body: bytes) -> None:
        nonlocal done
        while time.perf_counter() < deadline:
            await call(body)
            done += 1

    began = time.perf_counter()
    await asyncio.gather(*(worker(b) for b in bodies))
    return done / (time.perf_counter() - began)


def summary(direct: list[float], proxied: list[float]) -> dict[str, float]:
    d50, d99 = percentile(direct, 0.5), percentile(direct, 0.99)
    p50, p99 = percentile(proxied, 0.5), percentile(proxied, 0.99)
    return {
        "direct_p50_ms": d50,
        "direct_p99_ms": d99,
        "proxied_p50_ms": p50,
        "proxied_p99_ms": p99,
        "added_p50_ms": p50 - d50,
        "added_p99_ms": p99 - d99,
    }


def cpu_seconds(pid: int) -> float:
    """User + system CPU time a process has used so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def measure(
    upstream: str, proxies: list[str], proxy_pid: int, args: argparse.Namespace
) -> dict[str, Any]:
    """`proxies`: this proxy's base URL, then the reference's (if any)."""
    pool = UpstreamPool()
    direct = UpstreamTarget(f"{upstream}/chat/completions", {"Authorization": f"Bearer {API_KEY}"})
    targets = [
        UpstreamTarget(f"{url}/chat/completions", {"Authorization": "Bearer route-token"})
        for url in proxies
    ]
    body, stream_body = chat_request(0, stream=False), chat_request(0, stream=True)
    unary_d, unary_p = unary_call(pool, direct), [unary_call(pool, t) for t in targets]
    ttft_d, ttft_p = first_token_call(pool, direct), [first_token_call(pool, t) for t in targets]
    await paired(unary_d, unary_p, body, 200)  # warm-up: connections, caches
    unary_ms = await paired(unary_d, unary_p, body, args.pairs)
    await paired(ttft_d, ttft_p, stream_body, 100)
    ttft_ms = await paired(ttft_d, ttft_p, stream_body, args.pairs)
    await throughput(unary_p[0], 64, 1.0)
    direct_rps = await throughput(unary_d, 64, args.seconds)
    cpu_before = cpu_seconds(proxy_pid)
    proxied_rps = await throughput(unary_p[0], 64, args.seconds)
    cpu_ms = (cpu_seconds(proxy_pid) - cpu_before) * 1000 / (proxied_rps * args.seconds)
    await pool.close()
    result: dict[str, Any] = {
        "request_bytes": len(body),
        "prompt_token_ids_per_reply": prompt_tokens(),
        "unary_c1": summary(unary_ms[0], unary_ms[1][0]),
        "ttft_c1": summary(ttft_ms[0], ttft_ms[1][0]),
        "c64_rps": {"direct": direct_rps, "proxied": proxied_rps},
        "proxy_cpu_ms_per_request_c64": cpu_ms,
    }
    if len(proxies) > 1:
        result["openenv_unary_c1"] = summary(unary_ms[0], unary_ms[1][1])
        result["openenv_ttft_c1"] = summary(ttft_ms[0], ttft_ms[1][1])
    return result


def _row(label: str, stats: dict[str, float], quantile: str, target: str) -> str:
    direct, proxied = stats[f"direct_{quantile}_ms"], stats[f"proxied_{quantile}_ms"]
    added = stats[f"added_{quantile}_ms"]
    return f"| {label} | {direct:.3f} | {proxied:.3f} | {added:+.3f} | {target} |"


def _ratio(ours: dict[str, float], reference: dict[str, float], quantile: str) -> str:
    key = f"added_{quantile}_ms"
    return f"{ours[key] / reference[key]:.2f}x" if reference[key] > 0 else "n/a"


def table(result: dict[str, Any]) -> str:
    unary, ttft, rps = result["unary_c1"], result["ttft_c1"], result["c64_rps"]
    cpu = result["proxy_cpu_ms_per_request_c64"]
    rows = [
        "| measure | direct | proxied | added | target |",
        "| --- | ---: | ---: | ---: | --- |",
        _row("unary latency p50, c1 (ms)", unary, "p50", "<= +0.5"),
        _row("unary latency p99, c1 (ms)", unary, "p99", "<= +2"),
        _row("stream time to first token p50, c1 (ms)", ttft, "p50", ""),
        _row("stream time to first token p99, c1 (ms)", ttft, "p99", ""),
        f"| requests/s, c64 | {rps['direct']:.0f} | {rps['proxied']:.0f} | | >= 2000 |",
        f"| proxy CPU per request, c64 (ms) | | {cpu:.3f} | | |",
    ]
    if "openenv_unary_c1" in result:
        o_unary, o_ttft = result["openenv_unary_c1"], result["openenv_ttft_c1"]
        rows += [
            _row("OpenEnv's proxy: unary latency p50, c1 (ms)", o_unary, "p50", ""),
            _row("OpenEnv's proxy: unary latency p99, c1 (ms)", o_unary, "p99", ""),
            _row("OpenEnv's proxy: time to first token p50, c1 (ms)", o_ttft, "p50", ""),
            _row("OpenEnv's proxy: time to first token p99, c1 (ms)", o_ttft, "p99", ""),
            f"| added over OpenEnv's, unary p50 | | | {_ratio(unary, o_unary, 'p50')} | <= 0.15x |",
            f"| added over OpenEnv's, first token p50 | | | {_ratio(ttft, o_ttft, 'p50')} "
            "| <= 0.15x |",
        ]
    return "\n".join(rows)


def start_openenv(
    path: str, upstream: str, env: dict[str, str]
) -> tuple[subprocess.Popen[str], str]:
    """OpenEnv's interception proxy on a free port, once it accepts connections."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    argv = [sys.executable, path, "--upstream-url", upstream, "--upstream-api-key", API_KEY]
    argv += ["--trace", os.devnull, "--port", str(port)]
    process = subprocess.Popen(argv, cwd=ROOT, env=env, text=True)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and process.poll() is None:
        with socket.socket() as probe:
            if probe.connect_ex(("127.0.0.1", port)) == 0:
                return process, f"http://127.0.0.1:{port}/v1"
        time.sleep(0.1)
    process.kill()
    raise RuntimeError(f"OpenEnv's proxy ({path}) did not start")


def proxy_loop(pid: int) -> str:
    """The proxy's event loop, read from its loaded libraries: the figures depend on it."""
    return "uvloop" if "uvloop" in Path(f"/proc/{pid}/maps").read_text() else "asyncio"


def run(main: Coroutine[Any, Any, dict[str, Any]]) -> dict[str, Any]:
    try:
        import uvloop
    except ImportError:
        return asyncio.run(main)
    return uvloop.run(main)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=1500, help="direct/proxied pairs at c1")
    parser.add_argument("--seconds", type=float, default=5.0, help="duration of each c64 run")
    parser.add_argument("--openenv-proxy", help="OpenEnv's interception.py, as the reference")
    args = parser.parse_args()
    env = {**os.environ, "PYTHONPATH": str(ROOT), "ROLLOUT_PROXY_API_KEY": API_KEY}
    upstream_process, upstream = start(
        [
            sys.executable,
            "-m",
            "testing.fakes.llm_upstream",
            "--port",
            "0",
            "--text",
            REPLY,
            "--prompt-tokens",
            str(prompt_tokens()),
        ],
        env,
        ready_on_stderr=False,
    )
    proxy_process = reference = None
    try:
        proxy_process, ready = start(
            [
                sys.executable,
                "-m",
                "service.proxy.remote.standalone",
                "--listen",
                "127.0.0.1:0",
                "--base-url",
                upstream,
                "--model",
                MODEL,
                "--turns-file",
                os.devnull,
                "--token",
                "route-token",
            ],
            env,
            ready_on_stderr=True,
        )
        proxies = [json.loads(ready)["base_url"]]
        if args.openenv_proxy:
            reference, reference_url = start_openenv(args.openenv_proxy, upstream, env)
            proxies.append(reference_url)
        loop = proxy_loop(proxy_process.pid)
        load_before = os.getloadavg()
        result = run(measure(upstream, proxies, proxy_process.pid, args))
    finally:
        for process in (reference, proxy_process, upstream_process):
            if process is not None:
                process.terminate()
                process.wait(timeout=10)
    result["machine"] = {
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "proxy_event_loop": loop,
        "load_average_1m": {"before": load_before[0], "after": os.getloadavg()[0]},
    }
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "proxy.json").write_text(json.dumps(result, indent=2) + "\n")
    size = result["request_bytes"] / 1024
    ids = result["prompt_token_ids_per_reply"]
    load = result["machine"]["load_average_1m"]
    print(
        f"Request {size:.1f} KiB; reply: {len(REPLY.split())} words, logprobs, {ids} prompt ids.\n"
        f"Proxy event loop: {loop}; 1-min load average {load['before']:.2f} before, "
        f"{load['after']:.2f} after (other processes' load shows up in every figure).\n"
    )
    print(table(result))


if __name__ == "__main__":
    main()
