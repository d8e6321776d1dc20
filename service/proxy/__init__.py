"""The LLM capture proxy: an OpenAI-compatible relay that records every model call as a Turn.

- `server.CaptureProxy`: the proxy inside the service: a Unix socket of its own per local
  sandbox's route (no token), and a TCP listener routed by per-rollout token for remote
  sandboxes; `core.ProxyCore` is the part it shares with `remote.standalone`, the same proxy
  as its own process (inside a remote sandbox: `remote/`).
- `access`: how an agent inside a local sandbox reaches its route (the forwarder,
  `sandboxes.local.forward`, bridges the sandbox's loopback to its route socket).
- `endpoints.resolve_endpoint`: endpoint shorthands -> base URL, key, model.
- `capture/`: one call, from the agent's request to the turn it becomes (`rewrite` ->
  `relay` -> `assembly`, `prompt_ids`, `history` -> `route`), and `tally`, the trainable
  calls and their failures, which classify a rollout.
- `dialects/`: OpenAI Responses and Anthropic Messages, translated or native.
- `transport/`: the lean HTTP layer (`httpserver`, `upstream`, `sse`) and connection bounds.
"""

from service.proxy.capture.rewrite import AUX_MODEL_ALIAS, MAIN_MODEL_ALIAS
from service.proxy.capture.route import OnTurn, Route
from service.proxy.endpoints import ENDPOINT_KINDS, ResolvedEndpoint, resolve_endpoint
from service.proxy.server import CaptureProxy

__all__ = [
    "AUX_MODEL_ALIAS",
    "ENDPOINT_KINDS",
    "MAIN_MODEL_ALIAS",
    "CaptureProxy",
    "OnTurn",
    "ResolvedEndpoint",
    "Route",
    "resolve_endpoint",
]
