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

Server-held keys: a key from the server's environment goes only to the base URL configured
beside it (VLLM_API_KEY to VLLM_BASE_URL or the vLLM default), never to a `base_url` the
caller chose, and never into a sandbox (BLACK_BOX capture, a proxy inside a remote sandbox):
the agent would read it there. A caller's own key must be printable ASCII (it becomes an
HTTP header: CR/LF would inject headers). A base URL is printable ASCII, http(s), with a
valid port and no user:password, query or fragment: anything else is refused at admission
rather than failing, or being returned by GetRollout, later.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from urllib.parse import urlsplit

from service.errors import FieldViolation, SpecError, excerpt
from service.models import DialectMode, EndpointSpec

__all__ = [
    "ENDPOINT_KINDS",
    "EndpointKind",
    "ResolvedEndpoint",
    "normalized_base_url",
    "resolve_endpoint",
]

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
    dialect_mode: DialectMode = DialectMode.TRANSLATED
    """How Responses and Messages calls reach this upstream (`service.proxy.dialects`)."""
    private_ok: bool = True
    """Whether the upstream may be at a private address when the proxy connects: a caller's
    own base URL only when the operator allows it (`transport.addresses`); the operator's
    configured URL always."""

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


def _url_problem(url: str) -> str:
    """Why `url` cannot be an upstream base URL; "" when it can."""
    if not all("!" <= char <= "~" for char in url):
        return "must be printable ASCII without spaces (punycode host names, percent-encode paths)"
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        return "is not a valid URL (check the host and a port in 1..65535)"
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return "must be an http(s) URL with a host"
    if port == 0:
        return "has port 0; give a port in 1..65535"
    if "@" in parts.netloc:
        return "must not carry user:password (it would be stored and returned); use api_key"
    if parts.query or parts.fragment or url.endswith(("?", "#")):
        return "must not have a query or fragment (paths are appended to it)"
    return ""


def normalized_base_url(url: str) -> str | None:
    """`url` as a resolved endpoint's `base_url` would be; None when it cannot be one."""
    return None if _url_problem(url) else _normalize_base_url(url)


def _normalize_base_url(url: str) -> str:
    """A valid URL without trailing slash, "/v1" added when it has no path."""
    path = urlsplit(url).path
    url = url.rstrip("/")
    return url + "/v1" if path in ("", "/") else url


def _missing(name: str, env_var: str) -> FieldViolation:
    where = f"; set it in the spec or {env_var} in the server environment" if env_var else ""
    return FieldViolation(f"{_FIELD}.{name}", f"required{where}")


def _env(environ: Mapping[str, str], name: str) -> str:
    return environ.get(name, "") if name else ""


def _unknown_kind(kind: str) -> SpecError:
    known = ", ".join(sorted(ENDPOINT_KINDS))
    description = f"unknown endpoint kind {excerpt(kind)}; known: {known}"
    return SpecError([FieldViolation(f"{_FIELD}.kind", description)])


def _same_url(a: str, b: str) -> bool:
    return not (_url_problem(a) or _url_problem(b)) and (
        _normalize_base_url(a) == _normalize_base_url(b)
    )


def _key_violations(
    spec: EndpointSpec, kind: EndpointKind, server_key: str, key_in_sandbox: bool
) -> Iterator[FieldViolation]:
    field = f"{_FIELD}.api_key"
    if spec.api_key and not all("!" <= char <= "~" for char in spec.api_key):
        yield FieldViolation(field, "must be printable ASCII without spaces or line breaks")
    elif server_key and key_in_sandbox:
        yield FieldViolation(
            field,
            f"required: the server's {kind.api_key_env} is never handed to a sandbox (BLACK_BOX "
            "capture, or a proxy inside a remote sandbox); give a key or use TRANSPARENT_PROXY",
        )
    elif kind.key_required and not (spec.api_key or server_key):
        if spec.base_url:
            description = f"required (the server's {kind.api_key_env} goes only to its base URL)"
            yield FieldViolation(field, description)
        else:
            yield _missing("api_key", kind.api_key_env)


def resolve_endpoint(
    spec: EndpointSpec,
    environ: Mapping[str, str],
    *,
    key_in_sandbox: bool = False,
    allow_private: bool = True,
) -> ResolvedEndpoint:
    """Fill a spec's endpoint from its shorthand; raises SpecError naming each bad field.

    A key from the server's environment is used only with the base URL configured beside
    it (the spec's `base_url` left empty, or the same URL), and never when `key_in_sandbox`
    (the key would be handed to the sandbox: BLACK_BOX capture, a proxy inside a remote
    sandbox). A base URL of the caller's own may resolve to a private address only when
    `allow_private` (the operator's `ROLLOUT_ALLOW_PRIVATE_ENDPOINTS`).
    """
    kind = ENDPOINT_KINDS.get(spec.kind) if spec.kind else _EXPLICIT
    if kind is None:
        raise _unknown_kind(spec.kind)
    server_url = _env(environ, kind.base_url_env) or kind.base_url_default
    base_url = spec.base_url or server_url
    model = spec.model or _env(environ, kind.model_env)
    server_key = ""
    if not spec.api_key and (not spec.base_url or _same_url(spec.base_url, server_url)):
        server_key = _env(environ, kind.api_key_env)
    violations = list(_key_violations(spec, kind, server_key, key_in_sandbox))
    if not base_url:
        violations.append(_missing("base_url", kind.base_url_env))
    elif problem := _url_problem(base_url):
        where = "" if spec.base_url else f" ({kind.base_url_env} in the server environment)"
        violations.append(FieldViolation(f"{_FIELD}.base_url", problem + where))
    if not model:
        violations.append(_missing("model", kind.model_env))
    if violations:
        raise SpecError(violations)
    api_key = spec.api_key or server_key
    return ResolvedEndpoint(
        base_url=_normalize_base_url(base_url),
        api_key=api_key,
        model=model,
        dialect_mode=spec.dialect_mode,
        private_ok=allow_private or not spec.base_url or _same_url(spec.base_url, server_url),
    )
