"""A fake of envd, the daemon inside every E2B sandbox, speaking the wire format the SDK sends.

- Connect RPC over HTTP/1.1 with the JSON codec: `process.Process/Start` (a server stream of
  start/data/end events in Connect envelopes), `process.Process/SendSignal`,
  `process.Process/List`, `filesystem.Filesystem/MakeDir`.
- Plain HTTP: `GET /files` (download), `POST /files` (multipart or octet-stream upload),
  `GET /health`.

Commands run for real under bubblewrap: the host's root read-only, the sandbox's own
/home/user and /tmp, no network when internet access is off. Like a VM, a sandbox is one
pid namespace whose init (a small reaper, started with the first command) adopts every
orphan; each command joins it (`nsenter`), so pids are the sandbox's own, one command can
signal another's process group, and a root command that kills every process it sees
kills only the sandbox's. Like envd, a dropped stream leaves its process running,
`Connect-Timeout-Ms` kills it, and a signal reaches only the command's own process, not
its children. Commands run as the host's user whatever `user` they ask for.

A sandbox made from a snapshot starts from a copy of what the snapshotted one wrote
(`copy_layers`, `start_from`), with no process of its.

A sandbox of a built template (`rootfs`, `testing.fakes.e2b_templates`) runs on that image's
root filesystem instead, all of it writable as a VM's disk is: an overlay over the image
(upper layer under the sandbox's directory), mounted in a mount namespace of the sandbox's
own (`unshare`, so the host never sees it) before bwrap binds it as `/`; its files are
reached through its init's root (`/proc/<init>/root`); the image's ENV (PATH) is the
sandbox's `envs`.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import os
import posixpath
import shutil
import signal
import subprocess
import uuid
from pathlib import Path
from typing import Any

from testing.fakes.connect import END_STREAM, RpcError, envelope, http_status
from testing.fakes.envd_files import make_dir, serve_files
from testing.fakes.http1 import HttpRequest, HttpResponse

__all__ = ["ENVD_VERSION", "FakeProcess", "FakeSandbox", "serve_envd"]

ENVD_VERSION = "0.6.4"
_HOME = "/home/user"
_WRITABLE_ROOTS = (_HOME, "/tmp")
_OVERLAY_DIRS = ("upper", "work", "merged")
"""A sandbox on an image: its overlay's upper and work directories, and where it is mounted."""
_SIGNALS = {"SIGNAL_SIGKILL": signal.SIGKILL, "SIGNAL_SIGTERM": signal.SIGTERM}
_SIGNAL_WORDS = {signal.SIGKILL: "killed", signal.SIGTERM: "terminated"}
_DRAIN_AFTER_EXIT_S = 0.2
_BOOT_TRIES = 5
"""envd stops reading a command's pipes once it exits; children holding them are cut off."""
_INIT = (
    "import os, signal\n"
    "signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGCHLD})\n"
    "print('ready', flush=True)\n"
    "while True:\n"
    "    try:\n"
    "        while os.waitpid(-1, os.WNOHANG)[0] > 0: pass\n"
    "    except ChildProcessError: pass\n"
    "    signal.sigwait({signal.SIGCHLD})\n"
)
"""The sandbox's pid 1: reaps every orphan, as a VM's init does."""


