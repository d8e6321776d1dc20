"""The upstream's chat completion as the OpenAI Responses answer the agent expects.

Unary: one `response` object. Stream: the events OpenAI sends, each as `event: <type>` +
`data: <json>` with a `sequence_number`:

    response.created, response.in_progress           on the upstream's first chunk
    per output item (in the order the model produced them):
      reasoning  <- delta.reasoning_content / reasoning:
          response.output_item.added, response.reasoning_text.delta ... .done,
          response.output_item.done
      message    <- delta.content:
          response.output_item.added, response.content_part.added,
          response.output_text.delta ... .done, response.content_part.done,
          response.output_item.done
      function_call <- delta.tool_calls[i]:
          response.output_item.added, response.function_call_arguments.delta ... .done,
          response.output_item.done
    response.completed (response.incomplete when the upstream hit its token limit)

A failure mid-stream is `response.failed` with the response's `error`; before the stream,
an OpenAI error body. Logprobs are not repeated to the agent (the turn has them).
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable, Mapping
from typing import Any

import orjson

from service.proxy.capture.assembly import CompletionAssembler, first_choice, reasoning_of
from service.proxy.capture.failures import error_body
from service.proxy.capture.json_shapes import as_dict

__all__ = ["ResponsesCodec"]


def _id(prefix: str) -> str:
    return f"{prefix}_{secrets.token_hex(12)}"


class _Item:
    """One output item being streamed."""

    def __init__(self, kind: str, output_index: int, call: Mapping[str, Any] | None = None):
        self.kind, self.output_index = kind, output_index
        self.parts: list[str] = []
        self.id = _id({"message": "msg", "reasoning": "rs"}.get(kind, "fc"))
        function = (call or {}).get("function")
        function = function if isinstance(function, dict) else {}
        self.call_id = str((call or {}).get("id") or _id("call"))
        self.name = str(function.get("name") or "")

    def body(self, status: str) -> dict[str, Any]:
        text = "".join(self.parts)
        if self.kind == "message":
            content = [{"type": "output_text", "text": text, "annotations": [], "logprobs": []}]
            if status == "in_progress":
                content = []
            return {
                "type": "message",
                "id": self.id,
                "role": "assistant",
                "status": status,
                "content": content,
            }
        if self.kind == "reasoning":
            content = [{"type": "reasoning_text", "text": text}] if status != "in_progress" else []
            return {"type": "reasoning", "id": self.id, "summary": [], "content": content}
        return {
            "type": "function_call",
            "id": self.id,
            "call_id": self.call_id,
            "name": self.name,
            "arguments": text,
            "status": status,
        }


class ResponsesCodec:
    """Translated Responses: chat completions from the upstream, Responses to the agent."""

    def __init__(
        self,
        assembler: CompletionAssembler,
        request: Mapping[str, Any],
        scrub: Callable[[str], str],
    ) -> None:
        self._assembler = assembler
        self._scrub = scrub
        """Takes the key out of an upstream's error text (`Exchange.scrub`)."""
        self._request = request
        self._id = _id("resp")
        self._created = int(time.time())
        self._sequence = 0
        self._items: list[_Item] = []
        self._open: _Item | None = None
        self._tool_items: dict[int, _Item] = {}
        self._usage: Mapping[str, Any] = {}
        self._started = self._failed = False

    def _response(self, status: str, error: dict[str, Any] | None = None) -> dict[str, Any]:
        request = self._request
        done = status != "in_progress"
        response: dict[str, Any] = {
            "id": self._id,
            "object": "response",
            "created_at": self._created,
            "status": status,
            "model": request.get("model") or "",
            "output": [item.body("completed") for item in self._items] if done else [],
            "parallel_tool_calls": request.get("parallel_tool_calls") is not False,
            "tool_choice": request.get("tool_choice") or "auto",
            "tools": request.get("tools") or [],
            "error": error,
            "incomplete_details": {"reason": "max_output_tokens"}
            if status == "incomplete"
            else None,
            "instructions": request.get("instructions"),
            "metadata": request.get("metadata") or {},
            "temperature": request.get("temperature"),
            "top_p": request.get("top_p"),
            "max_output_tokens": request.get("max_output_tokens"),
            "store": False,
            "text": {"format": {"type": "text"}},
            "truncation": "disabled",
            "usage": self._usage_body() if done else None,
        }
        return response

    def _usage_body(self) -> dict[str, Any]:
        prompt = self._usage.get("prompt_tokens")
        completion = self._usage.get("completion_tokens")
        prompt = prompt if type(prompt) is int else 0
        completion = completion if type(completion) is int else 0
        return {
            "input_tokens": prompt,
            "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
            "output_tokens": completion,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": prompt + completion,
        }

    def _status(self) -> str:
        return "incomplete" if self._assembler.finish_reason == "length" else "completed"

    def _event(self, kind: str, **data: Any) -> bytes:
        self._sequence += 1
        payload = orjson.dumps({"type": kind, "sequence_number": self._sequence - 1, **data})
        return b"event: %s\ndata: %s\n\n" % (kind.encode(), payload)

    # unary
    def add_unary(self, doc: Mapping[str, Any]) -> None:
        self._assembler.add_completion(doc)

    def unary_body(self, body: bytes, doc: Mapping[str, Any]) -> bytes:
        usage = doc.get("usage")
        self._usage = usage if isinstance(usage, dict) else {}
        choice = first_choice(doc)
        message = as_dict(choice.get("message"))
        reasoning = reasoning_of(message)
        if reasoning:
            self._add_item("reasoning").parts.append(reasoning)
        if isinstance(message.get("content"), str) and message["content"]:
            self._add_item("message").parts.append(message["content"])
        for call in message.get("tool_calls") or []:
            if isinstance(call, dict):
                item = self._add_item("function_call", call)
                function = call.get("function")
                if isinstance(function, dict) and isinstance(function.get("arguments"), str):
                    item.parts.append(function["arguments"])
        length = choice.get("finish_reason") == "length"
        return orjson.dumps(self._response("incomplete" if length else "completed"))

    def _add_item(self, kind: str, call: Mapping[str, Any] | None = None) -> _Item:
        item = _Item(kind, len(self._items), call)
        self._items.append(item)
        return item

    # stream
    def add_chunk(self, chunk: Mapping[str, Any]) -> bool:
        return self._assembler.add_chunk(chunk)

    def event(self, event: bytes, chunk: Mapping[str, Any]) -> bytes:
        if "error" in chunk:
            return self.stream_error(self._scrub(self._assembler.error), 502)
        usage = chunk.get("usage")
        if isinstance(usage, dict):
            self._usage = usage
        out = b""
        if not self._started:
            out = self._start()
        delta = first_choice(chunk).get("delta")
        return out + self._delta(delta) if isinstance(delta, dict) else out

    def _start(self) -> bytes:
        self._started = True
        response = self._response("in_progress")
        created = self._event("response.created", response=response)
        return created + self._event("response.in_progress", response=response)

    def _delta(self, delta: Mapping[str, Any]) -> bytes:
        out = b""
        reasoning = reasoning_of(delta)
        if reasoning:
            out += self._text_delta("reasoning", reasoning, "response.reasoning_text.delta")
        content = delta.get("content")
        if isinstance(content, str) and content:
            out += self._text_delta("message", content, "response.output_text.delta")
        for call in delta.get("tool_calls") or []:
            if isinstance(call, dict):
                out += self._call_delta(call)
        return out

    def _text_delta(self, kind: str, text: str, event: str) -> bytes:
        out = b""
        if self._open is None or self._open.kind != kind:
            out += self._open_item(_Item(kind, len(self._items)))
        item = self._open
        assert item is not None
        item.parts.append(text)
        extra: dict[str, Any] = {"logprobs": []} if kind == "message" else {}
        where = {"item_id": item.id, "output_index": item.output_index, "content_index": 0}
        return out + self._event(event, **where, delta=text, **extra)

    def _call_delta(self, call: Mapping[str, Any]) -> bytes:
        number = call.get("index")
        index = number if isinstance(number, int) else len(self._tool_items)
        out = b""
        item = self._tool_items.get(index)
        if item is None:
            item = _Item("function_call", len(self._items), call)
            self._tool_items[index] = item
            out += self._open_item(item)
        function = call.get("function")
        arguments = function.get("arguments") if isinstance(function, dict) else None
        if isinstance(arguments, str) and arguments:
            item.parts.append(arguments)
            out += self._event(
                "response.function_call_arguments.delta",
                item_id=item.id,
                output_index=item.output_index,
                delta=arguments,
            )
        return out

    def _open_item(self, item: _Item) -> bytes:
        out = self._close_item()
        self._items.append(item)
        self._open = item
        out += self._event(
            "response.output_item.added",
            output_index=item.output_index,
            item=item.body("in_progress"),
        )
        if item.kind == "message":
            part = {"type": "output_text", "text": "", "annotations": [], "logprobs": []}
            out += self._event(
                "response.content_part.added",
                item_id=item.id,
                output_index=item.output_index,
                content_index=0,
                part=part,
            )
        return out

    def _close_item(self) -> bytes:
        item, self._open = self._open, None
        if item is None:
            return b""
        text = "".join(item.parts)
        where = {"item_id": item.id, "output_index": item.output_index}
        if item.kind == "message":
            part = {"type": "output_text", "text": text, "annotations": [], "logprobs": []}
            out = self._event(
                "response.output_text.done", **where, content_index=0, text=text, logprobs=[]
            )
            out += self._event("response.content_part.done", **where, content_index=0, part=part)
        elif item.kind == "reasoning":
            out = self._event("response.reasoning_text.done", **where, content_index=0, text=text)
        else:
            out = self._event(
                "response.function_call_arguments.done", **where, name=item.name, arguments=text
            )
        return out + self._event(
            "response.output_item.done", output_index=item.output_index, item=item.body("completed")
        )

    def done(self, event: bytes) -> bytes:
        return self.end()

    def end(self) -> bytes:
        if self._failed:
            return b""
        out = b"" if self._started else self._start()
        out += self._close_item()
        status = self._status()
        kind = "response.incomplete" if status == "incomplete" else "response.completed"
        return out + self._event(kind, response=self._response(status))

    def error_body(self, message: str, status: int) -> bytes:
        return error_body(
            message,
            status=status,
            kind="server_error" if status >= 500 else "invalid_request_error",
        )

    def stream_error(self, message: str, status: int) -> bytes:
        """`response.failed`: how OpenAI ends a stream whose response failed."""
        self._failed = True
        out = b"" if self._started else self._start()
        error = {"code": "server_error", "message": message}
        return out + self._event("response.failed", response=self._response("failed", error))
