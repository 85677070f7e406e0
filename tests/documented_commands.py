"""The chart's lifecycle commands as README.md and deploy/helm/evictd/README.md give them, read from the documents.

Each document marks one fenced shell block with the line `<!-- commands: helm-lifecycle -->` just above it: the
commands an operator copies, from the namespace (`kubectl create namespace`, its Pod Security label) to `helm
install`, `helm upgrade`, `helm rollback` and `helm uninstall`, in that order. `lifecycle` returns them as written
(a line continued by a backslash joined, a `#` comment dropped), each also split as the shell splits it, so a test
runs exactly what an operator would: tests/deploy/test_documented_commands.py renders the install and upgrade with
`helm template` offline; the real-cluster tier can run the list in order from the checkout's root, adding only
its own `--kubeconfig`.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
README = REPO / "README.md"
CHART_README = REPO / "deploy" / "helm" / "evictd" / "README.md"
DOCUMENTS = (README, CHART_README)
MARKER = "<!-- commands: helm-lifecycle -->"
HELM_ACTIONS = ("install", "upgrade", "rollback", "uninstall")
_FENCE = re.compile(r"^```(sh|bash|console|shell)?\s*$")


@dataclass(frozen=True, slots=True)
class Command:
    """One command of a document's lifecycle block: its text as written, and its words as the shell splits them."""

    source: Path
    line: int  # 1-based, the command's first line
    text: str
    argv: tuple[str, ...]

    @property
    def program(self) -> str:
        return self.argv[0]

    @property
    def action(self) -> str:
        """`helm install` -> "install", `kubectl label namespace` -> "label"."""
        return self.argv[1] if len(self.argv) > 1 else ""

    def option(self, name: str) -> str | None:
        """The value of `--name VALUE` or `--name=VALUE`, or None."""
        for index, word in enumerate(self.argv):
            if word == name and index + 1 < len(self.argv):
                return self.argv[index + 1]
            if word.startswith(f"{name}="):
                return word.partition("=")[2]
        return None


@dataclass(frozen=True, slots=True)
class Lifecycle:
    """A document's lifecycle block: the namespace's commands, then one helm command per action."""

    source: Path
    namespace: tuple[Command, ...]  # kubectl, in order
    helm: dict[str, Command]  # by action: install, upgrade, rollback, uninstall

    @property
    def commands(self) -> tuple[Command, ...]:
        """Every command in the order written."""
        return tuple(sorted((*self.namespace, *self.helm.values()), key=lambda command: command.line))


def marked_block(path: Path) -> tuple[int, list[str]]:
    """The 1-based line number of the first line inside the fenced block under MARKER, and the block's lines.
    Raises ValueError when the marker is missing, repeated, or not followed by a shell block."""
    lines = path.read_text(encoding="utf-8").splitlines()
    marks = [index for index, line in enumerate(lines) if line.strip() == MARKER]
    if len(marks) != 1:
        raise ValueError(f"{path}: {len(marks)} lines {MARKER!r}, expected 1")
    after = marks[0] + 1
    while after < len(lines) and not lines[after].strip():
        after += 1
    if after == len(lines) or not _FENCE.match(lines[after].strip()):
        raise ValueError(f"{path}:{after + 1}: {MARKER!r} is not followed by a shell code block")
    body: list[str] = []
    for line in lines[after + 1:]:
        if line.strip() == "```":
            return after + 2, body
        body.append(line)
    raise ValueError(f"{path}:{after + 1}: the code block under {MARKER!r} is not closed")


def commands_in(path: Path) -> list[Command]:
    """The commands of `path`'s lifecycle block: continuation lines joined, comments and blank lines dropped."""
    first, body = marked_block(path)
    commands: list[Command] = []
    pending: list[str] = []
    start = first
    for number, raw in enumerate(body, start=first):
        if not pending:
            start = number
        stripped = raw.strip()
        if stripped.endswith("\\"):
            pending.append(stripped[:-1].strip())
            continue
        pending.append(stripped)
        joined = " ".join(part for part in pending if part)
        pending = []
        argv = tuple(shlex.split(joined, comments=True))
        if argv:
            text = joined.split(" #", 1)[0].rstrip() if "#" in joined else joined
            commands.append(Command(path, start, text, argv))
    if pending:
        raise ValueError(f"{path}:{start}: the block ends inside a continued line")
    return commands


def lifecycle(path: Path) -> Lifecycle:
    """`path`'s lifecycle block, checked for shape: kubectl commands first, then exactly one `helm` command per
    action of HELM_ACTIONS, in that order, and nothing else. Raises ValueError naming the line otherwise."""
    namespace: list[Command] = []
    helm: dict[str, Command] = {}
    for command in commands_in(path):
        where = f"{command.source}:{command.line}"
        if command.program == "kubectl":
            if helm:
                raise ValueError(f"{where}: kubectl after the helm commands: {command.text}")
            namespace.append(command)
        elif command.program == "helm":
            expected = HELM_ACTIONS[len(helm)] if len(helm) < len(HELM_ACTIONS) else None
            if command.action != expected:
                raise ValueError(f"{where}: helm {command.action!r} where {expected!r} was expected: {command.text}")
            helm[command.action] = command
        else:
            raise ValueError(f"{where}: neither kubectl nor helm: {command.text}")
    if len(helm) != len(HELM_ACTIONS):
        raise ValueError(f"{path}: helm {', '.join(HELM_ACTIONS[len(helm):])} missing from the lifecycle block")
    return Lifecycle(path, tuple(namespace), helm)
