"""A Connect call judged and its request decoded before connectrpc sees it.

connectrpc (0.12) reads a whole body, inflates and decodes it on the event loop, and nothing
has looked at the caller first: a 59 MiB JSON body without a token was parsed for 112 s, and
3.3 MiB of gzip held the loop (health, the API, the proxy, every rollout) for 13 s. Here, in
this order, each step refusing with the Connect error in brackets:

    form             what the content type and HTTP method say           HTTP 415 / 405
    Host header      a name of this dashboard (`names_listener`)         [permission_denied]
    bearer token     from the headers, when tokens are set (`api.auth`)  [unauthenticated]
    Content-Length   over `max_bytes`: refused before a byte is read     [resource_exhausted]
    body             read to `max_bytes` at most                         [resource_exhausted]
    all bodies       held at once across calls, to the budget's bound    [resource_exhausted]
    inflated         gzip inflated as a stream, to `max_bytes` at most   [resource_exhausted]
    decoded          into the method's request message                   [invalid_argument]

Inflating and decoding run on the dashboard's decoding thread, never on the event loop. The
forms a Connect client sends:

    unary POST       the body is the message, Content-Encoding, application/json|proto
    streaming POST   one envelope (flags, 4-byte length, message), Connect-Content-Encoding,
                     application/connect+json|proto
    unary GET        ?message=...&encoding=json|proto[&base64=1][&compression=gzip]

gRPC and gRPC-Web are not among them (415): the API's own port speaks gRPC. connectrpc then
runs the call on an empty message to read, with `decode.decoded_codecs()`, which hand it the
message decoded here or raise the refusal, so that each form renders its error its own way (a unary
call's HTTP status, a stream's end message).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable, MutableMapping
from concurrent.futures import Executor
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs

from connectrpc.code import Code
from connectrpc.errors import ConnectError
from google.protobuf.message import Message

from service.api import TokenTable, Unauthenticated, authenticate
from service.dashboard.budget import BodyBudget, Held
from service.dashboard.decode import (
    CODECS,
    MessageForm,
    Outcome,
    bound_outcome,
    decode_message,
    invalid,
    too_large,
)
from service.errors import excerpt
from service.listen_address import names_listener

__all__ = ["REQUESTS_HELD_MAX_BYTES", "REQUEST_MAX_BYTES", "CallGate", "ReadCall", "Refusal"]

REQUEST_MAX_BYTES = 1024 * 1024
"""A read method's request, in the body and inflated (under the API's own max_message_bytes).
The largest valid one is ~100 KiB (64 labels of 256-byte keys and values, JSON-escaped); at
this bound, the costliest JSON found decodes in ~0.5 s, on the decoding thread."""
REQUESTS_HELD_MAX_BYTES = 16 * REQUEST_MAX_BYTES
"""The bodies of all calls in flight (`budget.BodyBudget`): sixteen at the bound, hundreds of
the largest valid request."""

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
_COMPRESSIONS = ("identity", "gzip")
_STREAM_PREFIX = "application/connect+"
_UNARY_PREFIX = "application/"
_EMPTY_ENVELOPE = bytes(5)
"""A streaming call's one message, empty: what connectrpc is given to read."""
_ACCEPT_POST = (b"accept-post", b"application/json, application/proto")


@dataclass(frozen=True)
class Refusal:
    """A request refused at the HTTP level, before any Connect form applies."""

    status: int
    headers: list[tuple[bytes, bytes]]


@dataclass(frozen=True)
class ReadCall:
    """A call to hand connectrpc: `scope` with `body` to read, under `bind()`."""

    scope: Scope
    body: bytes
    outcome: Outcome

    def bound(self) -> AbstractContextManager[None]:
        """While connectrpc runs the call: the outcome is what its codec's decode gives."""
        return bound_outcome(self.outcome)


