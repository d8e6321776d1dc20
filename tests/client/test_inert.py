"""`inert`: every character a terminal acts on is shown as a visible escape (issue 31)."""

from __future__ import annotations

import json

import pytest
from rollout_client.inert import inert, inert_json


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


def test_json_keeps_its_data_and_no_character_a_terminal_acts_on() -> None:
    document = {"text": "a\x1b]52;c;x\x07b\x9bc\u202ed\x7f"}
    text = inert_json(json.dumps(document, ensure_ascii=False))

    assert json.loads(text) == document
    assert not any(char in text for char in "\x1b\x07\x9b\u202e\x7f")
