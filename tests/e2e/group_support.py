"""Helpers for the group tests: GroupSpec messages, starting and following a group, and a
scripted agent that asks the model once."""

from __future__ import annotations

from rollout.v1 import rollout_pb2 as pb
from rollout.v1 import rollout_pb2_grpc as pb_grpc

from testing.server_process import ServerProcess

__all__ = ["call_model_then", "group_spec", "run_to_end", "snapshots_left", "start_group"]

_CALL_MODEL = """python3 - <<'PY'
import json, os, urllib.request
request = urllib.request.Request(
    os.environ["OPENAI_BASE_URL"] + "/chat/completions",
    data=json.dumps({"model": os.environ["OPENAI_MODEL"], "seed": 7, "temperature": 1.0,
                     "messages": [{"role": "user", "content": "sample"}]}).encode(),
    headers={"Authorization": "Bearer " + os.environ["OPENAI_API_KEY"],
             "Content-Type": "application/json"})
reply = json.load(urllib.request.urlopen(request, timeout=60))
open("reply.txt", "w").write(reply["choices"][0]["message"]["content"])
PY
"""


def call_model_then(command: str) -> str:
    """A command-agent script: one chat call (its own seed and temperature, which the group
    overrides), the reply's text in reply.txt, then `command`."""
    return _CALL_MODEL + command


def group_spec(
    spec: pb.RolloutSpec, n: int, *, min_complete: int = 0, max_refills: int | None = None
) -> pb.GroupSpec:
    return pb.GroupSpec(spec=spec, n=n, min_complete=min_complete, max_refills=max_refills)


async def start_group(stub: pb_grpc.RolloutServiceAsyncStub, spec: pb.GroupSpec) -> pb.Group:
    return (await stub.StartGroup(pb.StartGroupRequest(spec=spec))).group


async def run_to_end(stub: pb_grpc.RolloutServiceAsyncStub, group_id: str) -> pb.Group:
    """Follow the group to its final message and return the terminal group."""
    async for response in stub.WatchGroup(pb.WatchGroupRequest(group_id=group_id)):
        if response.HasField("group"):
            return response.group
    raise AssertionError(f"WatchGroup({group_id}) ended without the group")


def snapshots_left(server: ServerProcess) -> list[str]:
    """The group snapshots the server's local backend holds (`<state dir>/snapshots`)."""
    directory = server.state_dir / "snapshots"
    return sorted(entry.name for entry in directory.iterdir()) if directory.is_dir() else []
