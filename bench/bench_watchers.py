"""WatchRollout fan-out: delivery latency with many watchers, against the baseline server.

Two scenarios, each on a fresh server subprocess:
- `one`: 1,000 watchers of one rollout whose agent prints a line every 100 ms; the figure
  is the delay from an event's publication (its `time`) to its arrival at each watcher.
- `spread`: 10,000 watchers, 100 on each of 100 concurrent rollouts; every watcher must get
  every event in order (none cut off, none missing).

Delays count output events published after the watcher asked (a call the server has not yet
accepted counts as waiting); those published before reach it as replay, counted apart
("outputs replayed"). Each client channel is its own connection, as separate dashboards would
be.

The watchers live in `--clients` child processes, so that the client side is not one
interpreter's bottleneck. The baseline is the same scenario served by the code of
`--baseline-ref` (the last commit that serialized each event once per watcher), exported
with `git archive` and measured in the same run. Prints a markdown table with the ratios and
writes bench/results/watchers.json.

    python bench/bench_watchers.py [--watchers 1000] [--spread 10000] [--baseline-ref REF]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import os
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path

import grpc

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from rollout.v1 import rollout_pb2 as pb
from rollout.v1 import rollout_pb2_grpc as pb_grpc

from testing.server_process import ServerProcess

ROOT = Path(__file__).resolve().parents[1]
RESULTS = Path(__file__).parent / "results"
BASELINE_REF = "9eaf1ad"
"""The last commit before events were serialized once for all watchers."""
_STREAMS_PER_CHANNEL = 500
_ATTACH_S = 8
"""The rollouts' setup sleeps this long, so that every watcher is attached before the agent."""
_SPREAD_ATTACH_S = 30
"""The same for 10,000 watchers: a loaded 2-core server takes 10-30 s to accept them all."""


def ticking_spec(
    ticks: int, period_s: float, labels: dict[str, str], attach_s: float
) -> pb.RolloutSpec:
    script = f"for i in $(seq 1 {ticks}); do echo tick $i; sleep {period_s}; done"
    return pb.RolloutSpec(
        task=pb.Task(instruction="ticks", setup=[f"sleep {attach_s}"], verify=["true"]),
        agent=pb.Agent(name="command", command=script),
        labels=labels,
    )


async def _watch(stub: pb_grpc.RolloutServiceAsyncStub, rollout_id: str) -> dict[str, object]:
    """One watcher: delays (ms) of the agent's output events published after it asked, how
    many it got as replay instead, and whether it saw every seq."""
    delays: list[float] = []
    seqs: list[int] = []
    replayed = 0
    asked = time.time()
    try:
        async for response in stub.WatchRollout(pb.WatchRolloutRequest(rollout_id=rollout_id)):
            event = response.event
            seqs.append(event.seq)
            if event.HasField("output"):
                published = event.time.ToNanoseconds() / 1e9
                if published < asked:
                    replayed += 1
                else:
                    delays.append((time.time() - published) * 1000)
    except grpc.aio.AioRpcError as exc:
        error = f"{exc.code().name}: {exc.details()}"
        return {
            "delays": delays,
            "replayed": replayed,
            "events": len(seqs),
            "complete": False,
            "error": error,
        }
    complete = seqs == list(range(1, len(seqs) + 1))
    return {
        "delays": delays,
        "replayed": replayed,
        "events": len(seqs),
        "complete": complete,
        "error": "",
    }


