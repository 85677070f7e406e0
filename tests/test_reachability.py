"""Everything under src/evictd is reachable from an entry point: no module, function, class or method that only
tests use.

Entry points are what pyproject.toml declares as scripts (`evictd = "evictd.cli:main"`), `python -m evictd`
(evictd/__main__.py) and every module run as a program (`if __name__ == "__main__":`, the disk walker
process). Modules are followed through their imports (lazy ones inside functions too), the same AST walk as
tests/test_layering.py. A public name (no leading underscore) defined at a module's top level or in a public
class counts as reached when some reachable module names it (a call, an attribute, an import) outside its own
definition. The walk goes by names, not types: a name used for something else hides an unused definition, so
this catches dead code without proving code alive. Generated gRPC stubs are not ours and are left out.
"""

from __future__ import annotations

import ast
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src"
GENERATED = frozenset({"evictd.cri.api_pb2", "evictd.cri.api_pb2_grpc"})
# Members that exist so that tests and benchmarks can observe state no behaviour shows. Each entry must be a
# real, otherwise unreached definition (checked below), so the list can only shrink.
OBSERVED_BY_TESTS = {
    # a recorded ranking read back whole, as typed entries: the codec's tests read it (replay compares the names
    # alone, explain ranks the replayed cycle's pods itself)
    "evictd.record.decision.Ranking.entries",
    # which trees the cache holds: the tests of its forgetting rules read it
    "evictd.adapters.disk_usage.DiskUsageCache.cached_paths",
    # the walker child's PID: tests and bench/memory_rss.py measure and kill the child process
    "evictd.adapters.disk_walker_process.DiskWalkerProcess.child_pid",
    # the pods whose resumable walks are mid-way: the tests of resumption read it
    "evictd.adapters.pod_disk_usage.PodDiskWalker.rounds_in_progress",
    # the figures the store holds whatever their age, and the pods it was asked for: the walker process's tests
    # and bench/cycle_cost.py read them
    "evictd.adapters.pod_disk_usage.PodDiskStore.latest",
    "evictd.adapters.pod_disk_usage.PodDiskStore.wanted",
    # a whole tree measured in one go (a walk without a budget): the tests of the du counting rules and
    # bench/disk_walk_isolation.py measure with it
    "evictd.adapters.disk_usage.DiskUsageCache.usage",
    # whether the re-arming thread is busy: the notifier tests read it to wait for a re-arm
    "evictd.adapters.memcg_set.MemcgNotifierSet.rearming",
    # a Summary's API document: what the recorder's text encoder (which writes text, not documents) and the
    # changes it writes, read back, must equal; the tests check them against it
    "evictd.record.summary_json.summary_to_dict",
    # a whole recording read at once, with its count of unreadable lines: the commands stream (`Recording`),
    # the recorder's and the daemon's tests read back what was written with it
    "evictd.record.recording.read_recording",
    # the error that stopped the log writer (a closed or broken stdout): its tests read which one it was
    "evictd.observe.log_writer.LogWriter.failed",
    # a line as the bytes the recorder writes, joined: the recorder writes its parts a chunk at a time
    # (`encode_line_parts`); the codec's tests and test helpers round-trip whole lines with it
    "evictd.record.model.encode_line",
}



@dataclass(frozen=True)
class Definition:
    module: str
    qualname: str  # "function", "Class" or "Class.method"
    name: str  # the name a caller writes
    node: ast.AST  # its definition, whose own body does not count as a use

    @property
    def key(self) -> str:
        return f"{self.module}.{self.qualname}"


def module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def parse_modules() -> dict[str, ast.Module]:
    return {module_name(path): ast.parse(path.read_text(encoding="utf-8")) for path in (SRC / "evictd").rglob("*.py")}


def script_targets() -> set[str]:
    """The functions pyproject.toml's scripts run, as "module.function"."""
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["scripts"]
    return {target.replace(":", ".") for target in scripts.values()}


def entry_modules(trees: dict[str, ast.Module]) -> set[str]:
    entries = {target.rsplit(".", 1)[0] for target in script_targets()}
    entries.update(name for name in trees if name.endswith(".__main__"))
    entries.update(name for name, tree in trees.items() if runs_as_program(tree))
    return entries


def runs_as_program(tree: ast.Module) -> bool:
    """True for a module with an `if __name__ == "__main__":` block."""
    return any(isinstance(node, ast.If) and "__name__" in ast.unparse(node.test) and "__main__" in ast.unparse(node.test)
               for node in tree.body)


