"""Bearer-token authentication of the gRPC API, and the tenant each call acts as.

Tokens come from `auth_tokens` and `auth_token_file`, in one format: `<token>` or
`<token> <tenant>` (the file: one per line, blank lines and `# comments` ignored).

    token          16 to 4096 visible ASCII characters, no spaces; each token once
    tenant         1 to 64 of [A-Za-z0-9._-], starting with a letter or digit
    no tenant      an admin: sees, watches and cancels every rollout
    with tenant    sees, watches and cancels only rollouts submitted with its tenant

A call sends `authorization: Bearer <token>` metadata. The token is hashed and compared in
constant time with the hash of every configured token (all of them, whatever matches first),
so neither its value nor its length leaks through timing. A call without a valid token ends
UNAUTHENTICATED before any handler runs; health and reflection may be left open. The caller's
tenant reaches the servicer through a contextvar that the interceptor sets for the call (gRPC
runs the interceptors and the handler of one call in one context). Tokens are never logged,
nor echoed in an error.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import re
import stat
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import grpc

from service.config import Settings
from service.errors import ConfigError

__all__ = [
    "BearerAuthInterceptor",
    "TokenTable",
    "Unauthenticated",
    "authenticate",
    "caller_tenant",
    "load_tokens",
]

if TYPE_CHECKING:
    Handler = grpc.RpcMethodHandler[Any, Any]
    Continuation = Callable[[grpc.HandlerCallDetails], Awaitable[Handler | None]]

log = logging.getLogger(__name__)

_TOKEN = re.compile(r"[\x21-\x7e]{16,4096}")
_TENANT = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
_HEALTH_PREFIX = "/grpc.health.v1.Health/"
_REFLECTION_PREFIX = "/grpc.reflection."  # v1alpha and v1

_tenant: ContextVar[str | None] = ContextVar("rollout_api_tenant", default=None)


def caller_tenant() -> str | None:
    """The tenant of the current call; None for an admin token or a server without auth."""
    return _tenant.get()


@dataclass(frozen=True)
class TokenTable:
    """SHA-256 digests of the accepted tokens, each with its tenant (None: admin)."""

    entries: tuple[tuple[bytes, str | None], ...] = ()

    def __bool__(self) -> bool:
        return bool(self.entries)

    def lookup(self, token: str) -> tuple[bool, str | None]:
        """(accepted, tenant): compares against every entry, in constant time per entry."""
        digest = hashlib.sha256(token.encode()).digest()
        accepted, tenant = False, None
        for known, known_tenant in self.entries:
            if hmac.compare_digest(known, digest) and not accepted:
                accepted, tenant = True, known_tenant
        return accepted, tenant

    def describe(self) -> str:
        """What is configured, for the start-up log: counts, never tokens."""
        tenants = {tenant for _, tenant in self.entries if tenant is not None}
        admins = sum(tenant is None for _, tenant in self.entries)
        return f"{len(self.entries)} bearer tokens ({len(tenants)} tenants, {admins} admin)"


def load_tokens(settings: Settings) -> TokenTable:
    """Every token of `auth_tokens` and `auth_token_file`; ConfigError naming the bad entry."""
    lines = [
        (f"auth_tokens[{i}]", t.get_secret_value()) for i, t in enumerate(settings.auth_tokens)
    ]
    if settings.auth_token_file is not None:
        lines += _token_file_lines(settings.auth_token_file)
    entries: dict[bytes, str | None] = {}
    for where, line in lines:
        token, tenant = _parse_entry(where, line)
        digest = hashlib.sha256(token.encode()).digest()
        if digest in entries:
            raise ConfigError(f"{where}: this token is already configured")
        entries[digest] = tenant
    return TokenTable(tuple(entries.items()))


def _token_file_lines(path: Path) -> list[tuple[str, str]]:
    try:
        text = path.read_text(encoding="utf-8")
        mode = path.stat().st_mode
    except (OSError, UnicodeError) as exc:
        raise ConfigError(f"auth_token_file {str(path)!r} cannot be read: {exc}") from exc
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        log.warning("auth_token_file %s is readable by other users: chmod 600 it", path)
    return [
        (f"auth_token_file {str(path)!r} line {number}", line.strip())
        for number, line in enumerate(text.splitlines(), start=1)
        if line.strip() and not line.lstrip().startswith("#")
    ]


def _parse_entry(where: str, line: str) -> tuple[str, str | None]:
    """(token, tenant) of one "<token> [<tenant>]" entry; errors never quote the token."""
    fields = line.split()
    if len(fields) not in (1, 2):
        raise ConfigError(f'{where}: expected "<token>" or "<token> <tenant>"')
    token, tenant = fields[0], (fields[1] if len(fields) == 2 else None)
    if not _TOKEN.fullmatch(token):
        raise ConfigError(f"{where}: a token is 16 to 4096 visible ASCII characters")
    if tenant is not None and not _TENANT.fullmatch(tenant):
        raise ConfigError(
            f"{where}: a tenant is 1 to 64 of A-Z a-z 0-9 . _ - (letter or digit first)"
        )
    return token, tenant


class Unauthenticated(Exception):
    """Why a call's credentials were refused (a message safe to send back)."""


