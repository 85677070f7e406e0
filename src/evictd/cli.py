"""The `evictd` command line: `check-config`, `simulate`, `shadow-report`, `record export`, `replay` and `explain`
(offline), `run` (the daemon) and `mode` (the node-local switch to dry-run that `run` reads).

Over 500 lines because it is the one parser of every subcommand and option (bash and zsh completion are generated
from it); each command's work lives in evictd.commands.

Exit status: 0 success; 2 bad configuration or scenario (one line on stderr naming the key and the value,
never a traceback), or `run` finding the node or its stateDir still locked by another evictd (one line naming
the holder's PID and the lock file) or a lock file that is not a regular file; 1 `check-config --strict` judging a
hand-over that is not a backstop, or any other failure. The
offline commands import neither the kubernetes client nor grpc, so they start fast; with `--output json` stdout
carries only the JSON document.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import textwrap
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import replace
from datetime import datetime
from typing import TYPE_CHECKING, Any, cast

from evictd import __version__
from evictd.config import load_configuration
from evictd.config_files import read_documents
from evictd.core.duration import parse_go_duration
from evictd.core.engine import EngineConfig
from evictd.core.errors import ConfigError, DurationError, EvictdError, QuantityError, ScenarioError, StateLockError
from evictd.core.fs_layout import FsLayout
from evictd.core.kubelet_config import FLAG_NAMES
from evictd.core.quantity import ERR_FORMAT_WRONG

if TYPE_CHECKING:  # the offline commands import what they need when they run
    from evictd.config import Configuration
    from evictd.kubelet_file import KubeletFile
    from evictd.record.recording import Record, Recording

EXIT_OK = 0
EXIT_FAILURE = 1
EXIT_CONFIG = 2
EXIT_BROKEN_PIPE = 128 + 13  # as the shell reports a process that SIGPIPE ended
# What could not be read of a recording: so many problems are told on stderr, then that there are more.
MAX_PROBLEMS_SHOWN = 20


class _OrderedFlag(argparse.Action):
    """Collects kubelet flags as (name, value) pairs in command-line order, as pflag applies them."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: str | Sequence[Any] | None, option_string: str | None = None) -> None:
        flags: list[tuple[str, str]] = getattr(namespace, "kubelet_flags", None) or []
        flags.append((self.dest.replace("_", "-"), str(values)))
        namespace.kubelet_flags = flags


class _Parser(argparse.ArgumentParser):
    """An argument parser whose usage errors exit with the configuration status (2) and one line, that takes no
    abbreviation of a long option (`--conf` is not `--config`) and keeps the examples of its epilog as written."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("allow_abbrev", False)
        kwargs.setdefault("formatter_class", argparse.RawDescriptionHelpFormatter)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> Any:
        self.exit(EXIT_CONFIG, f"evictd: {message}\n")


def _add_config_options(parser: argparse.ArgumentParser, *, kubelet_flags: bool = False) -> None:
    """Add --config and, where the eviction thresholds matter (`kubelet_flags`), the kubelet's eviction flags."""
    parser.add_argument("--config", action="append", default=[], metavar="FILE",
                        help="KubeletConfiguration/EvictdConfiguration YAML; repeat to layer files in order; '-' "
                        "reads standard input (once)")
    parser.add_argument("--config-dir", metavar="DIR",
                        help="as the kubelet's --config-dir: its .conf drop-ins, in lexical order, merged onto the "
                        "KubeletConfiguration of the --config files as the kubelet merges them")
    if kubelet_flags:
        for name in FLAG_NAMES:
            parser.add_argument(f"--{name}", dest=name.replace("-", "_"), action=_OrderedFlag, metavar="VALUE",
                                help="as the kubelet flag of the same name (applies after the files)")


def _add_kubelet_config_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--kubelet-config", metavar="PATH",
                        help="the node's kubelet configuration file, or its /configz answer, to say who evicts on "
                        "each signal (default: the running kubelet's --config, else the first of kubeadm's, EKS's "
                        "and GKE's places that holds one; '' for none)")
    parser.add_argument("--kubelet-config-dir", metavar="DIR",
                        help="the kubelet's --config-dir: its drop-ins merged onto --kubelet-config, as the kubelet "
                        "merges them (default: the running kubelet's --config-dir)")
    line = parser.add_mutually_exclusive_group()
    line.add_argument("--kubelet-flags", dest="kubelet_command_line", metavar="ARGS",
                      help="the kubelet's command line (its flags, quoted as one argument): its --config and "
                      "--config-dir say where its files are, its eviction flags apply last (default: the running "
                      "kubelet's; '' for none)")
    line.add_argument("--kubelet-cmdline-from-pid", type=int, metavar="PID",
                      help="read the kubelet's command line from /proc/PID/cmdline (default: the process named "
                      "kubelet)")


