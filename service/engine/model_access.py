"""Choosing how a rollout's agent reaches the model: through the capture proxy or directly."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable, Mapping

from service.agents.base import ModelAccess
from service.engine.lifecycle import AttachModel, ModelAttachment
from service.errors import FieldViolation, SpecError
from service.models import CaptureMode, RolloutSpec, Turn
from service.proxy.access import host_socket_access
from service.proxy.endpoints import ResolvedEndpoint, resolve_endpoint
from service.proxy.server import CaptureProxy
from service.sandboxes.base import Sandbox, SandboxBackend

__all__ = ["ModelRouter"]


class ModelRouter:
    """Resolves endpoints at admission and opens per-rollout model access at run time."""

    def __init__(self, proxy: CaptureProxy, environ: Mapping[str, str]) -> None:
        self._proxy = proxy
        self._environ = environ

    def resolve(self, spec: RolloutSpec, *, required: bool) -> ResolvedEndpoint | None:
        """The upstream endpoint, or None when the spec names none and the agent needs none."""
        endpoint = spec.endpoint
        if not (endpoint.kind or endpoint.base_url or endpoint.model):
            if required:
                raise SpecError(
                    [FieldViolation("spec.endpoint", f"the {spec.agent.name} agent needs an LLM")]
                )
            return None
        return resolve_endpoint(endpoint, self._environ)

    def _proxied(self, spec: RolloutSpec, upstream: ResolvedEndpoint | None) -> bool:
        return upstream is not None and spec.capture.mode is CaptureMode.TRANSPARENT_PROXY

    def proxy_socket(
        self, spec: RolloutSpec, upstream: ResolvedEndpoint | None, backend: SandboxBackend
    ) -> str | None:
        """The host socket to bind into a local sandbox, when its agent uses the proxy."""
        if self._proxied(spec, upstream) and backend.name == "local":
            return str(self._proxy.socket_path)
        return None

    def attacher(
        self, rollout_id: str, spec: RolloutSpec, upstream: ResolvedEndpoint | None
    ) -> AttachModel | None:
        """How the rollout's sandbox will reach the model; None when it has no endpoint."""
        if upstream is None:
            return None
        if not self._proxied(spec, upstream):
            return _direct(upstream)
        return self._through_proxy(rollout_id, spec, upstream)

    def _through_proxy(
        self, rollout_id: str, spec: RolloutSpec, upstream: ResolvedEndpoint
    ) -> AttachModel:
        proxy = self._proxy

        @contextlib.asynccontextmanager
        async def attach(
            sandbox: Sandbox, on_turn: Callable[[Turn], None]
        ) -> AsyncIterator[ModelAttachment]:
            route = proxy.open_route(rollout_id, upstream, spec.capture, on_turn)
            try:
                yield ModelAttachment(
                    access=host_socket_access(route), all_failed=lambda: route.all_failed
                )
            finally:
                proxy.close_route(route)

        return attach


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
        yield ModelAttachment(access=access, all_failed=lambda: False)

    return attach

