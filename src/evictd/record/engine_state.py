"""The engine state file: grace periods and pressure history that survive a restart of `evictd run`.

Job: after every cycle, keep `<stateDir>/engine-state.json` up to date with what the engine remembers
(`evictd.core.saved_state`: first-observed times of thresholds, last-observed times of node conditions, the
thresholds kept for minimum reclaim, the last stats times); at start, rebuild the engine's state from it, so
that a restart inside a soft threshold's grace period neither resets nor shortens it and a node condition does
not flap. The kubelet loses all of this on a restart.

Invariants:
- Restored: threshold timers only when the file was saved at most `restore_window_s` ago (before it is stale,
  `evictd.core.wake.stale_after_s`: a restart, not an outage) and only for thresholds the configuration still
  has; node conditions while younger than the pressure transition period. No restored time lies in the future.
- A file that cannot be used (corrupt, empty, truncated, not a regular file, another format version, another
  node) never stops evictd: it is renamed aside to `engine-state.json.corrupt-<UTC time>` (or `.foreign-`),
  logged once as an error with the reason, counted in `evictd_errors_total{source="state"}`, and evictd
  starts afresh.
- A write that fails (ENOSPC, a read-only stateDir) costs only the saving: counted each time in
  `evictd_errors_total{source="state"}`, logged once per kind of error (and once when writing works again),
  never raised into the loop. Writes are atomic (temporary `.engine-state-*` file, fsync, rename); temporary
  files a killed process left are removed at start.
- With a `WriteBehind` (as `evictd run` builds it) the write runs on its thread, off the loop: the loop only
  builds the document; a newer document replaces one not yet written; `close` (at stop) writes the last one. A
  failed write makes the next cycle hand its state over again.
- A write follows every cycle whose timers changed, otherwise at most one a second (notification follow-ups
  run cycles milliseconds apart) while a threshold is met, and none on a calm node (no threshold met: no
  first-observed time, nothing kept for minimum reclaim). There the file's age changes nothing a restart
  restores: it has no threshold timers to keep or drop, and its node conditions are restored by their own
  times, whatever its age. Only the last stats times would be dropped with an old file; they decide whether a
  threshold met at once after the restart acts on a reading not newer than the last one before it, and a reading
  that old is one under which nothing was met (the kubelet, which keeps none, acts on it). In dry-run the
  composition root builds none of this: nothing is read or written.
"""

from __future__ import annotations

import os
from collections.abc import Callable

from evictd.clock import SYSTEM_CLOCK, Clock
from evictd.core.engine import EngineConfig, EngineState
from evictd.core.errors import SampleError
from evictd.core.saved_state import UnusableState, restorable_thresholds, restore_state, state_document
from evictd.cycle.finished import Cycle
from evictd.cycle.render import describe_threshold
from evictd.kube.atomic_file import move_aside, read_json_file, remove_temporaries, write_json_atomically
from evictd.log import Log
from evictd.record.write_behind import WriteBehind
from evictd.state_dir import CORRUPT_SUFFIX, ENGINE_STATE_TEMPORARY_PREFIX, FOREIGN_SUFFIX

# A node's state is a few KiB (nine signals, a few thresholds): a larger file is not one evictd wrote.
MAX_STATE_BYTES = 1 << 20
# Between cycles whose timers did not change, a write at most this often.
SAVE_EVERY_S = 1.0


def _timers(state: EngineState) -> object:
    """What of `state` must reach the file at once when it changes (times that only move on can wait)."""
    return (tuple(state.first_observed_at.items()), state.thresholds_met,
            tuple(state.condition_last_observed_at), state.node_conditions)


def _grace_periods(state: EngineState) -> bool:
    """Whether `state` has threshold timers, which a restart restores only from a recent file."""
    return bool(state.first_observed_at or state.thresholds_met)


