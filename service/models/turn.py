"""One model call as the capture proxy saw it."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from service.models.dialect import Dialect
from service.models.spec import Sampling


class ToolCall(BaseModel):
    """A function call requested by the model."""

    model_config = ConfigDict(frozen=True)

    id: str = ""
    name: str = ""
    arguments: str = ""
    """Arguments as the JSON text the model produced."""


class TokenLogprob(BaseModel):
    """One candidate token with its log-probability."""

    model_config = ConfigDict(frozen=True)

    token: str = ""
    token_id: int | None = None
    logprob: float = 0.0


class Usage(BaseModel):
    """Token accounting reported upstream."""

    model_config = ConfigDict(frozen=True)

    prompt_tokens: int = 0
    completion_tokens: int = 0
    total_tokens: int = 0


class Turn(BaseModel):
    """One model turn. Field names are read by outside tools: keep them."""

    index: int
    trainable: bool = True
    """False for auxiliary calls (title generation) a trainer should skip."""
    requested_model: str = ""
    request_messages: list[dict[str, Any]] = Field(default_factory=list)
    """Messages new since the previous turn."""
    request_message_offset: int = 0
    """Index in the full history where request_messages begin."""
    tools: list[dict[str, Any]] = Field(default_factory=list)
    """Tool schemas, only when they differ from the previous turn's."""
    tools_hash: str = ""
    completion_text: str = ""
    reasoning_text: str = ""
    tool_calls: list[ToolCall] = Field(default_factory=list)
    finish_reason: str = ""
    prompt_token_ids: list[int] = Field(default_factory=list)
    completion_token_ids: list[int] = Field(default_factory=list)
    logprobs: list[float] = Field(default_factory=list)
    """One log-probability per completion token."""
    completion_tokens: list[str] = Field(default_factory=list)
    top_logprobs: list[list[TokenLogprob]] = Field(default_factory=list)
    token_ids_present: bool = False
    """True only when the upstream returned ids; they are never invented."""
    usage: Usage = Field(default_factory=Usage)
    latency_s: float = 0.0
    time_to_first_token_s: float | None = None
    upstream_status: int = 0
    """HTTP status of the upstream response; 0 when there was none."""
    upstream_error: str = ""
    stream: bool = False
    start_time: datetime | None = None
    incomplete: bool = False
    """The response ended before the completion finished (a stream without a finish reason,
    a body cut short); `upstream_error` says how. Never a clean turn."""
    logprobs_present: bool = False
    """True when the upstream sent a log-probability for every completion token it sent
    (servers send `"logprobs": null` for some output, e.g. llama.cpp's tool calls)."""
    usage_counted: bool = False
    """True when the upstream sent no usage and `usage` was counted by the service from the
    token ids or logprobs it did send."""
    unparsed: bool = False
    """The request body was relayed but is not a chat request the turn model can read
    (`request_messages` empty); `raw_request` holds its beginning."""
    raw_request: str = ""
    """The request body as received, cut to a bounded length; only on `unparsed` turns."""
    dialect: Dialect = Dialect.CHAT_COMPLETIONS
    """The API the agent called; `request_messages` and `tools` are in chat-completions form
    whatever it was."""
    translated: bool = False
    """The call reached the upstream as chat completions translated from `dialect`."""
    body_cut: bool = False
    """The recorded bodies (request messages, tools, raw request, completion text,
    reasoning, tool calls) were cut to the per-turn cap or the rollout's budget
    (`service.proxy.capture.record`); token data and metadata never are."""
    body_bytes_dropped: int = 0
    """How many bytes of bodies the cut left out."""
    policy_version_start: int | None = None
    """The policy version (SetPolicyVersion) when the call went upstream; None: never set."""
    policy_version_end: int | None = None
    """The policy version when the call ended."""
    upstream_weight_version: str = ""
    """The weight version the upstream reported in a response header ("" if none)."""
    paused_s: float = 0.0
    """Time the call waited at a paused proxy (including before an aborted call's retry)."""
    sampling: Sampling = Field(default_factory=Sampling)
    """The sampling parameters the call carried upstream (None: not sent)."""
    sampling_stripped: list[str] = Field(default_factory=list)
    """Fields of the agent's request the proxy removed (`service.proxy.capture.sampling`)."""

    @property
    def failed(self) -> bool:
        """Whether the upstream call failed."""
        return bool(self.upstream_error) or not 200 <= self.upstream_status < 300
