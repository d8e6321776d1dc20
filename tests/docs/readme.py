"""The README's runnable examples: fenced blocks marked `<!-- readme-test: NAME -->`."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

__all__ = ["ROOT", "Block", "readme_blocks"]

ROOT = Path(__file__).resolve().parents[2]
_MARKED = re.compile(
    r"^<!-- readme-test: (?P<name>[\w-]+) -->\n```(?P<language>\w+)\n(?P<code>.*?)^```$",
    re.MULTILINE | re.DOTALL,
)


@dataclass(frozen=True)
class Block:
    """One marked example: its fence's language and its code, as a reader would copy it."""

    language: str
    code: str


def readme_blocks(path: Path = ROOT / "README.md") -> dict[str, Block]:
    """Every marked block of the README, by name; a name used twice is a mistake."""
    blocks: dict[str, Block] = {}
    for match in _MARKED.finditer(path.read_text(encoding="utf-8")):
        name = match["name"]
        if name in blocks:
            raise ValueError(f"{path}: two blocks are marked readme-test: {name}")
        blocks[name] = Block(match["language"], match["code"])
    return blocks
