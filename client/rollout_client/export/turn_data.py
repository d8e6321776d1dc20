"""What both exporters read off a turn in the same way: logprobs, and policy versions.

Logprobs travel as float32 in the proto, so -1.2345 sent by the upstream arrives as
-1.2345000505447388. Exporters write the shortest decimal that is the same float32, which is
what the upstream sent whenever its value fit a float32 (it never had more precision here).

Policy versions (SetPolicyVersion) are optional everywhere: a turn's `policy_version_start` /
`policy_version_end`, a result's `policy_version_min` / `policy_version_max`. Exporters write
them only when set, never a 0 that would read as a version.
"""

from __future__ import annotations

import struct

from rollout.v1 import rollout_pb2 as pb

__all__ = ["completion_logprobs", "policy_versions", "shortest_decimal", "version_range"]


def _float32(value: float) -> float:
    return float(struct.unpack("<f", struct.pack("<f", value))[0])


def shortest_decimal(value: float) -> float:
    """The float with the fewest significant digits that rounds to the same float32."""
    single = _float32(value)
    for digits in range(1, 10):
        candidate = float(f"{single:.{digits}g}")
        if _float32(candidate) == single:
            return candidate
    return single


def completion_logprobs(turn: pb.Turn) -> list[float]:
    """The turn's completion logprobs, one per token the upstream scored, as decimals."""
    return [shortest_decimal(value) for value in turn.logprobs]


def policy_versions(turn: pb.Turn) -> dict[str, int]:
    """`policy_version_start` / `policy_version_end`, those the turn has (maybe neither)."""
    versions = {}
    if turn.HasField("policy_version_start"):
        versions["policy_version_start"] = turn.policy_version_start
    if turn.HasField("policy_version_end"):
        versions["policy_version_end"] = turn.policy_version_end
    return versions


def version_range(result: pb.RolloutResult) -> dict[str, int]:
    """`policy_version_min` / `policy_version_max` of the rollout, those it has."""
    versions = {}
    if result.HasField("policy_version_min"):
        versions["policy_version_min"] = result.policy_version_min
    if result.HasField("policy_version_max"):
        versions["policy_version_max"] = result.policy_version_max
    return versions
