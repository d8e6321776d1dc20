"""The asyncio client: one channel, and the transport that makes `BaseClient`'s calls
awaitable."""

from __future__ import annotations

import asyncio
import contextlib
import functools
from collections.abc import AsyncGenerator, Callable, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any, Self, TypeVar

import grpc
from rollout.v1 import rollout_pb2 as pb
from rollout.v1 import rollout_pb2_grpc

from rollout_client.base import BaseClient
from rollout_client.batch.results import BatchResult
from rollout_client.batch.runner import BatchOptions, BatchSource, open_batch
from rollout_client.calls import Pages, Stream, Unary
from rollout_client.errors import translate_errors
from rollout_client.results import ExecOutcome
from rollout_client.specfile import SpecOverrides

__all__ = ["AsyncRolloutClient"]

T = TypeVar("T")


class AsyncRolloutClient(BaseClient):
    """asyncio client of a RolloutService; its arguments are `BaseClient`'s. Create it inside
    the event loop that uses it; use it as an async context manager, or await `close()`."""

    def _connect(
        self, credentials: grpc.ChannelCredentials | None, options: Sequence[tuple[str, Any]]
    ) -> None:
        self._channel = (
            grpc.aio.secure_channel(self.target, credentials, options=options)
            if credentials is not None
            else grpc.aio.insecure_channel(self.target, options=options)
        )
        self._stub = rollout_pb2_grpc.RolloutServiceStub(self._channel)

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    async def close(self) -> None:
        await self._channel.close()

    async def wait_until_ready(self, timeout_s: float) -> bool:
        """Wait up to `timeout_s` for the server to accept connections (a server still
        starting, say); whether it does."""
        try:
            async with asyncio.timeout(timeout_s):
                await self._channel.channel_ready()
        except TimeoutError:
            return False
        return True

    async def _send(self, build: Callable[[], Unary[T]]) -> T:
        call = build()
        method = getattr(self._stub, call.rpc)
        with translate_errors():
            response = await method(call.request, timeout=call.timeout, metadata=self._metadata)
            return call.shape(response)

    async def _receive(self, build: Callable[[], Stream[T]]) -> AsyncGenerator[T, None]:
        call = build()
        responses = getattr(self._stub, call.rpc)(
            call.request, timeout=call.timeout, metadata=self._metadata
        )
        try:
            with translate_errors():
                async for response in responses:
                    yield call.shape(response)
        finally:
            responses.cancel()

    async def _every_page(self, build: Callable[[], Pages[T]]) -> AsyncGenerator[T, None]:
        pages = build()
        token = ""
        while True:
            page = await self._send(functools.partial(pages.page, token))
            for item in pages.items(page):
                yield item
            token = page.next_page_token
            if not token:
                return

    async def _gather(self, build: Callable[[], Stream[pb.ExecResponse]]) -> ExecOutcome:
        outcome = ExecOutcome()
        async for item in self._receive(build):
            outcome.add(item)
        return outcome

    async def batch(
        self,
        source: BatchSource,
        *,
        group_size: int = 1,
        attempts: int = 3,
        n_concurrent: int = 8,
        labels: Mapping[str, str] | None = None,
        output_dir: str | Path | None = None,
        resume: bool = False,
        overrides: SpecOverrides | None = None,
    ) -> AsyncGenerator[BatchResult, None]:
        """Run every task of `source` (a Harbor dataset or task directory, a JSONL file of
        specs, or specs) and yield each rollout's result as it finishes: one rollout per
        task, or with `group_size` K one group of K, `n_concurrent` rollouts at a time, a
        rollout lost to infrastructure tried up to `attempts` times (`rollout_client.batch`).
        `overrides` (the agent, endpoint and sandbox, as `rollout batch`'s flags give them:
        `SpecOverrides(agent="opencode", base_url=..., model=...)`) are set over each task's
        spec read from a path.

        With `output_dir`, results.jsonl, trajectories and summary.json are written there, and
        `resume=True` runs only the tasks it has no result for. Closing or cancelling the
        iteration cancels what is in flight and returns once none of it runs.
        """
        options = BatchOptions(
            group_size=group_size,
            attempts=attempts,
            n_concurrent=n_concurrent,
            labels=dict(labels or {}),
        )
        batch = open_batch(
            self, source, options, output_dir=output_dir, resume=resume, overrides=overrides
        )
        async with contextlib.aclosing(batch.results()) as results:
            async for result in results:
                yield result
