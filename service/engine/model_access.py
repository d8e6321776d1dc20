"""Choosing how a rollout's agent reaches the model: through the capture proxy or directly.

Where the proxy runs for a rollout with capture TRANSPARENT_PROXY (`ModelRouter._placement`):
- a sandbox of a backend whose capabilities have `host_socket` (local) reaches the service's
  proxy through a Unix socket of its own, which the proxy binds in the sandbox's proxy
  directory (`SandboxProxySocket`) for the rollout's route: the route is reachable from
  that sandbox only, and carries no token; the service starts the forwarder to it before
  the agent (`proxy.access.start_forwarder`), so a forwarder that cannot start fails the
  rollout as SANDBOX, never as the agent's;
- a remote sandbox (E2B) reaches it at `Settings.proxy_public_url` when the operator set one
  (host placement);
- otherwise the proxy runs inside the remote sandbox (`service.proxy.remote.in_sandbox`).
A remote sandbox with network NONE is opened to the one host the proxy needs: the public
URL's for host placement, the upstream's for the proxy inside.

Each route of the service's proxy is registered with `ModelCalls` while it is open, so a
trainer's policy versions and pauses reach it (`engine.model_calls`); the proxy inside a
remote sandbox is out of their reach, so `spec.max_policy_lag` needs the service's proxy.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from enum import Enum
from pathlib import Path
from typing import Protocol, runtime_checkable
from urllib.parse import urlsplit

from service.config import Settings
from service.engine.lifecycle import AttachModel, ModelAttachment
from service.engine.model_calls import ModelCalls, Publish, RouteEntry
from service.errors import FieldViolation, SandboxError, SpecError
from service.models import CaptureMode, ModelAccess, NetworkPolicy, RolloutSpec, Turn
from service.proxy import (
    CaptureProxy,
    InSandboxProxy,
    ResolvedEndpoint,
    Route,
    direct_access,
    host_socket_access,
    resolve_endpoint,
    start_forwarder,
    stop_forwarder,
)
from service.registry import backend_capabilities
from service.sandboxes import Sandbox

__all__ = ["ModelRouter", "Placement"]


class Placement(Enum):
    """Where a rollout's capture proxy runs."""

    HOST_SOCKET = "host_socket"
    PUBLIC_URL = "public_url"
    IN_SANDBOX = "in_sandbox"


@runtime_checkable
class EgressControl(Protocol):
    """A sandbox whose outbound network can be opened to chosen hosts (E2B)."""

    async def allow_egress(self, hosts: Sequence[str]) -> None: ...


@runtime_checkable
class SandboxProxySocket(Protocol):
    """A sandbox with a proxy directory of its own (local): where its route socket goes,
    and how the forwarder to it runs there."""

    @property
    def proxy_socket_path(self) -> Path: ...

    @property
    def forwarder_argv(self) -> list[str]: ...


