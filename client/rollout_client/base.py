"""What the blocking and the asyncio clients share (httpx's `BaseClient` under `Client` and
`AsyncClient`): their settings, and every method, written once.

A method is a call of `rollout_client.calls` (its request built and checked, its deadline,
the part of the response it returns), bound to the client it is read from: each client is a
transport of four methods, one a kind of call, that makes the call blocking (`client.py`) or
awaitable (`aio.py`).

    kind       the method                        the transport's method
    unary      a response                        _send(build) -> T
    stream     an iterator of the responses      _receive(build) -> (Async)Generator[T]
    pages      an iterator over every page       _every_page(build) -> (Async)Generator[T]
    gathered   an Exec stream, gathered          _gather(build) -> ExecOutcome
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import AsyncGenerator, Callable, Coroutine, Generator, Sequence
from typing import Any, Concatenate, Generic, ParamSpec, Protocol, Self, TypeVar, overload

import grpc
from rollout.v1 import rollout_pb2 as pb

from rollout_client import calls, messages
from rollout_client.calls import Configured, Pages, Stream, Unary
from rollout_client.connection import auth_metadata, default_target
from rollout_client.results import ExecOutcome

__all__ = ["BaseClient"]

P = ParamSpec("P")
T = TypeVar("T")
B = TypeVar("B")
A = TypeVar("A")


class _Blocking(Protocol):
    """A transport whose calls return when they are done (`RolloutClient`)."""

    def _send(self, build: Callable[[], Unary[T]]) -> T: ...

    def _receive(self, build: Callable[[], Stream[T]]) -> Generator[T, None, None]: ...

    def _every_page(self, build: Callable[[], Pages[T]]) -> Generator[T, None, None]: ...

    def _gather(self, build: Callable[[], Stream[pb.ExecResponse]]) -> ExecOutcome: ...


class _Awaiting(Protocol):
    """A transport whose calls are awaited (`AsyncRolloutClient`)."""

    def _send(self, build: Callable[[], Unary[T]]) -> Coroutine[Any, Any, T]: ...

    def _receive(self, build: Callable[[], Stream[T]]) -> AsyncGenerator[T, None]: ...

    def _every_page(self, build: Callable[[], Pages[T]]) -> AsyncGenerator[T, None]: ...

    def _gather(
        self, build: Callable[[], Stream[pb.ExecResponse]]
    ) -> Coroutine[Any, Any, ExecOutcome]: ...


class _Method(Generic[P, B, A]):
    """A call of `calls` as a method: read from a client, the call bound to the client's
    `transport` method, which returns a B on a blocking client and an A on an awaiting one.
    The request is built when the transport makes the call (an awaitable's when awaited)."""

    def __init__(
        self, build: Callable[Concatenate[Configured, P], Any], transport: str, doc: str = ""
    ) -> None:
        self._build = build
        self._transport = transport
        self.__doc__ = doc or build.__doc__
        self.__name__ = self.__qualname__ = build.__name__
        parameters = list(inspect.signature(build).parameters.values())[1:]
        self.__signature__ = inspect.Signature(parameters)

    def __set_name__(self, owner: type, name: str) -> None:
        self.__name__ = name
        self.__qualname__ = f"{owner.__qualname__}.{name}"

    def __call__(self, client: Any, /, *args: Any, **kwargs: Any) -> Any:
        """Called from the class, as a function is: `RolloutClient.get(client, id)`."""
        return self._bind(client)(*args, **kwargs)

    @overload
    def __get__(self, client: None, owner: type) -> Self: ...
    @overload
    def __get__(self, client: _Blocking, owner: type | None = None) -> Callable[P, B]: ...
    @overload
    def __get__(self, client: _Awaiting, owner: type | None = None) -> Callable[P, A]: ...
    def __get__(self, client: Any, owner: type | None = None) -> Any:
        return self if client is None else self._bind(client)

    def _bind(self, client: Any) -> Callable[..., Any]:
        transport = getattr(client, self._transport)

        def method(*args: Any, **kwargs: Any) -> Any:
            return transport(functools.partial(self._build, client, *args, **kwargs))

        method.__name__ = self.__name__
        method.__qualname__ = self.__qualname__
        method.__doc__ = self.__doc__
        method.__signature__ = self.__signature__  # type: ignore[attr-defined]
        return method


def _unary(
    build: Callable[Concatenate[Configured, P], Unary[T]],
) -> _Method[P, T, Coroutine[Any, Any, T]]:
    return _Method(build, "_send")


def _stream(
    build: Callable[Concatenate[Configured, P], Stream[T]],
) -> _Method[P, Generator[T, None, None], AsyncGenerator[T, None]]:
    return _Method(build, "_receive")


def _pages(
    build: Callable[Concatenate[Configured, P], Pages[T]],
) -> _Method[P, Generator[T, None, None], AsyncGenerator[T, None]]:
    """Iterated as a stream is, over the items of every page."""
    return _Method(build, "_every_page")


def _gathered(
    build: Callable[Concatenate[Configured, P], Stream[pb.ExecResponse]],
) -> _Method[P, ExecOutcome, Coroutine[Any, Any, ExecOutcome]]:
    doc = "`exec_stream` gathered: the command's stdout, stderr and result."
    return _Method(build, "_gather", doc)


class BaseClient:
    """A client of a RolloutService: what `RolloutClient` and `AsyncRolloutClient` share.

    `timeout` (seconds, None for none) bounds the quick calls: start, get, list and cancel.
    `run` and `watch` last as long as the rollout, so they take their own `timeout`, unbounded
    by default. `target` is the server's host:port (None: $ROLLOUT_TARGET, else
    127.0.0.1:50051). `token` is sent as a bearer token on every call (None: $ROLLOUT_TOKEN, if
    set); `credentials` (see `rollout_client.connection.tls_credentials`) turn on TLS.
    `channel_options` are more gRPC channel arguments, after the message limits: e.g.
    `[("grpc.lb_policy_name", "round_robin")]` with a `dns:///name:port` target spreads
    calls over every address the name resolves to (a headless Service's pods).
    """

    def __init__(
        self,
        target: str | None = None,
        *,
        max_message_bytes: int = messages.DEFAULT_MAX_MESSAGE_BYTES,
        timeout: float | None = 30.0,
        credentials: grpc.ChannelCredentials | None = None,
        token: str | None = None,
        channel_options: Sequence[tuple[str, str | int]] = (),
    ) -> None:
        options = [*messages.channel_options(max_message_bytes), *channel_options]
        self.target = default_target() if target is None else target
        self.timeout = timeout
        self._metadata = auth_metadata(token)
        self._connect(credentials, options)

    def _connect(
        self, credentials: grpc.ChannelCredentials | None, options: Sequence[tuple[str, Any]]
    ) -> None:
        """Open the transport's channel to `self.target`, and its stub."""
        raise NotImplementedError

    run = _unary(calls.run)
    start = _unary(calls.start)
    watch = _stream(calls.watch)
    get = _unary(calls.get)
    list = _unary(calls.list_rollouts)
    list_all = _pages(calls.list_all)
    cancel = _unary(calls.cancel)
    run_group = _unary(calls.run_group)
    start_group = _unary(calls.start_group)
    watch_group = _stream(calls.watch_group)
    get_group = _unary(calls.get_group)
    list_groups = _unary(calls.list_groups)
    list_all_groups = _pages(calls.list_all_groups)
    cancel_group = _unary(calls.cancel_group)
    set_policy_version = _unary(calls.set_policy_version)
    pause_model_calls = _unary(calls.pause_model_calls)
    resume_model_calls = _unary(calls.resume_model_calls)
    open_session = _unary(calls.open_session)
    exec_stream = _stream(calls.exec_stream)
    exec = _gathered(calls.exec_stream)
    read_file = _unary(calls.read_file)
    write_file = _unary(calls.write_file)
    list_files = _unary(calls.list_files)
    verify_session = _unary(calls.verify_session)
    close_session = _unary(calls.close_session)
    get_session = _unary(calls.get_session)
    list_sessions = _unary(calls.list_sessions)
    watch_session = _stream(calls.watch_session)
