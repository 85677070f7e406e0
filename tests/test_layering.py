"""The decision core stays pure: it imports only the standard library and itself, and does no I/O. The
adapters (adapters/, kube/, cri/) depend on the core and on each other, never on the shell that wires them.

This is the contract STYLE.md describes (kopf enforces its layers the same way with import-linter).
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "src" / "evictd"
CORE = PACKAGE / "core"
ADAPTER_PACKAGES = ("adapters", "kube", "cri")
# What an adapter may import of evictd: the core, the adapter packages, the Clock and Log protocols and the
# stateDir's names.
ADAPTER_MAY_IMPORT = ("evictd.core", "evictd.clock", "evictd.log", "evictd.state_dir",
                      *(f"evictd.{name}" for name in ADAPTER_PACKAGES))

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


def adapter_modules() -> list[Path]:
    return sorted(path for name in ADAPTER_PACKAGES for path in (PACKAGE / name).glob("*.py"))


def shell_imports(tree: ast.AST) -> list[str]:
    """Return the evictd modules `tree` imports that an adapter may not."""
    return [name for name in imported_modules(tree) if name.startswith("evictd.")
            and not any(name == allowed or name.startswith(allowed + ".") for allowed in ADAPTER_MAY_IMPORT)]


@pytest.mark.parametrize("path", adapter_modules(), ids=lambda p: f"{p.parent.name}/{p.name}")
def test_adapters_do_not_import_the_shell(path: Path) -> None:
    assert shell_imports(ast.parse(path.read_text(encoding="utf-8"))) == [], f"{path} imports the shell"


def test_checker_catches_a_violation(tmp_path: Path) -> None:
    """The checks above must be able to fail: feed them a module that breaks every rule."""
    bad = ast.parse("import os\nfrom evictd.run.manager import X\nopen('f')\n")
    names = imported_modules(bad)
    assert "os" in names and "evictd.run.manager" in names
    assert shell_imports(bad) == ["evictd.run.manager"]
    assert shell_imports(ast.parse("from evictd.core.pods import Pod\nfrom evictd.clock import Clock\n")) == []
    calls = [n.func.id for n in ast.walk(bad) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)]
    assert "open" in calls
