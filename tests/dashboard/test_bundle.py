"""The committed page is what `make web` makes from the committed sources, byte for byte: the
TypeScript stubs from proto/ (buf + protoc-gen-es), and the bundle and its two static files.

Built into a temporary directory with the tools web/package-lock.json pins (`npm ci` first
when web/node_modules is missing), so the checkout is never touched.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from service.dashboard.site import STATIC_DIR

pytestmark = pytest.mark.e2e

WEB = Path(__file__).resolve().parents[2] / "web"
STUBS = Path("src/gen/rollout/v1/rollout_pb.ts")


def npm(*args: str, env: dict[str, str] | None = None) -> None:
    subprocess.run(["npm", *args], cwd=WEB, check=True, capture_output=True, timeout=300, env=env)


@pytest.fixture(scope="module")
def tools() -> None:
    if not (WEB / "node_modules/.bin/esbuild").exists():
        npm("ci", "--no-audit", "--no-fund", "--loglevel=error")


def test_committed_stubs_are_what_buf_generates_from_the_proto(tools: None, tmp_path: Path) -> None:
    subprocess.run(
        [str(WEB / "node_modules/.bin/buf"), "generate", "--output", str(tmp_path)],
        cwd=WEB,
        check=True,
        timeout=120,
    )
    generated = (tmp_path / STUBS).read_text()
    assert generated == (WEB / STUBS).read_text(), "web/src/gen is stale: run make web"


def test_committed_bundle_is_what_make_web_builds(tools: None, tmp_path: Path) -> None:
    env = {**os.environ, "OUTDIR": str(tmp_path)}
    npm("run", "--silent", "bundle", env=env)
    npm("run", "--silent", "copy", env=env)
    for name in ("app.js", "index.html", "app.css"):
        built = (tmp_path / name).read_bytes()
        assert built == (STATIC_DIR / name).read_bytes(), f"static/{name} is stale: run make web"
