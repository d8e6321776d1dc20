"""Sampling: each value outside its range is INVALID_ARGUMENT naming `spec.sampling.<field>`."""

from __future__ import annotations

import math

import pytest

from service.config import Settings
from service.engine.validation import validate_spec
from service.errors import SpecError
from service.models import CaptureSpec, RolloutSpec, Sampling, TaskSpec

GOOD_AND_BAD: dict[str, tuple[tuple[float, ...], tuple[float, ...]]] = {
    "seed": ((0, 2**63 - 1), (-1, 2**63)),
    "temperature": ((0.0, 1.0, 2.0), (-0.1, 2.5, math.inf)),
    "top_p": ((0.01, 1.0), (0.0, 1.5, -1.0)),
    "top_k": ((-1, 0, 1, 50), (-2, -100)),
    "min_p": ((0.0, 0.5, 1.0), (-0.1, 1.1)),
    "presence_penalty": ((-2.0, 0.0, 2.0), (-2.1, 3.0)),
    "frequency_penalty": ((-2.0, 0.0, 2.0), (-2.1, 3.0)),
    "repetition_penalty": ((0.5, 1.0, 2.0), (0.0, -1.0, 2.5)),
}


def spec(**sampling: float) -> RolloutSpec:
    return RolloutSpec(
        task=TaskSpec(instruction="x"),
        agent={"command": "true"},  # type: ignore[arg-type]
        capture=CaptureSpec(sampling=Sampling(**sampling)),  # type: ignore[arg-type]
    )


def refused(**sampling: float) -> set[str]:
    with pytest.raises(SpecError) as caught:
        validate_spec(spec(**sampling), Settings())
    return {violation.field for violation in caught.value.violations}


def test_every_field_has_a_range() -> None:
    assert set(GOOD_AND_BAD) == set(Sampling.model_fields)


@pytest.mark.parametrize("name", sorted(GOOD_AND_BAD))
def test_each_field_is_bounded(name: str) -> None:
    good, bad = GOOD_AND_BAD[name]
    for value in good:
        validate_spec(spec(**{name: value}), Settings())
    for value in bad:
        assert refused(**{name: value}) == {f"spec.sampling.{name}"}, value


@pytest.mark.parametrize("name", sorted(set(GOOD_AND_BAD) - {"seed", "top_k"}))
def test_nan_is_refused(name: str) -> None:
    assert refused(**{name: math.nan}) == {f"spec.sampling.{name}"}
