"""Harbor's environment seam backed by a rollout-service session (docs/harbor-environment.md).

    harbor run -p tasks/ -a oracle --env rollout_client.harbor_env:RolloutEnvironment \\
        --ek target=127.0.0.1:50051

Needs Harbor (Python 3.12+): `pip install 'rollout-client[harbor]'` in Harbor's venv.

| Harbor                          | the session                                               |
| ------------------------------- | --------------------------------------------------------- |
| start                           | OpenSession of the task directory (uploaded as            |
|                                 | `harbor_task.archive`, or `harbor_task.path` under the    |
|                                 | server's task roots with `--ek task_root=NAME`): the      |
|                                 | server builds its Dockerfile, applies resources, network  |
| exec(command, cwd, env, timeout)| Exec, output streamed to Harbor's callbacks; a `user`     |
|                                 | other than the sandbox's own is refused                   |
| upload / download               | WriteFile (modes: one chmod) / ListFiles + ReadFile       |
| stop                            | CloseSession (VerifySession with `--ek verify=true`)      |
| an agent's model calls          | the base URL and key variables of every exec point at the |
|                                 | session's capture route: each call is a turn              |

What it cannot do (GPUs, TPUs, compose, allowlists, a per-command user, mounts, stream mode,
Windows) Harbor refuses from `capabilities`, or `start`/`exec` refuse naming it.
"""

from __future__ import annotations

import asyncio
import json
import os
import shlex
from pathlib import Path, PurePosixPath
from typing import Any

from harbor.environments.base import BaseEnvironment, ExecResult
from harbor.environments.capabilities import (
    EnvironmentCapabilities,
    EnvironmentResourceCapabilities,
)
from harbor.models.task.config import NetworkMode
from harbor.models.trial.paths import EnvironmentPaths
from rollout.v1 import rollout_pb2 as pb

from rollout_client.aio import AsyncRolloutClient
from rollout_client.errors import RolloutError
from rollout_client.export.atif import to_atif
from rollout_client.harbor_pack import pack_task_dir

__all__ = ["RolloutEnvironment", "SessionEnvironmentError"]

_CONNECT_TIMEOUT_S = 10.0
_FILE_MAX_BYTES = 16 * 1024 * 1024
_LIST_MAX_ENTRIES = 10_000
_ROUTE_VARIABLES = ("OPENAI_BASE_URL", "OPENAI_API_KEY")
SESSION_RECORD = "rollout-session.json"
"""Written into the trial directory at stop: the session id, its status and reward, and the
session's ATIF trajectory (every model call captured as a turn)."""


class SessionEnvironmentError(RuntimeError):
    """A call the environment cannot make, or one the service refused: one line, the why."""


