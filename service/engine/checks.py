"""What is checked of a spec before a rollout exists, and what the check finds.

`SpecChecks.check` refuses, as RPC errors (SpecError: INVALID_ARGUMENT naming the field),
everything that can be known wrong at admission: the spec's own rules, a backend that is
not ready or lacks the image, a verify mode it cannot do, an agent's options. What it
finds, the backend, the agent and the model endpoint, is a `Checked`, which every kind of
rollout (lone, group member, session) starts from. Backends and agents are built once per
server, on first use, and kept here.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TypeVar

from service.agents import Agent
from service.config import Settings
from service.engine.model_access import ModelRouter
from service.engine.validation import validate_spec
from service.engine.verification import check_verify_mode
from service.errors import FieldViolation, MissingDependencyError, SpecError
from service.models import RolloutSpec, SandboxSpec
from service.proxy import ResolvedEndpoint
from service.registry import BACKENDS, load_agent, load_backend
from service.sandboxes import SandboxBackend

__all__ = ["Checked", "SpecChecks"]

T = TypeVar("T")


@dataclass(frozen=True)
class Checked:
    """What the check of a spec resolved: what runs it, and where its model is."""

    backend: SandboxBackend
    agent: Agent
    endpoint: ResolvedEndpoint | None
    """The spec's model endpoint; None when the agent needs none and the spec names none."""


class SpecChecks:
    """The server's checks of specs, with the backends and agents they have built."""

    def __init__(
        self,
        settings: Settings,
        models: ModelRouter,
        backends: Mapping[str, SandboxBackend] | None = None,
    ) -> None:
        self._settings = settings
        self._models = models
        self._backends: dict[str, SandboxBackend] = dict(backends or {})
        """By name; `backends` are built already (a test's in-memory one), others on first
        use, from the registry."""
        self._agents: dict[str, Agent] = {}

    async def check(self, spec: RolloutSpec) -> Checked:
        """Everything admission can refuse of `spec` before a rollout exists."""
        validate_spec(spec, self._settings)
        backend = self.backend(spec.sandbox.backend or self._settings.default_backend)
        backend.check_ready()
        if spec.harbor_task is None:  # a Harbor task's image is built at its start
            await backend.check_spec(spec.sandbox)
        check_verify_mode(spec, backend)
        agent = self._agent(spec.agent.name)
        violations = agent.option_violations(spec.agent.options)
        if violations:
            raise SpecError(violations)
        return Checked(backend, agent, self._models.resolve(spec, required=agent.requires_model))

    async def check_image(self, sandbox: SandboxSpec) -> None:
        """The backend's check of a sandbox spec; an unknown backend is left to validation."""
        name = sandbox.backend or self._settings.default_backend
        if name in BACKENDS:
            await self.backend(name).check_spec(sandbox)

    def backend(self, name: str) -> SandboxBackend:
        """The backend called `name`, built once."""
        return _built(self._backends, name, self._settings, load_backend, "spec.sandbox.backend")

    def load_default_backend(self) -> None:
        """Build the default backend now, so a missing dependency stops the server at start."""
        name = self._settings.default_backend
        if name not in self._backends:
            self._backends[name] = load_backend(name, self._settings)

    def built_backends(self) -> dict[str, SandboxBackend]:
        """The backends built so far, by name: a copy, so a caller may await while it walks
        them, and the metrics collector's thread may call this (a dict copy is atomic;
        iterating the dict itself is not)."""
        return self._backends.copy()

    def _agent(self, name: str) -> Agent:
        return _built(self._agents, name, self._settings, load_agent, "spec.agent.name")


def _built(
    built: dict[str, T],
    name: str,
    settings: Settings,
    load: Callable[[str, Settings], T],
    field: str,
) -> T:
    """`built[name]`, loaded on first use; a missing optional dependency is a SpecError of
    `field` that says what to install."""
    if name not in built:
        try:
            built[name] = load(name, settings)
        except MissingDependencyError as exc:
            raise SpecError([FieldViolation(field, str(exc))]) from exc
    return built[name]
