"""The engine state that survives a restart, as a JSON document (the file: `evictd.record.engine_state`).

Saves what a restart would lose of `EngineState` (thresholds' first-observed times, node conditions' last
observation, thresholds kept for minimum reclaim, last observations with their stats time) and restores what holds.

Invariants: the document holds wall-clock seconds (monotonic ones mean nothing to another process), converted at
each end; no restored time lies after `now`. Another format version or node is *foreign*, anything else not written
here *corrupt*: both raise `UnusableState`. Threshold timers are restored only within the restore window and for
thresholds the configuration still has, field by field; node conditions while younger than the pressure transition
period. The layout is not saved: the first cycle detects it again.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime

from evictd.core.decode import child, invalid, list_of, mapping, string
from evictd.core.engine import EngineState
from evictd.core.errors import DecodeError, QuantityError, bounded_repr
from evictd.core.fs_layout import FsLayout
from evictd.core.quantity import Quantity
from evictd.core.signals import NodeCondition, Signal
from evictd.core.summary import Observation
from evictd.core.thresholds import Threshold, ThresholdValue, derive_containerfs_thresholds

# The document format this evictd writes and reads; any other version is foreign.
STATE_VERSION = 1
# Every layout the first cycle may detect.
_LAYOUTS = tuple(FsLayout(dedicated_imagefs=dedicated, split_containerfs=split)
                 for dedicated in (False, True) for split in (False, True))

Record = dict[str, object]
# The first wall-clock second a datetime cannot hold (year 10000): every saved time lies before it.
_WALL_TIME_END_S = 253_402_300_800  # 10000-01-01T00:00:00Z


class UnusableState(ValueError):
    """A saved state that must not be used; `foreign` tells another node's or version's from a corrupt one."""

    def __init__(self, reason: str, *, foreign: bool = False) -> None:
        super().__init__(reason)
        self.reason = reason
        self.foreign = foreign


def versioned_document(document: object, version: int) -> Mapping[str, object]:
    """Return `document` as a mapping when it is a JSON object of format `version`; raise UnusableState (foreign
    for another version) otherwise. Every stateDir document evictd writes carries its format version."""
    if not isinstance(document, Mapping):
        raise UnusableState(f"not a JSON object but {bounded_repr(document)}")
    found = document.get("version")
    if found is None:
        raise UnusableState("no format version")
    if found != version or isinstance(found, bool):
        raise UnusableState(f"format version {bounded_repr(found)}, this evictd reads {version}", foreign=True)
    return document


@dataclass(frozen=True, slots=True)
class Restored:
    """A state rebuilt from a document, and what of it was kept (for the log line that says so)."""

    state: EngineState
    age_s: float  # how long before `now` the document was saved
    timers_kept: bool  # younger than the restore window: threshold timers restored
    thresholds: tuple[Threshold, ...] = ()  # first-observed times restored
    conditions: tuple[NodeCondition, ...] = ()  # last-observed times restored
    dropped: int = 0  # saved thresholds the configuration no longer has


# --- writing -------------------------------------------------------------------------------------------


def _value_record(value: ThresholdValue) -> Record:
    if value.quantity is not None:
        return {"quantity": str(value.quantity)}
    return {"percentage": value.percentage}


def threshold_record(threshold: Threshold) -> Record:
    """Return what identifies `threshold` in the document (compared as a whole on restore)."""
    return {
        "signal": str(threshold.signal),
        "operator": None if threshold.operator is None else str(threshold.operator),
        "value": _value_record(threshold.value),
        "gracePeriodSeconds": threshold.grace_period_s,
        "minReclaim": None if threshold.min_reclaim is None else _value_record(threshold.min_reclaim),
        "hard": threshold.hard,
        # Only on an allocatable copy told apart from an equal configured threshold (older records lack it).
        **({} if threshold.copied_from is None else {"copiedFrom": str(threshold.copied_from)}),
    }


def _observation_record(observation: Observation) -> Record:
    return {
        "available": str(observation.available),
        "capacity": str(observation.capacity),
        "time": None if observation.time is None else observation.time.timestamp(),
    }


def state_document(state: EngineState, *, node_name: str, now: float, now_wall: float) -> Record:
    """Return the document of `state` as saved at monotonic `now`, which is `now_wall` on the wall clock."""
    offset = now_wall - now
    return {
        "version": STATE_VERSION,
        "node": node_name,
        "savedAt": now_wall,
        "firstObservedAt": [
            {"threshold": threshold_record(t), "at": at + offset} for t, at in state.first_observed_at.items()
        ],
        "thresholdsMet": [threshold_record(t) for t in state.thresholds_met],
        "conditionLastObservedAt": {str(c): at + offset for c, at in state.condition_last_observed_at.items()},
        "lastObservations": {str(s): _observation_record(o) for s, o in state.last_observations.items()},
        "stallEvictedAt": None if state.stall_evicted_at is None else state.stall_evicted_at + offset,
    }


# --- reading -------------------------------------------------------------------------------------------


def restorable_thresholds(configured: Iterable[Threshold]) -> tuple[Threshold, ...]:
    """Return the configured thresholds and every containerfs copy any layout could derive from them."""
    configured = tuple(configured)
    found: dict[Threshold, None] = dict.fromkeys(configured)
    for layout in _LAYOUTS:
        derived, _ = derive_containerfs_thresholds(configured, layout)
        found.update(dict.fromkeys(derived))
    return tuple(found)


def _wall_time(value: object, key: str) -> float:
    """Return a wall-clock time in seconds since the epoch; one no datetime holds is not evictd's (OverflowError)."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise invalid("must be a number of seconds", key, value)
    if not 0 <= value < _WALL_TIME_END_S:
        raise invalid("must be a time between 1970 and 9999 (seconds since the epoch)", key, value)
    return float(value)


