"""The reward rules, in order: reward.txt, then reward.json, then passed/total, else none."""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from service.errors import VerifierError
from service.models import CommandResult
from service.sandboxes.base import REWARD_JSON, REWARD_TXT, Sandbox

__all__ = ["Reward", "compute_reward", "parse_reward_json", "parse_reward_txt"]

_MAX_REWARD_FILE_BYTES = 64 * 1024


@dataclass(frozen=True)
class Reward:
    value: float | None
    metrics: dict[str, float] = field(default_factory=dict)


async def compute_reward(sandbox: Sandbox, verify_results: Sequence[CommandResult]) -> Reward:
    """Apply the rules; a reward file that exists but does not parse is a VerifierError."""
    text = await sandbox.read_file(REWARD_TXT, max_bytes=_MAX_REWARD_FILE_BYTES)
    if text is not None:
        return Reward(parse_reward_txt(text))
    document = await sandbox.read_file(REWARD_JSON, max_bytes=_MAX_REWARD_FILE_BYTES)
    if document is not None:
        return parse_reward_json(document)
    if verify_results:
        passed = sum(result.passed for result in verify_results)
        return Reward(passed / len(verify_results))
    return Reward(None)


def parse_reward_txt(raw: bytes) -> float:
    try:
        value = float(raw.decode().strip())
    except (UnicodeDecodeError, ValueError) as exc:
        raise VerifierError(f"reward.txt is not a number: {raw[:80]!r}") from exc
    if not math.isfinite(value):
        raise VerifierError(f"reward.txt is not a finite number: {value}")
    return value


def parse_reward_json(raw: bytes) -> Reward:
    try:
        document = json.loads(raw)
    except (UnicodeDecodeError, ValueError) as exc:
        raise VerifierError(f"reward.json is not valid JSON: {exc}") from exc
    if not isinstance(document, dict):
        raise VerifierError("reward.json must be a JSON object")
    numbers = {
        key: float(value)
        for key, value in document.items()
        if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
    }
    if "reward" not in numbers:
        raise VerifierError("reward.json has no numeric 'reward' key")
    reward = numbers.pop("reward")
    return Reward(reward, numbers)
