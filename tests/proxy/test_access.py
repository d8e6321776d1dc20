"""A sandbox with a private network namespace reaches its route, and only its route, through
its own route socket and the forwarder (real bubblewrap)."""

from __future__ import annotations

import asyncio
import json
import shutil
from pathlib import Path

import pytest

from service.models import CaptureSpec, Turn
from service.proxy import CaptureProxy, ResolvedEndpoint
from service.proxy.access import forwarder_command, host_socket_access
from service.sandboxes.base import PROXY_DIR
from service.sandboxes.local import forward
from service.sandboxes.local.host_kit import forwarder_argv
from testing.fakes.llm_upstream import FakeUpstream, Reply
from tests.proxy.conftest import UPSTREAM_KEY, UPSTREAM_MODEL

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="needs bubblewrap")

CLIENT = """
import json, sys, urllib.error, urllib.request
base_url, key, proxy_port = sys.argv[1:]
def call(url, body=None):
    request = urllib.request.Request(url, data=body, headers={"Authorization": "Bearer " + key})
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()
    except OSError as error:
        return 0, type(error).__name__
message = {"role": "user", "content": "hi"}
body = json.dumps({"model": "rollout-policy", "messages": [message]}).encode()
print(json.dumps({
    "own": call(base_url + "/chat/completions", body),
    "token_path": call(base_url.replace("/v1", "/r/" + key + "/v1") + "/models"),
    "host_tcp": call("http://127.0.0.1:" + proxy_port + "/r/" + key + "/v1/models"),
}))
"""


PYTHON = forwarder_argv(on_image=False)
"""The forwarder as a sandbox on the host's root runs it."""
CODE_ROOT = str(Path(forward.__file__).resolve().parents[3])
"""The checkout the forwarder runs from (a CI clone may sit under /tmp)."""


async def run_sandboxed(proxy_dir: Path, script: str, client: Path) -> tuple[int, str, str]:
    """`script` in bwrap: private network and pid namespaces, `proxy_dir` bound at PROXY_DIR."""
    process = await asyncio.create_subprocess_exec(
        "bwrap", "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc",
        "--tmpfs", "/tmp", "--ro-bind", CODE_ROOT, CODE_ROOT,  # the forwarder, even in /tmp
        "--tmpfs", "/run", "--ro-bind", str(proxy_dir), PROXY_DIR,
        "--ro-bind", str(client), "/run/client.py",
        "--unshare-net", "--unshare-pid", "--die-with-parent", "--", "bash", "-c", script,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    stdout, stderr = await asyncio.wait_for(process.communicate(), 30)
    assert process.returncode is not None
    return process.returncode, stdout.decode(), stderr.decode()


async def test_the_sandbox_reaches_its_own_route_and_nothing_else(
    proxy: CaptureProxy, upstream: FakeUpstream, tmp_path: Path
) -> None:
    upstream.script(Reply(text="hello from the sandbox"))
    endpoint = ResolvedEndpoint(upstream.base_url, UPSTREAM_KEY, UPSTREAM_MODEL)
    turns: list[Turn] = []
    proxy_dir = tmp_path / "proxy"
    route = await proxy.open_sandbox_route(
        "rollout-1", endpoint, CaptureSpec(), turns.append, proxy_dir / "proxy.sock"
    )
    access = host_socket_access(port=48123)
    assert access.base_url == "http://127.0.0.1:48123/v1"
    assert route.token == ""  # nothing to leak: the socket is the route
    client = tmp_path / "client.py"
    client.write_text(CLIENT)
    command = f"python3 /run/client.py {access.base_url} {access.api_key} {proxy.port}"
    forwarder = forwarder_command(PYTHON, port=48123)
    quiet = f"{forwarder} >/dev/null || exit 70"  # it prints its pid
    code, out, err = await run_sandboxed(proxy_dir, f"{quiet}\n{command}", client)
    assert code == 0, err
    result = json.loads(out)
    assert result["own"][0] == 200
    assert "hello from the sandbox" in result["own"][1]
    assert result["token_path"][0] == 404
    assert result["host_tcp"] == [0, "URLError"]  # the host's loopback is not the sandbox's
    [turn] = turns
    assert turn.completion_text == "hello from the sandbox"
    proxy.close_route(route)
    assert not (proxy_dir / "proxy.sock").exists()
    async with asyncio.timeout(5):  # the daemon dies with the sandbox's pid namespace
        while forwarders_on(48123):  # noqa: ASYNC110 (other processes: nothing to wait on)
            await asyncio.sleep(0.05)


def forwarders_on(port: int) -> list[str]:
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            text = cmdline.read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if "forward.py" in text and f"127.0.0.1:{port}" in text:
            found.append(text)
    return found


async def test_the_forwarder_fails_loudly_when_the_proxy_is_unreachable(
    tmp_path: Path,
) -> None:
    no_route = tmp_path / "empty"  # a sandbox's proxy directory before its route opened
    no_route.mkdir()
    client = tmp_path / "client.py"
    client.write_text("")
    code, _, err = await run_sandboxed(no_route, forwarder_command(PYTHON), client)
    assert code == 1
    assert "cannot forward" in err
