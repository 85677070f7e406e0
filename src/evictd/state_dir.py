"""The stateDir's layout: every name evictd gives a file or folder there, said once (formats: the module beside it).

| entry | what | format |
|---|---|---|
| `evictd.lock` | the stateDir lock, holding the holder's PID | `evictd.run.lock` |
| `engine-state.json` | grace periods and pressure history for a restart | `evictd.record.engine_state` |
| `oom-counters.json` | the OOM-kill counters last read, and the boot ID | `evictd.record.oom_counters_file` |
| `evictions.json` | the eviction journal (API writes still pending) | `evictd.kube.journal` |
| `critical-pods.json` | the UIDs of critical pods, for an API outage | `evictd.kube.critical_record` |
| `shadow.jsonl` (`.1`: the rotated one) | dry-run comparisons with the kubelet | `evictd.kube.shadow` |
| `recording/` | the flight recorder's segments | `evictd.record.recording` |
| `mode` | the node-local mode file: `dry-run` holds the node in dry-run (`evictd mode`) | `evictd.adapters.mode_file` |

Atomic files are written under a temporary prefix beside them (stale ones removed at start); an unusable file is
renamed `<name>.corrupt-<UTC time>` (`.foreign-`: another node or format version).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

LOCK_FILE = "evictd.lock"
ENGINE_STATE_FILE = "engine-state.json"
ENGINE_STATE_TEMPORARY_PREFIX = ".engine-state-"
OOM_COUNTERS_FILE = "oom-counters.json"
OOM_COUNTERS_TEMPORARY_PREFIX = ".oom-counters-"
JOURNAL_FILE = "evictions.json"
JOURNAL_TEMPORARY_PREFIX = ".journal-"
CRITICAL_PODS_FILE = "critical-pods.json"
CRITICAL_PODS_TEMPORARY_PREFIX = ".tmp-"
SHADOW_FILE = "shadow.jsonl"
# Appended to the shadow record's name when it is rotated (one older record kept).
ROTATED_SUFFIX = ".1"
RECORDING_FOLDER = "recording"
# Written by an operator (`evictd mode`, or by hand), read by `evictd run` before every cycle.
MODE_FILE = "mode"
MODE_TEMPORARY_PREFIX = ".mode-"
# A recording segment being compressed, inside the recording folder.
RECORDING_TEMPORARY_PREFIX = "."
# What an unusable file is renamed aside with (followed by the UTC time).
CORRUPT_SUFFIX = ".corrupt-"
FOREIGN_SUFFIX = ".foreign-"


@dataclass(frozen=True, slots=True)
class StateDir:
    """The paths of the entries of the stateDir at `path`."""

    path: str

    @property
    def lock(self) -> str:
        return os.path.join(self.path, LOCK_FILE)

    @property
    def engine_state(self) -> str:
        return os.path.join(self.path, ENGINE_STATE_FILE)

    @property
    def oom_counters(self) -> str:
        return os.path.join(self.path, OOM_COUNTERS_FILE)

    @property
    def journal(self) -> str:
        return os.path.join(self.path, JOURNAL_FILE)

    @property
    def critical_pods(self) -> str:
        return os.path.join(self.path, CRITICAL_PODS_FILE)

    @property
    def shadow(self) -> str:
        return os.path.join(self.path, SHADOW_FILE)

    @property
    def shadow_rotated(self) -> str:
        return self.shadow + ROTATED_SUFFIX

    @property
    def recording(self) -> str:
        return os.path.join(self.path, RECORDING_FOLDER)

    @property
    def mode(self) -> str:
        return os.path.join(self.path, MODE_FILE)
