"""Text from a rollout made harmless to print on a terminal.

Whatever the CLI prints of a rollout (agent output, command output, file names, turn
texts, error messages) may have been written by the agent, which is an adversary: printed
raw, an escape sequence would set the window title, write the clipboard (OSC 52), plant a
hyperlink (OSC 8), move the cursor or clear the screen. `inert` shows every character that
a terminal could act on as a visible escape instead:

| characters                                          | shown as            |
| --------------------------------------------------- | ------------------- |
| C0 controls U+0000-U+001F but tab and newline, DEL  | `\\x1b`, `\\x7f`, ... |
| C1 controls U+0080-U+009F (`\\x9b` is a CSI)          | `\\x9b`, ...         |
| bidirectional marks, embeddings, overrides and       | `\\u202e`, ...       |
| isolates (U+061C, U+200E-U+200F, U+202A-U+202E,      |                     |
| U+2066-U+2069)                                       |                     |

JSON the CLI writes (`inert_json`) keeps its data: json escapes C0 controls itself, and
the rest of the table is written as JSON's own `\\u` escapes, which decode to the same text.

A carriage return that ends a line (`\\r\\n`, or one at the end of the text) is dropped: it
moves nothing a newline does not. A backslash is left as it is, so the agent can print a
text that reads like an escape, never one a terminal acts on.
"""

from __future__ import annotations

import re

__all__ = ["inert", "inert_json"]

_BEYOND_C0 = "\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069"
"""DEL, the C1 controls and the bidirectional marks: what a terminal acts on past C0."""
_ACTIVE = re.compile(f"(?P<line_end>\r(?=\n|\\Z))|[\x00-\x08\x0b-\x1f{_BEYOND_C0}]")


def _visible(match: re.Match[str]) -> str:
    if match.group("line_end"):
        return ""
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def inert(text: str) -> str:
    """`text` with every character a terminal acts on (but tab and newline) made visible."""
    return _ACTIVE.sub(_visible, text)


_JSON_ACTIVE = re.compile(f"[{_BEYOND_C0}]")


def inert_json(text: str) -> str:
    """JSON text (from `json.dumps`, which escapes C0 controls) with the other characters a
    terminal acts on written as `\\uXXXX`: the same document, safe to print."""
    return _JSON_ACTIVE.sub(lambda match: f"\\u{ord(match.group()):04x}", text)
