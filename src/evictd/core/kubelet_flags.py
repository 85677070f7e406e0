"""The kubelet's command line, read as the kubelet reads it (spf13/pflag with the kubelet's word-separator
normalisation) for what decides its eviction: the file and drop-in folder it loads (`--config`, `--config-dir`) and
the flags that override them, applied after both (cmd/kubelet/app/server.go re-parses the command line onto the
loaded configuration: `kubeletConfigFlagPrecedence`).

The grammar: `--name=value` or `--name value` (a flag that takes a value takes the next argument, whatever it
is), a boolean flag alone (`--name`) or with `=value`; `_` in a name reads as `-`; `--` ends the flags. The kubelet
refuses to start on a positional argument (`unknown command`), so an argument that is no flag's value is an error.
Flags evictd does not read are skipped with their value (the next argument, unless it starts with `-`). A repeated
scalar flag: the last one wins; a map or list flag: its first use replaces the file's value, later uses add to it
(`apply_flags`). Values are checked here as the kubelet checks them at start. Pure: arguments in, a
`KubeletCommandLine` out.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from evictd.core.errors import ConfigError, QuantityError
from evictd.core.kubelet_config import BOOL_FLAGS, KUBELET_SETTINGS_FLAGS, EvictionSettings, apply_flags
from evictd.core.quantity import Quantity

# The kubelet's flags for its files (KubeletFlags): the configuration file and the drop-in folder. (Its --root-dir
# does not say where the file is: a kubelet without --config reads none.)
CONFIG_FLAG = "config"
CONFIG_DIR_FLAG = "config-dir"
PATH_FLAGS = (CONFIG_FLAG, CONFIG_DIR_FLAG)
# Reservations (`key=value` maps, cliflag.MapStringString): checked as the kubelet's parseResourceList checks them.
RESERVED_FLAGS = ("system-reserved", "kube-reserved")
RESERVABLE = ("cpu", "memory", "ephemeral-storage", "pid")
# The program's name, when a command line given by hand starts with it (`kubelet --config ...`).
KUBELET_PROGRAM = "kubelet"
EXAMPLE = "--eviction-hard=memory.available<100Mi or --eviction-hard 'memory.available<100Mi'"


@dataclass(frozen=True, slots=True)
class KubeletCommandLine:
    """What a kubelet's command line says about its eviction: `config` and `config_dir` (None or "": none), the
    flags `apply_flags` applies (in order) and the reservation flags, in order."""

    config: str | None = None
    config_dir: str | None = None
    settings_flags: tuple[tuple[str, str], ...] = ()
    reserved_flags: tuple[tuple[str, str], ...] = ()

    def read_flags(self) -> list[str]:
        """The flags read besides the files', each once, in the order first given (`--eviction-hard`)."""
        names = [f"--{name}" for name, _ in (*self.settings_flags, *self.reserved_flags)]
        return list(dict.fromkeys(names))

    def apply(self, settings: EvictionSettings) -> EvictionSettings:
        """Return `settings` (the file's and drop-ins') with this command line's flags applied last."""
        return apply_flags(settings, self.settings_flags)


def _normalised(name: str) -> str:
    """The kubelet's flag set normalises `_` to `-` (cliflag.WordSepNormalizeFunc)."""
    return name.replace("_", "-")


def _error(reason: str, flag: str, value: object) -> ConfigError:
    return ConfigError(reason, key=flag, value=value)


def parse_kubelet_command_line(args: Sequence[str], *, program: bool) -> KubeletCommandLine:
    """Return what the kubelet's arguments `args` say (with `program`, args[0] is the program and is skipped; else a
    first argument that names the kubelet program is). Raises ConfigError naming the flag and the value."""
    rest = list(args[1:] if program else args)
    if not program and rest and not rest[0].startswith("-") and rest[0].rsplit("/", 1)[-1] == KUBELET_PROGRAM:
        rest = rest[1:]
    paths: dict[str, str] = {}
    settings: list[tuple[str, str]] = []
    reserved: list[tuple[str, str]] = []
    index = 0
    while index < len(rest):
        argument = rest[index]
        index += 1
        if argument == "--":
            if index < len(rest):
                raise _error("the kubelet takes no argument after `--` (it refuses to start: unknown command)",
                             "--", rest[index])
            break
        if not argument.startswith("-") or argument == "-":
            raise _error(f"not a flag: the kubelet takes flags only (it refuses to start on `{argument}`: unknown "
                         f"command); give each flag with its value: {EXAMPLE}", "kubelet argument", argument)
        if argument.startswith("---"):
            raise _error("bad flag syntax (the kubelet refuses it): write --name=value or --name value",
                         "kubelet argument", argument)
        long = argument.startswith("--")
        name, equals, value = argument[2 if long else 1:].partition("=")
        name = _normalised(name) if long else name
        known = long and (name in PATH_FLAGS or name in RESERVED_FLAGS or name in KUBELET_SETTINGS_FLAGS)
        if not equals:
            if long and name in BOOL_FLAGS:
                value = "true"
            elif known:
                if index >= len(rest):
                    raise _error(f"needs a value (as the kubelet: --{name}=VALUE or --{name} VALUE)", f"--{name}",
                                 "")
                value = rest[index]
                index += 1
            elif index < len(rest) and not rest[index].startswith("-"):
                index += 1  # a flag evictd does not read, with its value
        if not known:
            continue
        flag = f"--{name}"
        if name in PATH_FLAGS:
            paths[name] = value
        elif name in RESERVED_FLAGS:
            _check_reserved(flag, value)
            reserved.append((name, value))
        else:
            settings.append((name, value))
    command_line = KubeletCommandLine(config=paths.get(CONFIG_FLAG), config_dir=paths.get(CONFIG_DIR_FLAG),
                                      settings_flags=tuple(settings), reserved_flags=tuple(reserved))
    # A flag's syntax fails here; its thresholds are checked with the file's (a soft threshold's grace period may be
    # there).
    command_line.apply(EvictionSettings())
    return command_line


def _check_reserved(flag: str, value: str) -> None:
    """Check a reservation flag's `resource=quantity,...` as the kubelet does at start; raise ConfigError."""
    for item in value.split(","):
        if not item:
            continue
        resource, separator, quantity = item.partition("=")
        resource, quantity = resource.strip(), quantity.strip()
        if not separator:
            raise _error("malformed pair, expect string=string (write resource=quantity pairs: "
                         "memory=1Gi,cpu=500m)", flag, value)
        if resource not in RESERVABLE:
            raise _error(f"cannot reserve {resource!r} resource (the kubelet reserves {', '.join(RESERVABLE)})", flag,
                         value)
        try:
            parsed = Quantity.parse(quantity)
        except QuantityError as exc:
            raise _error(f"failed to parse quantity {quantity!r} for {resource!r} resource: {exc.reason} (write a "
                         "quantity such as 1Gi or 500m)", flag, value) from None
        if parsed.sign() < 0:
            raise _error(f"resource quantity for {resource!r} cannot be negative: {quantity}", flag, value)
