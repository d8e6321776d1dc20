"""The fake E2B cloud for `bench_scale.py`, in its own process, with scripted agents.

Everything the service talks to is the test suite's fake (`testing.fakes.e2b_cloud`: the control
plane, envd's Connect streams, files, network updates), on one loopback port. What is cheap is
the agent: a command containing `AGENT_MARK` is not a process but a coroutine of this process
that speaks envd's wire format like one (a start event, stdout chunks, an end event, killed
by SendSignal or by a kill of its process group). It makes a streamed chat call through the URL
the service gave it (`OPENAI_BASE_URL`: the replica's capture proxy) every `--every` seconds
(jittered), prints one line per call, until it is killed (the rollout cancelled). The service's
kill of an agent's process group (`kill -KILL -- -PID`) kills the coroutine and exits 0, as bash
would; every other command (the service's own clean-up and listings) runs for real, as in the
suite. So 10,000 live rollouts cost 10,000 open envd streams and model calls here, not 20,000
processes, and cancelling them boots no sandbox.

Driven by lines on stdin: `stats` is answered by one JSON line on stdout (live agents, calls
made and failed, call latency percentiles since the last `stats`); an empty line or the end of
stdin stops the cloud. Its first line out is the cloud's environment (`FakeE2B.environment`).

    python bench/scale_cloud.py ROOT [--every 30]
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import itertools
import json
import random
import re
import signal
import sys
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.bench_watchers import percentile
from testing.fakes.e2b_cloud import FakeE2B, SandboxRecord
from testing.fakes.envd import FakeProcess, FakeSandbox

AGENT_MARK = "bench-scale-agent"
_PIDS = itertools.count(1000)
_GROUP_KILL = re.compile(r"kill -KILL -- -(\d+) ")
"""The command `E2BSandbox.kill_process_group` runs."""


class Agents:
    """What every scripted agent of this process shares: its pace and the tallies."""

    def __init__(self, every_s: float) -> None:
        self.every_s = every_s
        self.live = 0
        self.calls = 0
        self.failed = 0
        self.call_ms: list[float] = []
        self.last_error = ""

    def stats(self) -> dict[str, Any]:
        latencies, self.call_ms = self.call_ms, []
        return {
            "agents": self.live,
            "calls": self.calls,
            "failed": self.failed,
            "call_p50_ms": round(percentile(latencies, 0.5), 1) if latencies else None,
            "call_p99_ms": round(percentile(latencies, 0.99), 1) if latencies else None,
            "last_error": self.last_error,
        }


class ScriptedAgent(FakeProcess):
    """An agent command as envd would stream it, without a process behind it."""

    def __init__(self, config: dict[str, Any], envs: dict[str, str], agents: Agents) -> None:
        self.config = config
        self.pid = self.host_pid = next(_PIDS)
        self.events: asyncio.Queue[dict[str, Any] | None] = asyncio.Queue()
        self._envs = envs
        self._agents = agents
        self._signum = 0
        self._run = asyncio.create_task(self._script())
        self.pump = asyncio.create_task(self._finish())

    def signal(self, signum: int) -> None:
        self._run.cancel()
        self._signum = signum

    async def _finish(self) -> None:
        try:
            await self._run
            code = 0
        except asyncio.CancelledError:
            code = -(self._signum or signal.SIGKILL)
        self.events.put_nowait({"end": self._end(code)})
        self.events.put_nowait(None)

    def _print(self, line: str) -> None:
        data = base64.b64encode(line.encode() + b"\n").decode()
        self.events.put_nowait({"data": {"stdout": data}})

    async def _script(self) -> None:
        agents = self._agents
        agents.live += 1
        try:
            self._print("agent up")
            for turn in itertools.count(1):
                await asyncio.sleep(agents.every_s * random.uniform(0.5, 1.5))
                self._print(f"turn {turn}: {await self._call()}")
        finally:
            agents.live -= 1

    async def _call(self) -> str:
        """One streamed chat completion through the service's proxy; its outcome."""
        agents = self._agents
        began = time.perf_counter()
        try:
            outcome = await _stream_chat(
                self._envs["OPENAI_BASE_URL"],
                self._envs["OPENAI_API_KEY"],
                self._envs["OPENAI_MODEL"],
            )
        except (OSError, ValueError, asyncio.IncompleteReadError) as exc:
            agents.failed += 1
            agents.last_error = repr(exc)
            return "failed"
        agents.calls += 1
        agents.call_ms.append((time.perf_counter() - began) * 1000)
        return outcome


