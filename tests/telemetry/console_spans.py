"""The spans a server with OTEL_TRACES_EXPORTER=console printed among its log lines."""

from __future__ import annotations

import json
import re
from typing import Any

__all__ = ["console_spans"]


def console_spans(output: str) -> list[dict[str, Any]]:
    """The JSON objects the console exporter printed, among the server's log lines."""
    spans, decoder = [], json.JSONDecoder()
    for match in re.finditer(r'^\{\s*$\n\s+"name"', output, flags=re.MULTILINE):
        span, _ = decoder.raw_decode(output, match.start())
        spans.append(span)
    return spans
