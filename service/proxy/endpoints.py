"""Resolve a spec's endpoint (possibly a shorthand) into a base URL, key and model.

Shorthands read the server's environment; explicit spec fields always win:

- `vllm`: VLLM_BASE_URL (default http://127.0.0.1:8000/v1), VLLM_API_KEY, VLLM_MODEL;
- `openai`: OPENAI_BASE_URL (default https://api.openai.com/v1), OPENAI_API_KEY, OPENAI_MODEL;
- `hf_router`: HF_ROUTER_BASE_URL (default https://router.huggingface.co/v1), HF_TOKEN,
  HF_ROUTER_MODEL;
- `""` (no shorthand): `base_url` and `model` must be given in the spec.

A key is required for `openai` and `hf_router` (hosted APIs); a vLLM server or an explicit
endpoint may run without one. A base URL with no path gets "/v1"; any other path is kept as
given (the caller knows where their API lives, e.g. ".../v1beta/openai").
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from urllib.parse import urlsplit

from service.errors import FieldViolation, SpecError
from service.models import EndpointSpec

__all__ = ["ENDPOINT_KINDS", "EndpointKind", "ResolvedEndpoint", "resolve_endpoint"]

_FIELD = "spec.endpoint"

NO_TOKEN_ID_HOSTS = frozenset({"api.openai.com", "router.huggingface.co"})
"""Hosted APIs that return no token ids and may reject unknown request fields."""


@dataclass(frozen=True)
class ResolvedEndpoint:
    """Where the proxy sends a rollout's model calls."""

    base_url: str
    """Ends in the API root (e.g. ".../v1"), no trailing slash."""
    api_key: str = field(repr=False)
    """Secret; empty when the upstream needs none."""
    model: str

    @cached_property
    def asks_token_ids(self) -> bool:
        """Whether to ask for `return_token_ids` (vLLM and self-hosted servers, not hosted APIs)."""
        return (urlsplit(self.base_url).hostname or "") not in NO_TOKEN_ID_HOSTS

    @property
    def chat_completions_url(self) -> str:
        return f"{self.base_url}/chat/completions"


@dataclass(frozen=True)
class EndpointKind:
    """Where one shorthand finds its pieces."""

    base_url_env: str
    base_url_default: str
    api_key_env: str
    model_env: str
    key_required: bool


ENDPOINT_KINDS: dict[str, EndpointKind] = {
    "vllm": EndpointKind(
        "VLLM_BASE_URL", "http://127.0.0.1:8000/v1", "VLLM_API_KEY", "VLLM_MODEL", False
    ),
    "openai": EndpointKind(
        "OPENAI_BASE_URL", "https://api.openai.com/v1", "OPENAI_API_KEY", "OPENAI_MODEL", True
    ),
    "hf_router": EndpointKind(
        "HF_ROUTER_BASE_URL",
        "https://router.huggingface.co/v1",
        "HF_TOKEN",
        "HF_ROUTER_MODEL",
        True,
    ),
}
"""Shorthand name -> where its base URL, key and model come from."""

_EXPLICIT = EndpointKind("", "", "", "", False)


def _normalize_base_url(url: str) -> str:
    """The URL without trailing slash, "/v1" added when it has no path; "" if not http(s)."""
    parts = urlsplit(url.strip())
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return ""
    url = url.strip().rstrip("/")
    return url + "/v1" if parts.path in ("", "/") else url


def _missing(name: str, env_var: str) -> FieldViolation:
    where = f"; set it in the spec or {env_var} in the server environment" if env_var else ""
    return FieldViolation(f"{_FIELD}.{name}", f"required{where}")


def _env(environ: Mapping[str, str], name: str) -> str:
    return environ.get(name, "") if name else ""


def resolve_endpoint(spec: EndpointSpec, environ: Mapping[str, str]) -> ResolvedEndpoint:
    """Fill a spec's endpoint from its shorthand; raises SpecError naming each missing field."""
    kind = ENDPOINT_KINDS.get(spec.kind) if spec.kind else _EXPLICIT
    if kind is None:
        known = ", ".join(sorted(ENDPOINT_KINDS))
        raise SpecError(
            [
                FieldViolation(
                    f"{_FIELD}.kind", f"unknown endpoint kind {spec.kind!r}; known: {known}"
                )
            ]
        )
    base_url = spec.base_url or _env(environ, kind.base_url_env) or kind.base_url_default
    api_key = spec.api_key or _env(environ, kind.api_key_env)
    model = spec.model or _env(environ, kind.model_env)
    normalized = _normalize_base_url(base_url)
    violations: list[FieldViolation] = []
    if not base_url:
        violations.append(_missing("base_url", kind.base_url_env))
    elif not normalized:
        violations.append(FieldViolation(f"{_FIELD}.base_url", f"not an http(s) URL: {base_url!r}"))
    if kind.key_required and not api_key:
        violations.append(_missing("api_key", kind.api_key_env))
    if not model:
        violations.append(_missing("model", kind.model_env))
    if violations:
        raise SpecError(violations)
    return ResolvedEndpoint(base_url=normalized, api_key=api_key, model=model)