async def _stream_chat(base_url: str, key: str, model: str) -> str:
    """POST a streaming chat completion (HTTP/1.1, one connection) and read it to its end."""
    url = urlsplit(base_url)
    body = json.dumps(
        {"model": model, "stream": True, "messages": [{"role": "user", "content": "next step"}]}
    ).encode()
    head = (
        f"POST {url.path}/chat/completions HTTP/1.1\r\nHost: {url.netloc}\r\n"
        f"Authorization: Bearer {key}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    )
    reader, writer = await asyncio.open_connection(url.hostname, url.port)
    try:
        writer.write(head.encode() + body)
        status_line = await reader.readline()
        if b" 200 " not in status_line:
            raise ValueError(f"status {status_line!r}")
        received = await asyncio.wait_for(reader.read(), 60)
    finally:
        writer.close()
    if b"data: [DONE]" not in received:
        raise ValueError("the stream ended before [DONE]")
    return "ok"


class Exited(FakeProcess):
    """A command that has already exited 0 (the kill of a scripted agent's group)."""

    def __init__(self, config: dict[str, Any]) -> None:
        self.config = config
        self.pid = self.host_pid = next(_PIDS)
        self.events: asyncio.Queue[dict[str, Any] | None] = asyncio.Queue()
        self.events.put_nowait({"end": self._end(0)})
        self.events.put_nowait(None)
        self.pump = asyncio.create_task(asyncio.sleep(0))

    def signal(self, signum: int) -> None:
        return


class ScaleSandbox(FakeSandbox):
    """A fake sandbox whose agent command is a `ScriptedAgent`, and the kill of its group an
    `Exited` command that kills it; other commands run for real."""

    agents: Agents

    async def start(self, config: dict[str, Any], timeout_s: float | None) -> FakeProcess:
        command = " ".join(config.get("args", []))
        group_kill = _GROUP_KILL.search(command)
        if group_kill is not None:
            agent = self.processes.get(int(group_kill.group(1)))
            if isinstance(agent, ScriptedAgent):
                agent.signal(signal.SIGKILL)
                self.started.append(config)
                return Exited(config)
        if AGENT_MARK not in command:
            return await super().start(config, timeout_s)
        self.started.append(config)
        agent = ScriptedAgent(config, self.envs | config.get("envs", {}), self.agents)
        self.processes[agent.pid] = agent
        agent.pump.add_done_callback(lambda _: self.processes.pop(agent.pid, None))
        return agent

    def destroy(self, *, drop_connections: bool = True) -> None:
        for process in list(self.processes.values()):
            if isinstance(process, ScriptedAgent):
                process.signal(signal.SIGKILL)
        super().destroy(drop_connections=drop_connections)


class ScaleE2B(FakeE2B):
    """The fake cloud, making `ScaleSandbox`es."""

    def __init__(self, root: Path, agents: Agents) -> None:
        super().__init__(root)
        self.agents = agents

    def _new_sandbox(self, body: dict[str, Any]) -> SandboxRecord:
        record = super()._new_sandbox(body)
        sandbox = record.sandbox
        sandbox.__class__ = ScaleSandbox  # made by the base class; only `start` differs
        assert isinstance(sandbox, ScaleSandbox)
        sandbox.agents = self.agents
        return record


async def serve(root: Path, every_s: float) -> None:
    agents = Agents(every_s)
    cloud = await ScaleE2B(root, agents).start()
    print(json.dumps(cloud.environment()), flush=True)
    try:
        while line := (await asyncio.to_thread(sys.stdin.readline)).strip():
            if line == "stats":
                print(json.dumps(agents.stats()), flush=True)
    finally:
        await cloud.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("root", type=Path)
    parser.add_argument("--every", type=float, default=30.0, help="seconds between model calls")
    args = parser.parse_args()
    asyncio.run(serve(args.root, args.every))


if __name__ == "__main__":
    main()
