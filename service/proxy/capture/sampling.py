"""The sampling boundary: what of an agent's request may reach the upstream.

The agent is the policy being trained. A field of its request that changes the
distribution its tokens are drawn from (`temperature`, `logit_bias`, `min_tokens`, guided
decoding...), which draw is taken (`seed`, `n`), or what the proxy captures of it
(`echo`, `stop`, `prompt_logprobs`) would let it choose the very numbers it is trained
on. So each dialect's request keeps only the top-level fields on its allow-list; every
other field is stripped and named on the turn (`Turn.sampling_stripped`), and then the
rollout's `Sampling` is set (`apply_sampling`). An allow-list, not a deny-list: vLLM and
SGLang grow new request extras each release (`structured_outputs`, `vllm_xargs`,
`logits_processors`), and one a list of known fields missed would pass.

    kept (all dialects)     the conversation and tools, `stream`, the token limit, hints
                            that change neither sampling nor capture (`metadata`, `user`,
                            `store`, `service_tier`, `prompt_cache_key`, ...), and what
                            shapes the prompt, which the turn records as token ids
                            (`chat_template_kwargs`, `reasoning_effort`, `reasoning`,
                            `thinking`, `verbosity`)
    tool_choice             kept when "auto" or "none" ({"type": "auto"|"none"} in
                            Messages); a forced choice ("required", "any", a named tool)
                            is decoding constrained to a schema: stripped
    Responses `text`        kept without its `format` (structured output): "text.format"
    `model`                 kept: the turn notes the alias, the rewrite replaces it
    set by the proxy        `logprobs`, `top_logprobs`, `return_token_ids`: dropped here,
                            set by the dialect's rewrite, not reported
    everything else         stripped: `temperature`, `top_p`, `top_k`, `min_p`, `seed`,
                            `n`, penalties, `logit_bias`, `stop`/`stop_sequences`,
                            `min_tokens`, `ignore_eos`, `allowed_token_ids`, `bad_words`,
                            `response_format`, `guided_*`, `extra_body`, unknown keys

Stripping, not refusing: every packaged harness sends some of these (claude-code its
`temperature`, codex its `tool_choice`), and a refused call would end their rollouts for
a field the trainer overrides anyway; the turn says what was taken out.
"""

from __future__ import annotations

from typing import Any

from service.models import Dialect, Sampling

__all__ = ["apply_sampling", "sent_sampling", "strip_agent_sampling"]

_HINTS = frozenset(
    {"model", "metadata", "user", "store", "service_tier", "prompt_cache_key", "safety_identifier"}
)
"""Kept in every dialect: `model` (which the rewrite replaces, after the turn has noted
the alias the agent asked for) and hints that change neither sampling nor capture."""
_KEPT: dict[Dialect, frozenset[str]] = {
    Dialect.CHAT_COMPLETIONS: _HINTS
    | {
        "messages",
        "tools",
        "parallel_tool_calls",
        "stream",
        "stream_options",
        "max_tokens",
        "max_completion_tokens",
        "chat_template_kwargs",
        "reasoning_effort",
        "verbosity",
    },
    Dialect.RESPONSES: _HINTS
    | {
        "input",
        "instructions",
        "previous_response_id",
        "tools",
        "parallel_tool_calls",
        "stream",
        "stream_options",
        "max_output_tokens",
        "include",
        "reasoning",
        "truncation",
    },
    Dialect.MESSAGES: _HINTS | {"messages", "system", "tools", "stream", "max_tokens", "thinking"},
}
"""Top-level fields an agent may send, per dialect, besides `tool_choice` and `text`."""
_REPLACED = frozenset({"logprobs", "top_logprobs", "return_token_ids"})
"""Dropped unreported: the proxy sets them itself (`return_token_ids` only on a
self-hosted upstream, `logprobs` only in chat completions)."""
_FREE_CHOICES = frozenset({"auto", "none"})


def strip_agent_sampling(body: dict[str, Any], dialect: Dialect) -> list[str]:
    """Remove from `body` (the agent's request, in place) every field not the agent's to
    set; the names of those the proxy does not set itself, in request order."""
    kept = _KEPT[dialect]
    stripped = []
    for name in list(body):
        if name in kept or (name == "tool_choice" and _free_choice(body[name], dialect)):
            continue
        if name == "text" and dialect is Dialect.RESPONSES and isinstance(body[name], dict):
            if "format" in body[name]:
                body[name] = {key: v for key, v in body[name].items() if key != "format"}
                stripped.append("text.format")
            continue
        del body[name]
        if name not in _REPLACED:
            stripped.append(name)
    return stripped


def _free_choice(choice: object, dialect: Dialect) -> bool:
    """Whether a `tool_choice` leaves the model free (no decoding constrained to a tool)."""
    if dialect is Dialect.MESSAGES:
        return isinstance(choice, dict) and choice.get("type") in _FREE_CHOICES
    return isinstance(choice, str) and choice in _FREE_CHOICES


def apply_sampling(body: dict[str, Any], sampling: Sampling) -> None:
    """The rollout's sampling parameters set on a request (any dialect: they share the names)."""
    for key, value in sampling.model_dump(exclude_none=True).items():
        body[key] = value


def sent_sampling(body: dict[str, Any]) -> Sampling:
    """The sampling parameters a rewritten request carries upstream (the turn records it)."""
    return Sampling.model_validate({key: body[key] for key in Sampling.model_fields if key in body})
