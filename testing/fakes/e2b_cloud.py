"""A fake of the E2B cloud on one loopback port, for the real `e2b` SDK.

The control-plane REST API (`POST/GET /v2/sandboxes`, `DELETE /sandboxes/{id}`, JSON as the
SDK's generated client reads it) and, behind the same port, every sandbox's envd
(`testing.fakes.envd`), routed by the `E2b-Sandbox-Id` header as E2B's sandbox proxy does.
A request for a sandbox that is gone gets the proxy's 502 "... was not found".

Point the SDK at it with `environment()` (`E2B_API_URL` and `E2B_SANDBOX_URL`; not debug
mode, which skips create/kill and would test nothing). Faults: `fail_creates` (statuses or
"reset"), `hold_creates`, `vanish` (a sandbox dies mid-command).

Templates: `add_template(name, files)` seeds files into the writable paths of every sandbox
made from it. Templates are also built through the SDK's template builder (`templates`,
`testing.fakes.e2b_templates`: the build routes, realised by the service's image store); a
sandbox of a built one runs on its image's root filesystem, with its ENV.
Snapshots (`POST /sandboxes/{id}/snapshots`, as `create_snapshot` sends it, its body in
`snapshot_bodies`) are templates too: a copy of the sandbox's filesystem as it is then
(what it wrote: every kind of file, with modes and owners; an image's overlay layer with
its whiteouts), from which a sandbox starts with the snapshotted one's image and ENV and
no process (the fake keeps no memory, so a full snapshot is a filesystem one); `GET
/snapshots` lists them (`list_snapshots`), `DELETE /templates/{id}` (`delete_snapshot`)
removes one; `snapshots` lists every one taken.
Network: `PUT /sandboxes/{id}/network` is recorded in `network_updates`; the fake cannot
filter by host, so any `allowOut` opens the sandbox's network as a whole (for commands
started after the update).
"""

from __future__ import annotations

import asyncio
import json
import shutil
import time
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, unquote

from service.config import Settings
from testing.fakes.e2b_templates import UPLOAD_PREFIX, FakeTemplateBuilds
from testing.fakes.envd import ENVD_VERSION, FakeSandbox, serve_envd
from testing.fakes.http1 import Http1Server, HttpRequest, HttpResponse

__all__ = ["FakeE2B", "SandboxRecord"]

_DEFAULT_TIMEOUT_S = 300


@dataclass
class SandboxRecord:
    """What the control plane knows of one sandbox."""

    sandbox: FakeSandbox
    template: str
    metadata: dict[str, str]
    timeout_s: int
    allow_internet_access: bool | None
    started_at: datetime = field(default_factory=lambda: datetime.now(UTC))
    expiry: asyncio.TimerHandle | None = None

    def listed(self) -> dict[str, Any]:
        return {
            "templateID": self.template,
            "sandboxID": self.sandbox.id,
            "clientID": "fake",
            "startedAt": self.started_at.isoformat(),
            "endAt": (self.started_at + timedelta(seconds=self.timeout_s)).isoformat(),
            "cpuCount": 2,
            "memoryMB": 512,
            "diskSizeMB": 1024,
            "state": "running",
            "envdVersion": ENVD_VERSION,
            "metadata": self.metadata,
        }