class FakeProcess:
    """One command: a bwrap process whose child (the reported pid) runs the command."""

    def __init__(
        self, proc: asyncio.subprocess.Process, host_pid: int, config: dict[str, Any]
    ) -> None:
        self.proc = proc
        self.host_pid = host_pid
        self.pid = _inner_pid(host_pid)
        """As the sandbox (and envd) sees it."""
        self.config = config
        self.events: asyncio.Queue[dict[str, Any] | None] = asyncio.Queue()
        self.pump = asyncio.create_task(self._pump())

    def signal(self, signum: int) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.host_pid, signum)

    async def _pump(self) -> None:
        readers = [
            asyncio.create_task(self._read(self.proc.stdout, "stdout")),
            asyncio.create_task(self._read(self.proc.stderr, "stderr")),
        ]
        code = await self.proc.wait()
        _, pending = await asyncio.wait(readers, timeout=_DRAIN_AFTER_EXIT_S)
        for reader in pending:
            reader.cancel()
        self.events.put_nowait({"end": self._end(code)})
        self.events.put_nowait(None)

    async def _read(self, stream: asyncio.StreamReader | None, name: str) -> None:
        assert stream is not None
        while chunk := await stream.read(32 * 1024):
            self.events.put_nowait({"data": {name: base64.b64encode(chunk).decode()}})

    def _end(self, code: int) -> dict[str, Any]:
        # bwrap reports its child's death by signal N as exit 128 + N, which a command could
        # also exit with by itself; the fake takes SIGKILL and SIGTERM for deaths.
        signum = -code if code < 0 else code - 128
        if signum in _SIGNAL_WORDS:
            status = f"signal: {_SIGNAL_WORDS[signal.Signals(signum)]}"
            return {"exitCode": -1, "exited": False, "status": status, "error": status}
        status = f"exit status {code}"
        end: dict[str, Any] = {"exitCode": code, "exited": True, "status": status}
        return end if code == 0 else {**end, "error": status}


