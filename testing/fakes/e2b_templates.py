"""E2B's template-build API for the fake cloud (`testing.fakes.e2b_cloud`), in the wire format
the e2b SDK's `AsyncTemplate.build` and `AsyncTemplate.exists` speak:

    POST /v3/templates                               {name} -> 202 {templateID, buildID, ...}
    GET  /templates/{id}/files/{hash}                -> 201 {present, url}
    PUT  <url>                                       the COPY step's files, a tar.gz
    POST /v2/templates/{id}/builds/{buildID}         {fromImage, steps, force} -> 202
    GET  /templates/{id}/builds/{buildID}/status     ?logsOffset -> {status, logEntries, reason}
    GET  /templates/aliases/{alias}                  200 once its build was requested, else 404
    GET  /templates/{id}                             the template and its builds' statuses

A build is realised for real: the steps are written back as a Dockerfile over a context made
of the uploaded archives, and built by the service's own image store (buildah, FROM an image
of that store, as a local Harbor task's is), so a sandbox of the template runs on the image's
root filesystem and sees exactly what the steps did. Its progress lines are the build's
logs; a failed step is status "error" with the store's message. The images are removed at
`close`. Needs root, like every image build here.

As E2B's API, an alias is known from the moment its build is requested (the alias lookup
joins the alias table and the templates, whatever their builds' state), so a template whose
only build failed still "exists"; creating a sandbox of it fails (the fake answers 400 "has
no ready build", its own wording). `fail_next_build` makes the next build fail in E2B's
builder whatever its steps (an outage, not the task's fault). `hold_lookups` makes alias lookups
wait for one another.
"""

from __future__ import annotations

import asyncio
import io
import json
import tarfile
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from service.errors import ImageError
from service.images import Image, ImageProgress, ImageStore
from testing.fakes.http1 import HttpRequest, HttpResponse

__all__ = ["UPLOAD_PREFIX", "FakeBuild", "FakeTemplateBuilds"]

UPLOAD_PREFIX = "/fake-uploads/"
"""Where the file upload links point (E2B's are presigned storage URLs, without the API key)."""
_LOG_PAGE = 100
"""Log entries per status answer, as E2B pages them."""


@dataclass
class FakeBuild:
    """One build of a template: its steps as received, its logs, its outcome."""

    template_id: str
    build_id: str
    name: str
    body: dict[str, Any] = field(default_factory=dict)
    status: str = "waiting"
    logs: list[dict[str, Any]] = field(default_factory=list)
    reason: dict[str, Any] | None = None
    image: Image | None = None
    dockerfile: str = ""
    created_at: str = field(default_factory=lambda: datetime.now(UTC).isoformat())

    def log(self, message: str, level: str = "info") -> None:
        stamp = datetime.now(UTC).isoformat()
        self.logs.append({"timestamp": stamp, "level": level, "message": message})