class RolloutEnvironment(BaseEnvironment):
    """A Harbor environment whose sandbox is a rollout-service session.

    Keyword arguments (Harbor's `--ek key=value`): `target` (host:port; default
    $ROLLOUT_TARGET, else 127.0.0.1:50051), `token` (default $ROLLOUT_TOKEN), `task_root` (the
    name of a server task root holding this task's directory: sent by path instead of
    uploaded), `base_url`, `model` and `api_key_env` (the upstream LLM endpoint the session's
    capture route relays to; the key is read from that variable of Harbor's process),
    `verify` (true: stop with VerifySession, the service's own verification, its reward
    recorded beside Harbor's), `idle_timeout_s`.
    """

    def __init__(
        self,
        *args: Any,
        target: str | None = None,
        token: str | None = None,
        task_root: str | None = None,
        base_url: str | None = None,
        model: str | None = None,
        api_key_env: str | None = None,
        verify: bool | str = False,
        idle_timeout_s: float | str = 0,
        **kwargs: Any,
    ) -> None:
        self._target = target
        self._token = token
        self._task_root = task_root
        self._endpoint = _endpoint(base_url, model, api_key_env)
        self._verify = str(verify).lower() in ("1", "true", "yes")
        self._idle_timeout_s = float(idle_timeout_s)
        self._client: AsyncRolloutClient | None = None
        self._session: pb.Session | None = None
        self._user: tuple[str, str] = ("", "")
        self._route: dict[str, str] = {}
        super().__init__(*args, **kwargs)

    @staticmethod
    def type() -> str:
        return "rollout-service"

    @property
    def capabilities(self) -> EnvironmentCapabilities:
        # NONE and FULL are the service's network policies; no allowlist, no policy change
        # between phases (a session's network is fixed when it opens), no host mounts.
        return EnvironmentCapabilities(disable_internet=True)

    @classmethod
    def resource_capabilities(cls) -> EnvironmentResourceCapabilities:
        # A local sandbox bounds memory; its CPU count is not enforced (E2B only).
        return EnvironmentResourceCapabilities(memory_limit=True)

    def _validate_definition(self) -> None:
        task_dir = self.environment_dir.parent
        if not (task_dir / "instruction.md").is_file():
            raise SessionEnvironmentError(f"{task_dir}: no instruction.md (not a Harbor task)")
        if (self.environment_dir / "docker-compose.yaml").exists():
            raise SessionEnvironmentError(
                f"{task_dir.name}: docker-compose environments are not supported by "
                "rollout-service (one Dockerfile per task)"
            )
        if (
            self.task_env_config.docker_image
            and not (self.environment_dir / "Dockerfile").is_file()
        ):
            raise SessionEnvironmentError(
                f"{task_dir.name}: [environment].docker_image is not supported by "
                "rollout-service; give the task an environment/Dockerfile"
            )

    async def start(self, force_build: bool) -> None:
        client = AsyncRolloutClient(self._target, token=self._token, timeout=120.0)
        self._client = client
        if not await client.wait_until_ready(_CONNECT_TIMEOUT_S):
            raise SessionEnvironmentError(
                f"rollout-service at {client.target} is unreachable "
                f"(no connection in {_CONNECT_TIMEOUT_S:.0f}s): is the server running?"
            )
        try:
            [session] = await client.open_session(
                self._spec(), idle_timeout_s=self._idle_timeout_s or None
            )
        except RolloutError as exc:
            raise SessionEnvironmentError(f"opening a session at {client.target}: {exc}") from exc
        self._session = session
        if session.status != pb.SESSION_STATUS_READY:
            error = session.result.error
            kind = pb.ErrorKind.Name(error.kind).removeprefix("ERROR_KIND_")
            raise SessionEnvironmentError(
                f"session {session.id} did not open ({kind}): {error.message}"
            )
        await self._learn_session()
        # Harbor's log directories, which mounting providers make as their mount points.
        paths = EnvironmentPaths.for_os(self.os)
        await self.ensure_dirs([paths.agent_dir, paths.verifier_dir, paths.artifacts_dir])

    def _spec(self) -> pb.RolloutSpec:
        task_dir = self.environment_dir.parent
        harbor_task = (
            pb.HarborTask(path=f"{self._task_root}/{task_dir.name}")
            if self._task_root
            else pb.HarborTask(archive=pack_task_dir(task_dir))
        )
        config = self.task_env_config
        network = (
            pb.NETWORK_POLICY_NONE
            if self.network_policy.network_mode == NetworkMode.NO_NETWORK
            else pb.NETWORK_POLICY_FULL
        )
        resources = pb.Resources(
            memory_mb=config.memory_mb or 0,
            disk_mb=config.storage_mb or 0,
            cpu_count=int(config.cpus or 0),
        )
        labels = {"harbor_session": _label(self.session_id)}
        return pb.RolloutSpec(
            harbor_task=harbor_task,
            sandbox=pb.SandboxSpec(network=network, resources=resources),
            endpoint=self._endpoint,
            labels=labels,
        )

    async def _learn_session(self) -> None:
        """The sandbox's user (what `user=` may name) and its model route's variables."""
        names = " ".join(f'"${name}"' for name in _ROUTE_VARIABLES)
        probe = await self._run(f'id -un; id -u; printf "%s\\n" {names}', None, {}, 60)
        lines = (probe.stdout or "").splitlines()
        if probe.return_code != 0 or len(lines) < 2 + len(_ROUTE_VARIABLES):
            raise SessionEnvironmentError(f"probing the session failed: {probe.stderr}")
        self._user = (lines[0], lines[1])
        route = dict(zip(_ROUTE_VARIABLES, lines[2:], strict=False))
        if route.get("OPENAI_BASE_URL"):
            self._route = _route_env(route["OPENAI_BASE_URL"], route["OPENAI_API_KEY"])

    async def stop(self, delete: bool) -> None:
        client, session = self._client, self._session
        if client is None:
            return
        try:
            if session is not None and session.status == pb.SESSION_STATUS_READY:
                ended = (
                    await client.verify_session(session.id)
                    if self._verify
                    else await client.close_session(session.id)
                )
                await self._record(client, ended)
        finally:
            self._client = None
            await client.close()

    async def _record(self, client: AsyncRolloutClient, ended: pb.Session) -> None:
        rollout = await client.get(ended.id, view=pb.RESULT_VIEW_FULL)
        record = {
            "session_id": ended.id,
            "status": pb.SessionStatus.Name(ended.status).removeprefix("SESSION_STATUS_"),
            "reward": ended.result.reward if ended.result.HasField("reward") else None,
            "turns": len(rollout.result.turns),
            "trajectory": to_atif(rollout),
        }
        path = self.trial_paths.trial_dir / SESSION_RECORD
        path.write_text(json.dumps(record, indent=2), encoding="utf-8")

    async def exec(
        self,
        command: str,
        cwd: str | None = None,
        env: dict[str, str] | None = None,
        timeout_sec: int | None = None,
        user: str | int | None = None,
    ) -> ExecResult:
        self._check_user(self._resolve_user(user))
        merged = {**(self._merge_env(env) or {}), **self._route}
        return await self._run(command, cwd, merged, timeout_sec)

    def _check_user(self, user: str | int | None) -> None:
        if user is None or str(user) in self._user:
            return
        raise SessionEnvironmentError(
            f"exec as user {user!r}: a rollout-service session runs every command as its "
            f"sandbox's user ({self._user[0]}, uid {self._user[1]}); no per-command user"
        )

    async def _run(
        self, command: str, cwd: str | None, env: dict[str, str], timeout_sec: float | None
    ) -> ExecResult:
        out: dict[int, list[bytes]] = {pb.EXEC_STREAM_STDOUT: [], pb.EXEC_STREAM_STDERR: []}
        callback = self._output_callback()
        result = pb.ExecResult()
        calls = self._connected().exec_stream(
            self._session_id(), command, timeout_s=timeout_sec or None, cwd=cwd or "", env=env
        )
        try:
            async for response in calls:
                if response.HasField("result"):
                    result = response.result
                    continue
                item = response.output
                out[item.stream].append(item.data)
                if callback is not None:
                    stream = "stdout" if item.stream == pb.EXEC_STREAM_STDOUT else "stderr"
                    await callback(item.data.decode("utf-8", errors="replace"), stream)
        except RolloutError as exc:
            raise SessionEnvironmentError(f"exec in session {self._session_id()}: {exc}") from exc
        if result.timed_out:
            raise TimeoutError(f"command timed out after {timeout_sec} seconds: {command[:200]}")
        stdout, stderr = (b"".join(out[s]).decode("utf-8", "replace") for s in sorted(out))
        return ExecResult(stdout=stdout, stderr=stderr, return_code=result.exit_code)

    async def upload_file(self, source_path: Path | str, target_path: str) -> None:
        source = Path(source_path)
        await self._write(source, target_path)
        if os.access(source, os.X_OK):
            await self._checked(f"chmod +x {shlex.quote(target_path)}")

    async def upload_dir(self, source_dir: Path | str, target_dir: str) -> None:
        target = PurePosixPath(target_dir)
        directories, files = await asyncio.to_thread(_local_tree, Path(source_dir))
        directories = [str(target), *(str(target / d) for d in directories)]
        executables = []
        for relative, executable in files:
            destination = str(target / relative)
            await self._write(Path(source_dir) / relative, destination)
            if executable:
                executables.append(destination)
        command = "mkdir -p " + " ".join(map(shlex.quote, directories))
        if executables:
            command += " && chmod +x " + " ".join(map(shlex.quote, executables))
        await self._checked(command)

    async def download_file(self, source_path: str, target_path: Path | str) -> None:
        try:
            read = await self._connected().read_file(
                self._session_id(), source_path, max_bytes=_FILE_MAX_BYTES
            )
        except RolloutError as exc:
            raise SessionEnvironmentError(f"reading {source_path}: {exc}") from exc
        if not read.found:
            raise FileNotFoundError(f"{source_path}: no regular file in the session")
        if read.truncated:
            raise SessionEnvironmentError(
                f"{source_path}: larger than a session file's 16 MiB, not downloaded"
            )
        await asyncio.to_thread(_save, Path(target_path), read.content)

    async def download_dir(self, source_dir: str, target_dir: Path | str) -> None:
        try:
            listing = await self._connected().list_files(
                self._session_id(), source_dir, max_entries=_LIST_MAX_ENTRIES
            )
        except RolloutError as exc:
            raise SessionEnvironmentError(f"listing {source_dir}: {exc}") from exc
        if listing.truncated:
            raise SessionEnvironmentError(
                f"{source_dir}: more than {_LIST_MAX_ENTRIES} files, not downloaded"
            )
        target = Path(target_dir)
        await asyncio.to_thread(target.mkdir, parents=True, exist_ok=True)
        for entry in listing.files:
            source = str(PurePosixPath(source_dir) / entry.path)
            await self.download_file(source, target / entry.path)

    async def _write(self, source: Path, target_path: str) -> None:
        content = await asyncio.to_thread(source.read_bytes)
        try:
            await self._connected().write_file(self._session_id(), target_path, content)
        except RolloutError as exc:
            raise SessionEnvironmentError(f"writing {target_path}: {exc}") from exc

    async def _checked(self, command: str) -> None:
        result = await self._run(command, None, {}, 120)
        if result.return_code != 0:
            raise SessionEnvironmentError(f"{command[:200]}: {result.stderr}".strip())

    def _connected(self) -> AsyncRolloutClient:
        if self._client is None:
            raise SessionEnvironmentError("the environment is not started")
        return self._client

    def _session_id(self) -> str:
        if self._session is None:
            raise SessionEnvironmentError("the environment has no session (start it first)")
        return self._session.id


