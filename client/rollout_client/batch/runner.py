"""The batch engine: runs every task of a batch with bounded concurrency, as results arrive.

Each task runs as one rollout (group size 1) or one group of K members (StartGroup and
WatchGroup; the group refills members lost to infrastructure, up to K x (attempts - 1)).
A lone rollout lost to infrastructure (`results.RETRYABLE_KINDS`) runs again, up to
`attempts` times in all; what is still lost after that is recorded as an infrastructure
failure, never scored.

Request ids are `batch-<batch id>-<task digest>-<attempt>`, so running a batch again
(--resume) finds, rather than repeats, what the server already did: a finished rollout or
group whose line was not written is picked up as it is. One that an interrupted run
cancelled is found CANCELLED at admission and skipped for the next attempt number.

Cancelling the iteration (Ctrl-C) cancels every rollout and group in flight on the server
and waits until each is terminal before the cancellation goes on: nothing is left running.
"""

from __future__ import annotations

import asyncio
import hashlib
import time
import uuid
from collections.abc import AsyncGenerator, Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, TypeVar

from rollout.v1 import rollout_pb2 as pb

from rollout_client.batch.client import BatchClient
from rollout_client.batch.inputs import BatchTask, read_input, tasks_of_specs
from rollout_client.batch.output import BatchOutput, open_output, write_trajectory
from rollout_client.batch.results import (
    BatchResult,
    group_is_retryable,
    is_retryable,
    rejected_result,
    result_of,
    unstarted_result,
)
from rollout_client.batch.summary import summarize
from rollout_client.errors import InvalidArgumentError, ResourceExhaustedError, SpecError
from rollout_client.messages import SpecLike, group_spec
from rollout_client.specfile import SpecOverrides

__all__ = ["BATCH_LABEL", "Batch", "BatchOptions", "BatchSource", "Tally", "open_batch"]

BATCH_LABEL = "rollout.batch"
"""The label every rollout of a batch carries: the batch's id (`rollout list --label`)."""
_TERMINAL = frozenset(
    {
        pb.ROLLOUT_STATUS_SUCCEEDED,
        pb.ROLLOUT_STATUS_FAILED,
        pb.ROLLOUT_STATUS_TIMED_OUT,
        pb.ROLLOUT_STATUS_CANCELLED,
    }
)
BatchSource = str | Path | Iterable[SpecLike]
"""A dataset or task directory, a JSONL file of specs, or specs."""
_CANCEL_REASON = "batch interrupted"
S = TypeVar("S")
R = TypeVar("R")