class FakeTemplateBuilds:
    """Template builds of one fake cloud; their files under `root`, images in `cache_dir`."""

    def __init__(self, root: Path, cache_dir: Path) -> None:
        self.root = root
        self.store = ImageStore(cache_dir)
        self.builds: list[FakeBuild] = []
        """Every build started (`POST /v2/templates/{id}/builds/{buildID}`), in order."""
        self._requested: dict[str, FakeBuild] = {}
        self._template_ids: dict[str, str] = {}
        self._uploads: dict[str, bytes] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._failing: list[str] = []
        self._lookups_held = 0
        self._lookups = asyncio.Barrier(1)

    async def close(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        for build in self.builds:
            if build.image is not None:
                await self.store.remove(_image_name(build))

    def fail_next_build(self, message: str) -> None:
        """Fail the next build started, with `message`, before it runs a step."""
        self._failing.append(message)

    def hold_lookups(self, count: int) -> None:
        """Answer the next `count` alias lookups only once all of them have arrived (replicas
        that look a template up at the same moment)."""
        self._lookups_held = count
        self._lookups = asyncio.Barrier(count)

    def registered(self, template: str) -> bool:
        """Whether `template` (a name or a template id) was ever requested."""
        return template in self._template_ids or template in self._template_ids.values()

    def image_of(self, template: str) -> Image | None:
        """The image of the last ready build of `template` (a name or a template id)."""
        for build in reversed(self.builds):
            if template in (build.name, build.template_id) and build.image is not None:
                return build.image
        return None

    async def upload(self, request: HttpRequest, response: HttpResponse) -> None:
        self._uploads[request.path.removeprefix(UPLOAD_PREFIX)] = request.body
        await response.reply_empty(200)

    async def handle(self, base_url: str, request: HttpRequest, response: HttpResponse) -> bool:
        """Answer a template-build route; False if `request` is none of them."""
        parts = request.path.strip("/").split("/")
        method = request.method
        if (method, parts) == ("POST", ["v3", "templates"]):
            await self._request_build(json.loads(request.body), response)
        elif method == "GET" and parts[:2] == ["templates", "aliases"] and len(parts) == 3:
            await self._alias(parts[2], response)
        elif method == "GET" and len(parts) == 2 and parts[0] == "templates":
            await self._template(parts[1], response)
        elif method == "GET" and len(parts) == 4 and parts[::2] == ["templates", "files"]:
            uploaded = parts[3] in self._uploads
            link = {"present": uploaded, "url": f"{base_url}{UPLOAD_PREFIX}{parts[3]}"}
            await response.reply_json(201, link)
        elif method == "POST" and len(parts) == 5 and parts[:2] == ["v2", "templates"]:
            await self._start(parts[2], parts[4], json.loads(request.body), response)
        elif method == "GET" and len(parts) == 5 and parts[-1] == "status":
            await self._status(parts[3], int(request.param("logsOffset") or 0), response)
        else:
            return False
        return True

    async def _request_build(self, body: dict[str, Any], response: HttpResponse) -> None:
        name = body["name"]
        template_id = self._template_ids.setdefault(name, "t" + uuid.uuid4().hex[:19])
        build = FakeBuild(template_id=template_id, build_id=str(uuid.uuid4()), name=name)
        self._requested[build.build_id] = build
        answer = {
            "templateID": template_id,
            "buildID": build.build_id,
            "public": False,
            "names": [name],
            "tags": body.get("tags") or ["default"],
            "aliases": [name],
        }
        await response.reply_json(202, answer)

    async def _alias(self, alias: str, response: HttpResponse) -> None:
        if self._lookups_held:
            self._lookups_held -= 1
            await self._lookups.wait()
        if alias not in self._template_ids:
            message = f"template '{alias}' not found"
            return await response.reply_json(404, {"code": 404, "message": message})
        await response.reply_json(200, {"templateID": self._template_ids[alias], "public": False})

    async def _template(self, template: str, response: HttpResponse) -> None:
        """`GET /templates/{id}` (a name too): E2B's TemplateWithBuilds."""
        builds = [b for b in self._requested.values() if template in (b.name, b.template_id)]
        if not builds:
            message = f"template '{template}' not found"
            return await response.reply_json(404, {"code": 404, "message": message})
        last, ready = builds[-1], [b for b in builds if b.status == "ready"]
        sizes = {"cpuCount": 2, "memoryMB": 512, "diskSizeMB": 1024, "envdVersion": "0.2.0"}
        answer = {
            "templateID": last.template_id,
            "buildID": (ready or builds)[-1].build_id,
            "public": False,
            "aliases": [last.name],
            "names": [last.name],
            "createdAt": builds[0].created_at,
            "updatedAt": last.created_at,
            "createdBy": None,
            "lastSpawnedAt": None,
            "spawnCount": 0,
            "buildCount": len(builds),
            "buildStatus": last.status,
            "builds": [
                {
                    "buildID": b.build_id,
                    "status": b.status,
                    "createdAt": b.created_at,
                    "updatedAt": b.created_at,
                    **sizes,
                }
                for b in builds
            ],
            **sizes,
        }
        await response.reply_json(200, answer)

    async def _start(
        self, template_id: str, build_id: str, body: dict[str, Any], response: HttpResponse
    ) -> None:
        build = self._requested.get(build_id)
        if build is None or build.template_id != template_id:
            message = f"build '{build_id}' of template '{template_id}' not found"
            return await response.reply_json(404, {"code": 404, "message": message})
        build.body = body
        build.status = "building"
        self.builds.append(build)
        task = asyncio.create_task(self._realise(build))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        await response.reply_empty(202)

    async def _status(self, build_id: str, offset: int, response: HttpResponse) -> None:
        build = self._requested.get(build_id)
        if build is None:
            message = f"build '{build_id}' not found"
            return await response.reply_json(404, {"code": 404, "message": message})
        answer: dict[str, Any] = {
            "templateID": build.template_id,
            "buildID": build.build_id,
            "status": build.status,
            "logs": [],
            "logEntries": build.logs[offset : offset + _LOG_PAGE],
        }
        if build.reason is not None:
            answer["reason"] = build.reason
        await response.reply_json(200, answer)

    async def _realise(self, build: FakeBuild) -> None:
        if self._failing:
            return self._fail(build, self._failing.pop(0))
        context = self.root / "builds" / build.build_id
        try:
            build.dockerfile = await asyncio.to_thread(self._write_context, build, context)
        except (KeyError, ValueError, OSError, tarfile.TarError) as exc:
            return self._fail(build, f"the build's files are wrong: {exc!r}")

        def progress(event: ImageProgress) -> None:
            build.log(f"{event.step}: {event.message}")

        try:
            build.image = await self.store.build(context, _image_name(build), on_progress=progress)
        except ImageError as exc:
            return self._fail(build, str(exc))
        build.log("build finished")
        build.status = "ready"

    def _write_context(self, build: FakeBuild, context: Path) -> str:
        """The build's files extracted into `context` and its steps as a Dockerfile there."""
        context.mkdir(parents=True)
        lines = [f"FROM {build.body['fromImage']}"]
        user = "root"
        for step in build.body.get("steps", []):
            kind, args = step["type"], step.get("args", [])
            if kind == "COPY":
                data = self._uploads[step["filesHash"]]
                _extract(data, context)
                src, dest, owner, mode = (*args, "", "")[:4]
                chown = f" --chown={owner}" if owner else ""
                chmod = f" --chmod={mode}" if mode else ""
                lines.append(f"COPY{chown}{chmod} {json.dumps([src, dest])}")
            elif kind == "RUN" and len(args) > 1 and args[1] != user:
                lines += [f"USER {args[1]}", f"RUN {args[0]}", f"USER {user}"]
            elif kind == "RUN":
                lines.append(f"RUN {args[0]}")
            elif kind == "ENV":
                pairs = zip(args[::2], args[1::2], strict=True)
                lines.append("ENV " + " ".join(f"{k}={json.dumps(v)}" for k, v in pairs))
            elif kind in ("WORKDIR", "USER"):
                user = args[0] if kind == "USER" else user
                lines.append(f"{kind} {args[0]}")
            else:
                raise ValueError(f"step type {kind!r} is not known to the fake")
        dockerfile = "\n".join(lines) + "\n"
        (context / "Dockerfile").write_text(dockerfile)
        return dockerfile

    @staticmethod
    def _fail(build: FakeBuild, message: str) -> None:
        build.log(message, level="error")
        build.status = "error"
        build.reason = {"message": message, "logEntries": build.logs[-_LOG_PAGE:]}


def _extract(archive: bytes, context: Path) -> None:
    """A COPY step's upload into `context`: regular files and directories, relative names."""
    with tarfile.open(fileobj=io.BytesIO(archive), mode="r:*") as tar:
        for member in tar.getmembers():
            if not (member.isfile() or member.isdir()) or member.name.startswith(("/", "..")):
                raise ValueError(f"unexpected archive member {member.name!r}")
        tar.extractall(context)


def _image_name(build: FakeBuild) -> str:
    return f"fake-e2b/{build.template_id}:{build.build_id[:12]}"
