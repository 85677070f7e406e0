"""The node's kubelet configuration, for the hand-over report (who evicts on each signal: `evictd.core.handover`):
where it is found, and what it says once read as the kubelet builds it (its defaults, its file, its drop-ins, then
its flags).

Where (`find_kubelet_file`; `check-config`, `run`, `shadow-report`):
1. The kubelet's command line: `--kubelet-flags ARGS` (as given to the kubelet; `''`: none, and no process is
   looked for), `--kubelet-cmdline-from-pid PID`, else the running kubelet's (`evictd.adapters.kubelet_process`,
   under `$EVICTD_PROC`, by default /proc). None found, several, or one that cannot be read: said, and not used.
2. The file and drop-ins: `--kubelet-config PATH` (`''`: not read) and `--kubelet-config-dir DIR`; else the
   command line's `--config` and `--config-dir` (no `--config`: the kubelet reads no file, and has no default
   hard thresholds: cmd/kubelet/app/server.go defaults `evictionHard` only when it loads a file); else, without a
   command line, the first of KNOWN_FILES that is there.
3. The command line's flags (`evictd.core.kubelet_flags`) apply last, a map flag replacing the whole map; not to a
   /configz answer (`evictd.core.configz`), which holds them and the drop-ins already.
As the kubelet, only the first document of the file and its eviction fields are read, and drop-ins merge as the
kubelet's (`evictd.core.dropin`). What an option names (a file, a folder, flags, a process) that cannot be used is a
ConfigError (exit 2); what was found on its own is only noted, so that `run` always starts.
"""

from __future__ import annotations

import os
import shlex
from collections.abc import Sequence
from dataclasses import dataclass, replace

from evictd.adapters.kubelet_process import PROC, kubelet_pids, path_as_process_sees_it, read_cmdline
from evictd.config import classify_document, read_dropins
from evictd.config_files import read_documents
from evictd.core.configz import configz_document, is_configz, zero_transition_period
from evictd.core.dropin import with_dropins
from evictd.core.errors import ConfigError, FilePath, SampleError
from evictd.core.kubelet_config import KUBELET_KIND, EvictionSettings, eviction_settings, merge_documents
from evictd.core.kubelet_flags import KubeletCommandLine, parse_kubelet_command_line
from evictd.core.thresholds import Threshold

OPTION = "--kubelet-config"
DIR_OPTION = "--kubelet-config-dir"
FLAGS_OPTION = "--kubelet-flags"
PID_OPTION = "--kubelet-cmdline-from-pid"
# Where the running kubelet is looked for (tests point it at a folder of their own).
PROC_ENV = "EVICTD_PROC"
DEFAULT_FILE_NAME = "config.yaml"  # under kubeletRootDir, where kubeadm writes it
NOTHING_READ = "not read"


@dataclass(frozen=True, slots=True)
class KubeletFile:
    """The kubelet's configuration as found (its file, drop-ins and flags): the file's path and the eviction
    settings, or why there are none."""

    path: str | None
    eviction: EvictionSettings | None
    note: str  # where it was found, or why it was not read

    def thresholds(self) -> list[Threshold] | None:
        """The kubelet's thresholds, or None when its configuration is unknown."""
        return None if self.eviction is None else self.eviction.thresholds()


@dataclass(frozen=True, slots=True)
class KubeletRead:
    """What `read_kubelet_settings` read: the settings, and whether the file was a /configz answer."""

    eviction: EvictionSettings
    configz: bool


def read_kubelet_settings(path: str | None, config_dir: str | None = None,
                          command_line: KubeletCommandLine | None = None, *, key: str = OPTION,
                          dir_key: str = DIR_OPTION, flags_key: str = "", flags_given: bool = True) -> KubeletRead:
    """Return the kubelet's eviction settings: its file at `path` (None: none; its first document, defaulted as the
    kubelet defaults it, or a /configz answer), the drop-ins of `config_dir` merged onto it, then the flags of
    `command_line` (named `flags_key` in errors). Raises ConfigError naming the option (`key`, `dir_key`) and path,
    or the field or flag and its value; a /configz answer with drop-ins, or with flags an option gave
    (`flags_given`), beside it is one (flags found on their own are in the answer already, and are left out)."""
    where = f"{key} {path}" if path is not None else "the kubelet's defaults (no file)"
    document: dict[str, object] = {}
    configz = False
    if path is not None:
        documents = read_documents(path, key=key)
        if not documents:
            raise ConfigError("holds no document (the kubelet would run with its defaults; say so with a "
                              "KubeletConfiguration document)", key=key, value=FilePath(path))
        first = documents[0][0]
        if is_configz(first):
            configz = True
            first = configz_document(first, where)
            beside = [name for name, given in ((dir_key, config_dir), (flags_key, command_line and flags_given))
                      if given]
            command_line = None
            if beside:
                raise ConfigError(f"a /configz answer is the kubelet's configuration with its drop-ins and flags "
                                  f"applied: {' and '.join(beside)} cannot apply to it again (give the kubelet's "
                                  "file instead, or the /configz answer alone)", key=key, value=FilePath(path))
        if classify_document(first, where) != KUBELET_KIND:
            raise ConfigError(f"the kubelet reads the first document of its file: it must be a {KUBELET_KIND} (or "
                              "a /configz answer)", key=f"{where}.kind", value=first.get("kind"))
        document = dict(first)
    dropins = [dropin for _, dropin in read_dropins(config_dir, dir_key)] if config_dir else []
    if config_dir:
        where += f" + {dir_key} {config_dir}"
    try:
        if config_dir:
            merged = with_dropins(document, dropins, from_file=path is not None)
        else:
            merged = merge_documents([document]) if path is not None else {"evictionHard": {}}
        settings = eviction_settings(merged)
        if configz and zero_transition_period(document):  # 0 set by a flag, not a file's zero (5m)
            settings = replace(settings, pressure_transition_period_s=0.0)
        if command_line is not None:
            where += f" + {flags_key}"
            settings = command_line.apply(settings)
        settings.thresholds()
    except ConfigError as exc:
        if exc.key is None:
            raise ConfigError(f"{where}: {exc.reason}") from None
        raise exc.at(f"{where}: {exc.key}", exc.value) from None
    return KubeletRead(settings, configz)


