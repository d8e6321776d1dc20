"""The reward rules: a reward file the verifier wrote, else passed/total, else none.

The files are read from VERIFIER_DIR, which the service empties once every process the
agent started is dead (`takeover`) and reads once every process verification started is
dead: a file there was written by verification, nobody else. Only a regular file counts
(a link, even to a file, is no reward file). Which rule applies is the task's
`reward_source`:

    AUTO      reward.txt, else reward.json, else passed/total of the verify commands
    FILE      reward.txt, else reward.json, else a VERIFIER error (Harbor tasks)
    COMMANDS  passed/total; reward files are not read

reward.txt holds one finite number. reward.json is an object whose numeric keys are
all metrics; the reward is its `reward` key, else the key the task names (`reward_key`),
else its only numeric key (`Reward.key` says which); with several and none named, the
reward is unset and `Reward.note` says why.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from service.errors import VerifierError
from service.models import CommandResult, RewardSource, TaskSpec
from service.sandboxes import REWARD_JSON, REWARD_TXT, VERIFIER_DIR, Sandbox

__all__ = ["Reward", "compute_reward", "parse_reward_json", "parse_reward_txt"]

_MAX_REWARD_FILE_BYTES = 64 * 1024
_MAX_LISTED = 10_000
"""Files of VERIFIER_DIR looked through for the reward files."""
_REWARD_KEY = "reward"


@dataclass(frozen=True)
class Reward:
    value: float | None
    metrics: dict[str, float] = field(default_factory=dict)
    key: str = ""
    """The reward.json key the reward is; "" for reward.txt, the commands, or none."""
    note: str = ""
    """Why a reward file that was read gives no reward, when it does not."""


async def compute_reward(
    sandbox: Sandbox, verify_results: Sequence[CommandResult], task: TaskSpec
) -> Reward:
    """Apply the rules; a reward file that is required but missing, or that does not
    parse, is a VerifierError."""
    if task.reward_source is not RewardSource.COMMANDS:
        written = await _regular_files(sandbox)
        if REWARD_TXT in written:
            return Reward(parse_reward_txt(await _read(sandbox, REWARD_TXT)))
        if REWARD_JSON in written:
            return parse_reward_json(await _read(sandbox, REWARD_JSON), key=task.reward_key)
        if task.reward_source is RewardSource.FILE:
            raise VerifierError(
                f"the verifier wrote no reward file ({REWARD_TXT} or {REWARD_JSON}, "
                "as a regular file), and the task's reward_source is FILE"
            )
    if verify_results:
        passed = sum(result.passed for result in verify_results)
        return Reward(passed / len(verify_results))
    return Reward(None)


async def _regular_files(sandbox: Sandbox) -> set[str]:
    """Sandbox paths of the regular files in VERIFIER_DIR (links are left out)."""
    entries = await sandbox.list_files(VERIFIER_DIR, max_entries=_MAX_LISTED)
    if len(entries) == _MAX_LISTED and entries[-1].path < REWARD_TXT.rsplit("/", 1)[1]:
        raise VerifierError(f"{VERIFIER_DIR} holds more than {_MAX_LISTED} files")
    return {f"{VERIFIER_DIR}/{entry.path}" for entry in entries}


async def _read(sandbox: Sandbox, path: str) -> bytes:
    data = await sandbox.read_file(path, max_bytes=_MAX_REWARD_FILE_BYTES)
    if data is None:
        raise VerifierError(f"{path} vanished while it was read")
    return data


def parse_reward_txt(raw: bytes) -> float:
    try:
        value = float(raw.decode().strip())
    except (UnicodeDecodeError, ValueError) as exc:
        raise VerifierError(f"reward.txt is not a number: {raw[:80]!r}") from exc
    if not math.isfinite(value):
        raise VerifierError(f"reward.txt is not a finite number: {value}")
    return value


def parse_reward_json(raw: bytes, *, key: str = "") -> Reward:
    """The reward and metrics of a reward.json (rules in the module docstring)."""
    try:
        document = json.loads(raw)
    except (UnicodeDecodeError, ValueError) as exc:
        raise VerifierError(f"reward.json is not valid JSON: {exc}") from exc
    if not isinstance(document, dict):
        raise VerifierError("reward.json must be a JSON object")
    numbers = {name: float(value) for name, value in document.items() if _is_number(value)}
    for named in (_REWARD_KEY, key):
        if named and named in document:
            if named not in numbers:
                raise VerifierError(f"reward.json: {named!r} is not a finite number")
            return Reward(numbers[named], numbers, named)
    if key:
        raise VerifierError(f"reward.json has no key {key!r} (the task's reward_key)")
    if len(numbers) == 1:
        only = next(iter(numbers))
        return Reward(numbers[only], numbers, only)
    if not numbers:
        raise VerifierError("reward.json has no numeric key")
    note = (
        f"reward.json has {len(numbers)} numeric keys, none named {_REWARD_KEY!r} nor by the "
        "task's reward_key: the reward is unset (every key is a metric)"
    )
    return Reward(None, numbers, note=note)


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
