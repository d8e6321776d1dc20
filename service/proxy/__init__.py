"""The LLM capture proxy: an OpenAI-compatible relay that records every model call as a Turn.

- `server.CaptureProxy`: the one listener in the service (TCP + Unix socket), routed by
  per-rollout token; `core.ProxyCore` is the part it shares with `standalone`, the same
  proxy as its own process (inside a remote sandbox).
- `access`: how an agent inside a local sandbox reaches its route (`forward` bridges the
  sandbox's loopback to the Unix socket).
- `endpoints.resolve_endpoint`: endpoint shorthands -> base URL, key, model.
- A call: `rewrite` (request rules) -> `relay` (upstream and back, via the lean HTTP layer
  `httpserver` / `upstream`) -> `assembly`, `prompt_ids`, `history` (the turn) -> `route`.
"""

from service.proxy.endpoints import ENDPOINT_KINDS, ResolvedEndpoint, resolve_endpoint
from service.proxy.rewrite import AUX_MODEL_ALIAS, MAIN_MODEL_ALIAS
from service.proxy.route import OnTurn, Route
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
