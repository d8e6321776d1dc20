"""A rollout's route through the proxy, and the turn each call through it becomes."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any

from pydantic import ValidationError

from service.models import CaptureSpec, Dialect, Sampling, Turn, Usage
from service.proxy.capture.assembly import CompletionAssembler
from service.proxy.capture.gate import Attempt, CallGate
from service.proxy.capture.history import (
    KEPT_REQUEST_BYTES,
    LANES_KEPT,
    LaneHistory,
    RequestDelta,
)
from service.proxy.capture.prompt_ids import PromptIdCache
from service.proxy.capture.record import RecordBounds, Recorder, scrub_bytes, scrub_text
from service.proxy.capture.request_parse import RequestParser
from service.proxy.capture.rewrite import is_trainable, upstream_headers
from service.proxy.capture.sampling import sent_sampling
from service.proxy.capture.tally import CallTally
from service.proxy.endpoints import ResolvedEndpoint
from service.proxy.transport.upstream import UpstreamTarget

__all__ = ["Exchange", "OnTurn", "Route"]

logger = logging.getLogger(__name__)

_LOG_ERROR_CHARS = 300
_RAW_REQUEST_BYTES = 64 * 1024
"""How much of an unparsed request a turn keeps."""
_STRIPPED_NAMES = 32
_STRIPPED_NAME_CHARS = 64
"""How many of the names of the agent's stripped fields a turn keeps, and of each how much
(the agent chooses them: a request of a thousand junk keys must not make a large turn)."""

OnTurn = Callable[[Turn], None]
"""Called with each turn the moment it completes; must not block."""


class Route:
    """One rollout's route: its upstream, capture settings and the turns recorded so far."""

    def __init__(
        self,
        token: str,
        rollout_id: str,
        upstream: ResolvedEndpoint,
        capture: CaptureSpec,
        on_turn: OnTurn,
        *,
        keep_turns: bool = True,
        bounds: RecordBounds | None = None,
    ) -> None:
        self.token = token
        self.rollout_id = rollout_id
        self.upstream = upstream
        self.capture = capture
        self.turns: list[Turn] = []
        """Completed turns in completion order (empty unless `keep_turns`)."""
        self.keep_turns = keep_turns
        self.turn_count = 0
        self.closed = False
        self.tasks: set[asyncio.Task[Any]] = set()
        """Requests in flight; cancelled when the route closes."""
        self.secrets = tuple(secret for secret in (upstream.api_key, token) if secret)
        """What must never reach the agent, a turn or a log: the key, and this route's token."""
        self.secret_bytes = tuple(secret.encode() for secret in self.secrets)
        self.recorder = Recorder(bounds or RecordBounds(), self.secrets)
        """Scrubs each turn and cuts its bodies to the per-turn cap and rollout budget."""
        self.target = UpstreamTarget(
            upstream.chat_completions_url,
            upstream_headers(upstream),
            private_ok=upstream.private_ok,
        )
        """The upstream request line and headers, built once."""
        self.parser = RequestParser()
        """Parses this route's requests, reusing the messages already parsed."""
        self._on_turn = on_turn
        self._history = LaneHistory()
        self._prompt_ids: dict[str, PromptIdCache] = {}
        self._next_index = 0
        self.calls = CallTally()
        """Trainable calls and their upstream failures (the rollout's classification)."""
        self.gate = CallGate()
        """Pauses this route's calls and holds its policy version (`gate`; the engine
        registers it with `engine.model_calls`)."""

    def __repr__(self) -> str:
        return f"Route(rollout_id={self.rollout_id!r}, turns={len(self.turns)})"

    @property
    def all_failed(self) -> bool:
        """True when there was a trainable call and every one failed upstream."""
        return self.calls.all_failed

    def begin(self, body: dict[str, Any], raw: bytes) -> Exchange:
        """Start the turn of a parsed request (before it is rewritten). A request whose
        messages or tools are not all objects is relayed all the same, and recorded as an
        unparsed turn holding the raw body."""
        model = body.get("model")
        messages = body.get("messages")
        tools = body.get("tools", [])
        readable = _objects(messages) and _objects(tools)
        exchange = Exchange(
            self,
            model if isinstance(model, str) else "",
            messages if readable and isinstance(messages, list) else [],
            tools if readable and isinstance(tools, list) else [],
            stream=bool(body.get("stream")),
        )
        exchange.request_bytes = len(raw)
        if not readable:
            exchange.mark_unparsed(raw)
        return exchange

    def _number(
        self, requested_model: str, messages: list[Any], tools: list[Any], *, keep: bool
    ) -> tuple[int, RequestDelta]:
        """The next turn index and what is new in the request, in one step so that
        `Turn.index` order is the order lanes were updated in."""
        index = self._next_index
        self._next_index += 1
        return index, self._history.delta(requested_model, messages, tools, keep=keep)

    def decode_prompt_ids(self, lane: str, raw: bytes) -> list[int] | None:
        """Prompt ids from a response's raw array, reusing the lane's previous prompt; only
        the `LANES_KEPT` most recently used lanes keep theirs (the agent names the lanes)."""
        cache = self._prompt_ids.pop(lane, None) or PromptIdCache()
        self._prompt_ids[lane] = cache
        while len(self._prompt_ids) > LANES_KEPT:
            del self._prompt_ids[next(iter(self._prompt_ids))]
        return cache.decode(raw)

    def prompt_ids_json(self, turn: Turn) -> bytes | None:
        """The JSON (an array's inner bytes) `turn.prompt_token_ids` was decoded from, while
        it is still its lane's latest; lets a writer skip re-serialising tens of thousands
        of ids."""
        cache = self._prompt_ids.get(turn.requested_model)
        return cache.raw_of(turn.prompt_token_ids) if cache is not None else None

    async def run(self, exchange: Exchange, call: Awaitable[None]) -> None:
        """Run one relayed call: cancelled if the route closes, recorded however it ends."""
        task = asyncio.current_task()
        assert task is not None
        self.tasks.add(task)
        try:
            await call
        except asyncio.CancelledError:
            exchange.fail("the agent disconnected (or the route closed) mid-call", upstream=False)
            raise
        finally:
            self.tasks.discard(task)
            self.complete(exchange)

    def complete(self, exchange: Exchange) -> None:
        """Record a finished exchange as a turn and publish it (unless the route is closed)."""
        turn = exchange.to_turn()
        self.turn_count += 1
        if self.keep_turns:
            self.turns.append(turn)
        self.calls.add(
            turn, upstream_failed=exchange.upstream_failed, unreachable=exchange.unreachable
        )
        if exchange.upstream_failed:
            logger.warning(
                "upstream call failed: rollout=%s turn=%d status=%d: %s",
                self.rollout_id,
                turn.index,
                turn.upstream_status,
                turn.upstream_error.strip().split("\n", 1)[0][:_LOG_ERROR_CHARS],
            )
        logger.debug(
            "turn rollout=%s index=%d status=%d latency=%.4fs%s",
            self.rollout_id,
            turn.index,
            turn.upstream_status,
            turn.latency_s,
            " failed" if turn.failed else "",
        )
        if not self.closed:
            self._on_turn(turn)


