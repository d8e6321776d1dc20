"""`SessionRuntime`: a verifiers `Runtime` whose box is a rollout-service session.

verifiers' seam for sandboxes is its `Runtime` (`verifiers.v1.runtimes.base`): start, run a
program, read and write files, stop. A run borrows a live one with
`agent.run(task, runtime=box)`. Here each call is a session RPC (docs/sessions.md):

    Runtime              session
    start()              OpenSession (READY, else one line saying why), model route to `relay`
    run(argv, env)       Exec `bash -c` of the quoted argv, with env; stdout, stderr, exit
    run_program(...)     the same, and the harness's interception secret handed to the relay
    _read / write        ReadFile / WriteFile (relative paths: the task's workdir)
    host_url(url)        the session's model route, for verifiers' interception URL
    verify()             VerifySession: the rollout-service task's own reward; the box ends
    stop()               CloseSession, unless verified; the relay and channel closed

Every bad configuration fails in `start` with one line (`SessionRuntimeError`, a verifiers
`SandboxError`): the server unreachable, the token refused, the spec rejected (an unknown
task), setup failing.
"""

from __future__ import annotations

import contextlib
import hashlib
import shlex
from typing import Any, Literal
from urllib.parse import urlsplit

import grpc
from pydantic_config import BaseConfig
from rollout.v1 import rollout_pb2 as pb
from verifiers.v1.errors import SandboxError
from verifiers.v1.runtimes.base import BaseRuntimeInfo, ProgramResult, Runtime

from rollout_client.aio import AsyncRolloutClient
from rollout_client.client import RolloutClient
from rollout_client.connection import default_target
from rollout_client.errors import (
    InvalidArgumentError,
    NotFoundError,
    RolloutError,
    StatusError,
    UnauthenticatedError,
    UnavailableError,
)
from rollout_client.messages import SpecLike, to_spec
from rollout_client.unreachable import Sent, why_unreachable
from rollout_client.verifiers_runtime.relay import ModelRelay

__all__ = ["SessionRuntime", "SessionRuntimeConfig", "SessionRuntimeError", "SessionRuntimeInfo"]

_MAX_FILE_BYTES = 16 * 1024 * 1024  # ReadFile's bound
_LOOPBACK = frozenset({"127.0.0.1", "localhost", "::1"})


class SessionRuntimeError(SandboxError):
    """A session could not be opened or used; its message is one line."""


class SessionRuntimeConfig(BaseConfig):
    """What a session runtime is, as verifiers records it on a trace (no secrets)."""

    type: Literal["rollout-session"] = "rollout-session"
    target: str = ""
    """The rollout-service server, host:port."""
    python: str | None = None
    """An interpreter in the sandbox that runs harness scripts instead of uv (None: uv)."""


class SessionRuntimeInfo(SessionRuntimeConfig, BaseRuntimeInfo):
    """The config, and `id`: the session's id once open."""


