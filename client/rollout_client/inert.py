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

A carriage return that ends a line (`\\r\\n`, or one at the end of the text) is dropped: it
moves nothing a newline does not. A backslash is left as it is, so the agent can print a
text that reads like an escape, never one a terminal acts on.
"""

from __future__ import annotations

import re

__all__ = ["inert"]

_ACTIVE = re.compile(
    "(?P<line_end>\r(?=\n|\\Z))"
    "|[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]"
)


def _visible(match: re.Match[str]) -> str:
    if match.group("line_end"):
        return ""
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def inert(text: str) -> str:
    """`text` with every character a terminal acts on (but tab and newline) made visible."""
    return _ACTIVE.sub(_visible, text)
