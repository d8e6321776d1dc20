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

from __future__ import annotations

from typing import TYPE_CHECKING

from service.door import door

if TYPE_CHECKING:
    from service.proxy.access import (
        direct_access,
        host_socket_access,
        start_forwarder,
        stop_forwarder,
    )
    from service.proxy.capture.gate import CallGate, SlotLease
    from service.proxy.capture.record import REDACTED, scrub_text
    from service.proxy.capture.rewrite import AUX_MODEL_ALIAS, MAIN_MODEL_ALIAS
    from service.proxy.capture.route import OnTurn, Route
    from service.proxy.capture.tally import CallTally
    from service.proxy.core import split_listen
    from service.proxy.endpoints import (
        ENDPOINT_KINDS,
        ResolvedEndpoint,
        normalized_base_url,
        resolve_endpoint,
    )
    from service.proxy.remote.bundle import requirements, sources_tarball
    from service.proxy.remote.in_sandbox import InSandboxProxy
    from service.proxy.remote.placement import TEMPLATE_DIR
    from service.proxy.server import CaptureProxy
    from service.proxy.transport.addresses import url_problem
    from service.proxy.transport.connections import ConnectionLimit
    from service.proxy.transport.httpserver import HttpRequest, HttpServerProtocol, Responder
    from service.proxy.transport.upstream import UpstreamPool, UpstreamTarget

__all__ = [
    "AUX_MODEL_ALIAS",
    "ENDPOINT_KINDS",
    "MAIN_MODEL_ALIAS",
    "REDACTED",
    "TEMPLATE_DIR",
    "CallGate",
    "CallTally",
    "CaptureProxy",
    "ConnectionLimit",
    "HttpRequest",
    "HttpServerProtocol",
    "InSandboxProxy",
    "OnTurn",
    "ResolvedEndpoint",
    "Responder",
    "Route",
    "SlotLease",
    "UpstreamPool",
    "UpstreamTarget",
    "direct_access",
    "host_socket_access",
    "normalized_base_url",
    "requirements",
    "resolve_endpoint",
    "scrub_text",
    "sources_tarball",
    "split_listen",
    "start_forwarder",
    "stop_forwarder",
    "url_problem",
]

__getattr__ = door(__name__)