def _fields(value: object, key: str, known: tuple[str, ...], optional: tuple[str, ...] = ()) -> Mapping[str, object]:
    """Return `value` as a mapping with only `known` and `optional` fields, every `known` one present."""
    fields = mapping(value, key)
    for name in fields:
        if name not in known and name not in optional:
            raise invalid("unknown field (written by a newer evictd?)", child(key, name), fields[name])
    for name in known:
        if name not in fields:
            raise invalid("missing", child(key, name), None)
    return fields


def _quantity(value: object, key: str) -> Quantity:
    try:
        return Quantity.parse(string(value, key))
    except QuantityError as exc:
        raise invalid(exc.reason, key, value) from None


def _observation(value: object, key: str, now_wall: float) -> Observation:
    fields = _fields(value, key, ("available", "capacity", "time"))
    time = fields["time"]
    return Observation(
        available=_quantity(fields["available"], child(key, "available")),
        capacity=_quantity(fields["capacity"], child(key, "capacity")),
        time=None if time is None else datetime.fromtimestamp(
            min(_wall_time(time, child(key, "time")), now_wall), UTC),
    )


def _signal(name: str, key: str) -> Signal:
    try:
        return Signal(name)
    except ValueError:
        raise invalid("is not an eviction signal", key, name) from None


def _condition(name: str, key: str) -> NodeCondition:
    try:
        return NodeCondition(name)
    except ValueError:
        raise invalid("is not a node pressure condition", key, name) from None


_RECORD_FIELDS = ("signal", "operator", "value", "gracePeriodSeconds", "minReclaim", "hard")
_DOCUMENT_FIELDS = ("version", "node", "savedAt", "firstObservedAt", "thresholdsMet", "conditionLastObservedAt",
                    "lastObservations")
# Fields an older evictd did not write (absent = unset).
_OPTIONAL_FIELDS = ("stallEvictedAt",)


def _record(value: object, key: str) -> Record:
    """Return a threshold record as found (compared whole, not parsed: one of no current threshold matches none)."""
    return dict(_fields(value, key, _RECORD_FIELDS, ("copiedFrom",)))


