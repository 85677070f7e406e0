"""The decision core stays pure: it imports only the standard library and itself, and does no I/O. The
adapters (adapters/, kube/, cri/) depend on the core, never on the shell that wires them; adapters/ and kube/ may
use the CRI client but not each other (what one needs of the other is a protocol, filled in by the composition).

This is the contract STYLE.md describes (kopf enforces its layers the same way with import-linter).
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Sequence
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
    bad = ast.parse("import os\nfrom evictd.cycle.manager import X\nopen('f')\n")
    names = imported_modules(bad)
    assert "os" in names and "evictd.cycle.manager" in names
    assert shell_imports(bad, "adapters") == ["evictd.cycle.manager"]
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


# --- the floors of the whole package -------------------------------------------------------------------------
# Each floor imports only the floors below it; the packages that share a floor stand side by side and import
# nothing of each other. docs/development.md ("Floors") draws the same order. A module is named by its package
# (a folder under src/evictd) or, for a module at the top of src/evictd, by its own name.
FLOORS: tuple[tuple[str, ...], ...] = (  # from the top down
    ("__main__",),
    ("cli",),
    ("run", "commands"),
    ("observe", "record"),
    ("cycle", "kubelet_file"),
    ("adapters", "kube", "config"),
    ("config_files", "cri"),
    ("clock", "log", "state_dir", "__init__"),
    ("core",),
)


def module_name(package_root: Path, path: Path) -> str:
    """The dotted module name of `path`, a file under `package_root` (src/evictd)."""
    parts = path.relative_to(package_root).with_suffix("").parts
    if parts[-1] == "__init__" and len(parts) > 1:
        parts = parts[:-1]
    return ".".join(("evictd", *parts))


def part_of(module: str) -> str:
    """The floor part a module of evictd belongs to: its package, or its own name at the top."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def evictd_imports(tree: ast.AST) -> list[str]:
    """The evictd modules `tree` imports, wherever the import stands (a function's, a TYPE_CHECKING block's)."""
    names = [name for name in imported_modules(tree) if name == "evictd" or name.startswith("evictd.")]
    for node in ast.walk(tree):  # `from evictd.cri import client`: the submodule too, when it is one
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("evictd"):
            names.extend(f"{node.module}.{alias.name}" for alias in node.names)
    return names


