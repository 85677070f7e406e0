"""Headings, anchors and links of the project's Markdown files, as GitHub renders them.

README.md is read on GitHub (it is not part of the MkDocs site, whose own build checks docs/), and the alert
rules point at docs/runbooks.md#<alert>: both need the anchors GitHub gives a heading (lower case, punctuation
but `-` and `_` dropped, spaces as `-`, a repeated heading suffixed `-1`, `-2`, ...). Lines inside fenced code
blocks are neither headings nor links.
"""

from __future__ import annotations

import re
from pathlib import Path

LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
INLINE_CODE = re.compile(r"`[^`]*`")


def github_anchor(heading: str) -> str:
    """Return the anchor GitHub gives a Markdown heading's text (before any repeat suffix)."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def prose_lines(text: str) -> list[str]:
    """The lines of a Markdown text outside fenced code blocks."""
    lines, fenced = [], False
    for line in text.splitlines():
        if line.lstrip().startswith("```"):
            fenced = not fenced
            continue
        if not fenced:
            lines.append(line)
    return lines


def anchors(path: Path) -> set[str]:
    """Every anchor GitHub gives the headings of the Markdown file at `path`."""
    found: set[str] = set()
    seen: dict[str, int] = {}
    for line in prose_lines(path.read_text(encoding="utf-8")):
        heading = re.match(r"#{1,6} (.*)", line)
        if heading:
            anchor = github_anchor(heading.group(1))
            repeat = seen.get(anchor, 0)
            seen[anchor] = repeat + 1
            found.add(anchor if repeat == 0 else f"{anchor}-{repeat}")
    return found


def relative_links(path: Path) -> list[str]:
    """The targets of the links in the Markdown file at `path` that are not URLs (`scheme:` or `//`)."""
    targets = []
    for line in prose_lines(path.read_text(encoding="utf-8")):
        for target in LINK.findall(INLINE_CODE.sub("", line)):
            if not re.match(r"[a-z][a-z0-9+.-]*:|//", target):
                targets.append(target)
    return targets


def broken_links(path: Path, root: Path) -> list[str]:
    """Each relative link of `path` whose file (inside `root`) or `#anchor` does not exist, with the reason."""
    broken = []
    for target in relative_links(path):
        file_part, _, anchor = target.partition("#")
        resolved = (path.parent / file_part).resolve() if file_part else path.resolve()
        if not resolved.is_relative_to(root.resolve()):
            broken.append(f"{target}: outside the repository")
        elif not resolved.exists():
            broken.append(f"{target}: no such file")
        elif anchor and (resolved.suffix != ".md" or anchor not in anchors(resolved)):
            broken.append(f"{target}: no heading of {resolved.name} gives #{anchor}")
    return broken