class EngineStateFile:
    """The state file at `path` of node `node_name`; called after each cycle, it saves the cycle's state.

    `on_error` counts an unusable file or a failed write (the daemon's `evictd_errors_total{source="state"}`).
    """

    def __init__(self, path: str, node_name: str, *, log: Log, on_error: Callable[[], None],
                 clock: Clock = SYSTEM_CLOCK, writer: WriteBehind | None = None) -> None:
        self.path = path
        self._writer = writer  # None: written in the caller's thread
        self._node_name = node_name
        self._log = log
        self._on_error = on_error
        self._clock = clock
        self._saved_timers: object = None
        self._saved_at: float | None = None  # monotonic
        self._write_errno: int | None = None  # the error of the last failed write, logged once per kind
        self._failed_writes = 0

    def restore(self, config: EngineConfig, window_s: float) -> EngineState:
        """Return the engine state to start from: what the file still holds for `config`, or a fresh one."""
        remove_temporaries(os.path.dirname(self.path) or ".", ENGINE_STATE_TEMPORARY_PREFIX, self._log, "engine state")
        try:
            document = read_json_file(self.path, MAX_STATE_BYTES)
            if document is None:
                return EngineState()
            restored = restore_state(document, node_name=self._node_name,
                                     thresholds=restorable_thresholds(config.thresholds),
                                     now=self._clock.monotonic(), now_wall=self._clock.wall().timestamp(),
                                     restore_window_s=window_s,
                                     transition_period_s=config.pressure_transition_period_s)
        except SampleError as exc:
            self._set_aside(exc.reason, foreign=False)
            return EngineState()
        except UnusableState as exc:
            self._set_aside(exc.reason, foreign=exc.foreign)
            return EngineState()
        # A calm node's file is not rewritten while it stays calm: old, it still holds all there was to restore.
        calm = isinstance(document, dict) and not document.get("firstObservedAt") and not document.get("thresholdsMet")
        self._log.info("engine state restored" if restored.timers_kept or calm else
                       "engine state too old for grace periods: only node conditions restored",
                       path=self.path, age_s=round(restored.age_s, 3), restore_window_s=window_s,
                       grace_periods=[describe_threshold(t) for t in restored.thresholds],
                       conditions=[str(c) for c in restored.conditions],
                       thresholds_no_longer_configured=restored.dropped)
        return restored.state

    def _set_aside(self, reason: str, *, foreign: bool) -> None:
        self._on_error()
        kind = "of another node or format version" if foreign else "unusable"
        try:
            target = move_aside(self.path, FOREIGN_SUFFIX if foreign else CORRUPT_SUFFIX, self._clock.wall())
        except OSError as exc:
            self._log.error(f"engine state file {kind} and not moved aside; starting afresh", path=self.path,
                            reason=reason, error=exc.strerror or str(exc))
            return
        self._log.error(f"engine state file {kind}: moved aside, starting afresh", path=self.path, reason=reason,
                        moved_to=target)

    def __call__(self, cycle: Cycle) -> None:
        """Save the state after `cycle` when its timers changed or, while a threshold is met, the last save is
        SAVE_EVERY_S old."""
        now = cycle.started_at + cycle.duration_s
        timers = _timers(cycle.state)
        if timers == self._saved_timers and self._saved_at is not None and (
                now - self._saved_at < SAVE_EVERY_S or not _grace_periods(cycle.state)):
            return
        document = state_document(cycle.state, node_name=self._node_name, now=now, now_wall=cycle.wall.timestamp())
        # Handed over: the next cycle does not hand the same timers over again unless this write fails.
        self._saved_timers = timers
        self._saved_at = now
        if self._writer is None:
            self._write(document)
        else:
            self._writer.submit(self.path, lambda: self._write(document))

    def close(self) -> None:
        """Write what was handed over and not yet written (at stop)."""
        if self._writer is not None:
            self._writer.flush()

    def _write(self, document: object) -> None:
        try:
            write_json_atomically(self.path, document, prefix=ENGINE_STATE_TEMPORARY_PREFIX)
        except OSError as exc:
            self._on_error()
            self._failed_writes += 1
            if exc.errno != self._write_errno:
                self._log.warning("engine state not saved: a restart now would start grace periods afresh",
                                  path=self.path, error=exc.strerror or str(exc))
            self._write_errno = exc.errno
            self._saved_timers = self._saved_at = None  # the next cycle hands its state over again
            return
        if self._write_errno is not None:
            self._log.info("engine state saved again", path=self.path, failed_writes=self._failed_writes)
        self._write_errno = None
        self._failed_writes = 0