def import_graph(package_root: Path) -> dict[str, set[str]]:
    """Module -> the modules of the package it imports (only names that are modules of the package)."""
    paths = {module_name(package_root, p): p for p in package_root.rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for module, path in paths.items():
        imported = evictd_imports(ast.parse(path.read_text(encoding="utf-8")))
        graph[module] = {name for name in imported if name in paths and name != module}
    return graph


def floor_violations(package_root: Path, floors: Sequence[Sequence[str]] = FLOORS) -> list[str]:
    """Every import that runs up a floor or across to a package beside it, and every part on no floor."""
    level = {part: index for index, floor in enumerate(floors) for part in floor}
    found = []
    for module, imported in sorted(import_graph(package_root).items()):
        source = part_of(module)
        if source not in level:
            found.append(f"{module} is on no floor")
            continue
        for name in sorted(imported):
            target = part_of(name)
            if target == source:
                continue
            if target not in level:
                found.append(f"{module} imports {name}, which is on no floor")
            elif level[target] < level[source]:
                found.append(f"{module} imports {name}: up from {source} to {target}")
            elif level[target] == level[source]:
                found.append(f"{module} imports {name}: across, {source} and {target} stand side by side")
    return found


def module_circles(package_root: Path) -> list[list[str]]:
    """The sets of modules that import each other in a loop (strongly connected components over one module)."""
    graph = import_graph(package_root)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    circles: list[list[str]] = []

    def visit(module: str) -> None:  # Tarjan's algorithm
        index[module] = low[module] = len(index)
        stack.append(module)
        on_stack.add(module)
        for name in graph[module]:
            if name not in index:
                visit(name)
                low[module] = min(low[module], low[name])
            elif name in on_stack:
                low[module] = min(low[module], index[name])
        if low[module] == index[module]:
            component = []
            while True:
                name = stack.pop()
                on_stack.discard(name)
                component.append(name)
                if name == module:
                    break
            if len(component) > 1:
                circles.append(sorted(component))

    for module in sorted(graph):
        if module not in index:
            visit(module)
    return circles


def test_every_package_imports_only_the_floors_below_it() -> None:
    assert floor_violations(PACKAGE) == []


def test_no_modules_import_each_other_in_a_circle() -> None:
    assert module_circles(PACKAGE) == []


def test_every_package_stands_on_a_floor() -> None:
    parts = {part_of(module_name(PACKAGE, path)) for path in PACKAGE.rglob("*.py")}
    assert parts == {part for floor in FLOORS for part in floor}


def _plant(root: Path, files: dict[str, str]) -> Path:
    package = root / "evictd"
    for name, text in files.items():
        path = package / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return package


def test_the_floor_checks_fail_on_a_planted_upward_import_across_import_and_circle(tmp_path: Path) -> None:
    """The checks above must be able to fail: a tree with an upward import (core -> cycle), an import across
    (run -> commands, inside a function), a part on no floor and a circle of two modules."""
    package = _plant(tmp_path, {
        "__init__.py": "",
        "core/__init__.py": "",
        "core/engine.py": "from evictd.cycle.manager import CycleReport\n",
        "cycle/__init__.py": "",
        "cycle/manager.py": "from evictd.core import engine\n",
        "commands/__init__.py": "",
        "commands/simulate.py": "",
        "run/__init__.py": "",
        "run/daemon.py": "def serve():\n    from evictd.commands.simulate import run\n",
        "attic/__init__.py": "",
    })
    assert floor_violations(package) == [
        "evictd.attic is on no floor",
        "evictd.core.engine imports evictd.cycle.manager: up from core to cycle",
        "evictd.run.daemon imports evictd.commands.simulate: across, run and commands stand side by side",
    ]
    assert module_circles(package) == [["evictd.core.engine", "evictd.cycle.manager"]]
    # The same tree without the planted imports passes.
    fixed = _plant(tmp_path / "fixed", {"__init__.py": "", "core/__init__.py": "", "core/engine.py": "",
                                         "cycle/__init__.py": "", "cycle/manager.py": "from evictd.core import engine\n"})
    assert floor_violations(fixed) == [] and module_circles(fixed) == []


# --- the size of a module ---------------------------------------------------------------------------------------------
# A module over 500 lines says why in its docstring ("Over 500 lines because ..."); none is over 650 (issue 76: the
# wake-up wing's one file had grown to 830). protoc's generated CRI stubs are not ours to split.
SAYS_WHY_OVER = 500
MAX_MODULE_LINES = 650
GENERATED = ("cri/api_pb2.py", "cri/api_pb2_grpc.py")


def module_size_problems(package_root: Path) -> list[str]:
    """Each module over `MAX_MODULE_LINES`, and each over `SAYS_WHY_OVER` whose docstring does not say why."""
    problems = []
    for path in sorted(package_root.rglob("*.py")):
        name = path.relative_to(package_root).as_posix()
        if name in GENERATED:
            continue
        text = path.read_text()
        lines = len(text.splitlines())
        docstring = ast.get_docstring(ast.parse(text)) or ""
        if lines > MAX_MODULE_LINES:
            problems.append(f"{name}: {lines} lines, over {MAX_MODULE_LINES}")
        elif lines > SAYS_WHY_OVER and f"Over {SAYS_WHY_OVER} lines because" not in " ".join(docstring.split()):
            problems.append(f"{name}: {lines} lines and its docstring does not say why it is over {SAYS_WHY_OVER}")
    return problems


def test_no_module_is_over_its_size_and_a_long_one_says_why() -> None:
    assert module_size_problems(PACKAGE) == []


def test_the_size_check_fails_on_a_long_module_and_on_one_that_does_not_say_why(tmp_path: Path) -> None:
    (tmp_path / "long.py").write_text('"""Long."""\n' + "x = 1\n" * MAX_MODULE_LINES)
    (tmp_path / "quiet.py").write_text('"""Quiet."""\n' + "x = 1\n" * SAYS_WHY_OVER)
    (tmp_path / "said.py").write_text(f'"""Said.\nOver {SAYS_WHY_OVER} lines\nbecause it is one model."""\n'
                                      + "x = 1\n" * SAYS_WHY_OVER)
    assert module_size_problems(tmp_path) == [
        f"long.py: {MAX_MODULE_LINES + 1} lines, over {MAX_MODULE_LINES}",
        f"quiet.py: {SAYS_WHY_OVER + 1} lines and its docstring does not say why it is over {SAYS_WHY_OVER}",
    ]
