"""`inert`: every character a terminal acts on is shown as a visible escape (issue 31)."""

from __future__ import annotations

import pytest
from rollout_client.inert import inert


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("\x1b]52;c;cHduZWQ=\x07", "\\x1b]52;c;cHduZWQ=\\x07"),
        ("\x1b[2J\x1b[H", "\\x1b[2J\\x1b[H"),
        ("\x00\x08\x0b\x0c\x1f\x7f", "\\x00\\x08\\x0b\\x0c\\x1f\\x7f"),
        ("\x80\x9b2J\x9f", "\\x80\\x9b2J\\x9f"),
        ("a\u202eb\u2066c\u2069\u200f\u061c", "a\\u202eb\\u2066c\\u2069\\u200f\\u061c"),
        ("50%\r100%", "50%\\x0d100%"),
        ("one\r\ntwo\r", "one\ntwo"),
        ("tabs\tand\nnewlines stay", "tabs\tand\nnewlines stay"),
        ("é, 日本, \\x1b, [bold]", "é, 日本, \\x1b, [bold]"),
    ],
)
def test_inert(text: str, shown: str) -> None:
    assert inert(text) == shown
