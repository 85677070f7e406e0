"""docs/commands.md's "Every command and option" states the command line the parser declares: every command (a
leaf of `evictd`'s subcommands) once, and every option and positional once, with exactly the commands that take it.

The section's first table has one row per command (`evictd <path>`); the second one row per option, its first cell
the option's names (`-o OUTPUT`, `--output OUTPUT`; a positional by its metavar, `POD`) and its second the commands,
comma-separated (`evictd` for the top-level parser's own).
"""

from __future__ import annotations

import re
from pathlib import Path

from evictd.cli import build_parser
from evictd.commands.parser_docs import commands

PAGE = Path(__file__).resolve().parents[1] / "docs" / "commands.md"
HEADING = "\n## Every command and option\n"


def declared() -> tuple[set[str], dict[tuple[str, ...], set[str]]]:
    """The parser's leaf commands, and each option (by its names, a positional by its metavar) with its commands."""
    leaves: set[str] = set()
    options: dict[tuple[str, ...], set[str]] = {}
    for command in commands(build_parser()):
        name = " ".join(command.path) or "evictd"
        if command.path and not command.subcommands:
            leaves.add(name)
        if command.subcommands and command.path:
            continue  # `record` only groups its subcommands
        for option in (*command.positionals, *command.options):
            if "--help" not in option.names:
                options.setdefault(option.names or (option.metavar,), set()).add(name)
    return leaves, options


def documented() -> tuple[set[str], dict[tuple[str, ...], set[str]]]:
    section = PAGE.read_text().split(HEADING, 1)[1].split("\n## ", 1)[0]
    tables = [block for block in section.split("\n\n") if block.startswith("|")]
    leaves: set[str] = set()
    options: dict[tuple[str, ...], set[str]] = {}
    for line in tables[0].splitlines()[2:]:
        path = re.match(r"\| `evictd ([^`]+)` \|", line)
        assert path, line
        assert path.group(1) not in leaves, f"{path.group(1)} twice"
        leaves.add(path.group(1))
    for line in tables[1].splitlines()[2:]:
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        names = tuple(name.split()[0] for name in re.findall(r"`([^`]+)`", cells[0]))
        assert names not in options, f"{names} twice"
        options[names] = {command.strip() for command in cells[1].split(",")}
    return leaves, options


def test_every_command_the_parser_declares_is_on_the_page_once() -> None:
    assert documented()[0] == declared()[0]


def test_every_option_is_on_the_page_once_with_the_commands_that_take_it() -> None:
    page, parser = documented()[1], declared()[1]
    assert sorted(set(page) - set(parser)) == [], "on the page, not in the parser"
    assert sorted(set(parser) - set(page)) == [], "in the parser, not on the page"
    assert {names: commands for names, commands in page.items() if parser[names] != commands} == {}, \
        "the page's commands of each option differ from the parser's"
