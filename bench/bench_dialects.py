"""Capture-proxy overhead per dialect: Anthropic Messages and OpenAI Responses, native and
translated, each against the upstream called directly in the same dialect, in one run.

Processes: the fake upstream in its standalone mode (`testing.fakes.llm_upstream`: one
pre-rendered reply on chat completions, with logprobs and ~12k prompt ids, and vLLM's
native `/v1/messages` and `/v1/responses` answers), two standalone proxies
(`service.proxy.remote.standalone`, `--dialect-mode translated` and `native`) and this load
generator. The requests are the opencode-sized request of `bench_proxy` (~50 KB: system
prompt, a dozen tools, eight tool rounds) spelled in each dialect.

Per dialect and mode, at concurrency 1, direct and proxied calls alternating (and the chat
route itself, as `bench_proxy` measures it, for reference under the same load):
- unary latency p50 / p99 and the proxy's addition;
- stream time to first token (the first text delta) p50 / p99, likewise.
"direct" is what the upstream does for the call: for native, the agent's dialect at the
upstream's endpoint for it; for translated, the same-sized chat-completions request with
the same reply, logprobs and ~12k prompt ids (what the translated call costs upstream).
Prints a markdown table and writes bench/results/dialects.json.

    python bench/bench_dialects.py [--pairs 1000]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import orjson

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.bench_proxy import (  # noqa: E402
    API_KEY,
    MODEL,
    REPLY,
    RESULTS,
    SOURCE,
    SYSTEM,
    TEXT_DELTA,
    TOOL_NAMES,
    Call,
    _tool,
    chat_request,
    prompt_tokens,
    run,
    start,
    summary,
    unary_call,
)
from service.proxy import UpstreamPool, UpstreamTarget  # noqa: E402

MARKERS = {"messages": b'"text_delta"', "responses": b'"response.output_text.delta"'}
"""What the first generated text looks like in each dialect's stream."""


def messages_request(*, stream: bool) -> bytes:
    """The opencode-sized request as claude-code would send it."""
    messages: list[dict[str, Any]] = [{"role": "user", "content": "Fix the pagination test."}]
    for step in range(8):
        use: dict[str, Any] = {"type": "tool_use", "id": f"toolu_{step}", "name": "read"}
        use["input"] = {"path": f"src/m{step}.py"}
        result = {"type": "tool_result", "tool_use_id": f"toolu_{step}", "content": SOURCE * 38}
        messages += [{"role": "assistant", "content": [use]}, {"role": "user", "content": [result]}]
    messages.append({"role": "user", "content": "continue."})
    functions = [
        _tool(n, f"Use {n}. ", ["path", "content", "pattern"])["function"] for n in TOOL_NAMES
    ]
    tools = [
        {"name": f["name"], "description": f["description"], "input_schema": f["parameters"]}
        for f in functions
    ]
    body = {"model": MODEL, "max_tokens": 4096, "system": SYSTEM, "messages": messages}
    return orjson.dumps({**body, "tools": tools, "stream": stream})


def responses_request(*, stream: bool) -> bytes:
    """The opencode-sized request as codex would send it."""
    items: list[dict[str, Any]] = [{"role": "user", "content": "Fix the pagination test."}]
    for step in range(8):
        arguments = json.dumps({"path": f"src/m{step}.py"})
        call = {"type": "function_call", "call_id": f"call_{step}", "name": "read"}
        output = {"type": "function_call_output", "call_id": f"call_{step}"}
        items += [{**call, "arguments": arguments}, {**output, "output": SOURCE * 38}]
    items.append({"role": "user", "content": "continue."})
    functions = [
        _tool(n, f"Use {n}. ", ["path", "content", "pattern"])["function"] for n in TOOL_NAMES
    ]
    tools = [{"type": "function", **function} for function in functions]
    body = {"model": MODEL, "instructions": SYSTEM, "input": items, "tools": tools}
    return orjson.dumps({**body, "store": False, "stream": stream})


REQUESTS = {"messages": messages_request, "responses": responses_request}


def first_text_call(pool: UpstreamPool, target: UpstreamTarget, marker: bytes) -> Call:
    """Time until the first bytes carrying generated text (the stream is then drained)."""

    async def call(body: bytes) -> float:
        began, first = time.perf_counter(), 0.0
        async with pool.request(target, body) as response:
            async for chunk in response.iter_chunks():
                if not first and marker in chunk:
                    first = time.perf_counter() - began
        if not first:
            raise RuntimeError("stream carried no text")
        return first

    return call


def _direct(
    pool: UpstreamPool, upstream: str, dialect: str, mode: str
) -> tuple[Call, Call, bytes, bytes]:
    """The direct baseline: the upstream's endpoint for the dialect (native), or its chat
    completions with the same reply, token ids and prompt ids (translated): what the
    upstream does either way, so the difference is the proxy's."""
    headers = {"Authorization": f"Bearer {API_KEY}", "x-api-key": API_KEY}
    if mode == "native":
        target, marker = UpstreamTarget(f"{upstream}/{dialect}", headers), MARKERS[dialect]
        body, stream_body = REQUESTS[dialect](stream=False), REQUESTS[dialect](stream=True)
    else:
        target, marker = UpstreamTarget(f"{upstream}/chat/completions", headers), TEXT_DELTA
        body, stream_body = chat_request(0, stream=False), chat_request(0, stream=True)
    return unary_call(pool, target), first_text_call(pool, target, marker), body, stream_body


