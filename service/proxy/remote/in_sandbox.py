"""The capture proxy inside a remote sandbox: placed, started, followed live, stopped.

A remote sandbox usually cannot reach this service, so the proxy runs inside it as
`service.proxy.remote.standalone` on 127.0.0.1 (on a port the kernel picks), with the upstream key
in its environment, never in its argv. It writes each completed turn as one JSON line on its
stdout, which reaches this service through the sandbox's output stream as it is written:
`on_turn` fires while the agent works. (Stdout, not a file: the agent cannot append to it.)

Where its code comes from (a template, or an upload) is `placement`'s choice.

The key sits in the proxy's environment inside the sandbox: an agent that goes looking for
it (/proc/<pid>/environ, as the same user) can find it. Where that matters, run the proxy on
the host instead (`Settings.proxy_public_url`).
"""

from __future__ import annotations

import asyncio
import json
import logging
import secrets
import shlex
from collections.abc import Callable
from typing import Any

from pydantic import ValidationError

from service.errors import SandboxError
from service.models import CaptureSpec, ModelAccess, Turn
from service.proxy.capture.record import scrub_text
from service.proxy.capture.rewrite import AUX_MODEL_ALIAS, MAIN_MODEL_ALIAS
from service.proxy.capture.route import OnTurn
from service.proxy.capture.tally import CallTally
from service.proxy.endpoints import ResolvedEndpoint
from service.proxy.remote.bundle import libraries_tarball, sources_tarball
from service.proxy.remote.placement import UPLOAD_DIR, Layout, choose_layout, probe
from service.proxy.remote.standalone import API_KEY_ENV
from service.sandboxes import BackgroundProcess, OutputStream, Sandbox

__all__ = ["READY_TIMEOUT_S", "InSandboxProxy"]

log = logging.getLogger(__name__)

READY_TIMEOUT_S = 60.0
"""Budget for the proxy to listen once started (imports, unpacking an upload)."""
_BOOT = (
    "import sys; sys.path[:0] = sys.argv[1:3]; "
    "from service.proxy.remote.standalone import main; main(sys.argv[3:])"
)


class _Lines:
    """Cuts output chunks (of any size, as the sandbox hands them over) into lines."""

    def __init__(self, on_line: Callable[[bytes], None]) -> None:
        self._on_line = on_line
        self._partial = bytearray()

    def feed(self, chunk: bytes) -> None:
        if b"\n" not in chunk:
            self._partial += chunk
            return
        first, *middle, rest = chunk.split(b"\n")
        self._partial += first
        for line in (bytes(self._partial), *middle):
            if line.strip():
                self._on_line(line)
        self._partial = bytearray(rest)


