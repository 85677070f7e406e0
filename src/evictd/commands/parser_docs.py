"""Documents generated from `evictd`'s argument parser, so that they cannot drift from it: the bash completion
script (`evictd completion bash`) and the man page (`evictd man`, roff for `man -l -`).

Both walk the parser the same way (`commands`): every command path (`check-config`, `record export`, ...) with
its subcommands, options (and the values an option offers), description and examples.
"""

from __future__ import annotations

import argparse
import shlex
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import date

# The metavars of options whose value is a path: completed with file names.
PATH_METAVARS = frozenset({"FILE", "DIR"})


@dataclass(frozen=True, slots=True)
class Option:
    """One option (or positional) of a command, as the documents show it."""

    names: tuple[str, ...]
    takes_value: bool
    choices: tuple[str, ...]
    metavar: str
    help: str


@dataclass(frozen=True, slots=True)
class Command:
    """One command: its path below `evictd` (() for evictd itself), usage line, texts, options and subcommands."""

    path: tuple[str, ...]
    usage_line: str
    description: str
    epilog: str
    options: tuple[Option, ...]
    positionals: tuple[Option, ...]
    subcommands: tuple[str, ...]


def _option(action: argparse.Action) -> Option:
    metavar = action.metavar if isinstance(action.metavar, str) else action.dest.upper()
    return Option(names=tuple(action.option_strings), takes_value=action.nargs != 0,
                  choices=tuple(str(c) for c in action.choices or ()), metavar=metavar,
                  help=" ".join((action.help or "").split()))


def commands(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()) -> Iterator[Command]:
    """Yield `parser`'s command and then, depth first, each of its subcommands'."""
    options: list[Option] = []
    positionals: list[Option] = []
    children: dict[str, argparse.ArgumentParser] = {}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            children = dict(action.choices)
        elif action.help != argparse.SUPPRESS:
            (options if action.option_strings else positionals).append(_option(action))
    yield Command(path=path, usage_line=" ".join(parser.format_usage().split())[len("usage: "):],
                  description=parser.description or "", epilog=parser.epilog or "", options=tuple(options),
                  positionals=tuple(positionals), subcommands=tuple(children))
    for name, child in children.items():
        yield from commands(child, (*path, name))


# --- bash completion ------------------------------------------------------------------------------------------


def bash_completion(parser: argparse.ArgumentParser) -> str:
    """Return a bash script defining completion for `evictd`: subcommands, options, an option's choices, file names
    for a path option's value (and, by `complete -o default`, for positionals), nothing for other values."""
    tree = list(commands(parser))
    paths = "|".join(shlex.quote(" " + " ".join(c.path)) for c in tree if c.path)
    words_by_path: list[str] = []
    values: list[str] = []
    files: list[str] = []
    free: list[str] = []
    for command in tree:
        key = shlex.quote(" " + " ".join(command.path)) if command.path else "''"
        words = [name for option in command.options for name in option.names] + list(command.subcommands)
        words_by_path.append(f"        {key}) words={shlex.quote(' '.join(words))} ;;")
        for option in command.options:
            for name in option.names:
                case = shlex.quote(f"{' '.join(command.path)}:{name}")
                if option.choices:
                    values.append(f"        {case}) COMPREPLY=($(compgen -W {shlex.quote(' '.join(option.choices))} "
                                  '-- "$cur")); return ;;')
                elif option.takes_value:  # a path, or a value no list holds (a threshold, a duration)
                    (files if option.metavar in PATH_METAVARS else free).append(case)
    if files:
        values.append(f"        {'|'.join(files)}) COMPREPLY=($(compgen -f -- \"$cur\")); return ;;")
    if free:
        values.append(f"        {'|'.join(free)}) COMPREPLY=(); return ;;")
    return "\n".join([
        "# bash completion for evictd, generated from its argument parser by `evictd completion bash`",
        "_evictd() {",
        '    local cur="${COMP_WORDS[COMP_CWORD]}" prev="${COMP_WORDS[COMP_CWORD-1]}" path="" words="" i',
        "    for ((i = 1; i < COMP_CWORD; i++)); do  # the subcommands typed so far",
        '        case "$path ${COMP_WORDS[i]}" in',
        f'            {paths}) path="$path ${{COMP_WORDS[i]}}" ;;',
        "        esac",
        "    done",
        '    case "${path# }:$prev" in',
        *values,
        "    esac",
        '    case "$path" in',
        *words_by_path,
        "    esac",
        '    COMPREPLY=($(compgen -W "$words" -- "$cur"))',
        "}",
        "complete -o default -F _evictd evictd",
        "",
    ])