def _endpoint(base_url: str | None, model: str | None, api_key_env: str | None) -> pb.Endpoint:
    if not base_url:
        return pb.Endpoint()
    key = os.environ.get(api_key_env, "") if api_key_env else ""
    if api_key_env and not key:
        raise SessionEnvironmentError(f"api_key_env: ${api_key_env} is not set")
    return pb.Endpoint(base_url=base_url, model=model or "", api_key=key)


def _route_env(base_url: str, key: str) -> dict[str, str]:
    """Every base-URL and key variable Harbor's agents read, set to the session's route, over
    what the agent passed: any agent's model calls reach the capture proxy."""
    root = base_url.removesuffix("/").removesuffix("/v1")
    return {
        "OPENAI_BASE_URL": base_url,
        "OPENAI_API_BASE": base_url,
        "OPENAI_API_KEY": key,
        "ANTHROPIC_BASE_URL": root,
        "ANTHROPIC_API_KEY": key,
        "ANTHROPIC_AUTH_TOKEN": key,
    }


def _local_tree(source: Path) -> tuple[list[str], list[tuple[str, bool]]]:
    """A local directory's subdirectories and files ("/"-separated, relative), each file with
    whether it is executable."""
    directories, files = [], []
    for path in sorted(source.rglob("*")):
        relative = path.relative_to(source).as_posix()
        if path.is_dir():
            directories.append(relative)
        elif path.is_file():
            files.append((relative, os.access(path, os.X_OK)))
    return directories, files


def _save(target: Path, content: bytes) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_bytes(content)


def _label(value: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in value)[:63]