class SessionRuntime(Runtime):
    """A verifiers `Runtime` backed by one rollout-service session of `spec` (its `agent`
    unset). `target`, `token` and `credentials` are `AsyncRolloutClient`'s. `python` names
    an interpreter inside the sandbox that already has a harness script's dependencies
    (verifiers' chat program: openai, mcp, httpx, httpx2, tenacity, certifi); without it
    scripts are prepared with uv, which needs the sandbox to reach PyPI. `command_timeout_s`
    bounds each command (None: the spec's command_timeout, else the server's default).
    Use it as `async with`, or call `start()` and `stop()`."""

    is_local = True  # the relay carries the interception URL: no tunnel

    def __init__(
        self,
        spec: SpecLike,
        *,
        target: str | None = None,
        token: str | None = None,
        credentials: grpc.ChannelCredentials | None = None,
        python: str | None = None,
        command_timeout_s: float | None = None,
        idle_timeout_s: float | None = None,
        name: str | None = None,
    ) -> None:
        super().__init__(name)
        self.config = SessionRuntimeConfig(target=target or default_target(), python=python)
        self.info = SessionRuntimeInfo(**self.config.model_dump())
        self.spec = to_spec(spec)
        self.session: pb.Session | None = None
        """The session as opened (READY), or as it ended after `verify`."""
        self._token = token
        self._credentials = credentials
        self._command_timeout_s = command_timeout_s
        self._idle_timeout_s = idle_timeout_s
        self._client: AsyncRolloutClient | None = None
        self._relay = ModelRelay()
        self._open = False
        self._scripts: set[str] = set()

    async def __aenter__(self) -> SessionRuntime:
        try:
            await self.start()
        except BaseException:
            await self.stop()
            raise
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    @property
    def session_id(self) -> str:
        if self.session is None:
            raise SessionRuntimeError("the session is not open: call start() first")
        return self.session.id

    async def start(self) -> None:
        target = self.config.target
        try:
            self._client = AsyncRolloutClient(
                target, token=self._token, credentials=self._credentials, timeout=60.0
            )
        except ValueError as exc:  # a token that is no token
            raise SessionRuntimeError(f"rollout-service at {target}: {exc}") from exc
        spec = pb.RolloutSpec()
        spec.CopyFrom(self.spec)
        # The route's upstream is the relay; the model name is the one the harness's
        # program sends (the spec's, when it gives one), which verifiers answers for.
        model = spec.endpoint.model or "verifiers"
        base_url = await self._relay.start()
        spec.endpoint.CopyFrom(pb.Endpoint(base_url=base_url, api_key=self._relay.key, model=model))
        try:
            (session,) = await self._client.open_session(spec, idle_timeout_s=self._idle_timeout_s)
        except RolloutError as exc:
            raise SessionRuntimeError(self._why_not_opened(exc)) from exc
        self.session = session
        self.info.id = session.id
        if session.status != pb.SESSION_STATUS_READY:
            error = session.result.error
            kind = pb.ErrorKind.Name(error.kind).removeprefix("ERROR_KIND_")
            message = " ".join(error.message.split())
            raise SessionRuntimeError(f"session {session.id} did not open ({kind}): {message}")
        self._open = True

    def _why_not_opened(self, exc: RolloutError) -> str:
        target = self.config.target
        if isinstance(exc, UnavailableError):
            sent = Sent.TLS if self._credentials is not None else Sent.PLAINTEXT
            return f"rollout-service is unreachable: {why_unreachable(exc.details, target, sent)}"
        if isinstance(exc, UnauthenticatedError):
            return f"rollout-service at {target} refused the token: {exc.details}"
        if isinstance(exc, InvalidArgumentError):
            return f"rollout-service at {target} rejected the session's spec: {exc.details}"
        if isinstance(exc, StatusError):
            return f"rollout-service at {target}: {exc.code.name}: {exc.details}"
        return f"rollout-service at {target}: {exc}"

    def _live_client(self) -> AsyncRolloutClient:
        if self._client is None or not self._open:
            raise SessionRuntimeError(
                "the session is not open (never started, verified or stopped)"
            )
        return self._client

    async def run(self, argv: list[str], env: dict[str, str]) -> ProgramResult:
        client = self._live_client()
        try:
            ran = await client.exec(
                self.session_id,
                shlex.join(argv),
                timeout_s=self._command_timeout_s,
                env=self.process_env(env),
                max_output_bytes=_MAX_FILE_BYTES,
            )
        except StatusError as exc:
            raise SessionRuntimeError(f"session {self.session_id}: {exc.details}") from exc
        exit_code = -1 if ran.timed_out else ran.exit_code
        stdout, stderr = (data.decode(errors="replace") for data in (ran.stdout, ran.stderr))
        return ProgramResult(exit_code, stdout, stderr)

    async def run_program(self, argv: list[str], env: dict[str, str]) -> ProgramResult:
        """Run a harness's main program; the interception secret it carries (`--api-key=`)
        is what the relay sends on its model calls."""
        for arg in argv:
            if arg.startswith("--api-key="):
                self._relay.point(secret=arg.removeprefix("--api-key="))
        return await self.run(argv, env)

    def host_url(self, url: str) -> str:
        """verifiers' interception URL (host loopback, ending in /v1) as the session's model
        route; any other URL unchanged (a sandbox does not reach the caller's loopback)."""
        parts = urlsplit(url)
        route = self.session.model_base_url if self.session is not None else ""
        if route and parts.hostname in _LOOPBACK and parts.path.rstrip("/").endswith("/v1"):
            self._relay.point(target=url)
            return route
        return url

    async def prepare_uv_script(
        self, script: str | bytes, env: dict[str, str] | None = None, *, activate: bool = True
    ) -> list[str]:
        if self.config.python is None:
            return list(await super().prepare_uv_script(script, env, activate=activate))
        data = script.encode() if isinstance(script, str) else script
        path = f"{self.scripts_dir}/{hashlib.sha256(data).hexdigest()}.py"
        if path not in self._scripts:
            await self.write(path, data)
            self._scripts.add(path)
        return [self.config.python, path]

    async def _read(self, path: str, max_bytes: int | None = None) -> bytes:
        client = self._live_client()
        limit = _MAX_FILE_BYTES if max_bytes is None else min(max_bytes, _MAX_FILE_BYTES)
        try:
            response = await client.read_file(self.session_id, path, max_bytes=max(limit, 1))
        except StatusError as exc:
            raise SessionRuntimeError(f"read {path!r}: {exc.details}") from exc
        if not response.found:
            raise SessionRuntimeError(f"read {path!r}: no regular file there")
        if response.truncated and max_bytes is None:
            raise SessionRuntimeError(f"read {path!r}: over the {_MAX_FILE_BYTES} byte limit")
        return response.content[:limit] if max_bytes is not None else response.content

    async def write(self, path: str, data: bytes) -> None:
        client = self._live_client()
        try:
            await client.write_file(self.session_id, path, data)
        except StatusError as exc:
            raise SessionRuntimeError(f"write {path!r}: {exc.details}") from exc

    async def verify(self) -> pb.Session:
        """End the session with its rollout-service reward (`result.reward`): the task's
        own verification, run as a rollout's. The box is gone afterwards."""
        client = self._live_client()
        self._open = False
        self.session = await client.verify_session(self.session_id)
        return self.session

    async def teardown(self) -> None:
        if self._client is not None:
            if self._open:
                self._open = False
                with contextlib.suppress(NotFoundError, StatusError):
                    await self._client.close_session(self.session_id)
            await self._client.close()
            self._client = None
        await self._relay.stop()

    def cleanup(self) -> None:
        """At interpreter exit (a run cut short): close the session over a blocking channel."""
        if not self._open or self.session is None:
            return
        self._open = False
        with (
            RolloutClient(
                self.config.target, token=self._token, credentials=self._credentials
            ) as client,
            contextlib.suppress(RolloutError),
        ):
            client.close_session(self.session.id)

    def describe(self) -> dict[str, Any]:
        return {"target": self.config.target, "session": self.info.id}