def zsh_completion(parser: argparse.ArgumentParser) -> str:
    """Return a zsh script for `source <(evictd completion zsh)`: the bash completion, run by zsh's own bashcompinit
    (zsh ships it for this), so both shells complete the same words from the same parser."""
    return "\n".join([
        "# zsh completion for evictd, generated from its argument parser by `evictd completion zsh`;",
        "# in ~/.zshrc: source <(evictd completion zsh)",
        "(( $+functions[compdef] )) || { autoload -U compinit && compinit }",
        "autoload -U +X bashcompinit && bashcompinit",
        bash_completion(parser).replace("# bash completion for evictd", "# the bash completion for evictd", 1),
    ])


def completion_script(parser: argparse.ArgumentParser, shell: str) -> str:
    """The completion script of `shell` ("bash" or "zsh")."""
    return zsh_completion(parser) if shell == "zsh" else bash_completion(parser)


def bare_usage(parser: argparse.ArgumentParser) -> str:
    """What bare `evictd` prints: the usage line, the commands, and where help is."""
    names = next(action.choices for action in parser._actions if action.dest == "command") or ()
    return (parser.format_usage() + f"evictd: a COMMAND is needed, one of: {', '.join(names)} "
            "(evictd --help; evictd COMMAND --help)\n")


# --- man page ---------------------------------------------------------------------------------------------------


def _roff(text: str) -> str:
    """Return `text` safe in a roff line: backslashes and hyphens escaped, no line starting with a control dot."""
    escaped = text.replace("\\", "\\e").replace("-", "\\-")
    return "\n".join(("\\&" + line) if line.startswith((".", "'")) else line for line in escaped.splitlines())


def man_page(parser: argparse.ArgumentParser, version: str, today: date | None = None) -> str:
    """Return evictd(8) in roff (man macros): every command's usage, description, options and examples."""
    tree = list(commands(parser))
    top = tree[0]
    when = (today or date.today()).isoformat()
    lines = [f'.TH EVICTD 8 "{when}" "evictd {version}" "System Administration"', ".SH NAME",
             f"evictd \\- {_roff(top.description.rstrip('.'))}", ".SH SYNOPSIS", f".B {_roff(top.usage_line)}",
             ".SH COMMANDS"]
    for command in tree[1:]:
        lines += [f".SS {_roff(' '.join(command.path))}", f".B {_roff(command.usage_line)}", ".PP",
                  _roff(" ".join(command.description.split()))]
        for option in (*command.positionals, *command.options):
            names = ", ".join(option.names) or option.metavar
            value = f" {{{','.join(option.choices)}}}" if option.choices else (
                f" {option.metavar}" if option.takes_value and option.names else "")
            lines += [".TP", f"\\fB{_roff(names)}\\fR{_roff(value)}", _roff(option.help or "")]
        if command.epilog:
            lines += [".PP", ".nf", _roff(command.epilog), ".fi"]
    lines += [".SH OPTIONS"]
    for option in top.options:
        lines += [".TP", f"\\fB{_roff(', '.join(option.names))}\\fR", _roff(option.help)]
    lines += [".SH EXIT STATUS", "0 success; 2 bad configuration, scenario or usage (one line on stderr naming the "
              "key and the value); 141 standard output closed early; 1 any other failure.",
              ".SH SEE ALSO", "README.md and docs/ of evictd; kubelet(8)", ""]
    return "\n".join(lines)