class FakeSandbox:
    """One sandbox: a directory for its writable paths, its processes, its open streams."""

    def __init__(
        self,
        parent: Path,
        *,
        envs: dict[str, str],
        internet: bool,
        rootfs: Path | None = None,
        start_from: Path | None = None,
    ) -> None:
        self.id = "i" + uuid.uuid4().hex[:19]
        self.access_token = uuid.uuid4().hex
        self.root = parent / self.id
        self.envs = envs
        self.internet = internet
        self.rootfs = rootfs
        """The image's root filesystem a built template's sandbox runs on (None: the host's)."""
        self.alive = True
        self.processes: dict[int, FakeProcess] = {}
        self.started: list[dict[str, Any]] = []
        """The config of every command started, in order (envs included)."""
        self.streams: set[HttpResponse] = set()
        self._init: subprocess.Popen[bytes] | None = None
        self._init_pid = 0
        self._booting = asyncio.Lock()
        layers = _OVERLAY_DIRS if rootfs is not None else _WRITABLE_ROOTS
        for writable in layers:
            (self.root / writable.lstrip("/")).mkdir(parents=True, exist_ok=True)
        if start_from is not None:
            for layer in self.layers():
                source = f"{start_from / layer}/."
                subprocess.run(["cp", "-a", source, str(self.root / layer)], check=True)

    def layers(self) -> list[str]:
        """Its directories holding what it wrote, relative to `root`: the overlay's upper
        layer (whiteouts included), or its writable paths."""
        if self.rootfs is not None:
            return [_OVERLAY_DIRS[0]]
        return [writable.lstrip("/") for writable in _WRITABLE_ROOTS]

    def copy_layers(self, into: Path) -> None:
        """Copy what it wrote into `into`, for a sandbox to start from (`start_from`)."""
        for layer in self.layers():
            (into / layer).mkdir(parents=True)
            subprocess.run(["cp", "-a", f"{self.root / layer}/.", str(into / layer)], check=True)

    def resolve(self, path: str) -> tuple[Path, bool]:
        """Host path of a sandbox path, and whether the sandbox may write there."""
        full = posixpath.normpath(posixpath.join(_HOME, path))
        if self.rootfs is not None:
            if not self._init_pid:
                raise RuntimeError("a sandbox on an image is reached once it is booted")
            return Path(f"/proc/{self._init_pid}/root{full}"), True
        for writable in _WRITABLE_ROOTS:
            if full == writable or full.startswith(writable + "/"):
                return self.root / full.lstrip("/"), True
        return Path(full), False

    async def start(self, config: dict[str, Any], timeout_s: float | None) -> FakeProcess:
        self.started.append(config)
        cwd = config.get("cwd") or _HOME
        if not self.resolve(cwd)[0].is_dir():
            raise RpcError("invalid_argument", f"cwd '{cwd}' does not exist")
        init = await self.boot()
        enter = ["nsenter", f"--target={init}", "--pid", "--mount", "--net", f"--wdns={cwd}"]
        argv = [*enter, "--", config.get("cmd", "/bin/bash"), *config.get("args", [])]
        proc = await asyncio.create_subprocess_exec(
            *argv,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env=self._environment(config.get("envs", {})),
            start_new_session=True,
        )
        process = FakeProcess(proc, await _child_pid(proc), config)
        self.processes[process.pid] = process
        process.pump.add_done_callback(lambda _: self.processes.pop(process.pid, None))
        if timeout_s:
            timer = asyncio.get_running_loop().call_later(timeout_s, process.signal, signal.SIGKILL)
            process.pump.add_done_callback(lambda _: timer.cancel())
        return process

    async def boot(self) -> int:
        """Host pid of the sandbox's init, started on first use."""
        async with self._booting:
            for _ in range(_BOOT_TRIES):
                if self._init is not None:
                    break
                init = await asyncio.to_thread(self._start_init)
                assert init.stdout is not None
                if await asyncio.to_thread(init.stdout.readline):  # namespaces and mounts made
                    self._init = init
                    self._init_pid = _children(init.pid)[0]  # bwrap's child: pid 1 inside
                    break
                # bwrap binds the host's root recursively, then remounts each mount below
                # it: another test's sandbox disk unmounted meanwhile fails that. Again.
                init.stdout.close()
                await asyncio.to_thread(init.wait)
            else:
                raise RuntimeError(f"the fake sandbox {self.id}'s init failed {_BOOT_TRIES} times")
            return self._init_pid

    def _start_init(self) -> subprocess.Popen[bytes]:
        argv = [*self._bwrap(), "--", "python3", "-c", _INIT]
        if self.rootfs is not None:
            upper, work, merged = (str(self.root / name) for name in _OVERLAY_DIRS)
            options = f"lowerdir={self.rootfs},upperdir={upper},workdir={work}"
            mount = f'mount -t overlay overlay -o {options} {merged} && exec "$@"'
            unshare = ["unshare", "--mount", "--propagation", "private", "--", "sh", "-c", mount]
            argv = [*unshare, "sh", *argv]
        return subprocess.Popen(
            argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, start_new_session=True
        )

    def destroy(self, *, drop_connections: bool = True) -> None:
        """Kill every process the sandbox started; drop its open streams (or leave them hanging)."""
        self.alive = False
        if self._init is not None and self._init.poll() is None:
            self._init.kill()  # its child, pid 1 inside, dies with it, and then all the rest
            self._init.wait()
            assert self._init.stdout is not None
            self._init.stdout.close()
        marker = f"E2B_SANDBOX_ID={self.id}".encode()
        while _kill_marked(marker):
            pass
        if drop_connections:
            for stream in list(self.streams):
                stream.abort()
        shutil.rmtree(self.root, ignore_errors=True)

    def _bwrap(self) -> list[str]:
        if self.rootfs is not None:
            argv = ["bwrap", "--bind", str(self.root / _OVERLAY_DIRS[2]), "/"]
        else:
            argv = ["bwrap", "--ro-bind", "/", "/", "--tmpfs", "/home"]
            for writable in _WRITABLE_ROOTS:
                argv += ["--bind", str(self.root / writable.lstrip("/")), writable]
        argv += ["--unshare-pid", "--as-pid-1", "--proc", "/proc", "--dev", "/dev"]
        argv += ["--die-with-parent"]
        return argv if self.internet else [*argv, "--unshare-net"]

    def _environment(self, extra: dict[str, str]) -> dict[str, str]:
        base = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": _HOME, "USER": "user"}
        base |= {"LOGNAME": "user", "E2B_SANDBOX": "true", "E2B_SANDBOX_ID": self.id}
        return base | self.envs | extra


