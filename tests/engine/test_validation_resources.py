"""Resources: 0 means the server default; otherwise within a minimum and the server's maximum."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from service.config import Settings
from service.engine.validation import RESOURCE_MINIMUMS, validate_spec
from service.errors import SpecError
from service.models import Resources, RolloutSpec, SandboxSpec, TaskSpec


def spec(**resources: int) -> RolloutSpec:
    return RolloutSpec(
        task=TaskSpec(instruction="x"),
        agent={"command": "true"},  # type: ignore[arg-type]
        sandbox=SandboxSpec(resources=Resources(**resources)),
    )


def refused(resources: dict[str, int], settings: Settings) -> set[str]:
    with pytest.raises(SpecError) as caught:
        validate_spec(spec(**resources), settings)
    return {violation.field for violation in caught.value.violations}


@pytest.mark.parametrize("name", sorted(RESOURCE_MINIMUMS))
def test_each_field_is_bounded_on_both_sides(name: str) -> None:
    settings = Settings()
    minimum, maximum = RESOURCE_MINIMUMS[name], settings.sandbox_resource_maxima[name]
    for fine in (0, minimum, maximum):
        validate_spec(spec(**{name: fine}), settings)
    for bad in (minimum - 1, maximum + 1):
        if bad > 0:
            assert refused({name: bad}, settings) == {f"spec.sandbox.resources.{name}"}


def test_the_maxima_are_the_operators_to_set() -> None:
    settings = Settings(
        sandbox_memory_mb_max=8192, sandbox_max_processes=128, sandbox_max_processes_max=256
    )
    validate_spec(spec(memory_mb=8192, max_processes=256), settings)
    assert refused({"memory_mb": 8193, "max_processes": 257}, settings) == {
        "spec.sandbox.resources.memory_mb",
        "spec.sandbox.resources.max_processes",
    }


def test_a_default_above_its_maximum_stops_the_server_at_start() -> None:
    with pytest.raises(ValidationError, match="memory_mb"):
        Settings(sandbox_memory_mb=8192, sandbox_memory_mb_max=4096)