class ModelRouter:
    """Resolves endpoints at admission and opens per-rollout model access at run time."""

    def __init__(self, proxy: CaptureProxy, environ: Mapping[str, str], settings: Settings) -> None:
        self._proxy = proxy
        self._environ = environ
        self._settings = settings
        self.calls = ModelCalls(
            rules_per_tenant=settings.model_call_rules_per_tenant,
            pause_max_s=settings.pause_max_s,
        )
        """The live routes' gates: policy versions and pauses (`engine.model_calls`)."""

    def resolve(self, spec: RolloutSpec, *, required: bool) -> ResolvedEndpoint | None:
        """The upstream endpoint, or None when the spec names none and the agent needs none."""
        endpoint = spec.endpoint
        if not (endpoint.kind or endpoint.base_url or endpoint.model):
            if required:
                raise SpecError(
                    [FieldViolation("spec.endpoint", f"the {spec.agent.name} agent needs an LLM")]
                )
            return None
        key_in_sandbox = (
            spec.capture.mode is CaptureMode.BLACK_BOX
            or self._placement(spec) is Placement.IN_SANDBOX
        )
        if key_in_sandbox and spec.max_policy_lag is not None:
            problem = "needs capture TRANSPARENT_PROXY through the service's own proxy"
            raise SpecError([FieldViolation("spec.max_policy_lag", problem)])
        return resolve_endpoint(
            endpoint,
            self._environ,
            key_in_sandbox=key_in_sandbox,
            allow_private=self._settings.allow_private_endpoints,
        )

    def _proxied(self, spec: RolloutSpec, upstream: ResolvedEndpoint | None) -> bool:
        return upstream is not None and spec.capture.mode is CaptureMode.TRANSPARENT_PROXY

    def _placement(self, spec: RolloutSpec) -> Placement:
        backend = spec.sandbox.backend or self._settings.default_backend
        if backend_capabilities(backend).host_socket:
            return Placement.HOST_SOCKET
        if self._settings.proxy_public_url:
            return Placement.PUBLIC_URL
        return Placement.IN_SANDBOX

    def attacher(
        self,
        rollout_id: str,
        spec: RolloutSpec,
        upstream: ResolvedEndpoint | None,
        *,
        tenant: str = "",
        publish: Publish = lambda payload: None,
    ) -> AttachModel | None:
        """How the rollout's sandbox will reach the model; None when it has no endpoint.
        `publish` takes the rollout's pause and resume notices."""
        if upstream is None:
            return None
        if not self._proxied(spec, upstream):
            return _direct(upstream)
        placement = self._placement(spec)
        if placement is Placement.IN_SANDBOX:
            return self._inside_sandbox(rollout_id, spec, upstream)
        entry = functools.partial(
            RouteEntry, rollout_id, tenant, upstream.base_url, upstream.model, spec.labels
        )
        return self._through_service_proxy(rollout_id, spec, upstream, placement, entry, publish)

    def _through_service_proxy(
        self,
        rollout_id: str,
        spec: RolloutSpec,
        upstream: ResolvedEndpoint,
        placement: Placement,
        entry: Callable[..., RouteEntry],
        publish: Publish,
    ) -> AttachModel:
        proxy = self._proxy
        calls = self.calls
        public_url = self._settings.proxy_public_url

        @contextlib.asynccontextmanager
        async def attach(
            sandbox: Sandbox, on_turn: Callable[[Turn], None]
        ) -> AsyncIterator[ModelAttachment]:
            if placement is Placement.PUBLIC_URL:
                await _open_egress(sandbox, spec, public_url)
                route = proxy.open_route(rollout_id, upstream, spec.capture, on_turn)
                access = direct_access(route, public_url)
                secrets: tuple[str, ...] = (route.token,)
                forwarder = None
            else:
                route, forwarder = await _open_sandbox_route(
                    proxy, sandbox, rollout_id, upstream, spec, on_turn
                )
                access, secrets = host_socket_access(), ()
            route.gate.max_lag = spec.max_policy_lag
            calls.register(entry(route.gate, publish))
            try:
                yield ModelAttachment(
                    access=access, calls=route.calls, secrets=secrets, gate=route.gate
                )
            finally:
                calls.unregister(route.gate)
                proxy.close_route(route)
                if forwarder is not None:
                    await stop_forwarder(sandbox, forwarder)

        return attach

    def _inside_sandbox(
        self, rollout_id: str, spec: RolloutSpec, upstream: ResolvedEndpoint
    ) -> AttachModel:
        upstream_timeout_s = self._settings.upstream_timeout_s

        @contextlib.asynccontextmanager
        async def attach(
            sandbox: Sandbox, on_turn: Callable[[Turn], None]
        ) -> AsyncIterator[ModelAttachment]:
            await _open_egress(sandbox, spec, upstream.base_url)
            proxy = InSandboxProxy(
                sandbox,
                rollout_id,
                upstream,
                spec.capture,
                on_turn,
                upstream_timeout_s=upstream_timeout_s,
            )
            try:
                access = await proxy.start()
                yield ModelAttachment(access=access, calls=proxy.calls, secrets=(access.api_key,))
            finally:
                await proxy.stop()

        return attach


async def _open_sandbox_route(
    proxy: CaptureProxy,
    sandbox: Sandbox,
    rollout_id: str,
    upstream: ResolvedEndpoint,
    spec: RolloutSpec,
    on_turn: Callable[[Turn], None],
) -> tuple[Route, int]:
    """The sandbox's route on its own socket, and the pid of the forwarder to it."""
    if not isinstance(sandbox, SandboxProxySocket):
        raise SandboxError(f"the {spec.sandbox.backend} sandbox has no proxy directory")
    try:
        route = await proxy.open_sandbox_route(
            rollout_id, upstream, spec.capture, on_turn, sandbox.proxy_socket_path
        )
    except OSError as exc:
        raise SandboxError(f"could not bind the sandbox's capture proxy socket: {exc}") from exc
    try:
        forwarder = await start_forwarder(sandbox, sandbox.forwarder_argv)
    except BaseException:
        proxy.close_route(route)
        raise
    return route, forwarder


async def _open_egress(sandbox: Sandbox, spec: RolloutSpec, url: str) -> None:
    """Under network NONE, let the sandbox reach `url`'s host (and nothing else)."""
    if spec.sandbox.network is not NetworkPolicy.NONE:
        return
    if not isinstance(sandbox, EgressControl):
        raise SandboxError(
            f"the {spec.sandbox.backend} sandbox cannot be opened to the capture proxy's "
            "upstream under network NONE"
        )
    await sandbox.allow_egress([urlsplit(url).hostname or url])


def _direct(upstream: ResolvedEndpoint) -> AttachModel:
    @contextlib.asynccontextmanager
    async def attach(
        sandbox: Sandbox, on_turn: Callable[[Turn], None]
    ) -> AsyncIterator[ModelAttachment]:
        access = ModelAccess(
            base_url=upstream.base_url,
            api_key=upstream.api_key,
            model=upstream.model,
            small_model=upstream.model,
        )
        yield ModelAttachment(access=access, calls=None, secrets=(upstream.api_key,))

    return attach