def restore_state(
    document: object,
    *,
    node_name: str,
    thresholds: Iterable[Threshold],
    now: float,
    now_wall: float,
    restore_window_s: float,
    transition_period_s: float,
) -> Restored:
    """Return the state of a saved `document` for a process whose clocks read `now` and `now_wall`, for the
    `thresholds` the configuration can have. Raises UnusableState for a foreign or corrupt document."""
    document = versioned_document(document, STATE_VERSION)
    if document.get("node") != node_name:
        raise UnusableState(f"saved by node {bounded_repr(document.get('node'))}, this is node {node_name!r}",
                            foreign=True)
    try:
        saved = _parse(document, now_wall)
    except DecodeError as exc:
        raise UnusableState(str(exc)) from None

    def monotonic(wall: float) -> float:
        """The monotonic time of a wall-clock time, never after `now`."""
        return now - max(now_wall - wall, 0.0)

    age_s = now_wall - saved.saved_at
    # A document from the future means the wall clock went back: its times cannot be placed, none is kept.
    timers_kept = 0 <= age_s <= restore_window_s
    kept_conditions = {c: monotonic(at) for c, at in saved.conditions.items()
                       if age_s >= 0 and now_wall - at < transition_period_s}
    configured = [(threshold_record(t), t) for t in thresholds]

    def current(record: Record) -> Threshold | None:
        return next((t for r, t in configured if r == record), None)

    first_observed_at: dict[Threshold, float] = {}
    thresholds_met: list[Threshold] = []
    dropped = 0
    for record, at in saved.first_observed:
        threshold = current(record)
        if threshold is None:
            dropped += 1
        elif timers_kept:
            first_observed_at[threshold] = monotonic(at)
    if timers_kept:
        thresholds_met = [t for t in (current(r) for r in saved.met) if t is not None and t in first_observed_at]
    state = EngineState(
        first_observed_at=first_observed_at,
        condition_last_observed_at=kept_conditions,
        node_conditions=tuple(kept_conditions),
        thresholds_met=tuple(thresholds_met),
        last_observations=saved.observations if timers_kept else {},
        stall_evicted_at=monotonic(saved.stall_evicted_at) if timers_kept and saved.stall_evicted_at is not None
        else None,
    )
    return Restored(state=state, age_s=age_s, timers_kept=timers_kept, thresholds=tuple(first_observed_at),
                    conditions=tuple(kept_conditions), dropped=dropped)


@dataclass(frozen=True, slots=True)
class _Saved:
    """A document's contents, checked; times are wall-clock seconds, threshold records as found."""

    saved_at: float
    first_observed: tuple[tuple[Record, float], ...]
    met: tuple[Record, ...]
    conditions: Mapping[NodeCondition, float]
    observations: Mapping[Signal, Observation]
    stall_evicted_at: float | None = None


def _parse(document: Mapping[str, object], now_wall: float) -> _Saved:
    """Return the checked contents of a document; raise DecodeError naming the bad field."""
    fields = _fields(document, "state", _DOCUMENT_FIELDS, _OPTIONAL_FIELDS)
    stall_evicted_at = fields.get("stallEvictedAt")

    def timer(value: object, key: str) -> tuple[Record, float]:
        item = _fields(value, key, ("threshold", "at"))
        return _record(item["threshold"], child(key, "threshold")), _wall_time(item["at"], child(key, "at"))

    conditions_key, observations_key = "state.conditionLastObservedAt", "state.lastObservations"
    return _Saved(
        saved_at=_wall_time(fields["savedAt"], "state.savedAt"),
        first_observed=list_of(fields["firstObservedAt"], "state.firstObservedAt", timer),
        met=list_of(fields["thresholdsMet"], "state.thresholdsMet", _record),
        conditions={
            _condition(name, child(conditions_key, name)): _wall_time(at, child(conditions_key, name))
            for name, at in mapping(fields["conditionLastObservedAt"], conditions_key).items()
        },
        observations={
            _signal(name, child(observations_key, name)): _observation(value, child(observations_key, name), now_wall)
            for name, value in mapping(fields["lastObservations"], observations_key).items()
        },
        stall_evicted_at=None if stall_evicted_at is None else _wall_time(stall_evicted_at, "state.stallEvictedAt"),
    )

