"""Assemble a completion from a unary response or from SSE chunks, reading token ids.

Token ids are read from every shape vLLM and compatible servers return, in this order:
1. choice `token_ids` (vLLM `return_token_ids`; top-level `prompt_token_ids` for the prompt);
2. a `token_id` (or llama.cpp's `id`) key on every logprob entry;
3. every token spelled `token_id:N` (vLLM `--return-tokens-as-token-ids`).
Ids are never invented: with none of these, `token_ids_present` is false and the id
lists are empty. Logprobs likewise: `logprobs_present` is true only when every piece of
output came with its logprobs (llama.cpp sends `"logprobs": null` for tool-call output).

Only the first choice is recorded (agents ask for n=1). Upstream data is untrusted: odd
shapes are skipped, never raised on. Per-token work happens once, in `fields()`, with
list comprehensions: completions run to thousands of tokens.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from service.proxy.capture.json_shapes import as_dict, as_list, as_str

__all__ = ["CompletionAssembler", "entry_token_id", "first_choice", "reasoning_of"]

_ID_PREFIX = "token_id:"
_USAGE_KEYS = ("prompt_tokens", "completion_tokens", "total_tokens")


def entry_token_id(entry: Mapping[str, Any]) -> int | None:
    """The token id carried by one logprob entry, in any known spelling; None if absent."""
    for key in ("token_id", "id"):
        value = entry.get(key)
        if type(value) is int:
            return value
    token = entry.get("token")
    if (
        isinstance(token, str)
        and token.startswith(_ID_PREFIX)
        and token[len(_ID_PREFIX) :].isdigit()
    ):
        return int(token[len(_ID_PREFIX) :])
    return None


def _entry_ids(entries: list[dict[str, Any]]) -> list[Any] | None:
    """Ids carried by the logprob entries, when every entry carries one (validated by the Turn)."""
    if not entries:
        return None
    for key in ("token_id", "id"):
        ids = [entry.get(key) for entry in entries]
        if None not in ids:
            return ids
    ids = [entry_token_id(entry) for entry in entries]
    return None if None in ids else ids


def _float(value: object) -> float:
    return float(value) if isinstance(value, int | float) else 0.0


@dataclass
class _ToolCallParts:
    id: str = ""
    name: str = ""
    arguments: str = ""


def first_choice(doc: Mapping[str, Any]) -> Mapping[str, Any]:
    """A chat completion's (or chunk's) first choice; empty when it has none."""
    choices = as_list(doc.get("choices"))
    return as_dict(choices[0]) if choices else {}


def reasoning_of(message: Mapping[str, Any]) -> str:
    """A message's or delta's reasoning text, under either name servers use for it."""
    return as_str(message.get("reasoning_content") or message.get("reasoning"))


class CompletionAssembler:
    """Accumulates one completion; `fields()` gives the Turn fields it determines."""

    def __init__(self, top_k: int) -> None:
        self._top_k = top_k
        self._content: list[str] = []
        self._reasoning: list[str] = []
        self._tool_calls: dict[int, _ToolCallParts] = {}
        self._entries: list[Any] = []
        self._choice_ids: list[Any] | None = None
        self._prompt_ids: list[Any] = []
        self._usage: Mapping[str, Any] = {}
        self._output_without_logprobs = False
        """Some output (a chunk, or a unary message) came without its logprobs."""
        self.prompt_raw: bytes | None = None
        """The prompt ids array's bytes, cut from the response before parsing (`prompt_ids`)."""
        self.finish_reason = ""
        self.error = ""
        """An in-band error the upstream sent (SSE `{"error": ...}`)."""

    def add_completion(self, doc: Mapping[str, Any]) -> None:
        """A whole `chat.completion` object (unary response)."""
        self._add_common(doc)
        choice = as_dict(next(iter(as_list(doc.get("choices"))), None))
        message = as_dict(choice.get("message"))
        produced = self._add_text(message)
        for index, call in enumerate(as_list(message.get("tool_calls"))):
            self._add_tool_call(as_dict(call), index)
            produced = True
        self._add_choice_tokens(choice, produced)

    def add_chunk(self, doc: Mapping[str, Any]) -> bool:
        """One `chat.completion.chunk`; returns whether it carried generated output."""
        if "error" in doc:
            self.error = _error_message(doc["error"])
            return False
        self._add_common(doc)
        choices = doc.get("choices")
        if not choices or not isinstance(choices, list):
            return False
        choice = as_dict(choices[0])
        delta = as_dict(choice.get("delta"))
        produced = self._add_text(delta)
        for call in as_list(delta.get("tool_calls")):
            call = as_dict(call)
            index = call.get("index")
            self._add_tool_call(call, index if type(index) is int else len(self._tool_calls))
            produced = True
        self._add_choice_tokens(choice, produced)
        return produced

    def _add_common(self, doc: Mapping[str, Any]) -> None:
        prompt_ids = doc.get("prompt_token_ids")
        if isinstance(prompt_ids, list):
            self._prompt_ids = prompt_ids
        usage = doc.get("usage")
        if isinstance(usage, dict):
            self._usage = usage

    def _add_text(self, message: Mapping[str, Any]) -> bool:
        content = message.get("content")
        reasoning = reasoning_of(message)
        if isinstance(content, str) and content:
            self._content.append(content)
        if reasoning:
            self._reasoning.append(reasoning)
        return bool(content or reasoning)

    def _add_tool_call(self, call: Mapping[str, Any], index: int) -> None:
        parts = self._tool_calls.setdefault(index, _ToolCallParts())
        function = as_dict(call.get("function"))
        name, arguments, call_id = function.get("name"), function.get("arguments"), call.get("id")
        if isinstance(call_id, str) and call_id and not parts.id:
            parts.id = call_id
        if isinstance(name, str) and name and not parts.name:
            parts.name = name
        if isinstance(arguments, str):
            parts.arguments += arguments

    def _add_choice_tokens(self, choice: Mapping[str, Any], produced: bool) -> None:
        reason = choice.get("finish_reason")
        if isinstance(reason, str) and reason:
            self.finish_reason = reason
        ids = choice.get("token_ids")
        if isinstance(ids, list):
            if self._choice_ids is None:
                self._choice_ids = []
            self._choice_ids.extend(ids)
        entries = as_list(as_dict(choice.get("logprobs")).get("content"))
        self._entries.extend(entries)
        if produced and not entries:
            self._output_without_logprobs = True

    def fields(self) -> dict[str, Any]:
        """The Turn fields read from the response (plain data, validated once by the Turn)."""
        entries = [entry for entry in self._entries if isinstance(entry, dict)]
        ids = self._choice_ids if self._choice_ids is not None else _entry_ids(entries)
        logprobs_complete = bool(entries) and not self._output_without_logprobs
        return {
            "completion_text": "".join(self._content),
            "reasoning_text": "".join(self._reasoning),
            "tool_calls": [vars(parts) for _, parts in sorted(self._tool_calls.items())],
            "finish_reason": self.finish_reason,
            "prompt_token_ids": [] if self.prompt_raw is not None else self._prompt_ids,
            "completion_token_ids": ids or [],
            "token_ids_present": ids is not None or bool(self._prompt_ids),
            "logprobs": [_float(entry.get("logprob")) for entry in entries],
            "completion_tokens": [
                token if isinstance(token := entry.get("token"), str) else "" for entry in entries
            ],
            "top_logprobs": [_top(entry) for entry in entries] if self._top_k > 1 else [],
            "logprobs_present": logprobs_complete and (ids is None or len(ids) == len(entries)),
            "usage": {k: v for k in _USAGE_KEYS if type(v := self._usage.get(k)) is int},
        }


def _top(entry: Mapping[str, Any]) -> list[dict[str, Any]]:
    return [
        {
            "token": alt.get("token") if isinstance(alt.get("token"), str) else "",
            "token_id": entry_token_id(alt),
            "logprob": _float(alt.get("logprob")),
        }
        for alt in as_list(entry.get("top_logprobs"))
        if isinstance(alt, dict)
    ]


def _error_message(error: object) -> str:
    if isinstance(error, dict):
        message = error.get("message")
        if isinstance(message, str):
            return message
    return str(error)[:1000]
