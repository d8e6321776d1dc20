"""envd's filesystem side, for the fake in `testing.fakes.envd`: `GET /files` (download),
`POST /files` (multipart or octet-stream upload) and `filesystem.Filesystem/MakeDir`."""

from __future__ import annotations

import gzip
import posixpath
import re
from pathlib import Path
from typing import Any, Protocol

from testing.fakes.connect import RpcError
from testing.fakes.http1 import HttpRequest, HttpResponse

__all__ = ["make_dir", "serve_files"]


class FakeSandbox(Protocol):
    """What the files side needs of `testing.fakes.envd.FakeSandbox` (which imports this)."""

    def resolve(self, path: str) -> tuple[Path, bool]:
        """Host path of a sandbox path, and whether the sandbox may write there."""
        ...


def make_dir(sandbox: FakeSandbox, path: str) -> dict[str, Any]:
    """`filesystem.Filesystem/MakeDir`: parents included; an existing path is ALREADY_EXISTS."""
    host, writable = sandbox.resolve(path)
    if host.exists():
        raise RpcError("already_exists", f"directory '{path}' already exists")
    if not writable:
        raise RpcError("permission_denied", f"cannot create '{path}': permission denied")
    host.mkdir(parents=True)
    entry = {"name": posixpath.basename(path), "type": "FILE_TYPE_DIRECTORY", "path": path}
    return {"entry": entry}


async def serve_files(sandbox: FakeSandbox, request: HttpRequest, response: HttpResponse) -> None:
    """`GET /files?path=` answers the bytes; `POST /files` writes, creating parents."""
    if request.method == "GET":
        host, _ = sandbox.resolve(request.param("path"))
        if not host.is_file():
            message = f"path '{request.param('path')}' does not exist"
            return await response.reply_json(404, {"code": 404, "message": message})
        return await response.reply(200, host.read_bytes(), "application/octet-stream")
    written = []
    for path, data in _uploads(request):
        host, writable = sandbox.resolve(path)
        if not writable:
            message = f"cannot write '{path}': permission denied"
            return await response.reply_json(403, {"code": 403, "message": message})
        host.parent.mkdir(parents=True, exist_ok=True)
        host.write_bytes(data)
        written.append({"name": posixpath.basename(path), "type": "file", "path": path})
    await response.reply_json(200, written)


def _uploads(request: HttpRequest) -> list[tuple[str, bytes]]:
    content_type = request.headers.get("content-type", "")
    if not content_type.startswith("multipart/form-data"):
        body = request.body
        if request.headers.get("content-encoding") == "gzip":
            body = gzip.decompress(body)
        return [(request.param("path"), body)]
    boundary = content_type.split("boundary=", 1)[1].strip('"').encode()
    uploads = []
    for part in request.body.split(b"--" + boundary)[1:]:
        if part.startswith(b"--"):
            break
        head, _, content = part[2:].partition(b"\r\n\r\n")
        name = re.search(rb'filename="([^"]*)"', head)
        path = request.param("path") or (name.group(1).decode() if name else "")
        uploads.append((path, content[:-2]))
    return uploads
