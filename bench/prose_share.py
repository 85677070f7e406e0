"""How much of src/ is prose: docstrings and comments as a share of all lines, and the long module docstrings.

A prose line is a line inside a module, class or function docstring (ast) or a line holding a comment token
(tokenize), whether the comment stands alone or follows code; a line counts once. Lines are every line of every
.py file under the root (generated modules included). Stdlib only:

    python bench/prose_share.py [--root src] [--limit 15] [--per-module]
"""

from __future__ import annotations

import argparse
import ast
import io
import signal
import tokenize
from pathlib import Path

DOCSTRING_OWNERS = (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)


def docstring_span(node: ast.AST) -> tuple[int, int] | None:
    """The first and last line of `node`'s docstring, or None when it has none."""
    body = getattr(node, "body", None)
    if not body:
        return None
    first = body[0]
    if (isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant)
            and isinstance(first.value.value, str)):
        return first.lineno, first.end_lineno or first.lineno
    return None


def prose_lines(text: str) -> tuple[set[int], int]:
    """The line numbers of `text` that are prose, and the length of its module docstring in lines."""
    lines: set[int] = set()
    tree = ast.parse(text)
    module_doc = 0
    for node in ast.walk(tree):
        if isinstance(node, DOCSTRING_OWNERS):
            span = docstring_span(node)
            if span is not None:
                lines.update(range(span[0], span[1] + 1))
                if isinstance(node, ast.Module):
                    module_doc = span[1] - span[0] + 1
    for token in tokenize.generate_tokens(io.StringIO(text).readline):
        if token.type == tokenize.COMMENT:
            lines.add(token.start[0])
    return lines, module_doc


def main() -> None:
    """Print the totals, the share and the modules whose docstring is over the limit."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", default=str(Path(__file__).resolve().parents[1] / "src"))
    parser.add_argument("--limit", type=int, default=15, help="module docstring lines allowed")
    parser.add_argument("--per-module", action="store_true", help="print every module's figures")
    args = parser.parse_args()
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)  # `| head` ends the listing quietly
    root = Path(args.root)
    total = prose = 0
    long_docs: list[tuple[int, str]] = []
    rows: list[tuple[float, int, int, str]] = []
    for path in sorted(root.rglob("*.py")):
        text = path.read_text(encoding="utf-8")
        count = len(text.splitlines())
        lines, module_doc = prose_lines(text)
        total += count
        prose += len(lines)
        name = path.relative_to(root).as_posix()
        rows.append((len(lines) / count if count else 0.0, len(lines), count, name))
        if module_doc > args.limit:
            long_docs.append((module_doc, name))
    print(f"src lines: {total}")
    print(f"prose lines: {prose}")
    print(f"share: {100 * prose / total:.1f} %")
    print(f"module docstrings over {args.limit} lines: {len(long_docs)}")
    for length, name in sorted(long_docs, reverse=True):
        print(f"  {length:4d}  {name}")
    if args.per_module:
        for share, lines_prose, count, name in sorted(rows, reverse=True):
            print(f"{100 * share:5.1f} %  {lines_prose:5d} / {count:5d}  {name}")


if __name__ == "__main__":
    main()