async def _paired(direct: Call, proxied: Call, bodies: tuple[bytes, bytes], pairs: int) -> Any:
    """Like `bench_proxy.paired`, each side with its own request body."""
    results: tuple[list[float], list[float]] = ([], [])
    for _ in range(pairs):
        results[0].append(await direct(bodies[0]) * 1000)
        results[1].append(await proxied(bodies[1]) * 1000)
    return summary(*results)


async def _row(
    direct: tuple[Call, Call, bytes, bytes], proxied: tuple[Call, Call, bytes, bytes], pairs: int
) -> dict[str, Any]:
    """Unary latency and time to first token, direct and proxied calls alternating."""
    unary, ttft = (direct[0], proxied[0]), (direct[1], proxied[1])
    unary_bodies, stream_bodies = (direct[2], proxied[2]), (direct[3], proxied[3])
    await _paired(*unary, unary_bodies, 100)  # warm-up
    unary_stats = await _paired(*unary, unary_bodies, pairs)
    await _paired(*ttft, stream_bodies, 50)
    ttft_stats = await _paired(*ttft, stream_bodies, pairs)
    return {"request_bytes": len(proxied[2]), "unary_c1": unary_stats, "ttft_c1": ttft_stats}


async def measure(upstream: str, proxies: dict[str, str], pairs: int) -> dict[str, Any]:
    pool = UpstreamPool()
    token = {"Authorization": "Bearer token"}
    # The chat route as it was, in the same run and under the same load, for reference.
    chat = UpstreamTarget(f"{proxies['translated']}/chat/completions", token)
    proxied_chat = (
        unary_call(pool, chat),
        first_text_call(pool, chat, TEXT_DELTA),
        chat_request(0, stream=False),
        chat_request(0, stream=True),
    )
    direct_chat = _direct(pool, upstream, "messages", "translated")
    results = {"chat_completions": await _row(direct_chat, proxied_chat, pairs)}
    for dialect, request in REQUESTS.items():
        for mode, proxy in proxies.items():
            target = UpstreamTarget(f"{proxy}/{dialect}", token)
            proxied = (
                unary_call(pool, target),
                first_text_call(pool, target, MARKERS[dialect]),
                request(stream=False),
                request(stream=True),
            )
            direct = _direct(pool, upstream, dialect, mode)
            results[f"{dialect}_{mode}"] = await _row(direct, proxied, pairs)
    await pool.close()
    return results


def table(results: dict[str, Any]) -> str:
    rows = [
        "| dialect, mode | unary p50 direct / added | unary p99 direct / added "
        "| first token p50 direct / added | first token p99 direct / added |",
        "| --- | ---: | ---: | ---: | ---: |",
    ]
    for name, result in results.items():
        cells = []
        for kind in ("unary_c1", "ttft_c1"):
            stats = result[kind]
            for q in ("p50", "p99"):
                direct, added = stats[f"direct_{q}_ms"], stats[f"added_{q}_ms"]
                cells.append(f"{direct:.3f} / {added:+.3f}")
        rows.append(
            f"| {name.replace('_', ', ').replace('chat, ', 'chat ')} | " + " | ".join(cells) + " |"
        )
    return "\n".join(rows)


def _proxy(upstream: str, mode: str, env: dict[str, str]) -> tuple[subprocess.Popen[str], str]:
    argv = [sys.executable, "-m", "service.proxy.remote.standalone", "--listen", "127.0.0.1:0"]
    argv += ["--base-url", upstream, "--model", MODEL, "--turns-file", os.devnull]
    argv += ["--token", "token", "--dialect-mode", mode]
    process, ready = start(argv, env, ready_on_stderr=True)
    return process, str(json.loads(ready)["base_url"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=1000, help="direct/proxied pairs per row")
    args = parser.parse_args()
    env = {**os.environ, "PYTHONPATH": str(ROOT), "ROLLOUT_PROXY_API_KEY": API_KEY}
    argv = [sys.executable, "-m", "testing.fakes.llm_upstream", "--port", "0", "--text", REPLY]
    argv += ["--prompt-tokens", str(prompt_tokens())]
    upstream_process, upstream = start(argv, env, ready_on_stderr=False)
    processes: list[subprocess.Popen[str]] = [upstream_process]
    try:
        proxies = {}
        for mode in ("translated", "native"):
            process, proxies[mode] = _proxy(upstream, mode, env)
            processes.append(process)
        load_before = os.getloadavg()[0]
        results = run(measure(upstream, proxies, args.pairs))
    finally:
        for process in reversed(processes):
            process.terminate()
            process.wait(timeout=10)
    results["machine"] = {
        "cpus": os.cpu_count(),
        "load_average_1m": {"before": load_before, "after": os.getloadavg()[0]},
    }
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "dialects.json").write_text(json.dumps(results, indent=2) + "\n")
    load = results.pop("machine")["load_average_1m"]
    print(
        f"ms at concurrency 1; 1-min load average {load['before']:.2f} before, "
        f"{load['after']:.2f} after (other processes' load shows up in every figure).\n"
    )
    print(table(results))


if __name__ == "__main__":
    main()