def authenticate(tokens: TokenTable, authorization: Sequence[str]) -> str | None:
    """The tenant (None: admin) of a call whose `authorization` values are these;
    Unauthenticated unless they are one `Bearer <token>` of `tokens`."""
    if not authorization:
        raise Unauthenticated(
            "missing bearer token: send the metadata `authorization: Bearer <token>`"
        )
    scheme, _, token = authorization[0].partition(" ")
    if len(authorization) > 1 or scheme.lower() != "bearer" or not token.strip():
        raise Unauthenticated("the authorization metadata must be one `Bearer <token>`")
    accepted, tenant = tokens.lookup(token.strip())
    if not accepted:
        raise Unauthenticated("invalid bearer token")
    return tenant


class BearerAuthInterceptor(grpc.aio.ServerInterceptor):
    """Refuses calls without a configured bearer token; sets the tenant of the others."""

    def __init__(self, tokens: TokenTable, *, health_open: bool, reflection_open: bool) -> None:
        self._tokens = tokens
        self._open = tuple(
            prefix
            for prefix, is_open in (
                (_HEALTH_PREFIX, health_open),
                (_REFLECTION_PREFIX, reflection_open),
            )
            if is_open
        )

    async def intercept_service(
        self, continuation: Continuation, handler_call_details: grpc.HandlerCallDetails
    ) -> Handler | None:
        if handler_call_details.method.startswith(self._open):
            return await continuation(handler_call_details)
        metadata = handler_call_details.invocation_metadata or ()
        try:
            tenant = authenticate(
                self._tokens, [str(value) for key, value in metadata if key == "authorization"]
            )
        except Unauthenticated as exc:
            handler = await continuation(handler_call_details)
            return None if handler is None else _refusal(handler, str(exc))
        _tenant.set(tenant)
        return await continuation(handler_call_details)


def _refusal(handler: Handler, message: str) -> Handler:
    """A handler of the same shape as `handler` that ends the call UNAUTHENTICATED."""

    async def refuse(request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> None:
        await context.abort(grpc.StatusCode.UNAUTHENTICATED, message)

    async def refuse_stream(
        request: Any, context: grpc.aio.ServicerContext[Any, Any]
    ) -> AsyncIterator[None]:
        # A generator, as response-streaming behaviors are (OpenTelemetry's wrapper needs it).
        await refuse(request, context)
        yield

    make = {
        (False, False): grpc.unary_unary_rpc_method_handler,
        (False, True): grpc.unary_stream_rpc_method_handler,
        (True, False): grpc.stream_unary_rpc_method_handler,
        (True, True): grpc.stream_stream_rpc_method_handler,
    }[(handler.request_streaming, handler.response_streaming)]
    return make(
        refuse_stream if handler.response_streaming else refuse,
        request_deserializer=handler.request_deserializer,
        response_serializer=handler.response_serializer,
    )