# --- where the kubelet's configuration is found ----------------------------------------------------------

@dataclass(frozen=True, slots=True)
class KnownFile:
    """A place a node's installer writes the kubelet's file (and its drop-ins), tried when no command line says."""

    path: str
    writer: str
    config_dir: str | None = None


def known_files(kubelet_root_dir: str) -> tuple[KnownFile, ...]:
    """The known places, in the order tried: kubeadm's, EKS's (Amazon Linux 2023, with nodeadm's drop-ins), GKE's."""
    return (KnownFile(os.path.join(kubelet_root_dir, DEFAULT_FILE_NAME), "the default: kubeletRootDir/config.yaml"),
            KnownFile("/etc/kubernetes/kubelet/config.json", "EKS", "/etc/kubernetes/kubelet/config.json.d"),
            KnownFile("/home/kubernetes/kubelet-config.yaml", "GKE"))


@dataclass(frozen=True, slots=True)
class CommandLineFound:
    """The kubelet's command line and where it came from; `given` by an option: its problems are errors."""

    line: KubeletCommandLine
    source: str
    pid: int | None
    given: bool

    def flags_note(self, *, own: bool) -> str:
        """` + the flags of <source>: --a, --b` (` + its flags: ...` when the file is `own`, named by this command
        line), or "" when it holds none that evictd reads."""
        names = self.line.read_flags()
        whose = "its flags" if own else f"the flags of {self.source}"
        return f" + {whose}: {', '.join(names)}" if names else ""

    def path(self, path: str) -> str:
        """Where evictd reads the kubelet's `path` (through /proc/<pid>/root for a running kubelet)."""
        return path if self.pid is None else path_as_process_sees_it(self.pid, path, proc_root())


def proc_root() -> str:
    return os.environ.get(PROC_ENV) or PROC


def kubelet_command_line(flags: str | None, pid: int | None, root: str) -> tuple[CommandLineFound | None, str]:
    """Return the kubelet's command line (from `flags`, process `pid`, or the running kubelet under `root`), or None
    and why. Raises ConfigError for what `flags` or `pid` name that cannot be used."""
    if flags is not None:
        if not flags.strip():
            return None, f"no kubelet command line ({FLAGS_OPTION} '')"
        try:
            words = shlex.split(flags)
        except ValueError as exc:
            raise ConfigError(f"not a command line ({exc}): quote values as a shell would, e.g. "
                              f"{FLAGS_OPTION} \"--eviction-hard='memory.available<100Mi'\"", key=FLAGS_OPTION,
                              value=flags) from None
        return CommandLineFound(_parsed(words, program=False, where=FLAGS_OPTION), FLAGS_OPTION, None, True), ""
    if pid is not None:
        try:
            args = read_cmdline(pid, root)
        except SampleError as exc:
            raise ConfigError(f"cannot read the process's command line ({exc.reason}): give the PID of a running "
                              "kubelet", key=PID_OPTION, value=pid) from None
        where = f"{PID_OPTION} {pid}"
        return CommandLineFound(_parsed(args, program=True, where=where), f"process {pid}", pid, True), ""
    try:
        pids = kubelet_pids(root)
    except SampleError as exc:
        return None, f"no kubelet process looked for ({exc})"
    if not pids:
        return None, f"no kubelet process in {root}"
    if len(pids) > 1:
        return None, f"{len(pids)} kubelet processes ({', '.join(map(str, pids))}): name one with {PID_OPTION}"
    source = f"the kubelet (PID {pids[0]})"
    try:
        line = parse_kubelet_command_line(read_cmdline(pids[0], root), program=True)
    except (SampleError, ConfigError) as exc:
        return None, f"the command line of {source} cannot be used: {exc}"
    return CommandLineFound(line, source, pids[0], False), ""


