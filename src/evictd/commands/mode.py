"""`evictd mode`: hold this node's evictd in dry-run, or let it go, through the node-local mode file.

`dry-run` writes `<stateDir>/mode` (atomically), `clear` removes it, `show` says what it holds; the running evictd
reads it before its next cycle, with or without the API (`evictd.core.run_mode`: a file present holds the node in
dry-run whatever the Node label and `dryRun` say). There is no `acting`: the file never makes evictd act, so a
forgotten file can only keep a node out of acting, never undo a rollback by label or `dryRun`. Bad input
(`acting`, a stateDir that does not exist) is a ConfigError (exit 2) naming the value and what is accepted.
"""

from __future__ import annotations

import os
from collections.abc import Callable

from evictd.adapters.mode_file import read_mode_file, remove_mode_file, write_mode_file
from evictd.core.errors import ConfigError, EvictdError, FilePath
from evictd.core.run_mode import MODE_FILE_VALUES, MODE_LABEL, RunMode
from evictd.state_dir import StateDir

HOLD = str(RunMode.DRY_RUN)
CLEAR = "clear"
SHOW = "show"
SETTINGS = (HOLD, CLEAR, SHOW)
# What evictd does once the file is gone: said after `clear` and by `show`.
HANDED_BACK = f"the Node label {MODE_LABEL} and dryRun decide evictd's mode"


def set_mode(setting: str, state_dir: str, say: Callable[[str], None], warn: Callable[[str], None]) -> None:
    """Carry out `evictd mode SETTING` on the stateDir `state_dir`, telling the outcome through `say` and what looks
    wrong through `warn`. Raises ConfigError for a setting not accepted or a stateDir that is no folder, EvictdError
    when the file cannot be written or removed (exit 1)."""
    if setting not in SETTINGS:
        hint = (f" (the node-local file only holds a node in dry-run; to let this node act, run `evictd mode clear` "
                f"and label the Node {MODE_LABEL}=acting, or set dryRun: false)"
                if setting == str(RunMode.ACTING) else "")
        raise ConfigError(f"expected {', '.join(SETTINGS[:-1])} or {SETTINGS[-1]}{hint}", key="mode", value=setting)
    if not os.path.isdir(state_dir):
        raise ConfigError("no such folder: evictd's stateDir (--state-dir, or the configuration's stateDir), where "
                          "evictd run reads its mode file", key="stateDir", value=FilePath(state_dir))
    folder = StateDir(state_dir)
    path = folder.mode
    if setting != SHOW and not os.path.lexists(folder.lock):
        warn(f"no evictd has run with the stateDir {state_dir} (no {os.path.basename(folder.lock)} in it): check "
             "that it is the running evictd's (--state-dir, or --config with its configuration)")
    try:
        if setting == HOLD:
            write_mode_file(path, HOLD)
            say(f"{path}: {HOLD}: evictd on this node is in dry-run from its next cycle, whatever the Node label "
                f"and dryRun say, with or without the API (`evictd mode clear` lets go)")
        elif setting == CLEAR:
            if remove_mode_file(path):
                say(f"{path} removed: from evictd's next cycle {HANDED_BACK}")
            else:
                say(f"{path}: none to clear: {HANDED_BACK}")
    except OSError as exc:
        verb = "written" if setting == HOLD else "removed"
        raise EvictdError(f"{path}: cannot be {verb}: {exc.strerror or exc}") from None
    if setting == SHOW:
        say(shown(path))


def shown(path: str) -> str:
    """What the mode file at `path` holds, and what evictd makes of it, in one line."""
    held = read_mode_file(path)
    if held is None:
        return f"{path}: none: {HANDED_BACK}"
    if held.accepted:
        return f"{path}: {held.text}: evictd on this node stays in dry-run whatever the Node label and dryRun say"
    what = f"holds {held.text!r}" if held.problem is None else held.problem
    return (f"{path}: {what}, not accepted (accepted: {', '.join(MODE_FILE_VALUES)}): evictd holds this node in "
            "dry-run until the file is corrected or removed (`evictd mode clear`)")