def imported(tree: ast.AST, known: set[str]) -> set[str]:
    """The modules of `known` that `tree` imports, with their parent packages (importing runs those too)."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)  # `from package import module`
    found: set[str] = set()
    for name in names:
        parts = name.split(".")
        found.update(prefix for i in range(1, len(parts) + 1) if (prefix := ".".join(parts[:i])) in known)
    return found


def reachable_modules(trees: dict[str, ast.Module], entries: set[str]) -> set[str]:
    known = set(trees)
    seen: set[str] = set()
    pending = list(entries)
    while pending:
        name = pending.pop()
        if name not in seen:
            seen.add(name)
            pending.extend(imported(trees[name], known) - seen)
    return seen


def definitions(module: str, tree: ast.Module) -> Iterator[Definition]:
    """The public functions and classes at the top of `tree`, and the public methods of its public classes."""
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) and not node.name.startswith("_"):
            yield Definition(module, node.name, node.name, node)
            if isinstance(node, ast.ClassDef):
                for member in node.body:
                    if isinstance(member, ast.FunctionDef | ast.AsyncFunctionDef) and not member.name.startswith("_"):
                        yield Definition(module, f"{node.name}.{member.name}", member.name, member)


def names_used(tree: ast.AST, *, attributes_only: bool = False) -> Iterator[str]:
    """Every name `tree` refers to (variables, attributes, imported names), or only its attributes: a method is
    reached through an attribute, so a variable of the same name does not count for it."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and not attributes_only:
            yield node.id
        elif isinstance(node, ast.Attribute):
            yield node.attr
        elif isinstance(node, ast.ImportFrom) and not attributes_only:
            yield from (alias.name for alias in node.names)


def unreached(trees: dict[str, ast.Module], reachable: set[str], targets: set[str]) -> list[str]:
    """The keys of the definitions in `reachable` modules that no reachable module names (nor runs as a script
    target)."""
    uses: dict[str, int] = {}
    attribute_uses: dict[str, int] = {}
    for name in reachable:
        for used in names_used(trees[name]):
            uses[used] = uses.get(used, 0) + 1
        for used in names_used(trees[name], attributes_only=True):
            attribute_uses[used] = attribute_uses.get(used, 0) + 1
    found = []
    for module in sorted(reachable - GENERATED):
        for definition in definitions(module, trees[module]):
            method = "." in definition.qualname
            own = sum(1 for used in names_used(definition.node, attributes_only=method) if used == definition.name)
            counted = (attribute_uses if method else uses).get(definition.name, 0)
            if counted - own == 0 and definition.key not in targets:
                found.append(definition.key)
    return sorted(found)


def test_every_module_is_reachable_from_an_entry_point() -> None:
    trees = parse_modules()
    entries = entry_modules(trees)
    assert {"evictd.cli", "evictd.__main__", "evictd.adapters.disk_walker_process"} <= entries
    unreachable = sorted(set(trees) - reachable_modules(trees, entries))
    assert unreachable == [], f"modules no entry point imports: {unreachable}"


def test_every_public_definition_is_used_by_evictd() -> None:
    trees = parse_modules()
    dead = set(unreached(trees, reachable_modules(trees, entry_modules(trees)), script_targets()))
    assert sorted(dead - OBSERVED_BY_TESTS) == [], (
        "defined in src/evictd, used by nothing there (only by tests?)")
    assert sorted(OBSERVED_BY_TESTS - dead) == [], "listed as observed by tests, but evictd uses it (or it is gone)"


def test_the_walk_finds_what_nothing_reaches() -> None:
    """The checks above must be able to fail: a module nobody imports, and an unused function and method."""
    trees = {
        "evictd.cli": ast.parse("from evictd.used import Used, helper\n\ndef main():\n    Used().run()\n    helper()\n"),
        "evictd.used": ast.parse(
            "def helper():\n    pass\n\ndef unused():\n    unused()\n\n"
            "class Used:\n    def run(self):\n        pass\n    def for_tests(self):\n        return self.for_tests\n"
            "    def shadowed(self):\n        shadowed = 1\n        return shadowed\n"),
        "evictd.orphan": ast.parse("def main():\n    pass\n"),
        "evictd.tool": ast.parse("import evictd.used\n\nif __name__ == '__main__':\n    pass\n"),
    }
    entries = {"evictd.cli"} | {name for name, tree in trees.items() if runs_as_program(tree)}
    reachable = reachable_modules(trees, entries)
    assert sorted(reachable) == ["evictd.cli", "evictd.tool", "evictd.used"]
    assert unreached(trees, reachable, {"evictd.cli.main"}) == [
        "evictd.used.Used.for_tests", "evictd.used.Used.shadowed", "evictd.used.unused"]
