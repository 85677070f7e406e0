"""The decision core stays pure: it imports only the standard library and itself, and does no I/O. The
adapters (adapters/, kube/, cri/) depend on the core, never on the shell that wires them; adapters/ and kube/ may
use the CRI client but not each other (what one needs of the other is a protocol, filled in by the composition).

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
# What every adapter may import of evictd: the core, the Clock and Log protocols, the stateDir's names and the
# CRI client.
_SHARED = ("evictd.core", "evictd.clock", "evictd.log", "evictd.state_dir", "evictd.cri")
# What the adapters of each package may import of evictd besides: their own package.
ADAPTER_MAY_IMPORT = {name: (*_SHARED, f"evictd.{name}") for name in ADAPTER_PACKAGES}

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


def shell_imports(tree: ast.AST, package: str) -> list[str]:
    """Return the evictd modules `tree`, a module of the adapter package `package`, imports that it may not."""
    allowed = ADAPTER_MAY_IMPORT[package]
    return [name for name in imported_modules(tree) if name.startswith("evictd.")
            and not any(name == prefix or name.startswith(prefix + ".") for prefix in allowed)]


@pytest.mark.parametrize("path", adapter_modules(), ids=lambda p: f"{p.parent.name}/{p.name}")
def test_adapters_import_neither_the_shell_nor_another_adapter_package(path: Path) -> None:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    assert shell_imports(tree, path.parent.name) == [], f"{path} imports the shell or another adapter package"


@pytest.mark.parametrize("path", core_modules(), ids=lambda p: p.name)
def test_core_imports_nothing_of_the_recording(path: Path) -> None:
    """The recording's codecs and writers live in evictd.record; the core knows nothing of them."""
    names = imported_modules(ast.parse(path.read_text(encoding="utf-8")))
    assert [name for name in names if name == "evictd.record" or name.startswith("evictd.record.")] == []


def test_checker_catches_a_violation(tmp_path: Path) -> None:
    """The checks above must be able to fail: feed them a module that breaks every rule."""
    bad = ast.parse("import os\nfrom evictd.run.manager import X\nopen('f')\n")
    names = imported_modules(bad)
    assert "os" in names and "evictd.run.manager" in names
    assert shell_imports(bad, "adapters") == ["evictd.run.manager"]
    fine = "from evictd.core.pods import Pod\nfrom evictd.clock import Clock\nfrom evictd.cri import Runtime\n"
    assert shell_imports(ast.parse(fine), "kube") == []
    # The arrows between kube/ and adapters/, either way, even imported inside a function.
    assert shell_imports(ast.parse("from evictd.adapters.node_pods import DiscoveredPods\n"), "kube") == [
        "evictd.adapters.node_pods"]
    lazy = ast.parse("def f():\n    from evictd.kube.client import build_api_client\n")
    assert shell_imports(lazy, "adapters") == ["evictd.kube.client"]
    assert shell_imports(ast.parse("import evictd.adapters.cgroups\n"), "cri") == ["evictd.adapters.cgroups"]
    calls = [n.func.id for n in ast.walk(bad) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)]
    assert "open" in calls