@dataclass(frozen=True)
class CallGate:
    """What a call to the dashboard must pass: its Host, its token, the size of its message."""

    listen_host: str
    """dashboard_listen's host: the names and addresses it stands for are the dashboard's
    (`listen_address.names_listener`)."""
    names: tuple[str, ...]
    """dashboard_hosts: the names it answers besides those."""
    tokens: TokenTable
    max_bytes: int
    """Bytes of a request's body, and of its message inflated."""
    executor: Executor
    """Where inflating and decoding run."""
    budget: BodyBudget
    """The bodies held at once across calls."""

    async def read(
        self, scope: Scope, receive: Receive, request_class: type[Message], streaming: bool
    ) -> ReadCall | Refusal:
        """The call, its message decoded (or the Connect error that refuses it)."""
        codec = _codec(scope, streaming)
        if isinstance(codec, Refusal):
            return codec
        try:
            self._judge(scope)
            form = _form(scope, codec, streaming)
        except ConnectError as exc:
            await self._discard(scope, receive)
            return _handed(scope, codec, streaming, exc)
        outcome: Outcome
        with self.budget.holding() as held:
            try:
                data = form.data
                if data is None:
                    data = await self._body(scope, receive, held)
                loop = asyncio.get_running_loop()
                outcome = await loop.run_in_executor(
                    self.executor, decode_message, form, data, request_class, self.max_bytes
                )
            except ConnectError as exc:
                outcome = exc
        return _handed(scope, codec, streaming, outcome)

    def host_allowed(self, scope: Scope) -> bool:
        """Whether the request's Host is a name of this dashboard."""
        return names_listener(_header_values(scope, b"host"), self.listen_host, self.names)

    def _judge(self, scope: Scope) -> None:
        if not self.host_allowed(scope):
            hosts = _header_values(scope, b"host")
            given = excerpt(hosts[0]) if len(hosts) == 1 else f"{len(hosts)} Host headers"
            raise ConnectError(
                Code.PERMISSION_DENIED,
                f"Host {given} is not a name of this dashboard: call it by its listen "
                "address, or add the name to ROLLOUT_DASHBOARD_HOSTS",
            )
        if self.tokens:
            try:
                authenticate(self.tokens, _header_values(scope, b"authorization"))
            except Unauthenticated as exc:
                raise ConnectError(Code.UNAUTHENTICATED, str(exc)) from None

    async def _body(self, scope: Scope, receive: Receive, held: Held) -> bytes:
        chunks = []
        async for chunk in self._chunks(scope, receive):
            held.add(len(chunk))
            chunks.append(chunk)
        return b"".join(chunks)

    async def _discard(self, scope: Scope, receive: Receive) -> None:
        """Read a refused call's body and drop it, so that its connection may carry the next
        call (HTTP/1.1 keep-alive); a body past `max_bytes` closes the connection instead."""
        with contextlib.suppress(ConnectError):
            async for _ in self._chunks(scope, receive):
                pass

    async def _chunks(self, scope: Scope, receive: Receive) -> AsyncIterator[bytes]:
        """The body's chunks, refused as soon as they would pass `max_bytes`."""
        declared = _header_values(scope, b"content-length")
        if declared and declared[0].isdigit() and int(declared[0]) > self.max_bytes:
            raise too_large("the request body", self.max_bytes)
        size = 0
        while True:
            message = await receive()
            if message["type"] != "http.request":
                raise ConnectError(Code.CANCELED, "the client went away before its request")
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_bytes:
                raise too_large("the request body", self.max_bytes)
            yield chunk
            if not message.get("more_body", False):
                return


def _codec(scope: Scope, streaming: bool) -> str | Refusal:
    """The codec a Connect client names; a Refusal for a request no Connect client sends."""
    method = scope["method"]
    if method == "GET" and not streaming:
        codec = _query(scope).get("encoding", [""])[0]
    elif method == "POST":
        content_type = (_header_values(scope, b"content-type") or [""])[0]
        kind = content_type.partition(";")[0].strip().lower()
        prefix = _STREAM_PREFIX if streaming else _UNARY_PREFIX
        codec = kind.removeprefix(prefix) if kind.startswith(prefix) else ""
    else:
        return Refusal(405, [(b"allow", b"POST" if streaming else b"GET, POST")])
    return codec if codec in CODECS else Refusal(415, [_ACCEPT_POST])


def _form(scope: Scope, codec: str, streaming: bool) -> MessageForm:
    if scope["method"] == "GET":
        params = _query(scope)
        if "message" not in params:
            raise invalid("the query parameter `message` is required")
        compression = _known(params.get("compression", ["identity"])[0])
        data = params["message"][0].encode("utf-8")
        base64_encoded = params.get("base64", [""])[0] == "1"
        return MessageForm(codec, compression, enveloped=False, data=data, base64=base64_encoded)
    header = b"connect-content-encoding" if streaming else b"content-encoding"
    compression = (_header_values(scope, header) or ["identity"])[0].strip().lower()
    return MessageForm(codec, _known(compression), enveloped=streaming, data=None)


def _query(scope: Scope) -> dict[str, list[str]]:
    """A GET's parameters (as long as the HTTP server lets a request line be: 16 KiB)."""
    return parse_qs(scope.get("query_string", b"").decode("latin-1"), keep_blank_values=True)


def _known(compression: str) -> str:
    if compression not in _COMPRESSIONS:
        raise ConnectError(
            Code.UNIMPLEMENTED,
            f"unknown compression {excerpt(compression)}: supported are {', '.join(_COMPRESSIONS)}",
        )
    return compression


def _handed(scope: Scope, codec: str, streaming: bool, outcome: Outcome) -> ReadCall:
    """The call connectrpc runs: no message left to read, `outcome` its decoding."""
    return ReadCall(_emptied(scope, codec), _EMPTY_ENVELOPE if streaming else b"", outcome)


def _emptied(scope: Scope, codec: str) -> Scope:
    """`scope` as connectrpc sees it: no compression, and a GET's message empty."""
    dropped = (b"content-encoding", b"connect-content-encoding", b"content-length")
    headers = [(name, value) for name, value in scope["headers"] if name.lower() not in dropped]
    query = f"encoding={codec}&message=".encode() if scope["method"] == "GET" else b""
    return {**scope, "headers": headers, "query_string": query}


def _header_values(scope: Scope, name: bytes) -> list[str]:
    return [value.decode("latin-1") for key, value in scope["headers"] if key.lower() == name]