class FakeE2B:
    """The E2B API and sandboxes; sandboxes' files live under `root`, the images of built
    templates in the store under `cache_dir` (the server's default: FROM finds the base)."""

    def __init__(
        self, root: Path, api_key: str = "e2b_fake_key", cache_dir: Path | None = None
    ) -> None:
        self.root = root
        self.api_key = api_key
        self.templates = FakeTemplateBuilds(root / "templates", cache_dir or Settings().cache_dir)
        self.records: dict[str, SandboxRecord] = {}
        self.create_bodies: list[dict[str, Any]] = []
        """Every create request received (failed ones too), with `_idempotency_key`, `_at`."""
        self.create_arrived = asyncio.Event()
        self._create_gate = asyncio.Event()
        self._create_gate.set()
        self.network_updates: list[tuple[str, dict[str, Any]]] = []
        """(sandbox id, body) of every network update received."""
        self._templates: dict[str, dict[str, tuple[bytes, int]]] = {}
        self.snapshots: list[str] = []
        """The id of every snapshot taken, deleted or not."""
        self.snapshot_bodies: list[dict[str, Any]] = []
        """The body of every snapshot request received."""
        self._snapshots: dict[str, _Snapshot] = {}
        self.refuse_snapshots = False
        """Answer snapshots 400, as E2B does where a team may not take them."""
        self._failures: list[int | str] = []
        self._by_idempotency_key: dict[str, str] = {}
        self._server = Http1Server(self._handle)

    async def start(self) -> FakeE2B:
        await self._server.start()
        return self

    async def close(self) -> None:
        for record in self.records.values():
            if record.sandbox.alive:
                record.sandbox.destroy()
        for snapshot in self._snapshots.values():
            shutil.rmtree(snapshot.directory, ignore_errors=True)
        await self._server.close()
        await self.templates.close()

    @property
    def url(self) -> str:
        return self._server.url

    def environment(self) -> dict[str, str]:
        """Environment variables that point the e2b SDK here."""
        return {
            "E2B_API_KEY": self.api_key,
            "E2B_API_URL": self.url,
            "E2B_SANDBOX_URL": self.url,
            "E2B_DEBUG": "false",
        }

    def live_ids(self) -> set[str]:
        return {sid for sid, record in self.records.items() if record.sandbox.alive}

    def add_template(self, name: str, files: dict[str, tuple[bytes, int]]) -> None:
        """Sandboxes of template `name` start with these files: sandbox path -> (data, mode)."""
        self._templates[name] = files

    def fail_creates(self, *outcomes: int | str) -> None:
        """Answer the next creates with these HTTP statuses ("reset" drops the connection)."""
        self._failures.extend(outcomes)

    def hold_creates(self) -> None:
        """Make creates wait (after `create_arrived` is set) until `release_creates`."""
        self.create_arrived.clear()
        self._create_gate.clear()

    def release_creates(self) -> None:
        self._create_gate.set()

    def vanish(self, sandbox_id: str, *, drop_connections: bool = True) -> None:
        """The sandbox dies: its processes are killed; open streams drop (or hang forever)."""
        self.records[sandbox_id].sandbox.destroy(drop_connections=drop_connections)

    async def _handle(self, request: HttpRequest, response: HttpResponse) -> None:
        sandbox_id = request.headers.get("e2b-sandbox-id")
        if sandbox_id is not None:
            return await self._envd(sandbox_id, request, response)
        if request.method == "PUT" and request.path.startswith(UPLOAD_PREFIX):
            return await self.templates.upload(request, response)
        if request.headers.get("x-api-key") != self.api_key:
            return await response.reply_json(401, {"code": 401, "message": "Invalid API key"})
        route = (request.method, request.path.rstrip("/"))
        if await self.templates.handle(self.url, request, response):
            return None
        if route == ("POST", "/v2/sandboxes"):
            await self._create(request, response)
        elif route == ("GET", "/v2/sandboxes"):
            await self._list(request, response)
        elif request.method == "POST" and request.path.endswith("/snapshots"):
            sandbox_id = request.path.removeprefix("/sandboxes/").removesuffix("/snapshots")
            await self._snapshot(sandbox_id, json.loads(request.body or b"{}"), response)
        elif route == ("GET", "/snapshots"):
            await self._list_snapshots(request, response)
        elif request.method == "DELETE" and request.path.startswith("/templates/"):
            await self._delete_template(request.path.removeprefix("/templates/"), response)
        elif request.method == "DELETE" and request.path.startswith("/sandboxes/"):
            await self._delete(request.path.removeprefix("/sandboxes/"), response)
        elif request.method == "PUT" and request.path.endswith("/network"):
            sandbox_id = request.path.removeprefix("/sandboxes/").removesuffix("/network")
            await self._update_network(sandbox_id, json.loads(request.body), response)
        else:
            await response.reply_json(404, {"code": 404, "message": f"no route {route}"})

    async def _envd(self, sandbox_id: str, request: HttpRequest, response: HttpResponse) -> None:
        record = self.records.get(sandbox_id)
        if record is None or not record.sandbox.alive:
            gone = {"sandboxId": sandbox_id, "message": "The sandbox was not found", "code": 502}
            return await response.reply_json(502, gone)
        await serve_envd(record.sandbox, request, response)

    async def _create(self, request: HttpRequest, response: HttpResponse) -> None:
        body = json.loads(request.body)
        key = request.headers.get("idempotency-key", "")
        self.create_bodies.append(body | {"_idempotency_key": key, "_at": time.monotonic()})
        self.create_arrived.set()
        await self._create_gate.wait()
        if self._failures:
            outcome = self._failures.pop(0)
            if outcome == "reset":
                return response.abort()
            failure = {"code": outcome, "message": "injected failure"}
            return await response.reply_json(int(outcome), failure)
        template = body["templateID"]
        if self.templates.registered(template) and self.templates.image_of(template) is None:
            unready = {"code": 400, "message": f"template '{template}' has no ready build"}
            return await response.reply_json(400, unready)
        record = self.records.get(self._by_idempotency_key.get(key, ""))
        if record is None or not record.sandbox.alive:
            record = self._new_sandbox(body)
            self._by_idempotency_key[key] = record.sandbox.id
            if record.sandbox.rootfs is not None:
                await record.sandbox.boot()
        await response.reply_json(201, self._created(record))

    def _new_sandbox(self, body: dict[str, Any]) -> SandboxRecord:
        internet = body.get("allow_internet_access")
        snapshot = self._snapshots.get(body["templateID"])
        template = body["templateID"] if snapshot is None else snapshot.template
        envs = body.get("envVars", {})
        image = self.templates.image_of(template)
        if image is not None:
            envs = image.config.env | envs
        rootfs = None if image is None else image.rootfs
        sandbox = FakeSandbox(
            self.root,
            envs=envs,
            internet=internet is not False,
            rootfs=rootfs,
            start_from=None if snapshot is None else snapshot.directory,
        )
        if snapshot is None:
            self._seed(sandbox, self._templates.get(template, {}))
        record = SandboxRecord(
            sandbox=sandbox,
            template=body["templateID"],
            metadata=body.get("metadata", {}),
            timeout_s=int(body.get("timeout", _DEFAULT_TIMEOUT_S)),
            allow_internet_access=internet,
        )
        loop = asyncio.get_running_loop()
        record.expiry = loop.call_later(record.timeout_s, self._expire, sandbox.id)
        self.records[sandbox.id] = record
        return record

    @staticmethod
    def _seed(sandbox: FakeSandbox, files: dict[str, tuple[bytes, int]]) -> None:
        for path, (data, mode) in files.items():
            target, writable = sandbox.resolve(path)
            if not writable:
                raise ValueError(f"a fake template can only seed writable paths, not {path}")
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(data)
            target.chmod(mode)

    def _expire(self, sandbox_id: str) -> None:
        sandbox = self.records[sandbox_id].sandbox
        if sandbox.alive:
            sandbox.destroy()

    def _created(self, record: SandboxRecord) -> dict[str, Any]:
        return {
            "templateID": record.template,
            "sandboxID": record.sandbox.id,
            "clientID": "fake",
            "envdVersion": ENVD_VERSION,
            "envdAccessToken": record.sandbox.access_token,
        }

    async def _list(self, request: HttpRequest, response: HttpResponse) -> None:
        wanted = {k: v[-1] for k, v in parse_qs(request.param("metadata")).items()}
        matching = [
            record.listed()
            for record in self.records.values()
            if record.sandbox.alive and wanted.items() <= record.metadata.items()
        ]
        await self._reply_page(request, response, matching, "sandboxID")

    @staticmethod
    async def _reply_page(
        request: HttpRequest, response: HttpResponse, items: list[dict[str, Any]], key: str
    ) -> None:
        """One page of a listing in `key` order, `x-next-token` naming where the next starts
        as E2B does: a cursor (the last `key` sent), so that items removed between two pages
        do not make the next skip others, as an offset would."""
        after = request.param("nextToken") or ""
        limit = int(request.param("limit") or 100)
        rest = sorted((item for item in items if item[key] > after), key=lambda item: item[key])
        page = rest[:limit]
        headers = {"content-type": "application/json"}
        if len(rest) > limit:
            headers["x-next-token"] = page[-1][key]
        body = json.dumps(page).encode()
        await response.start(200, headers | {"content-length": str(len(body))})
        await response.send(body)
        await response.end()

    async def _delete(self, sandbox_id: str, response: HttpResponse) -> None:
        record = await self._live_record(sandbox_id, response)
        if record is None:
            return
        record.sandbox.destroy()
        if record.expiry is not None:
            record.expiry.cancel()
        await response.reply_empty(204)

    async def _live_record(self, sandbox_id: str, response: HttpResponse) -> SandboxRecord | None:
        """The live sandbox's record, or None once the API's 404 is sent."""
        record = self.records.get(sandbox_id)
        if record is None or not record.sandbox.alive:
            message = f"sandbox '{sandbox_id}' not found"
            await response.reply_json(404, {"code": 404, "message": message})
            return None
        return record

    async def _snapshot(
        self, sandbox_id: str, body: dict[str, Any], response: HttpResponse
    ) -> None:
        record = await self._live_record(sandbox_id, response)
        if record is None:
            return
        if self.refuse_snapshots:
            refused = {"code": 400, "message": "snapshots are not enabled for this team"}
            return await response.reply_json(400, refused)
        self.snapshot_bodies.append(body)
        name = body.get("name") or f"snapshot-{uuid.uuid4().hex[:12]}"
        snapshot_id = f"{name}:default"
        source = self._snapshots.get(record.template)
        snapshot = _Snapshot(
            self.root / "snapshots" / uuid.uuid4().hex,
            record.template if source is None else source.template,
        )
        await asyncio.to_thread(record.sandbox.copy_layers, snapshot.directory)
        self._snapshots[snapshot_id] = snapshot
        self.snapshots.append(snapshot_id)
        await response.reply_json(201, self._snapshot_info(snapshot_id))

    @staticmethod
    def _snapshot_info(snapshot_id: str) -> dict[str, Any]:
        return {"snapshotID": snapshot_id, "names": [f"fake-team/{snapshot_id}"]}

    async def _list_snapshots(self, request: HttpRequest, response: HttpResponse) -> None:
        snapshots = [self._snapshot_info(s) for s in self._snapshots]
        await self._reply_page(request, response, snapshots, "snapshotID")

    async def _delete_template(self, template_id: str, response: HttpResponse) -> None:
        template_id = unquote(template_id)
        snapshot = self._snapshots.pop(template_id, None)
        if snapshot is not None:
            await asyncio.to_thread(shutil.rmtree, snapshot.directory)
        elif self._templates.pop(template_id, None) is None:
            message = f"template '{template_id}' not found"
            return await response.reply_json(404, {"code": 404, "message": message})
        await response.reply_empty(204)

    def template_ids(self) -> set[str]:
        """Templates and snapshots not deleted."""
        return set(self._templates) | set(self._snapshots)

    async def _update_network(
        self, sandbox_id: str, body: dict[str, Any], response: HttpResponse
    ) -> None:
        record = await self._live_record(sandbox_id, response)
        if record is None:
            return
        self.network_updates.append((sandbox_id, body))
        if body.get("allowOut"):
            record.sandbox.internet = True
        await response.reply_empty(204)


@dataclass(frozen=True)
class _Snapshot:
    """A snapshot: a copy of what its sandbox wrote, over the template that sandbox ran on."""

    directory: Path
    template: str
