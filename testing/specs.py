"""Builders for the RolloutSpec messages the end-to-end tests send."""

from __future__ import annotations

from typing import Any

from google.protobuf import json_format
from rollout.v1 import rollout_pb2 as pb

__all__ = ["PATHS", "POST", "command_spec", "model_calls", "terminal"]


def command_spec(
    command: str = "true",
    *,
    setup: tuple[str, ...] = (),
    verify: tuple[str, ...] = (),
    **fields: Any,
) -> pb.RolloutSpec:
    """A spec for the `command` agent; extra fields in proto JSON shape are merged in."""
    document: dict[str, Any] = {
        "task": {"instruction": "do the task", "setup": list(setup), "verify": list(verify)},
        "agent": {"name": "command", "command": command},
    }
    for key, value in fields.items():
        if isinstance(value, dict) and isinstance(document.get(key), dict):
            document[key] = {**document[key], **value}
        else:
            document[key] = value
    return json_format.ParseDict(document, pb.RolloutSpec())


def model_calls(count: int, *, timeout_s: int = 120) -> str:
    """A scripted agent's command: `count` chat calls in turn through the proxy, each announced
    on stdout first and its answer printed after; then a file `done`."""
    return f"""python3 - <<'PY'
import json, os, sys, urllib.request
for i in range({count}):
    print("calling", i, flush=True)
    request = urllib.request.Request(
        os.environ["OPENAI_BASE_URL"] + "/chat/completions",
        data=json.dumps({{"model": os.environ["OPENAI_MODEL"],
                         "messages": [{{"role": "user", "content": "call %d" % i}}]}}).encode(),
        headers={{"Authorization": "Bearer " + os.environ["OPENAI_API_KEY"],
                 "Content-Type": "application/json"}})
    body = json.loads(urllib.request.urlopen(request, timeout={timeout_s}).read())
    print("answer:", body["choices"][0]["message"]["content"], flush=True)
open("done", "w").write("ok")
PY"""


TERMINAL = {
    pb.ROLLOUT_STATUS_SUCCEEDED,
    pb.ROLLOUT_STATUS_FAILED,
    pb.ROLLOUT_STATUS_CANCELLED,
    pb.ROLLOUT_STATUS_TIMED_OUT,
}


def terminal(rollout: pb.Rollout) -> bool:
    return rollout.status in TERMINAL


PATHS = ("responses", "messages", "chat/completions")
"""The model routes an agent calls, one per dialect."""
POST = """python3 - <<'PY'
import json, os, urllib.request
base, key = os.environ["OPENAI_BASE_URL"], os.environ["OPENAI_API_KEY"]
for mark, path in zip("rmc", {paths!r}):
    message = {{"role": "user", "content": mark * {size}}}
    body = {{"model": os.environ["OPENAI_MODEL"], "max_tokens": 64}}
    body["input" if path == "responses" else "messages"] = [message]
    request = urllib.request.Request(base + "/" + path, data=json.dumps(body).encode(),
        headers={{"Authorization": "Bearer " + key, "Content-Type": "application/json"}})
    print(path, urllib.request.urlopen(request, timeout=60).status, flush=True)
PY"""
"""An agent command: one call of `size` characters to each of `paths` (each a new message),
printing each status (`POST.format(size=..., paths=PATHS)`)."""
