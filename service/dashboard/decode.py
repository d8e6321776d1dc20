"""A Connect request's message decoded, on the dashboard's decoding thread, and handed to
connectrpc.

`decode_message` is the costly part of a request (base64, gzip inflated as a stream to a
cap, the envelope of a streaming call, JSON or binary protobuf), so `inbound` runs it off the
event loop. connectrpc decodes on the loop; it is given the codecs of `decoded_codecs()`,
whose decode returns what `inbound` bound for the call (`bound_outcome`), or raises the
Connect error that refused it.
"""

from __future__ import annotations

import base64
import binascii
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass

from connectrpc.code import Code
from connectrpc.codec import Codec
from connectrpc.compat import google_protobuf_codecs
from connectrpc.compression.gzip import GzipCompression
from connectrpc.errors import ConnectError
from google.protobuf.json_format import ParseError
from google.protobuf.message import DecodeError, Message

from service.errors import excerpt

__all__ = [
    "CODECS",
    "MessageForm",
    "Outcome",
    "bound_outcome",
    "decode_message",
    "decoded_codecs",
    "invalid",
    "too_large",
]

Outcome = Message | ConnectError

CODECS: dict[str, Codec[Message, Message]] = {c.name(): c for c in google_protobuf_codecs()}
"""connectrpc's JSON and binary codecs by name (its JSON rules: unknown fields ignored)."""

_GZIP = GzipCompression()
_ENVELOPE_HEADER_BYTES = 5
_COMPRESSED_FLAG = 0x01
_ERROR_EXCERPT_CHARS = 300

_outcome: ContextVar[Outcome | None] = ContextVar("dashboard_request", default=None)


@dataclass(frozen=True)
class MessageForm:
    """Where the message is in one request, and how it is wrapped."""

    codec: str
    compression: str
    enveloped: bool
    data: bytes | None  # a GET's query carries it; a POST's body does (None)
    base64: bool = False


@contextmanager
def bound_outcome(outcome: Outcome) -> Iterator[None]:
    """While connectrpc runs a call: what its codec's decode gives (or raises)."""
    token = _outcome.set(outcome)
    try:
        yield
    finally:
        _outcome.reset(token)


def decoded_codecs() -> list[Codec[Message, Message]]:
    """The codecs to give connectrpc: each encodes as its own, and decodes nothing."""
    return [_DecodedCodec(codec) for codec in CODECS.values()]


class _DecodedCodec:
    """connectrpc's codec of one name, whose decode is the one `CallGate.read` did."""

    def __init__(self, codec: Codec[Message, Message]) -> None:
        self._codec = codec

    def name(self) -> str:
        return self._codec.name()

    def encode(self, message: Message) -> bytes:
        return self._codec.encode(message)

    def decode(self, data: bytes | bytearray, message_class: type[Message]) -> Message:
        outcome = _outcome.get()
        if isinstance(outcome, ConnectError):
            raise outcome
        if outcome is None or data:
            raise ConnectError(Code.INTERNAL, "the dashboard did not read this request first")
        return outcome


def decode_message(
    form: MessageForm, data: bytes, request_class: type[Message], max_bytes: int
) -> Message:
    """The message of `data` in `form` (on the decoding thread: this is the costly part)."""
    if form.base64:
        try:
            data = base64.urlsafe_b64decode(data + b"===")
        except binascii.Error as exc:
            raise invalid(f"the query parameter `message` is not base64: {exc}") from None
    compression = form.compression
    if form.enveloped:
        data, compressed = _unwrap(data, max_bytes)
        compression = compression if compressed else "identity"
    if compression == "gzip":
        data = _inflate(data, max_bytes)
    elif len(data) > max_bytes:
        raise too_large("the request message", max_bytes)
    try:
        return CODECS[form.codec].decode(data, request_class)
    except (ParseError, DecodeError, ValueError, RecursionError) as exc:
        name = request_class.DESCRIPTOR.full_name
        why = excerpt(str(exc), _ERROR_EXCERPT_CHARS)
        raise invalid(f"the request is not a {name} in {form.codec}: {why}") from None


def _unwrap(data: bytes, max_bytes: int) -> tuple[bytes, bool]:
    """The message of a streaming request's one envelope, and whether it is compressed."""
    if len(data) < _ENVELOPE_HEADER_BYTES:
        raise invalid(f"the request has {len(data)} bytes: an envelope starts with 5")
    flags, length = data[0], int.from_bytes(data[1:_ENVELOPE_HEADER_BYTES], "big")
    if flags & ~_COMPRESSED_FLAG:
        raise invalid(f"the request's envelope has flags {flags:#04x}: only 0x01 is defined")
    if length > max_bytes:
        raise too_large("the request message", max_bytes)
    given = len(data) - _ENVELOPE_HEADER_BYTES
    if given != length:
        raise invalid(
            f"the request's envelope says {length} bytes and {given} follow: a "
            "server-streaming call sends exactly one message"
        )
    return data[_ENVELOPE_HEADER_BYTES:], bool(flags & _COMPRESSED_FLAG)


def _inflate(data: bytes, max_bytes: int) -> bytes:
    """gzip inflated as a stream, refused past `max_bytes` (connectrpc's capped inflater)."""
    try:
        inflated = _GZIP.decompress(data, max_bytes)
    except ConnectError:
        raise too_large("the request message inflated", max_bytes) from None
    except (zlib.error, EOFError) as exc:
        raise invalid(f"the request is not valid gzip: {exc}") from None
    return inflated


def too_large(what: str, max_bytes: int) -> ConnectError:
    return ConnectError(
        Code.RESOURCE_EXHAUSTED, f"{what} is larger than the dashboard's limit of {max_bytes} bytes"
    )


def invalid(message: str) -> ConnectError:
    return ConnectError(Code.INVALID_ARGUMENT, message)