async def _client(target: str, rollout_ids: Sequence[str]) -> list[dict[str, object]]:
    # Each channel its own connection, as separate dashboards would be (no shared subchannel).
    options = [("grpc.use_local_subchannel_pool", 1)]
    channels = [
        grpc.aio.insecure_channel(target, options=options)
        for _ in range(0, len(rollout_ids), _STREAMS_PER_CHANNEL)
    ]
    stubs = [pb_grpc.RolloutServiceStub(channel) for channel in channels]
    try:
        return await asyncio.gather(
            *(_watch(stubs[i // _STREAMS_PER_CHANNEL], rid) for i, rid in enumerate(rollout_ids))
        )
    finally:
        for channel in channels:
            await channel.close()


def client_process(target: str, rollout_ids: list[str], out: str) -> None:
    Path(out).write_text(json.dumps(asyncio.run(_client(target, rollout_ids))))


def cpu_s(pid: int) -> float:
    """User + system CPU seconds `pid` has used: unlike latency, hardly moved by other load."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


async def _start(
    target: str, rollouts: int, ticks: int, period_s: float, attach_s: float
) -> list[str]:
    async with grpc.aio.insecure_channel(target) as channel:
        stub = pb_grpc.RolloutServiceStub(channel)
        spec = ticking_spec(ticks, period_s, {"bench": "w"}, attach_s)
        started = await asyncio.gather(
            *(stub.StartRollout(pb.StartRolloutRequest(spec=spec)) for _ in range(rollouts))
        )
    return [response.rollout.id for response in started]


def scenario(
    server_command: list[str],
    rollouts: int,
    watchers: int,
    clients: int,
    ticks: int,
    attach_s: float = _ATTACH_S,
) -> dict[str, object]:
    """Start `rollouts`, attach `watchers` spread evenly over them from `clients` processes,
    and gather what every watcher saw."""
    with tempfile.TemporaryDirectory() as state:
        env = {"ROLLOUT_MAX_RUNNING": str(max(rollouts, 8)), "ROLLOUT_LOG_LEVEL": "WARNING"}
        server = ServerProcess(Path(state), env=env, command=server_command)
        target = server.start()
        try:
            ids = asyncio.run(_start(target, rollouts, ticks, 0.1, attach_s))
            wanted = [ids[i % rollouts] for i in range(watchers)]
            seen, cpu = watch_from_clients(target, server.pid, wanted, clients, Path(state))
        except grpc.RpcError:
            print("".join(server.output)[-4000:], file=sys.stderr)
            raise
        finally:
            server.stop()
    return summary(seen, cpu, rollouts, watchers)


def floor_scenario(watchers: int, clients: int, ticks: int) -> dict[str, object]:
    """The same watchers of a bare grpc.aio server that writes ready-made bytes: what gRPC
    itself costs, the floor under any WatchRollout."""
    with tempfile.TemporaryDirectory() as state:
        port_file = Path(state) / "port"
        spawn = multiprocessing.get_context("spawn")
        server = spawn.Process(target=floor_server, args=(str(port_file), watchers, ticks))
        server.start()
        while not port_file.exists() or not port_file.read_text():
            time.sleep(0.1)
        target = f"127.0.0.1:{port_file.read_text()}"
        assert server.pid is not None
        seen, cpu = watch_from_clients(
            target, server.pid, ["floor"] * watchers, clients, Path(state)
        )
        server.join()
    return summary(seen, cpu, 1, watchers)


def floor_server(port_file: str, watchers: int, ticks: int) -> None:
    asyncio.run(_floor(Path(port_file), watchers, ticks))


class _Ticks:
    """What the floor server has published, with a wake-up for its watchers."""

    def __init__(self, watchers: int) -> None:
        self.published: list[bytes] = []
        self.changed = asyncio.Event()
        self.watchers = watchers
        self.joined = 0
        self.all_joined = asyncio.Event()
        self.all_left = asyncio.Event()

    def join(self) -> None:
        self.joined += 1
        if self.joined == self.watchers:
            self.all_joined.set()

    def leave(self) -> None:
        self.joined -= 1
        if self.joined == 0:
            self.all_left.set()

    def publish(self, seq: int) -> None:
        event = pb.RolloutEvent(rollout_id="floor", seq=seq, output=pb.AgentOutput(text="tick"))
        event.time.GetCurrentTime()
        self.published.append(pb.WatchRolloutResponse(event=event).SerializeToString())
        changed, self.changed = self.changed, asyncio.Event()
        changed.set()


async def _floor(port_file: Path, watchers: int, ticks: int) -> None:
    state = _Ticks(watchers)

    async def watch(request: bytes, context: grpc.aio.ServicerContext[bytes, bytes]) -> None:
        state.join()
        sent = 0
        while True:
            changed = state.changed
            while sent < len(state.published):
                await context.write(state.published[sent])
                sent += 1
            if sent == ticks:
                break
            await changed.wait()
        state.leave()

    handler = grpc.unary_stream_rpc_method_handler(
        watch, request_deserializer=bytes, response_serializer=bytes
    )
    server = grpc.aio.server()
    methods = {"WatchRollout": handler}
    server.add_generic_rpc_handlers(
        (grpc.method_handlers_generic_handler("rollout.v1.RolloutService", methods),)
    )
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    port_file.write_text(str(port))
    await state.all_joined.wait()
    for seq in range(1, ticks + 1):
        state.publish(seq)
        await asyncio.sleep(0.1)
    await state.all_left.wait()
    await server.stop(grace=5)


def watch_from_clients(
    target: str, server_pid: int, wanted: list[str], clients: int, workdir: Path
) -> tuple[list[dict[str, object]], float]:
    """What each watcher of `wanted` (rollout ids) saw, from `clients` processes, and the
    server's CPU seconds meanwhile."""
    spawn = multiprocessing.get_context("spawn")
    outs = [str(workdir / f"client{i}.json") for i in range(clients)]
    procs = [
        spawn.Process(target=client_process, args=(target, wanted[i::clients], outs[i]))
        for i in range(clients)
    ]
    began = cpu_s(server_pid)
    for proc in procs:
        proc.start()
    for proc in procs:
        proc.join()
    server_cpu_s = cpu_s(server_pid) - began
    return [w for out in outs for w in json.loads(Path(out).read_text())], server_cpu_s


def summary(
    seen: list[dict[str, object]], server_cpu_s: float, rollouts: int, watchers: int
) -> dict[str, object]:
    delays = [float(d) for w in seen for d in w["delays"]]  # type: ignore[attr-defined]
    deliveries = sum(int(w["events"]) for w in seen)  # type: ignore[call-overload]
    return {
        "rollouts": rollouts,
        "watchers": watchers,
        "p50_ms": round(percentile(delays, 0.5), 1),
        "p99_ms": round(percentile(delays, 0.99), 1),
        "replayed_outputs": sum(int(w["replayed"]) for w in seen),  # type: ignore[call-overload]
        "complete": sum(1 for w in seen if w["complete"]),
        "cut_off": sum(1 for w in seen if w["error"]),
        "errors": dict(Counter(str(w["error"]) for w in seen if w["error"])),
        "server_cpu_us_per_delivery": round(server_cpu_s * 1e6 / max(deliveries, 1), 1),
    }


def ratio(value: object, base: object) -> str:
    return f"{float(value) / float(base):.2f}x"  # type: ignore[arg-type]


def baseline_command(ref: str, into: Path) -> list[str]:
    """A server command running `ref`'s service/ (exported with git archive into `into`)."""
    archive = subprocess.run(
        ["git", "-C", str(ROOT), "archive", ref, "service"], check=True, capture_output=True
    ).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    code = f"import sys; sys.path.insert(0, {str(into)!r}); from service.server import main; "
    return [sys.executable, "-c", code + "sys.exit(main())"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--watchers", type=int, default=1000, help="watchers of one rollout")
    parser.add_argument("--spread", type=int, default=10_000, help="watchers over 100 rollouts")
    parser.add_argument("--clients", type=int, default=4, help="watcher processes")
    parser.add_argument("--baseline-ref", default=BASELINE_REF)
    args = parser.parse_args()
    current = [sys.executable, "-m", "service.server"]
    figures: dict[str, dict[str, object]] = {}
    with tempfile.TemporaryDirectory() as old:
        baseline = baseline_command(args.baseline_ref, Path(old))
        runs: dict[str, Callable[[], dict[str, object]]] = {
            "one": lambda: scenario(current, 1, args.watchers, args.clients, 30),
            "one_baseline": lambda: scenario(baseline, 1, args.watchers, args.clients, 30),
            "one_grpc_floor": lambda: floor_scenario(args.watchers, args.clients, 30),
            "spread": lambda: scenario(
                current, 100, args.spread, args.clients, 10, _SPREAD_ATTACH_S
            ),
            "spread_baseline": lambda: scenario(
                baseline, 100, args.spread, args.clients, 10, _SPREAD_ATTACH_S
            ),
        }
        for name, run in runs.items():
            if args.watchers if name.startswith("one") else args.spread:
                figures[name] = run()
                print(name, json.dumps(figures[name]), flush=True)
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "watchers.json").write_text(json.dumps(figures, indent=2))
    print(f"baseline: {args.baseline_ref} (serialized per watcher), measured in this run\n")
    print(
        "| scenario | rollouts | watchers | p50 ms | p99 ms (x baseline) "
        "| server CPU us per delivery (x baseline) | complete | cut off | outputs replayed |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for key in ("one", "spread"):
        if key not in figures:
            continue
        for name in (key, f"{key}_baseline", f"{key}_grpc_floor"):
            if name not in figures:
                continue
            row, base = figures[name], figures[f"{key}_baseline"]
            latency, cpu = row["p99_ms"], row["server_cpu_us_per_delivery"]
            if name != f"{key}_baseline":
                latency = f"{latency} ({ratio(latency, base['p99_ms'])})"
                cpu = f"{cpu} ({ratio(cpu, base['server_cpu_us_per_delivery'])})"
            print(
                f"| {name} | {row['rollouts']} | {row['watchers']} | {row['p50_ms']} "
                f"| {latency} | {cpu} | {row['complete']} | {row['cut_off']} "
                f"| {row['replayed_outputs']} |"
            )


if __name__ == "__main__":
    main()
