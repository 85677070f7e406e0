"""The OOM-kill counters evictd last read, as a JSON document, so that kills while it was not running are counted.

Turns the counter part of an `OomState` into a document (the file: `evictd.record.oom_counters_file`) and decides
what a new run starts from: nothing saved, the boot ID unreadable or another boot's: a baseline; this boot's with
another pods cgroup: the machine's counter only; this boot's, same pods cgroup: every counter. Either of the last
two judges the first interval NOT_RUNNING since `savedAt`.

Invariants: nothing is counted twice (a run saves after it reported) nor from another boot; no count is negative
(`evictd.core.oom.machine_delta`); only non-zero counters are written (a missing cgroup counts from zero); a
document of another format version raises `UnusableState(foreign=True)`, an unrecognised one `UnusableState`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum

from evictd.core.decode import child, integer, invalid, mapping, string
from evictd.core.errors import DecodeError
from evictd.core.oom import OomState
from evictd.core.saved_state import UnusableState, versioned_document

# The document format this evictd writes and reads; any other version is foreign.
OOM_COUNTERS_VERSION = 1
# The kernel's counters are unsigned longs.
_COUNTER_MAX = (1 << 64) - 1

Record = dict[str, object]

_FIELDS = ("version", "bootId", "savedAt", "podsCgroup", "machine", "pods", "walked", "machineAtWalk", "podsAtWalk",
           "cgroups")
_CGROUP_FIELDS = ("oomKill", "oomGroupKill")


class Resumption(StrEnum):
    """What a new run could make of the saved counters (the `resumed` field of the start's log line)."""

    NONE_SAVED = "none-saved"  # no document: the first run on this stateDir
    BOOT_UNKNOWN = "boot-unknown"  # the running kernel's boot ID could not be read
    OTHER_BOOT = "other-boot"  # saved before a reboot: the kernel's counters started again from zero
    MACHINE_ONLY = "machine-only"  # another pods cgroup (configuration changed): the machine's counter only
    RESUMED = "resumed"  # every counter saved


# Each reads after "OOM-kill counters: ", in the start's log line.
RESUMPTION_TO_DESCRIPTION: Mapping[Resumption, str] = {
    Resumption.NONE_SAVED: "none saved; kills before this start are not counted",
    Resumption.BOOT_UNKNOWN: "boot ID unreadable, a reboot could not be told; kills before this start are not counted",
    Resumption.OTHER_BOOT: "saved before a reboot; kills before this start are not counted",
    Resumption.MACHINE_ONLY: "saved for another pods cgroup; kills while evictd was not running are counted on the "
                             "machine only",
    Resumption.RESUMED: "restored; kills while evictd was not running are counted at the first cycle",
}


@dataclass(frozen=True, slots=True)
class ResumedOom:
    """The OOM state a run starts from, what of the saved counters it kept, and when they were saved."""

    state: OomState
    resumption: Resumption
    saved_at_wall: float | None = None  # seconds since the epoch; None without a document


def oom_counters_document(state: OomState, *, boot_id: str, pods_cgroup: str, now_wall: float) -> Record:
    """Return the document of `state`'s counters, read during boot `boot_id` for the pods cgroup `pods_cgroup`
    (the reader's name for it: a version and a path) and saved at `now_wall` (seconds since the epoch)."""
    cgroups: dict[str, Record] = {}
    for path in sorted(set(state.cgroups) | set(state.group_kills)):
        kills, groups = state.cgroups.get(path, 0), state.group_kills.get(path, 0)
        if kills or groups:
            cgroups[path] = {"oomKill": kills, "oomGroupKill": groups}
    return {
        "version": OOM_COUNTERS_VERSION,
        "bootId": boot_id,
        "savedAt": now_wall,
        "podsCgroup": pods_cgroup,
        "machine": state.node,
        "pods": state.pods,
        "walked": state.walked,
        "machineAtWalk": state.node_at_walk,
        "podsAtWalk": state.pods_at_walk,
        "cgroups": cgroups,
    }


def resumed_oom_state(document: object | None, *, boot_id: str | None, pods_cgroup: str) -> ResumedOom:
    """Return the state a new run starts from, given the saved `document` (None: no file) and `boot_id` (None:
    unreadable). Raises UnusableState for a foreign or unrecognised document."""
    if document is None:
        return ResumedOom(OomState(), Resumption.NONE_SAVED)
    document = versioned_document(document, OOM_COUNTERS_VERSION)
    try:
        saved = _parse(document)
    except DecodeError as exc:
        raise UnusableState(str(exc)) from None
    if boot_id is None:
        return ResumedOom(OomState(), Resumption.BOOT_UNKNOWN, saved.saved_at)
    if saved.boot_id != boot_id:
        return ResumedOom(OomState(), Resumption.OTHER_BOOT, saved.saved_at)
    if saved.pods_cgroup != pods_cgroup:
        machine = OomState(node=saved.node, baseline=True, not_running_since_wall=saved.saved_at)
        return ResumedOom(machine, Resumption.MACHINE_ONLY, saved.saved_at)
    state = OomState(
        node=saved.node,
        pods=saved.pods,
        cgroups={path: kills for path, (kills, _) in saved.cgroups.items()},
        group_kills={path: groups for path, (_, groups) in saved.cgroups.items() if groups},
        baseline=True,
        walked=saved.walked,
        node_at_walk=saved.node_at_walk,
        pods_at_walk=saved.pods_at_walk,
        not_running_since_wall=saved.saved_at,
    )
    return ResumedOom(state, Resumption.RESUMED, saved.saved_at)


@dataclass(frozen=True, slots=True)
class _Saved:
    boot_id: str
    saved_at: float
    pods_cgroup: str
    node: int | None
    pods: int | None
    walked: bool
    node_at_walk: int | None
    pods_at_walk: int | None
    cgroups: Mapping[str, tuple[int, int]]


def _counter(value: object, key: str) -> int | None:
    return integer(value, key, low=0, high=_COUNTER_MAX, if_null=None)


def _flag(value: object, key: str) -> bool:
    if not isinstance(value, bool):
        raise invalid("must be true or false", key, value)
    return value


def _saved_at(value: object, key: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value < 0:
        raise invalid("must be a number of seconds since the epoch", key, value)
    return float(value)


def _cgroup(value: object, key: str) -> tuple[int, int]:
    fields = mapping(value, key)
    for name in fields:
        if name not in _CGROUP_FIELDS:
            raise invalid("unknown field (written by a newer evictd?)", child(key, name), fields[name])
    counts = [integer(fields.get(name), child(key, name), low=0, high=_COUNTER_MAX) for name in _CGROUP_FIELDS]
    return counts[0], counts[1]


def _parse(document: Mapping[str, object]) -> _Saved:
    """Return the checked contents of a document; raise DecodeError naming the bad field."""
    fields = mapping(document, "oomCounters")
    for name in fields:
        if name not in _FIELDS:
            raise invalid("unknown field (written by a newer evictd?)", child("oomCounters", name), fields[name])
    for name in _FIELDS:
        if name not in fields:
            raise invalid("missing", child("oomCounters", name), None)

    def key(name: str) -> str:
        return child("oomCounters", name)

    cgroups_key = key("cgroups")
    return _Saved(
        boot_id=string(fields["bootId"], key("bootId")),
        saved_at=_saved_at(fields["savedAt"], key("savedAt")),
        pods_cgroup=string(fields["podsCgroup"], key("podsCgroup")),
        node=_counter(fields["machine"], key("machine")),
        pods=_counter(fields["pods"], key("pods")),
        walked=_flag(fields["walked"], key("walked")),
        node_at_walk=_counter(fields["machineAtWalk"], key("machineAtWalk")),
        pods_at_walk=_counter(fields["podsAtWalk"], key("podsAtWalk")),
        cgroups={path: _cgroup(value, child(cgroups_key, path))
                 for path, value in mapping(fields["cgroups"], cgroups_key).items()},
    )
