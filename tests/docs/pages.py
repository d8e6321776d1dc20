"""The documentation as the tests read it: `README.md` and every `docs/*.md` page.

Three things are read from the pages: their runnable examples (a fenced block whose line before
the fence is `<!-- doc-test: NAME -->`), their relative links, and the anchors their headings
make. A name is unique across all pages, so a test names an example without saying where it is.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "ROOT",
    "Block",
    "broken_links",
    "claimed_output",
    "doc_pages",
    "heading_anchors",
    "marked_blocks",
]

ROOT = Path(__file__).resolve().parents[2]
_MARKED = re.compile(
    r"^<!-- doc-test: (?P<name>[\w-]+) -->\n```(?P<language>\w+)\n(?P<code>.*?)^```$",
    re.MULTILINE | re.DOTALL,
)
_FENCED = re.compile(r"^```.*?^```$", re.MULTILINE | re.DOTALL)
_INLINE_CODE = re.compile(r"`[^`\n]*`")
_LINK = re.compile(r"\[[^\]]*\]\((?P<target>[^)\s]+)\)")
_URL = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*:")
_HEADING = re.compile(r"^#{1,6} +(?P<text>.+?) *#* *$", re.MULTILINE)
_CLAIM = re.compile(r"It prints `(?P<output>[^`]+)`")


@dataclass(frozen=True)
class Block:
    """One marked example: where it is, its fence's language, its code as a reader copies it."""

    page: Path
    language: str
    code: str
    after: str
    """The page's text after the block, where the prose says what the block prints."""

    def commands(self) -> list[str]:
        """The block's command lines, comments and blank lines left out."""
        lines = (line.split("#", 1)[0].strip() for line in self.code.splitlines())
        return [line for line in lines if line]


def doc_pages() -> list[Path]:
    """The README and every page under docs/."""
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def marked_blocks() -> dict[str, Block]:
    """Every marked block of every page, by name; a name used twice is a mistake."""
    blocks: dict[str, Block] = {}
    for page in doc_pages():
        text = page.read_text(encoding="utf-8")
        for match in _MARKED.finditer(text):
            name = match["name"]
            if name in blocks:
                raise ValueError(f"{page}: doc-test {name} is also marked in {blocks[name].page}")
            blocks[name] = Block(page, match["language"], match["code"], text[match.end() :])
    return blocks


def claimed_output(block: Block) -> str:
    """What the page says the block prints: the first "It prints `...`" after it."""
    claim = _CLAIM.search(block.after)
    if claim is None:
        raise ValueError(f"{block.page}: no 'It prints `...`' after the block")
    return claim["output"]


def _prose(text: str) -> str:
    """The page without its code, where a bracket or a `#` is not markdown."""
    return _INLINE_CODE.sub("", _FENCED.sub("", text))


def heading_anchors(page: Path) -> set[str]:
    """The ids GitHub gives the page's headings: lower case, punctuation dropped, spaces to
    hyphens, and `-1`, `-2`... after a repeated one."""
    seen: Counter[str] = Counter()
    anchors = set()
    for heading in _HEADING.finditer(_FENCED.sub("", page.read_text(encoding="utf-8"))):
        slug = re.sub(r"[^\w\- ]", "", heading["text"].replace("`", "").lower()).replace(" ", "-")
        anchors.add(slug if not seen[slug] else f"{slug}-{seen[slug]}")
        seen[slug] += 1
    return anchors


def broken_links(page: Path, root: Path = ROOT) -> list[str]:
    """Each relative link of `page` to a file, or a heading of a markdown file, that is not
    there (or not under `root`: the link would break in a clone)."""
    broken = []
    for link in _LINK.finditer(_prose(page.read_text(encoding="utf-8"))):
        target = link["target"]
        if _URL.match(target):
            continue
        path, _, anchor = target.partition("#")
        resolved = (page.parent / path).resolve() if path else page
        if not resolved.exists() or not resolved.is_relative_to(root):
            broken.append(f"{target}: no such file")
        elif anchor and resolved.suffix == ".md" and anchor not in heading_anchors(resolved):
            broken.append(f"{target}: no such heading in {resolved.relative_to(root)}")
    return broken