class InSandboxProxy:
    """The standalone proxy serving one rollout from inside its sandbox.

    `start()` places and starts it and returns the agent's `ModelAccess`; `stop()` kills it
    once the turns it wrote are in (call it on every path, even after a failed start).
    """

    def __init__(
        self,
        sandbox: Sandbox,
        rollout_id: str,
        upstream: ResolvedEndpoint,
        capture: CaptureSpec,
        on_turn: OnTurn,
        *,
        upstream_timeout_s: float,
    ) -> None:
        self._sandbox = sandbox
        self._rollout_id = rollout_id
        self._upstream = upstream
        self._capture = capture
        self._on_turn = on_turn
        self._upstream_timeout_s = upstream_timeout_s
        self._token = secrets.token_urlsafe(24)
        self._lines = {
            OutputStream.STDOUT: _Lines(self._turn_line),
            OutputStream.STDERR: _Lines(self._log_line),
        }
        self._ready: asyncio.Future[str] = asyncio.get_running_loop().create_future()
        self._process: BackgroundProcess | None = None
        self.turn_count = 0
        self.calls = CallTally()
        """Trainable calls and their upstream failures (the rollout's classification)."""

    async def start(self) -> ModelAccess:
        layout = choose_layout(await probe(self._sandbox))
        await self._upload(layout)
        self._process = await self._sandbox.spawn(
            self._command(layout), env=self._environment(), on_output=self._output
        )
        base_url = await self._until_ready(self._process)
        return ModelAccess(
            base_url=base_url,
            api_key=self._token,
            model=MAIN_MODEL_ALIAS,
            small_model=AUX_MODEL_ALIAS,
        )

    async def stop(self) -> None:
        """Kill the proxy. Its process has ended when this returns, so every line it wrote
        has been read: the turns are all in."""
        if self._process is not None:
            await self._process.kill()

    async def _upload(self, layout: Layout) -> None:
        builders = {"sources": sources_tarball, "libraries": libraries_tarball}
        files = {
            f"{UPLOAD_DIR}/{name}.tgz": await asyncio.to_thread(builders[name])
            for name in layout.upload
        }
        await self._sandbox.write_files(files)

    def _command(self, layout: Layout) -> str:
        unpack = "".join(
            f"tar -xzf {UPLOAD_DIR}/{name}.tgz -C {UPLOAD_DIR} && " for name in layout.upload
        )
        capture = self._capture
        # --flag=value: a token may begin with "-", which argparse would take for a flag.
        flags = [
            "--listen=127.0.0.1:0",
            f"--token={self._token}",
            f"--rollout-id={self._rollout_id}",
            f"--base-url={self._upstream.base_url}",
            f"--model={self._upstream.model}",
            f"--dialect-mode={self._upstream.dialect_mode.value}",
            f"--top-logprobs={capture.top_logprobs}",
            f"--max-tokens-cap={capture.max_tokens_cap}",
            f"--upstream-timeout-s={self._upstream_timeout_s:g}",
            *(["--disable-thinking"] if capture.disable_thinking else []),
            f"--sampling={capture.sampling.model_dump_json(exclude_none=True)}",
        ]
        argv = ["python3", "-I", "-c", _BOOT, layout.sources, layout.libraries, *flags]
        return unpack + "exec " + shlex.join(argv)

    def _environment(self) -> dict[str, str]:
        key = self._upstream.api_key
        return {API_KEY_ENV: key} if key else {}

    def _output(self, stream: OutputStream, chunk: bytes) -> None:
        self._lines[stream].feed(chunk)

    def _turn_line(self, line: bytes) -> None:
        try:
            turn = Turn.model_validate_json(line)
        except ValidationError:
            log.warning(
                "rollout %s: the in-sandbox proxy wrote %d bytes that are not a turn",
                self._rollout_id,
                len(line),
            )
            return
        self.turn_count += 1
        self.calls.add(turn, upstream_failed=turn.failed)
        self._on_turn(turn)

    def _log_line(self, line: bytes) -> None:
        text = self._scrub(line.decode(errors="replace"))
        if not self._ready.done():
            try:
                ready = json.loads(text)
            except ValueError:
                ready = None
            if isinstance(ready, dict) and ready.get("ready") and ready.get("base_url"):
                self._ready.set_result(str(ready["base_url"]))
                return
        log.debug("rollout %s: in-sandbox proxy: %s", self._rollout_id, text[:1000])

    async def _until_ready(self, process: BackgroundProcess) -> str:
        exited = asyncio.ensure_future(process.wait())
        either: set[asyncio.Future[Any]] = {self._ready, exited}
        try:
            await asyncio.wait(either, timeout=READY_TIMEOUT_S, return_when=asyncio.FIRST_COMPLETED)
        finally:
            exited.cancel()
        if self._ready.done():
            return self._ready.result()
        if not exited.done() or exited.cancelled():
            raise SandboxError(f"the capture proxy did not start within {READY_TIMEOUT_S:g}s")
        result = exited.result()
        stderr = self._scrub(result.stderr.strip())[-1000:]
        raise SandboxError(
            f"the capture proxy stopped before it was ready (exit {result.exit_code}): {stderr}"
        )

    def _scrub(self, text: str) -> str:
        key = self._upstream.api_key
        return scrub_text(text, (key,) if key else ())
