"""How the proxy rewrites an agent's chat request before it goes upstream.

Rules (each applied to the parsed JSON body, in place):
- every field that is not the agent's to set is stripped (`sampling`: temperature, seed,
  n, logit_bias, stop, response_format, guided decoding, a forced tool_choice, ...);
- `model` becomes the rollout's real model (the agent asks for an alias);
- `logprobs: true` and `top_logprobs: k` (k >= 1: llama.cpp-style servers return no
  logprobs otherwise);
- `max_tokens` and `max_completion_tokens` are capped at `max_tokens_cap` when it is > 0;
  with neither present, the cap is set as `max_tokens` (`max_completion_tokens` on hosted
  APIs, which reject `max_tokens` for reasoning models);
- `disable_thinking` sets `chat_template_kwargs.enable_thinking = false`;
- `return_token_ids: true` only where the upstream is self-hosted (see
  `ResolvedEndpoint.asks_token_ids`): hosted APIs return no ids and may reject the field;
- streams get `stream_options.include_usage = true`;
- `capture.sampling` sets the rollout's `seed`, `temperature`, `top_p`, `top_k`, ...
  where given (a group member's seed is its own, derived from the group's:
  `service.engine.groups.members`); the rest are not sent, so the upstream's defaults
  apply.
Headers are not rewritten but rebuilt: see `upstream_headers`.
"""

from __future__ import annotations

from typing import Any

from service.models import CaptureSpec, Dialect
from service.proxy.capture.sampling import apply_sampling, strip_agent_sampling
from service.proxy.endpoints import ResolvedEndpoint

__all__ = [
    "AUX_MODEL_ALIAS",
    "MAIN_MODEL_ALIAS",
    "cap_tokens",
    "disable_template_thinking",
    "is_trainable",
    "rewrite_request",
    "upstream_headers",
]

MAIN_MODEL_ALIAS = "rollout-policy"
"""Model name the agent uses for its main loop; replaced by the real model upstream."""
AUX_MODEL_ALIAS = "rollout-policy-aux"
"""Model name for auxiliary calls (opencode's titles); their turns are not trainable."""


def is_trainable(requested_model: object) -> bool:
    """Auxiliary calls are recorded but marked not trainable."""
    return requested_model != AUX_MODEL_ALIAS


def _cap_max_tokens(body: dict[str, Any], cap: int, hosted: bool) -> None:
    present = False
    for key in ("max_tokens", "max_completion_tokens"):
        value = body.get(key)
        if isinstance(value, int) and not isinstance(value, bool):
            body[key] = min(value, cap)
            present = True
    if not present:
        body["max_completion_tokens" if hosted else "max_tokens"] = cap


def rewrite_request(
    body: dict[str, Any], upstream: ResolvedEndpoint, capture: CaptureSpec
) -> list[str]:
    """Apply every rewrite rule to a parsed chat-completions request body; the names of
    the agent's fields it stripped."""
    stripped = strip_agent_sampling(body, Dialect.CHAT_COMPLETIONS)
    body["model"] = upstream.model
    body["logprobs"] = True
    body["top_logprobs"] = max(1, capture.top_logprobs)
    if capture.max_tokens_cap > 0:
        _cap_max_tokens(body, capture.max_tokens_cap, hosted=not upstream.asks_token_ids)
    if capture.disable_thinking:
        disable_template_thinking(body)
    if upstream.asks_token_ids:
        body["return_token_ids"] = True
    apply_sampling(body, capture.sampling)
    if body.get("stream"):
        options = body.get("stream_options")
        body["stream_options"] = {
            **(options if isinstance(options, dict) else {}),
            "include_usage": True,
        }
    return stripped


def cap_tokens(body: dict[str, Any], key: str, cap: int) -> None:
    """`body[key]` at most `cap`, and `cap` when the agent set no positive number."""
    value = body.get(key)
    body[key] = min(value, cap) if isinstance(value, int) and value > 0 else cap


def disable_template_thinking(body: dict[str, Any]) -> None:
    """`chat_template_kwargs.enable_thinking = false`, keeping the agent's other kwargs."""
    kwargs = body.get("chat_template_kwargs")
    body["chat_template_kwargs"] = {
        **(kwargs if isinstance(kwargs, dict) else {}),
        "enable_thinking": False,
    }


def upstream_headers(upstream: ResolvedEndpoint) -> dict[str, str]:
    """The only headers sent upstream: nothing of the agent's (its route token) is forwarded."""
    headers = {"Content-Type": "application/json", "Accept-Encoding": "identity"}
    if upstream.api_key:
        headers["Authorization"] = f"Bearer {upstream.api_key}"
    return headers
