"""Through the real server: an image's contents never break the sandbox's own machinery.

The holder and the proxy's forwarder run on the host's programs (`host_kit`), so an image
without `sleep` or any python still runs, and its agent reaches the model; an image that
cannot run commands at all (no bash) is refused at creation, as SANDBOX, naming bash.
On main the first failed as SANDBOX with a bare `/proc/N/ns/mnt`, and a server whose
forwarder ran on the image's python3.X had its rollout end SUCCEEDED with every call lost.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from rollout.v1 import rollout_pb2 as pb
from rollout.v1 import rollout_pb2_grpc as pb_grpc

from service.config import Settings
from service.images import ImageStore
from testing.fakes.llm_upstream import FakeUpstream, Reply
from testing.specs import command_spec

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(os.geteuid() != 0, reason="image sandboxes need a root server"),
]

UPSTREAM_KEY = "sk-plumbing-upstream-7d2e"
UPSTREAM_MODEL = "fake-policy-plumbing"

# A model call with nothing but bash: /dev/tcp to the forwarder the base URL names.
CALL_WITH_BASH = r"""
command -v sleep python3 python3.11 curl > tools.txt
address=${OPENAI_BASE_URL#http://}; address=${address%%/*}
body='{"model":"'"$OPENAI_MODEL"'","messages":[{"role":"user","content":"from a bare image"}]}'
exec 3<>"/dev/tcp/${address%:*}/${address##*:}" || exit 3
head='POST /v1/chat/completions HTTP/1.1\r\nHost: sandbox\r\nConnection: close\r\n'
head+='Authorization: Bearer %s\r\nContent-Type: application/json\r\nContent-Length: %d'
printf "$head\r\n\r\n%s" "$OPENAI_API_KEY" "${#body}" "$body" >&3
cat <&3 > reply.txt
"""


@pytest.fixture
async def upstream() -> AsyncIterator[FakeUpstream]:
    async with FakeUpstream(api_key=UPSTREAM_KEY, model=UPSTREAM_MODEL) as upstream:
        yield upstream


@pytest.fixture
async def images() -> AsyncIterator[tuple[ImageStore, list[str]]]:
    """The shared store on the server's cache; the names built here are removed after."""
    store = ImageStore(Settings().cache_dir)
    built: list[str] = []
    yield store, built
    for name in built:
        await store.remove(name)


async def _build(images: tuple[ImageStore, list[str]], tmp_path: Path, run: str) -> str:
    store, built = images
    name = f"test/plumbing-{uuid.uuid4().hex[:12]}"
    context = tmp_path / name.rsplit("/", 1)[1]
    context.mkdir()
    (context / "Dockerfile").write_text(f"FROM rollout/base\nRUN {run}\n")
    await store.build(context, name)
    built.append(name)
    return name


async def test_an_image_without_sleep_or_python_runs_and_reaches_the_model(
    stub: pb_grpc.RolloutServiceAsyncStub,
    upstream: FakeUpstream,
    images: tuple[ImageStore, list[str]],
    tmp_path: Path,
) -> None:
    name = await _build(images, tmp_path, "rm /usr/bin/sleep /usr/bin/python3*")
    upstream.script(Reply(text="answered inside a bare image"))
    spec = command_spec(CALL_WITH_BASH, verify=("grep -q 'bare image' reply.txt",))
    spec.sandbox.image = name
    spec.endpoint.CopyFrom(
        pb.Endpoint(base_url=upstream.base_url, api_key=UPSTREAM_KEY, model=UPSTREAM_MODEL)
    )
    rollout = (await stub.RunRollout(pb.RunRolloutRequest(spec=spec))).rollout
    assert rollout.status == pb.ROLLOUT_STATUS_SUCCEEDED, rollout.result.error
    assert rollout.result.files["tools.txt"] == b""  # the image has none of them
    assert b"answered inside a bare image" in rollout.result.files["reply.txt"]
    assert rollout.result.reward == 1.0
    [turn] = rollout.result.turns
    assert turn.upstream_status == 200
    assert turn.request_messages[0]["content"] == "from a bare image"


async def test_an_image_without_bash_is_refused_naming_it(
    stub: pb_grpc.RolloutServiceAsyncStub,
    images: tuple[ImageStore, list[str]],
    tmp_path: Path,
) -> None:
    name = await _build(images, tmp_path, "rm /usr/bin/bash")
    spec = command_spec("echo never > ran.txt", sandbox={"image": name})
    rollout = (await stub.RunRollout(pb.RunRolloutRequest(spec=spec))).rollout
    assert rollout.status == pb.ROLLOUT_STATUS_FAILED
    assert rollout.result.error.kind == pb.ERROR_KIND_SANDBOX
    assert "the image has no bash on its PATH" in rollout.result.error.message
    assert rollout.phase != pb.PHASE_AGENT
    assert "ran.txt" not in rollout.result.files