class Exchange:
    """One agent request in flight: what it asked, and what came back so far."""

    def __init__(
        self,
        route: Route,
        requested_model: str,
        messages: list[Any],
        tools: list[Any],
        *,
        stream: bool,
    ) -> None:
        self.route = route
        self.requested_model = requested_model
        self.stream = stream
        self._request: tuple[list[Any], list[Any]] | None = (messages, tools)
        self.index = -1
        self.delta = RequestDelta(0, [], [], "")
        self.started = time.perf_counter()
        self.start_time = datetime.now(UTC)
        self.assembler = CompletionAssembler(route.capture.top_logprobs)
        self.upstream_status = 0
        self.error = ""
        self.upstream_failed = False
        self.unreachable = False
        """No connection to the upstream could be made (refused, DNS, TLS): a wrong endpoint."""
        self.incomplete = False
        """A 2xx response that ended before its completion finished."""
        self.raw_request = ""
        """The request's beginning, when it could not be read as a chat request."""
        self.request_bytes = 0
        """The size of the request as the agent sent it (what its lane may keep)."""
        self.first_token_s: float | None = None
        self.agent_reads_ids = False
        """The agent asked for token ids itself (`return_token_ids`): it gets the prompt's
        too. Otherwise they were asked for the turn alone and are cut from its copy."""
        self.dialect = Dialect.CHAT_COMPLETIONS
        """The API the agent called (`service.proxy.dialects`)."""
        self.translated = False
        self.side_call = False
        """A call no trainer learns from whatever its model (token counting)."""
        self.attempts = 0
        """Times the call went upstream (more than 1 when a pause aborted it: `gate`)."""
        self.paused_s = 0.0
        self.policy_version_start: int | None = None
        self.policy_version_end: int | None = None
        self.upstream_weight_version = ""
        self.sampling = Sampling()
        """The sampling parameters the rewritten request carries upstream."""
        self.sampling_stripped: list[str] = []
        """The agent's fields the rewrite stripped (scrubbed, then cut: the agent names
        them)."""

    def note_rewritten(self, body: dict[str, Any], stripped: list[str]) -> None:
        """Record what the rewritten request `body` sends upstream, and what was stripped."""
        self.sampling = sent_sampling(body)
        kept = stripped[:_STRIPPED_NAMES]
        self.sampling_stripped = [self.scrub(name)[:_STRIPPED_NAME_CHARS] for name in kept]

    def start_attempt(self, attempt: Attempt) -> None:
        """The call passed the gate: the turn is this attempt's (a retry's, after an abort);
        its latency starts now when it waited or is a retry."""
        if attempt.waited_s or self.attempts:
            self.started = time.perf_counter()
        self.attempts += 1
        self.paused_s += attempt.waited_s
        self.policy_version_start = attempt.version
        self.upstream_status = 0

    def end_attempt(self, version: int | None) -> None:
        """The call ended under `version` (when it went upstream at all)."""
        if self.attempts:
            self.policy_version_end = version

    def mark_unparsed(self, raw: bytes) -> None:
        """Record the request as its raw beginning: it is not a chat request the turn reads."""
        self.raw_request = raw[:_RAW_REQUEST_BYTES].decode("utf-8", "replace")

    def record_request(self, messages: list[Any], tools: list[Any]) -> None:
        """Set the request the turn records, when it is known only after the relay (a native
        call's chat form is worked out after answering, off the agent's critical path)."""
        if self._request is not None:
            self._request = (messages, tools)

    def number(self) -> None:
        """Give the turn its index and request delta; done when the turn is built, after the
        response was forwarded, so the diff never delays the agent."""
        if self._request is not None:
            keep = self.request_bytes <= KEPT_REQUEST_BYTES
            self.index, self.delta = self.route._number(
                self.requested_model, *self._request, keep=keep
            )
            self._request = None

    def fail(self, message: str, *, upstream: bool = True) -> None:
        """Note a failure; `upstream=False` for ones the upstream is not to blame for."""
        if not self.error:
            self.error = self.scrub(message)
        self.upstream_failed = self.upstream_failed or upstream

    def cut_short(self, message: str) -> None:
        """Note a response that began (2xx) but ended before its completion finished."""
        self.incomplete = True
        self.fail(message)

    def scrub(self, text: str) -> str:
        """`text` without the upstream API key or the route token (errors may echo them)."""
        return scrub_text(text, self.route.secrets)

    def scrub_bytes(self, data: bytes, quiet: tuple[int, int] | None = None) -> bytes:
        """Bytes for the agent without the upstream API key (a server may echo it anywhere);
        `quiet` as `record.scrub_bytes` takes it."""
        return scrub_bytes(data, self.route.secret_bytes, quiet)

    def mark_first_token(self) -> None:
        if self.first_token_s is None:
            self.first_token_s = time.perf_counter() - self.started

    def to_turn(self) -> Turn:
        self.number()
        latency_s = time.perf_counter() - self.started
        if self.assembler.error:
            self.fail(self.assembler.error)
        prompt_ids = self._prompt_ids()
        recorded = self.route.recorder.record(self._fields(latency_s))
        try:
            turn = Turn.model_validate(recorded)
        except ValidationError:
            self.fail("upstream sent malformed token data")
            recorded.update(_NO_TOKEN_DATA, upstream_error=self.error)
            turn, prompt_ids = Turn.model_validate(recorded), None
        if prompt_ids:
            # Checked by PromptIdCache; validating tens of thousands of ints again costs ~1 ms.
            turn.prompt_token_ids = prompt_ids
            turn.token_ids_present = True
        if not turn.usage.completion_tokens:
            _count_usage(turn)
        return turn

    def _prompt_ids(self) -> list[int] | None:
        raw = self.assembler.prompt_raw
        if raw is None:
            return None
        ids = self.route.decode_prompt_ids(self.requested_model, raw)
        if ids is None:
            self.fail("upstream sent malformed prompt token ids")
        return ids

    def _fields(self, latency_s: float) -> dict[str, Any]:
        """The turn's fields as recorded before the cut (`record`)."""
        return {
            **self.assembler.fields(),
            "index": self.index,
            "trainable": not self.side_call and is_trainable(self.requested_model),
            "requested_model": self.requested_model,
            "request_messages": self.delta.messages,
            "request_message_offset": self.delta.offset,
            "tools": self.delta.tools,
            "tools_hash": self.delta.tools_hash,
            "latency_s": latency_s,
            "time_to_first_token_s": self.first_token_s,
            "upstream_status": self.upstream_status,
            "upstream_error": self.error,
            "stream": self.stream,
            "start_time": self.start_time,
            "incomplete": self.incomplete,
            "unparsed": bool(self.raw_request),
            "raw_request": self.raw_request,
            "dialect": self.dialect,
            "translated": self.translated,
            "policy_version_start": self.policy_version_start,
            "policy_version_end": self.policy_version_end,
            "upstream_weight_version": self.scrub(self.upstream_weight_version),
            "paused_s": self.paused_s,
            "sampling": self.sampling,
            "sampling_stripped": self.sampling_stripped,
        }


def _objects(value: object) -> bool:
    """Whether `value` is a list of JSON objects, as chat messages and tools are."""
    return isinstance(value, list) and all(isinstance(item, dict) for item in value)


def _count_usage(turn: Turn) -> None:
    """Usage counted from the tokens the upstream sent, when it sent no usage of its own."""
    completion = len(turn.completion_token_ids) or len(turn.logprobs)
    if not completion:
        return
    prompt = len(turn.prompt_token_ids)
    turn.usage = Usage(
        prompt_tokens=prompt, completion_tokens=completion, total_tokens=prompt + completion
    )
    turn.usage_counted = True


_NO_TOKEN_DATA: dict[str, Any] = {
    "prompt_token_ids": [],
    "completion_token_ids": [],
    "token_ids_present": False,
    "logprobs": [],
    "completion_tokens": [],
    "top_logprobs": [],
    "logprobs_present": False,
    "usage": {},
}