def _inner_pid(host_pid: int) -> int:
    """A process's pid in its own pid namespace (its host pid once it is gone)."""
    try:
        status = Path(f"/proc/{host_pid}/status").read_text()
    except OSError:
        return host_pid
    fields = dict(line.split(":", 1) for line in status.splitlines())
    return int(fields["NSpid"].split()[-1])


async def _child_pid(proc: asyncio.subprocess.Process) -> int:
    """The host pid of nsenter's child, which execs the command (what envd reports)."""
    while proc.returncode is None:
        if children := _children(proc.pid):
            return children[0]
        await asyncio.sleep(0.0005)
    return proc.pid


def _children(pid: int) -> list[int]:
    try:
        return [
            int(child) for child in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
        ]
    except OSError:
        return []


def _kill_marked(marker: bytes) -> int:
    """SIGKILL every process whose environment carries `marker`; returns how many."""
    killed = 0
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            environ = Path(entry.path, "environ").read_bytes()
        except OSError:
            continue
        if marker in environ.split(b"\0"):
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(entry.name), signal.SIGKILL)
                killed += 1
    return killed


async def serve_envd(sandbox: FakeSandbox, request: HttpRequest, response: HttpResponse) -> None:
    """Answer one request addressed to `sandbox`'s envd."""
    if request.headers.get("x-access-token") != sandbox.access_token:
        await response.reply_json(401, {"code": 401, "message": "invalid access token"})
    elif request.path == "/process.Process/Start":
        await _start(sandbox, request, response)
    elif request.path == "/health":
        await response.reply_empty(204)
    elif request.path == "/files":
        await serve_files(sandbox, request, response)
    else:
        await _unary(sandbox, request, response)


async def _start(sandbox: FakeSandbox, request: HttpRequest, response: HttpResponse) -> None:
    message = json.loads(request.body[5:]) if len(request.body) >= 5 else {}
    timeout_ms = request.headers.get("connect-timeout-ms")
    await response.start(200, {"content-type": "application/connect+json"})
    try:
        process = await sandbox.start(message.get("process", {}), _seconds(timeout_ms))
    except RpcError as exc:
        await response.send(envelope({"error": exc.body()}, flags=END_STREAM))
        return await response.end()
    sandbox.streams.add(response)
    try:
        await _stream_events(sandbox, process, response)
    finally:
        sandbox.streams.discard(response)


async def _stream_events(
    sandbox: FakeSandbox, process: FakeProcess, response: HttpResponse
) -> None:
    event: dict[str, Any] | None = {"start": {"pid": process.pid}}
    while event is not None:
        if not sandbox.alive:
            await asyncio.Event().wait()  # a vanished sandbox never answers again
        if response.finished:
            return
        await response.send(envelope({"event": event}))
        event = await process.events.get()
    await response.send(envelope({}, flags=END_STREAM))
    await response.end()


async def _unary(sandbox: FakeSandbox, request: HttpRequest, response: HttpResponse) -> None:
    body = json.loads(request.body or b"{}")
    try:
        if request.path == "/process.Process/SendSignal":
            answer = _send_signal(sandbox, body)
        elif request.path == "/process.Process/List":
            running = sandbox.processes.values()
            answer = {"processes": [{"config": p.config, "pid": p.pid} for p in running]}
        elif request.path == "/filesystem.Filesystem/MakeDir":
            answer = make_dir(sandbox, body.get("path", ""))
        else:
            raise RpcError("unimplemented", f"{request.path} is not implemented by the fake")
    except RpcError as exc:
        return await response.reply_json(http_status(exc), exc.body())
    await response.reply_json(200, answer)


def _send_signal(sandbox: FakeSandbox, body: dict[str, Any]) -> dict[str, Any]:
    pid = int(body.get("process", {}).get("pid", 0))
    process = sandbox.processes.get(pid)
    if process is None:
        raise RpcError("not_found", f"process with pid {pid} not found")
    process.signal(_SIGNALS[body.get("signal", "SIGNAL_SIGKILL")])
    return {}


def _seconds(milliseconds: str | None) -> float | None:
    return int(milliseconds) / 1000 if milliseconds else None
