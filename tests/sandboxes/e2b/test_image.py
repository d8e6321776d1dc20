"""E2B sandboxes run on templates: `spec.sandbox.image` is refused naming the field."""

from __future__ import annotations

from pathlib import Path

import pytest

from service.errors import SpecError
from service.models import SandboxSpec
from testing.e2b_support import make_backend
from testing.fakes.e2b_cloud import FakeE2B


async def test_an_image_is_refused_pointing_at_the_template(tmp_path: Path, cloud: FakeE2B) -> None:
    backend = make_backend(tmp_path)
    try:
        with pytest.raises(SpecError) as raised:
            await backend.check_spec(SandboxSpec(backend="e2b", image="rollout/base"))
        (violation,) = raised.value.violations
        assert violation.field == "spec.sandbox.image"
        assert "spec.sandbox.template" in violation.description
        await backend.check_spec(SandboxSpec(backend="e2b", template="base-template"))
    finally:
        await backend.close()
