"""The decision core stays pure: it imports only the standard library and itself, and does no I/O.

This is the contract STYLE.md describes (kopf enforces its layers the same way with import-linter).
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

CORE = Path(__file__).resolve().parents[1] / "src" / "evictd" / "core"

# Standard-library modules that would let the core touch the outside world or the clock.
FORBIDDEN_STDLIB = {
    "os", "io", "time", "socket", "subprocess", "pathlib", "shutil", "logging", "tempfile", "threading",
    "asyncio", "select", "signal", "sys", "random", "urllib", "http", "glob", "ctypes", "mmap", "fcntl",
}
FORBIDDEN_CALLS = {"open", "print", "input", "exec", "eval", "__import__"}


def core_modules() -> list[Path]:
    return sorted(CORE.glob("*.py"))


def imported_modules(tree: ast.AST) -> list[str]:
    names: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.extend(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            assert node.level == 0, "relative imports hide the layer; use evictd.core.x"
            names.append(node.module or "")
    return names


def test_core_has_modules() -> None:
    assert len(core_modules()) >= 8


@pytest.mark.parametrize("path", core_modules(), ids=lambda p: p.name)
def test_core_imports_only_stdlib_and_itself(path: Path) -> None:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    for name in imported_modules(tree):
        top = name.split(".")[0]
        if name.startswith("evictd."):
            assert name.startswith("evictd.core"), f"{path.name} imports the shell module {name}"
            continue
        assert top in sys.stdlib_module_names or top == "__future__", f"{path.name} imports {name}"
        assert top not in FORBIDDEN_STDLIB, f"{path.name} imports {name}, which does I/O or reads a clock"


@pytest.mark.parametrize("path", core_modules(), ids=lambda p: p.name)
def test_core_calls_no_io_builtins(path: Path) -> None:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            assert node.func.id not in FORBIDDEN_CALLS, f"{path.name}:{node.lineno} calls {node.func.id}()"


def test_checker_catches_a_violation(tmp_path: Path) -> None:
    """The checks above must be able to fail: feed them a module that breaks every rule."""
    bad = ast.parse("import os\nfrom evictd.manager import X\nopen('f')\n")
    names = imported_modules(bad)
    assert "os" in names and "evictd.manager" in names
    calls = [n.func.id for n in ast.walk(bad) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)]
    assert "open" in calls