@dataclass(frozen=True)
class BatchOptions:
    """How a batch runs."""

    group_size: int = 1
    """Members per task: 1 runs lone rollouts, K > 1 one group of K per task."""
    attempts: int = 3
    """Runs of a rollout lost to infrastructure, the first included."""
    n_concurrent: int = 8
    """Rollouts in flight at once (a group holds K; at least one group runs)."""
    labels: Mapping[str, str] = field(default_factory=dict)
    """Set on every rollout, with the batch's own label."""

    def __post_init__(self) -> None:
        for name in ("group_size", "attempts", "n_concurrent"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1, got {getattr(self, name)}")


@dataclass
class Tally:
    """The batch so far, for a progress view (updated as results arrive)."""

    total: int = 0
    done: int = 0
    running: int = 0
    infra_retries: int = 0
    scored: int = 0
    reward_sum: float = 0.0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    started: float = field(default_factory=time.monotonic)

    @property
    def queued(self) -> int:
        return self.total - self.done - self.running

    @property
    def mean_reward(self) -> float | None:
        return self.reward_sum / self.scored if self.scored else None

    def count(self, result: BatchResult) -> None:
        self.done += 1
        self.prompt_tokens += result.prompt_tokens
        self.completion_tokens += result.completion_tokens
        if result.scored:
            self.scored += 1
            self.reward_sum += result.score()


class Batch:
    """One batch over `tasks`: iterate `results()` to run it. With an `output` directory,
    finished tasks are skipped and each result is written as it arrives."""

    def __init__(
        self,
        client: BatchClient,
        tasks: list[BatchTask],
        options: BatchOptions,
        *,
        batch_id: str,
        output: BatchOutput | None = None,
    ) -> None:
        self._client = client
        self._options = options
        self._output = output
        self.batch_id = batch_id
        done = output.done_tasks() if output is not None else set()
        self._todo = [task for task in tasks if task.task_id not in done]
        self.tally = Tally(total=len(self._todo) * options.group_size)
        self.finished: list[BatchResult] = list(output.done) if output is not None else []
        """Every result so far, earlier runs' first."""
        self.final_summary: dict[str, Any] | None = None
        """summary.json's document, once the batch has ended."""

    def summary(self) -> dict[str, Any]:
        """summary.json's document over every finished task (earlier runs' too)."""
        return summarize(
            self.finished,
            self._options.group_size,
            infra_retries=self.tally.infra_retries,
            wall_time_s=time.monotonic() - self.tally.started,
        )

    async def results(self) -> AsyncGenerator[BatchResult, None]:
        """Each rollout's result as it finishes; then summary.json is written."""
        queue: asyncio.Queue[BatchResult | None] = asyncio.Queue()
        driver = asyncio.create_task(self._drive(queue))
        try:
            while (result := await queue.get()) is not None:
                yield result
            await driver
        finally:
            if not driver.done():
                driver.cancel()
                # The driver cancels what is in flight on the server before it ends.
                await asyncio.gather(driver, return_exceptions=True)
        self.final_summary = self.summary()
        if self._output is not None:
            self._output.write_summary(self.final_summary)

    async def _drive(self, queue: asyncio.Queue[BatchResult | None]) -> None:
        slots = asyncio.Semaphore(max(1, self._options.n_concurrent // self._options.group_size))
        try:
            async with asyncio.TaskGroup() as tasks:
                for task in self._todo:
                    tasks.create_task(self._run_task(task, slots, queue))
        except ExceptionGroup as failed:
            raise failed.exceptions[0] from None
        finally:
            queue.put_nowait(None)

    async def _run_task(
        self, task: BatchTask, slots: asyncio.Semaphore, queue: asyncio.Queue[BatchResult | None]
    ) -> None:
        async with slots:
            size = self._options.group_size
            self.tally.running += size
            emitted = 0

            def emit(result: BatchResult) -> None:
                nonlocal emitted
                emitted += 1
                self.tally.running -= 1
                self.tally.count(result)
                self.finished.append(result)
                if self._output is not None:
                    self._output.append(result)
                queue.put_nowait(result)

            try:
                if size == 1:
                    await self._single(task, emit)
                else:
                    await self._group(task, emit)
            finally:
                self.tally.running -= size - emitted

    def _spec(self, task: BatchTask, attempt: int) -> pb.RolloutSpec:
        spec = pb.RolloutSpec()
        spec.CopyFrom(task.spec)
        digest = hashlib.sha256(task.task_id.encode()).hexdigest()[:16]
        spec.request_id = f"batch-{self.batch_id}-{digest}-{attempt}"
        spec.labels.update(self._options.labels)
        spec.labels[BATCH_LABEL] = self.batch_id
        return spec

    async def _single(self, task: BatchTask, emit: Callable[[BatchResult], None]) -> None:
        attempt = failures = 0
        while True:
            spec = self._spec(task, attempt)
            try:
                started = await _admitted_or_undone(self._client.start, spec, self._cancel_rollout)
            except InvalidArgumentError as exc:
                _stop_if_the_server_refuses_all(task, exc)
                emit(rejected_result(task.task_id, 0, spec.request_id, str(exc)))
                return
            if started.status == pb.ROLLOUT_STATUS_CANCELLED:  # an interrupted run's
                attempt += 1
                continue
            rollout = await self._follow(started.id)
            if is_retryable(rollout) and failures + 1 < self._options.attempts:
                failures += 1
                self.tally.infra_retries += 1
                attempt += 1
                continue
            emit(self._result(task, rollout, attempt))
            return

    async def _follow(self, rollout_id: str) -> pb.Rollout:
        """The rollout, FULL view, once terminal; cancelled on the server if we are."""
        try:
            await self._ended(rollout_id)
            return await self._client.get(rollout_id, view=pb.RESULT_VIEW_FULL)
        except asyncio.CancelledError:
            await self._cancel_rollout(rollout_id)
            raise

    async def _cancel_rollout(self, rollout_id: str) -> None:
        await self._client.cancel(rollout_id, _CANCEL_REASON)
        await self._ended(rollout_id)

    async def _ended(self, rollout_id: str) -> None:
        """Return once the rollout is terminal (its event stream ends with `finished`)."""
        async for event in self._client.watch(rollout_id):
            if event.HasField("finished"):
                return

    async def _group(self, task: BatchTask, emit: Callable[[BatchResult], None]) -> None:
        """Run the task's group; a group the infrastructure failed before any member started
        (its template's sandbox) runs again, as a lone rollout would, up to `attempts`."""
        attempt = failures = 0
        while True:
            admitted = await self._admit_group(task, emit, attempt)
            if admitted is None:
                return
            started, attempt = admitted
            try:
                group, held = await self._watch_group(task, started.id, attempt, emit)
            except asyncio.CancelledError:
                await self._cancel_group(started.id)
                raise
            if group.members or not group_is_retryable(group):
                break
            if failures + 1 >= self._options.attempts:
                break
            failures += 1
            self.tally.infra_retries += 1
            attempt += 1
        await self._emit_members(task, group, held, attempt, emit)

    async def _emit_members(
        self,
        task: BatchTask,
        group: pb.Group,
        held: set[str],
        attempt: int,
        emit: Callable[[BatchResult], None],
    ) -> None:
        """Emit the held members that were not replaced, then a line for each member the
        group never started: every member of every task ends in the results."""
        for entry in group.members:
            if entry.rollout_id not in held:
                continue
            if entry.replaced_by:
                self.tally.infra_retries += 1
            else:
                emit(await self._fetched(task, entry.rollout_id, attempt))
        request_id = self._spec(task, attempt).request_id
        started = {entry.index for entry in group.members}
        for member in range(self._options.group_size):
            if member not in started:
                emit(
                    unstarted_result(
                        task.task_id, member, group, request_id=request_id, attempt=attempt
                    )
                )

    async def _admit_group(
        self, task: BatchTask, emit: Callable[[BatchResult], None], attempt: int
    ) -> tuple[pb.Group, int] | None:
        """The task's group and its attempt number, from `attempt` on (None: the server
        refused the spec)."""
        size = self._options.group_size
        while True:
            spec = self._spec(task, attempt)
            refills = size * (self._options.attempts - 1)
            try:
                started = await _admitted_or_undone(
                    self._client.start_group,
                    group_spec(spec, size, max_refills=refills),
                    self._cancel_group,
                )
            except InvalidArgumentError as exc:
                _stop_if_the_server_refuses_all(task, exc)
                for member in range(size):
                    emit(rejected_result(task.task_id, member, spec.request_id, str(exc)))
                return None
            if started.status != pb.GROUP_STATUS_CANCELLED:  # else an interrupted run's
                return started, attempt
            attempt += 1

    async def _watch_group(
        self, task: BatchTask, group_id: str, attempt: int, emit: Callable[[BatchResult], None]
    ) -> tuple[pb.Group, set[str]]:
        """Emit each member that counts as it ends; hold the others (lost to infrastructure
        or cancelled) until the group says whether they were replaced."""
        held: set[str] = set()
        async for response in self._client.watch_group(group_id):
            if response.HasField("group"):
                return response.group, held
            member = response.member
            if is_retryable(member) or member.status == pb.ROLLOUT_STATUS_CANCELLED:
                held.add(member.id)
            else:
                emit(await self._fetched(task, member.id, attempt))
        return await self._client.get_group(group_id), held

    async def _cancel_group(self, group_id: str) -> None:
        """Cancel the group and return once it and every member it started are terminal."""
        group = await self._client.cancel_group(group_id, _CANCEL_REASON)
        async for response in self._client.watch_group(group_id):
            if response.HasField("group"):
                group = response.group
                break
        for member in group.members:
            if member.status not in _TERMINAL:
                await self._ended(member.rollout_id)

    async def _fetched(self, task: BatchTask, rollout_id: str, attempt: int) -> BatchResult:
        rollout = await self._client.get(rollout_id, view=pb.RESULT_VIEW_FULL)
        return self._result(task, rollout, attempt)

    def _result(self, task: BatchTask, rollout: pb.Rollout, attempt: int) -> BatchResult:
        trajectory = ""
        if self._output is not None:
            trajectory = write_trajectory(self._output.directory, rollout)
        request_id = self._spec(task, attempt).request_id
        return result_of(
            task.task_id, rollout, request_id=request_id, attempt=attempt, trajectory=trajectory
        )


_UPLOAD_BUILDS = "ROLLOUT_HARBOR_UPLOAD_BUILDS"
"""The server setting its refusal of an uploaded task's Dockerfile names."""


def _stop_if_the_server_refuses_all(task: BatchTask, exc: InvalidArgumentError) -> None:
    """Stop the batch (a SpecError) when the server refused the task for a setting of its
    own: it builds no uploaded Dockerfile, so it refuses every task of the dataset with one,
    and only its operator, or a built image for every task, can change that."""
    for violation in exc.field_violations:
        if violation.field.endswith("harbor_task.archive") and _UPLOAD_BUILDS in str(violation):
            raise SpecError(
                f"task {task.task_id}: the server does not build the Dockerfiles of uploaded "
                f"tasks; start it with {_UPLOAD_BUILDS}=true (their RUN steps run as root on "
                "its host), or run every task on a built image (--image)"
            )


class _Made(Protocol):
    @property
    def id(self) -> str: ...


M = TypeVar("M", bound=_Made)


async def _admitted_or_undone(
    call: Callable[[S], Awaitable[M]], request: S, undo: Callable[[str], Awaitable[None]]
) -> M:
    """`_admitted`, but cancelled mid-call: the request may have reached the server, so it is
    sent again (its request id names what it made, if anything) and what it names is undone."""
    try:
        return await _admitted(call, request)
    except asyncio.CancelledError:
        try:
            made = await call(request)
        except InvalidArgumentError:
            raise asyncio.CancelledError from None
        await undo(made.id)
        raise


async def _admitted(call: Callable[[S], Awaitable[R]], request: S) -> R:
    """The call's answer, waiting out a server at capacity for as long as it asks."""
    while True:
        try:
            return await call(request)
        except ResourceExhaustedError as exc:
            await asyncio.sleep(exc.retry_delay_s or 1.0)


def open_batch(
    client: BatchClient,
    source: BatchSource,
    options: BatchOptions,
    *,
    output_dir: str | Path | None = None,
    resume: bool = False,
    overrides: SpecOverrides | None = None,
) -> Batch:
    """A batch over `source` (the input is read, and found sound, before `output_dir` is
    made); without an output directory it has a fresh id and nothing to resume."""
    if isinstance(source, str | Path):
        tasks = read_input(Path(source), overrides)
    else:
        tasks = tasks_of_specs(source)
    if output_dir is None:
        return Batch(client, tasks, options, batch_id=uuid.uuid4().hex[:16])
    output = open_output(Path(output_dir), options.group_size, resume=resume)
    return Batch(client, tasks, options, batch_id=output.batch_id, output=output)
