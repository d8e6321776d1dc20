"""Every setting of the server is a row of docs/configuration.md's table, with its default:
a setting added without its documentation fails here."""

from __future__ import annotations

import re

from service.config import Settings
from tests.docs.pages import ROOT

_ROW = re.compile(r"^\| `(ROLLOUT_[A-Z0-9_]+)` \|", re.MULTILINE)


def test_every_setting_has_a_row_and_every_row_a_setting() -> None:
    documented = set(_ROW.findall((ROOT / "docs" / "configuration.md").read_text()))
    settings = {f"ROLLOUT_{name.upper()}" for name in Settings.model_fields}
    assert settings - documented == set(), "settings missing from docs/configuration.md"
    assert documented - settings == set(), "rows naming no setting"
