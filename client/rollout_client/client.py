"""The blocking client: one channel, and the transport that makes `BaseClient`'s calls."""

from __future__ import annotations

import functools
from collections.abc import Callable, Generator, Sequence
from types import TracebackType
from typing import Any, Self, TypeVar

import grpc
from rollout.v1 import rollout_pb2 as pb
from rollout.v1 import rollout_pb2_grpc

from rollout_client.base import BaseClient
from rollout_client.calls import Pages, Stream, Unary
from rollout_client.errors import translate_errors
from rollout_client.results import ExecOutcome

__all__ = ["RolloutClient"]

T = TypeVar("T")


class RolloutClient(BaseClient):
    """Blocking client of a RolloutService; its arguments are `BaseClient`'s. Use it as a
    context manager, or call `close()`, to close the channel."""

    def _connect(
        self, credentials: grpc.ChannelCredentials | None, options: Sequence[tuple[str, Any]]
    ) -> None:
        self._channel = (
            grpc.secure_channel(self.target, credentials, options=options)
            if credentials is not None
            else grpc.insecure_channel(self.target, options=options)
        )
        self._stub = rollout_pb2_grpc.RolloutServiceStub(self._channel)

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def close(self) -> None:
        self._channel.close()

    def wait_until_ready(self, timeout_s: float) -> bool:
        """Wait up to `timeout_s` for the server to accept connections (a server still
        starting, say); whether it does."""
        try:
            grpc.channel_ready_future(self._channel).result(timeout=timeout_s)
        except grpc.FutureTimeoutError:
            return False
        return True

    def _send(self, build: Callable[[], Unary[T]]) -> T:
        call = build()
        method = getattr(self._stub, call.rpc)
        with translate_errors():
            return call.shape(method(call.request, timeout=call.timeout, metadata=self._metadata))

    def _receive(self, build: Callable[[], Stream[T]]) -> Generator[T, None, None]:
        call = build()
        responses = getattr(self._stub, call.rpc)(
            call.request, timeout=call.timeout, metadata=self._metadata
        )
        try:
            with translate_errors():
                for response in responses:
                    yield call.shape(response)
        finally:
            responses.cancel()

    def _every_page(self, build: Callable[[], Pages[T]]) -> Generator[T, None, None]:
        pages = build()
        token = ""
        while True:
            page = self._send(functools.partial(pages.page, token))
            yield from pages.items(page)
            token = page.next_page_token
            if not token:
                return

    def _gather(self, build: Callable[[], Stream[pb.ExecResponse]]) -> ExecOutcome:
        outcome = ExecOutcome()
        for item in self._receive(build):
            outcome.add(item)
        return outcome
