"""What holds of every training batch examples/train_loop.py writes, whatever the model said:
shared by its test on the scripted upstream and the real-model test."""

from __future__ import annotations

import json
import statistics
from collections import defaultdict
from pathlib import Path
from typing import Any

from examples.train_loop import EPS

__all__ = ["assert_group_normalised", "assert_mask_lines_up", "read_lines"]


def read_lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def assert_mask_lines_up(line: dict[str, Any]) -> tuple[int, ...]:
    """The loss mask is aligned with the ids, 0 on the prompt and 1 on the completion, with a
    logprob per completion token; returns the completion's ids."""
    mask, ids = line["loss_mask"], line["input_ids"]
    assert len(mask) == len(ids)
    completion_length = sum(mask)
    assert completion_length > 0
    assert mask == [0] * (len(ids) - completion_length) + [1] * completion_length
    assert len(line["logprobs"]) == completion_length
    return tuple(ids[len(ids) - completion_length :])


def assert_group_normalised(lines: list[dict[str, Any]]) -> dict[str, list[float]]:
    """(r - mean) / (std + eps) per group, recomputed exactly from the lines' rewards; the
    members' advantages sum to 0 within each group. Returns each group's rewards."""
    groups: dict[str, dict[str, tuple[float, float]]] = defaultdict(dict)
    for line in lines:
        groups[line["group_id"]][line["rollout_id"]] = (line["reward"], line["advantage"])
    for members in groups.values():
        rewards = [reward for reward, _ in members.values()]
        mean, std = statistics.fmean(rewards), statistics.pstdev(rewards)
        for reward, advantage in members.values():
            assert advantage == (reward - mean) / (std + EPS)
        assert abs(sum(advantage for _, advantage in members.values())) < 1e-12
    return {group: sorted(r for r, _ in members.values()) for group, members in groups.items()}