def _parsed(args: Sequence[str], *, program: bool, where: str) -> KubeletCommandLine:
    try:
        return parse_kubelet_command_line(args, program=program)
    except ConfigError as exc:
        if exc.key is None:
            raise ConfigError(f"{where}: {exc.reason}") from None
        raise exc.at(f"{where}: {exc.key}", exc.value) from None


def find_kubelet_file(option: str | None, kubelet_root_dir: str, config_dir: str | None = None, *,
                      flags: str | None = None, pid: int | None = None) -> KubeletFile:
    """Return the kubelet's configuration as the module's docstring finds it: `option` is `--kubelet-config` (None:
    not given; '': none), `config_dir` `--kubelet-config-dir`, `flags` `--kubelet-flags`, `pid`
    `--kubelet-cmdline-from-pid`. Raises ConfigError for what an option names that cannot be used."""
    command, no_command = kubelet_command_line(flags, pid, proc_root())
    dropins = f" + {DIR_OPTION} {config_dir}" if config_dir else ""
    if option is not None:
        if not option:
            if config_dir:
                raise ConfigError(f"needs the kubelet's configuration file ({OPTION}): its drop-ins merge onto it",
                                  key=DIR_OPTION, value=FilePath(config_dir))
            return KubeletFile(None, None, f"{NOTHING_READ} ({OPTION} '')")
        return _read(option, option, config_dir, command, given=True, key=OPTION, note=f"{OPTION} {option}{dropins}")
    if command is not None:
        return _from_command_line(command, config_dir)
    return _from_known_files(known_files(kubelet_root_dir), config_dir, no_command)


def _from_command_line(command: CommandLineFound, config_dir: str | None) -> KubeletFile:
    """The file and drop-ins the kubelet's command line names (`config_dir`, when given, replaces its own)."""
    line = command.line
    dropins = (f" + {DIR_OPTION} {config_dir}" if config_dir
               else f" + --config-dir {line.config_dir}" if line.config_dir else "")
    folder = config_dir or (command.path(line.config_dir) if line.config_dir else None)
    given, key = command.given or bool(config_dir), f"{command.source}: --config"
    if not line.config:
        note = f"no file ({command.source} has no --config: the kubelet starts from its defaults, no evictionHard)"
        return _read(None, None, folder, command, given=given, key=key, note=note + dropins, own=True)
    note = f"--config {line.config} of {command.source}{dropins}"
    return _read(command.path(line.config), line.config, folder, command, given=given, key=key, note=note, own=True)


def _from_known_files(known: tuple[KnownFile, ...], config_dir: str | None, no_command: str) -> KubeletFile:
    """The first known file that is there (its problems noted, unless `config_dir` was given: then errors)."""
    for candidate in known:
        if not os.path.isfile(candidate.path):
            continue
        folder = config_dir or (candidate.config_dir if candidate.config_dir and os.path.isdir(candidate.config_dir)
                                else None)
        dropins = (f" + {DIR_OPTION} {config_dir}" if config_dir
                   else f" + {candidate.config_dir}" if folder else "")
        return _read(candidate.path, candidate.path, folder, None, given=bool(config_dir), key=OPTION,
                     note=f"{candidate.path} ({candidate.writer}){dropins}")
    tried = ", ".join(f"{candidate.path} ({candidate.writer})" for candidate in known)
    if config_dir:
        raise ConfigError(f"needs the kubelet's configuration file: none at {tried}; name it with {OPTION}",
                          key=DIR_OPTION, value=FilePath(config_dir))
    return KubeletFile(None, None, f"not found at {tried}; {no_command}: name the file with {OPTION} PATH or the "
                                   f"kubelet's flags with {FLAGS_OPTION}")


def _read(path: str | None, shown: str | None, config_dir: str | None, command: CommandLineFound | None, *,
          given: bool, key: str, note: str, own: bool = False) -> KubeletFile:
    """Read the kubelet's file at `path` (shown as `shown`) with `config_dir`'s drop-ins and `command`'s flags (`own`:
    the file is the one that command line names). ConfigError when `given` (an option named them), else a note."""
    line = command.line if command is not None and command.line.settings_flags else None
    try:
        read = read_kubelet_settings(path, config_dir, line, key=key,
                                     flags_key=command.source if command is not None else "",
                                     flags_given=command is not None and command.given)
    except ConfigError as exc:
        if given or (command is not None and command.given):
            raise
        return KubeletFile(None, None, f"{note} cannot be used: {exc}")
    if read.configz:
        return KubeletFile(shown, read.eviction, f"{note} (a /configz answer: the kubelet's file, drop-ins and flags "
                                                 "as it runs with them)")
    flags = command.flags_note(own=own) if command is not None else ""
    return KubeletFile(shown, read.eviction, note + flags)
