"""The capture proxy's dialects: OpenAI Responses and Anthropic Messages beside chat
completions, each call becoming the same `Turn`.

    route path (under /v1)   dialect            translated (default)          native
    chat/completions         CHAT_COMPLETIONS   (always as is: `core`, `relay`)
    responses                RESPONSES          responses_in -> chat ->        native_responses
                                                responses_out
    messages                 MESSAGES           messages_in -> chat ->         native_messages
                                                messages_out
    messages/count_tokens    MESSAGES           vLLM /tokenize (count_tokens)  forwarded

The mode is the endpoint's (`ResolvedEndpoint.dialect_mode`). Translated calls carry the
upstream's exact prompt and completion token ids and logprobs; native ones carry what
their dialect returns (see `native_*`). `handler` serves a call; the `Codec` protocol
(`service.proxy.capture.codec`) is how the relay reads and writes each dialect.
"""

from service.proxy.dialects.call import DialectCall
from service.proxy.dialects.handler import COUNT_TOKENS, serve_dialect

DIALECT_ENDPOINTS = frozenset({"responses", "messages", COUNT_TOKENS})
"""Route endpoints (the path after /v1/) served by `serve_dialect`."""

__all__ = ["DIALECT_ENDPOINTS", "DialectCall", "serve_dialect"]
