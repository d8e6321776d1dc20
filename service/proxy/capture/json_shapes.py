"""Reading untrusted JSON (agents' requests, upstreams' answers) without trusting its shape:
a value of the wrong type reads as empty rather than raising."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["as_dict", "as_list", "as_str"]


def as_dict(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, dict) else {}


def as_list(value: object) -> list[Any]:
    return value if isinstance(value, list) else []


def as_str(value: object) -> str:
    return value if isinstance(value, str) else ""
