"""The documentation stays true to the repository: README's links resolve, and the project layout in
docs/development.md lists exactly the modules under src/evictd.

README.md is not part of the MkDocs site (whose `mkdocs build --strict`, in `make test`, checks every link and
anchor of docs/), so its relative links and #anchors are checked here, as GitHub resolves them. The layout is a
code block of docs/development.md: a line `src/evictd/<package>/` (or `src/evictd/` for the shell) opens a
package, and each entry line below it, indented by two spaces, names that package's modules before its
description (`a.py, b.py   what they do`). Generated modules (`api_pb2*`) and `__init__.py` are not listed.
"""

from __future__ import annotations

import re
from pathlib import Path

from markdown_anchors import anchors, broken_links, relative_links

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
DEVELOPMENT = ROOT / "docs" / "development.md"
PACKAGE = ROOT / "src" / "evictd"


def source_modules() -> set[str]:
    """Every module under src/evictd as a path relative to it, without __init__.py and generated stubs."""
    return {path.relative_to(PACKAGE).as_posix() for path in PACKAGE.rglob("*.py")
            if path.name != "__init__.py" and not path.name.startswith("api_pb2")}


def layout_block(text: str) -> list[str]:
    """The lines of the code block under the `## Project layout` heading."""
    after = text.split("\n## Project layout\n", 1)[1]
    return after.split("```", 2)[1].splitlines()


def listed_modules(text: str) -> list[str]:
    """The modules the layout names, each as a path relative to src/evictd, in order (repeats kept)."""
    listed: list[str] = []
    package: str | None = None
    for line in layout_block(text):
        opens = re.match(r"(\S+)/\s", line + " ")
        if opens:
            folder = opens.group(1)
            package = (folder.removeprefix("src/evictd").strip("/") if folder.startswith("src/evictd")
                       else None)
            continue
        entry = re.match(r"  (\S.*?)(?: {2,}|$)", line)
        if package is None or not entry or line.startswith("   "):
            continue
        for name in entry.group(1).split(", "):
            assert re.fullmatch(r"\w+\.py", name), f"not a module name in the layout: {line!r}"
            listed.append(f"{package}/{name}" if package else name)
    return listed


def test_readme_has_relative_links_and_each_resolves() -> None:
    assert relative_links(README), "README links to its docs/ pages"
    assert broken_links(README, ROOT) == []


def test_broken_links_finds_a_missing_file_a_missing_anchor_and_a_path_outside(tmp_path: Path) -> None:
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "page.md").write_text("# A page\n\n## `evictd run`: the daemon\n\n## Twice\n\n## Twice\n")
    readme = tmp_path / "README.md"
    readme.write_text("# Top\n\n[ok](docs/page.md#evictd-run-the-daemon) [ok](docs/page.md#twice-1) [ok](#top)\n"
                      "[gone](docs/gone.md) [no anchor](docs/page.md#nothing) [out](../shared/SPEC.md)\n"
                      "`[code](not/a/link.md)` [web](https://example.com/x.md)\n"
                      "```\n[fenced](not/a/link.md)\n```\n")
    assert broken_links(readme, tmp_path) == ["docs/gone.md: no such file",
                                              "docs/page.md#nothing: no heading of page.md gives #nothing",
                                              "../shared/SPEC.md: outside the repository"]
    assert anchors(tmp_path / "docs" / "page.md") == {"a-page", "evictd-run-the-daemon", "twice", "twice-1"}


def layout_mismatch(text: str) -> tuple[list[str], list[str], list[str]]:
    """What a layout text misses of src/evictd, what it lists that is not there, and what it lists twice."""
    listed = listed_modules(text)
    return (sorted(source_modules() - set(listed)), sorted(set(listed) - source_modules()),
            sorted({name for name in listed if listed.count(name) > 1}))


def test_layout_lists_every_module_under_src_evictd_once_and_nothing_else() -> None:
    missing, extra, repeated = layout_mismatch(DEVELOPMENT.read_text(encoding="utf-8"))
    assert (missing, extra, repeated) == ([], [], []), (
        f"docs/development.md's project layout is out of step with src/evictd: missing {missing}, "
        f"listed but not there {extra}, listed twice {repeated}")


def test_layout_check_sees_a_renamed_a_misplaced_and_a_repeated_module() -> None:
    text = DEVELOPMENT.read_text(encoding="utf-8")
    renamed = text.replace("\n  psi.py ", "\n  xyz.py ", 1)
    misplaced = text.replace("\n  lock.py ", "\n   ", 1).replace("\n  journal.py ", "\n  journal.py, lock.py ", 1)
    repeated = text.replace("\n  events.py ", "\n  events.py, events.py ", 1)
    assert text != renamed and text != misplaced and text != repeated
    assert layout_mismatch(renamed) == (["core/psi.py"], ["core/xyz.py"], [])
    assert layout_mismatch(misplaced) == (["run/lock.py"], ["kube/lock.py"], [])
    assert layout_mismatch(repeated) == ([], [], ["kube/events.py"])