def _add_output_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("-o", "--output", choices=("text", "json"), default="text",
                        help="text for people (default), or json: one JSON document alone on stdout")


def _add_state_dir_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--state-dir", metavar="DIR", help="evictd's stateDir (default: the configuration's)")


def _add_recording_options(parser: argparse.ArgumentParser, *, state_dir: bool = True) -> None:
    if state_dir:
        _add_state_dir_option(parser)
    parser.add_argument("--since", metavar="WHEN", help="only cycles after WHEN (a duration ago such as 2h or 1d, "
                        "or an RFC 3339 time)")
    parser.add_argument("--until", metavar="WHEN", help="only cycles until WHEN (as --since)")


def _command(commands: Any, name: str, summary: str, description: str, examples: Sequence[str]) -> _Parser:
    """Add the subcommand `name`: `summary` in `evictd --help`, `description` and `examples` in its own --help."""
    epilog = "examples:\n" + "\n".join(f"  {example}" for example in examples)
    text = textwrap.fill(f"{summary[0].upper()}{summary[1:]}. {description}", width=100)
    return cast(_Parser, commands.add_parser(name, help=summary, description=text, epilog=epilog))


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="evictd", description="Kubernetes node-pressure eviction, outside the kubelet.",
                     epilog="examples:\n  evictd check-config --config /var/lib/kubelet/config.yaml\n"
                     "  evictd run --dry-run --config /var/lib/kubelet/config.yaml\n  evictd COMMAND --help")
    parser.add_argument("--version", action="version", version=f"evictd {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, parser_class=_Parser, metavar="COMMAND")

    check = _command(commands, "check-config", "print the effective eviction thresholds",
                     "The files and flags are read as the kubelet reads them; problems the kubelet's lenient "
                     "decoding lets pass (an unknown or duplicate key) are warnings on stderr. Then who evicts on "
                     "each signal, evictd or the node's kubelet (--kubelet-config), and how the node "
                     "protects its daemons' memory, from the configuration and this machine's cgroups.",
                     ["evictd check-config --config /var/lib/kubelet/config.yaml",
                      "evictd check-config --config kubelet.yaml --config evictd.yaml --eviction-hard "
                      "memory.available<500Mi",
                      "evictd check-config --strict -o json --config /var/lib/kubelet/config.yaml",
                      "evictd check-config --config-only --config kubelet.yaml",
                      "evictd check-config --config /etc/evictd/config.yaml --kubelet-config /var/lib/kubelet/"
                      "config.yaml",
                      "evictd check-config --strict --config /etc/evictd/config.yaml --kubelet-config configz.json",
                      "evictd check-config --config /etc/evictd/config.yaml --kubelet-flags "
                      "\"--eviction-hard='memory.available<100Mi'\""])
    _add_config_options(check, kubelet_flags=True)
    _add_kubelet_config_option(check)
    check.add_argument("--strict", action="store_true",
                       help="an unknown or duplicate KubeletConfiguration key is an error (exit 2), as in the "
                       "kubelet's strict decoding; a hand-over that is not a backstop (a race with the kubelet, "
                       "or no eviction at all) fails (exit 1)")
    check.add_argument("--dedicated-imagefs", action="store_true",
                       help="derive containerfs thresholds for a dedicated image filesystem")
    check.add_argument("--split-containerfs", action="store_true",
                       help="derive containerfs thresholds for split image/container filesystems")
    check.add_argument("--node-memory", metavar="QUANTITY",
                       help="the node's memory capacity (16Gi), to resolve memory percentages in the lints and "
                       "compute allocatable memory (default: this machine's MemTotal; none with --config-only)")
    check.add_argument("--config-only", action="store_true",
                       help="judge the node's memory protection on the configuration alone, without reading this "
                       "machine's cgroups (checking a file off its node)")
    _add_output_option(check)

    run = _command(commands, "run", "run the eviction daemon on this node",
                   "A live view on a terminal, JSON log lines otherwise; stops on SIGTERM or SIGINT.",
                   ["evictd run --dry-run --config /var/lib/kubelet/config.yaml",
                    "evictd run --config /etc/evictd/config.yaml --state-dir /tmp/evictd-state --cycles 3"])
    _add_config_options(run, kubelet_flags=True)
    _add_kubelet_config_option(run)
    _add_state_dir_option(run)
    run.add_argument("--dry-run", action="store_true",
                     help="decide and report, change nothing (whatever the Node's evictd.io/mode label says)")
    run.add_argument("--cycles", type=int, default=0, metavar="N",
                     help="stop after N housekeeping cycles (0: run until SIGTERM/SIGINT)")

    shadow = _command(commands, "shadow-report", "how a dry-run evictd agreed with the kubelet's own evictions",
                      "Reads shadow.jsonl in the stateDir (written by `run` in dry-run with the Kubernetes API).",
                      ["evictd shadow-report --config /etc/evictd/config.yaml", "evictd shadow-report --state-dir "
                       "/var/lib/evictd -o json"])
    _add_config_options(shadow)
    _add_kubelet_config_option(shadow)
    _add_state_dir_option(shadow)

    record = _command(commands, "record", "the flight recorder's recording (in stateDir)",
                      "`record export` writes recorded cycles as a `simulate` scenario.",
                      ["evictd record export --config /etc/evictd/config.yaml --since 2h > scenario.yaml",
                       "evictd record export --state-dir /var/lib/evictd | evictd simulate -"])
    record_commands = record.add_subparsers(dest="record_command", required=True, parser_class=_Parser,
                                            metavar="SUBCOMMAND")
    export = _command(record_commands, "export", "write the recording as a simulate scenario (YAML)",
                      "Cycles of several runs play as one scenario (a warning says so).",
                      ["evictd record export --config /etc/evictd/config.yaml --since 1d > scenario.yaml",
                       "evictd record export --state-dir /var/lib/evictd --since 2026-11-23T04:00:00Z "
                       "--until 2026-11-23T04:30:00Z"])
    _add_config_options(export)
    _add_recording_options(export)

    replay = _command(commands, "replay", "run a recording through another configuration, print what differs",
                      "Without --config or flags, the recorded configuration itself (a check of determinism); with "
                      "them, the recorded configuration with only what they state changed (--from-defaults: the "
                      "kubelet's defaults with them).",
                      ["evictd replay /var/lib/evictd --config candidate.yaml --since 2h",
                       "evictd replay /var/lib/evictd --eviction-hard memory.available<1Gi -o json"])
    replay.add_argument("recording", metavar="RECORDING",
                        help="a stateDir, its recording folder, or one segment file")
    _add_config_options(replay, kubelet_flags=True)
    replay.add_argument("--from-defaults", action="store_true",
                        help="start --config and the flags from the kubelet's defaults, not from the recorded "
                        "configuration (by default they change only what they state)")
    _add_recording_options(replay, state_dir=False)

    explain = _command(commands, "explain", "why a pod was evicted, or what would be evicted next",
                       "From the flight recorder's recording, or the eviction journal.",
                       ["evictd explain shop/cart-7d9f --config /etc/evictd/config.yaml", "evictd explain --last",
                        "evictd explain --decision 20261123T040102Z-4242/17", "evictd explain --now -o json"])
    which = explain.add_mutually_exclusive_group(required=True)
    which.add_argument("pod", metavar="POD", nargs="?", help="the evicted pod: namespace/name, name or UID "
                       "(its last eviction)")
    which.add_argument("--last", action="store_true", help="the last eviction recorded")
    which.add_argument("--decision", metavar="ID", help="the eviction of decision ID (<run>/<cycle>, as logged)")
    which.add_argument("--now", action="store_true", help="the newest recorded cycle: each signal's distance "
                       "from its thresholds, and the pods next in the eviction order")
    _add_config_options(explain)
    _add_recording_options(explain)

    simulate = _command(commands, "simulate", "run the engine through a scripted scenario",
                        "The scenario format is in docs/commands.md (`evictd simulate`); `-` reads it from stdin.",
                        ["evictd simulate scenario.yaml",
                         "evictd record export --since 1h | evictd simulate - -o json",
                         "evictd simulate scenario.yaml --record /tmp/sample && evictd explain --state-dir "
                         "/tmp/sample --last"])
    simulate.add_argument("scenario", metavar="SCENARIO", help="scenario YAML or JSON file, or - for stdin")
    simulate.add_argument("--record", metavar="DIR", help="also write the cycles' flight recording into DIR (a new "
                          "stateDir), for `explain --state-dir DIR` and `replay DIR`")
    for command in (shadow, replay, explain, simulate):  # last in each
        _add_output_option(command)

    mode = _command(commands, "mode", "hold this node's evictd in dry-run, without the API, or let it go",
                    "Writes or removes the node-local mode file <stateDir>/mode, which `evictd run` reads before "
                    "every cycle: while it is there evictd is in dry-run, whatever the Node's evictd.io/mode label "
                    "and dryRun say (the rollback of a node cut off from the API). `clear` hands the mode back to the "
                    "label and dryRun; `show` says what the file holds.",
                    ["evictd mode dry-run", "evictd mode clear --config /etc/evictd/config.yaml",
                     "evictd mode show --state-dir /var/lib/evictd"])
    mode.add_argument("setting", metavar="SETTING", nargs="?", default="show",
                      help="dry-run (hold this node in dry-run), clear (let go) or show (the default)")
    _add_config_options(mode)
    _add_state_dir_option(mode)

    completion = _command(commands, "completion", "print a shell completion script for evictd",
                          "Generated from this command line's own parser.",
                          ["evictd completion bash > /etc/bash_completion.d/evictd",
                           'source <(evictd completion bash)', "source <(evictd completion zsh)  # in ~/.zshrc"])
    completion.add_argument("shell", choices=("bash", "zsh"), help="the shell (bash or zsh)")
    _command(commands, "man", "print evictd's man page (roff)", "Generated from this command line's own parser.",
             ["evictd man | man -l -", "evictd man > /usr/local/share/man/man8/evictd.8"])
    return parser


def _flags(args: argparse.Namespace) -> list[tuple[str, str]]:
    return list(getattr(args, "kubelet_flags", None) or [])


def _state_dir(args: argparse.Namespace) -> str:
    if args.state_dir:
        return str(args.state_dir)
    return load_configuration(args.config, _flags(args), config_dir=args.config_dir).evictd.state_dir


def _kubelet(args: argparse.Namespace, configuration: Configuration) -> KubeletFile:
    """The node's kubelet configuration as the --kubelet-* options say where to find it (`evictd.kubelet_file`)."""
    from evictd.kubelet_file import find_kubelet_file

    return find_kubelet_file(args.kubelet_config, configuration.evictd.kubelet_root_dir, args.kubelet_config_dir,
                             flags=args.kubelet_command_line, pid=args.kubelet_cmdline_from_pid)


def _check_config(args: argparse.Namespace) -> int:
    from evictd.commands.check_config import check_config

    configuration = load_configuration(args.config, _flags(args), strict=args.strict, config_dir=args.config_dir)
    layout = FsLayout(dedicated_imagefs=args.dedicated_imagefs, split_containerfs=args.split_containerfs)
    return check_config(configuration, layout, _kubelet(args, configuration), read_cgroups=not args.config_only,
                        output=args.output, strict=args.strict, node_memory=_node_memory(args.node_memory))


def _node_memory(text: str | None) -> int | None:
    """The bytes of `--node-memory` (None: not given). Raises ConfigError naming the option and what it accepts."""
    from evictd.core.quantity import Quantity

    if text is None:
        return None
    try:
        value = Quantity.parse(text).ceil_int()
    except QuantityError:
        value = 0
    if value <= 0:
        raise ConfigError("must be a positive memory quantity such as 16Gi or 17179869184", key="--node-memory",
                          value=text)
    return value


def _simulate(args: argparse.Namespace) -> int:
    from evictd.commands.simulate import parse_scenario, run_scenario
    from evictd.cycle.render import simulation_text, step_json

    documents = read_documents(args.scenario, key="scenario", stdin_ok=True)
    if len(documents) != 1:
        raise ScenarioError("a scenario file holds exactly one document", key="scenario", value=args.scenario)
    scenario = parse_scenario(documents[0][0])
    for warning in scenario.warnings:
        print(f"warning: {warning}", file=sys.stderr)
    if args.record is not None:
        from evictd.commands.scenario_recording import record_scenario

        reports = record_scenario(scenario, args.record)
    else:
        reports = run_scenario(scenario)
    steps = [(step.at, report) for step, report in zip(scenario.steps, reports, strict=True)]
    for _, report in steps:
        for warning in report.decided.assessment.warnings:
            print(f"warning: {warning}", file=sys.stderr)
    if args.output == "json":
        print(json.dumps({"steps": [step_json(at, report) for at, report in steps]}, indent=2))
    else:
        print(simulation_text(steps))
    return EXIT_OK


def _days_and_duration(text: str) -> float:
    """Return the seconds of a Go duration that may start with whole days (`1d`, `2d12h`); raise DurationError."""
    days, separator, rest = text.partition("d")
    if separator and days.isdigit() and days.isascii():
        return int(days) * 86400.0 + (parse_go_duration(rest) if rest else 0.0)
    return parse_go_duration(text)


def _when(value: str | None, option: str) -> float | None:
    """Return --since/--until as epoch seconds: a Go duration before now, or an RFC 3339 time."""
    if value is None:
        return None
    try:
        return time.time() - _days_and_duration(value)
    except DurationError:
        pass
    try:
        moment = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        moment = None
    if moment is None or moment.tzinfo is None:
        raise ConfigError("must be a duration (2h, 1d) or an RFC 3339 time (2026-11-23T01:00:00Z)", key=option,
                          value=value)
    return moment.timestamp()


class _Problems:
    """Tells stderr, printably, the first MAX_PROBLEMS_SHOWN things of a recording that could not be read."""

    def __init__(self) -> None:
        self.told = 0

    def __call__(self, message: str) -> None:
        self.told += 1
        if self.told <= MAX_PROBLEMS_SHOWN:
            _warn(message)
        elif self.told == MAX_PROBLEMS_SHOWN + 1:
            _warn("more lines cannot be read: not shown")


def _warn(message: str) -> None:
    from evictd.cycle.render import printable

    print(f"warning: {printable(message)}", file=sys.stderr)


def _recording(path: str, args: argparse.Namespace) -> Recording:
    """The recording at `path` (a stateDir, its recording folder or a segment) between --since and --until."""
    from evictd.record.recording import open_recording

    return open_recording(path, _when(args.since, "--since"), _when(args.until, "--until"), _Problems())


def _record(args: argparse.Namespace) -> int:
    from evictd.commands.export import export

    export(_recording(_state_dir(args), args), sys.stdout, _warn)
    return EXIT_OK


def _replay(args: argparse.Namespace) -> int:
    from evictd.commands.replay import Candidate, replay, replay_json, replay_text

    flags = _flags(args)
    config: Candidate | None = None
    if args.config or args.config_dir or flags:
        # Bad files: exit 2.
        config = EngineConfig.from_settings(load_configuration(args.config, flags, config_dir=args.config_dir).eviction)
        if not args.from_defaults:  # layered on each run's recorded configuration

            def layered(recorded: Mapping[str, object]) -> EngineConfig:
                return EngineConfig.from_settings(
                    load_configuration(args.config, flags, base=recorded, config_dir=args.config_dir).eviction)

            config = layered
    elif args.from_defaults:
        raise ConfigError("needs --config or a kubelet eviction flag to start from the kubelet's defaults",
                          key="--from-defaults", value=True)
    recording = _recording(args.recording, args)
    seen = [False]

    def counted(records: Iterable[Record]) -> Iterator[Record]:
        for record in records:
            seen[0] = True
            yield record

    result = replay(counted(recording), config, recording.problem)
    recording.check_read(seen[0], _warn)
    print(json.dumps(replay_json(result), indent=2) if args.output == "json" else replay_text(result))
    return EXIT_OK


def _explain(args: argparse.Namespace) -> int:
    from evictd.commands.explain import explain

    configuration = load_configuration(args.config, _flags(args), config_dir=args.config_dir)
    state_dir = args.state_dir or configuration.evictd.state_dir
    explanation = explain(_recording(state_dir, args), state_dir, pod=args.pod, decision=args.decision, now=args.now,
                          housekeeping_interval_s=configuration.evictd.housekeeping_interval_s, now_wall=time.time(),
                          warn=_warn)
    print(json.dumps(explanation.document(), indent=2) if args.output == "json" else explanation.text())
    return EXIT_OK


def _run(args: argparse.Namespace) -> int:
    from evictd.run.composition import build_daemon, check_settings
    from evictd.run.daemon import serve

    configuration = load_configuration(args.config, _flags(args), config_dir=args.config_dir)
    if args.dry_run:
        configuration = replace(configuration, evictd=replace(configuration.evictd, dry_run=True))
    if args.state_dir:
        configuration = replace(configuration, evictd=replace(configuration.evictd, state_dir=args.state_dir))
    if args.cycles < 0:
        raise ConfigError("must not be negative", key="--cycles", value=args.cycles)
    check_settings(configuration)
    kubelet = _kubelet(args, configuration)
    return serve(build_daemon(configuration, max_cycles=args.cycles, kubelet=kubelet, pinned_dry_run=args.dry_run))


def _shadow_report(args: argparse.Namespace) -> int:
    from evictd.commands.shadow_report import read_comparisons, summary, summary_text

    report = summary(read_comparisons(_state_dir(args)))
    if args.config or args.config_dir:  # evictd's thresholds known: who would evict once it acts, beside the kubelet
        from evictd.commands.shadow_report import with_handover

        configuration = load_configuration(args.config, config_dir=args.config_dir)
        report = with_handover(report, configuration.eviction.thresholds(), _kubelet(args, configuration))
    print(json.dumps(report, indent=2) if args.output == "json" else summary_text(report))
    return EXIT_OK


def _mode(args: argparse.Namespace) -> int:
    from evictd.commands.mode import set_mode

    set_mode(args.setting, _state_dir(args), print, lambda message: print(f"warning: {message}", file=sys.stderr))
    return EXIT_OK


def _completion(args: argparse.Namespace) -> int:
    from evictd.commands.parser_docs import completion_script

    sys.stdout.write(completion_script(build_parser(), args.shell))
    return EXIT_OK


def _man(args: argparse.Namespace) -> int:
    from evictd.commands.parser_docs import man_page

    sys.stdout.write(man_page(build_parser(), __version__))
    return EXIT_OK


COMMANDS = {"check-config": _check_config, "simulate": _simulate, "run": _run, "shadow-report": _shadow_report,
            "record": _record, "replay": _replay, "explain": _explain, "mode": _mode, "completion": _completion,
            "man": _man}


def _one_line(exc: EvictdError) -> str:
    """An error's message as one line: what it quotes (a recorded pod name, a path) may hold terminal controls."""
    from evictd.cycle.render import printable

    return printable(str(exc))


# After the kubelet's own wording for a quantity it cannot read: what would be accepted, in an operator's words.
QUANTITY_ACCEPTED = " (write a quantity such as 500Mi, 1Gi or 500M, or a percentage such as 10%)"


def _accepted(exc: EvictdError) -> str:
    """What would be accepted, where the kubelet's message names only the grammar it failed."""
    return QUANTITY_ACCEPTED if isinstance(exc, QuantityError) and exc.reason == ERR_FORMAT_WRONG else ""


# Options whose value is itself a command line (`--kubelet-flags --eviction-hard=...`): argparse would read the value
# as an option of its own, so the value is joined to the option first (`--kubelet-flags=--eviction-hard=...`).
COMMAND_LINE_OPTIONS = ("--kubelet-flags",)


def _command_lines_joined(argv: Sequence[str]) -> list[str]:
    joined: list[str] = []
    words = iter(argv)
    for word in words:
        if word in COMMAND_LINE_OPTIONS:
            value = next(words, None)
            joined.append(word if value is None else f"{word}={value}")
        else:
            joined.append(word)
            if word == "--":
                joined.extend(words)
    return joined


def main(argv: Sequence[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if not argv:  # bare `evictd`: the usage line and the commands
        from evictd.commands.parser_docs import bare_usage
        sys.stderr.write(bare_usage(build_parser()))
        return EXIT_CONFIG
    args = build_parser().parse_args(_command_lines_joined(argv))
    try:
        status = COMMANDS[args.command](args)
        sys.stdout.flush()  # here, where a closed pipe is handled, not at the interpreter's exit
        return status
    except BrokenPipeError:
        # The reader went away (`| head`): end quietly with SIGPIPE's status; later writes go to /dev/null.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_BROKEN_PIPE
    except (ConfigError, StateLockError) as exc:
        print(f"evictd: {_one_line(exc)}{_accepted(exc)}", file=sys.stderr)
        return EXIT_CONFIG
    except EvictdError as exc:
        print(f"evictd: {_one_line(exc)}", file=sys.stderr)
        return EXIT_FAILURE
    except Exception as exc:  # the last line of defence: one line, never a traceback, unless asked for
        if os.environ.get("EVICTD_DEBUG"):
            raise
        print(f"evictd: internal error: {type(exc).__name__}: {exc} (set EVICTD_DEBUG=1 for details)",
              file=sys.stderr)
        return EXIT_FAILURE
