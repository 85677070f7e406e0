"""The OOM-kill counters file: what evictd last read of the kernel's OOM-kill counters, kept across its restarts.

Keeps `<stateDir>/oom-counters.json` (`evictd.core.oom_saved`) at what the daemon last read and reported, so kills
while it was not running are counted once, at its next first cycle. Invariants: saved after the cycle's report (only
a kill in the milliseconds before a write is counted twice, never lost); written off the loop, `close` writes the
last reading; a write on every change, else at most every `REFRESH_EVERY_S` (the file's time is when evictd last
looked); an unusable file is moved aside (`.corrupt-`/`.foreign-<UTC time>`), logged once, counted
(`evictd_errors_total{source="state"}`), the run starting from a baseline; a failed write is counted, logged once per
kind, never raised; stale temporary files are removed at start.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from datetime import UTC, datetime

from evictd.clock import SYSTEM_CLOCK, Clock
from evictd.core.errors import SampleError
from evictd.core.oom import OomState, wall_time_text
from evictd.core.oom_saved import (
    RESUMPTION_TO_DESCRIPTION,
    ResumedOom,
    Resumption,
    oom_counters_document,
    resumed_oom_state,
)
from evictd.core.saved_state import UnusableState
from evictd.kube.atomic_file import move_aside, read_json_file, remove_temporaries, write_json_atomically
from evictd.log import Log
from evictd.record.write_behind import WriteBehind
from evictd.state_dir import CORRUPT_SUFFIX, FOREIGN_SUFFIX, OOM_COUNTERS_TEMPORARY_PREFIX

# A v1 node walks every cgroup below the pods cgroup, but only counters that are not zero are written: a few KiB.
MAX_FILE_BYTES = 4 << 20
# Between unchanged readings a write at most this often (how early the "since" of kills while down may be).
REFRESH_EVERY_S = 60.0


class OomCountersFile:
    """The counters file at `path` for boot `boot_id` (None: unreadable, nothing saved is used) and `pods_cgroup`;
    `on_error` counts an unusable file or a failed write."""

    def __init__(self, path: str, *, boot_id: str | None, pods_cgroup: str, log: Log, on_error: Callable[[], None],
                 clock: Clock = SYSTEM_CLOCK, writer: WriteBehind | None = None) -> None:
        self.path = path
        self._boot_id = boot_id
        self._pods_cgroup = pods_cgroup
        self._log = log
        self._on_error = on_error
        self._clock = clock
        self._writer = writer  # None: written in the caller's thread
        self._saved_counters: object = None  # the last document handed over, without its time
        self._saved_at: datetime | None = None
        self._unsaved: tuple[OomState, datetime] | None = None  # the last reading not handed over yet
        self._write_errno: int | None = None
        self._failed_writes = 0

    def restore(self) -> ResumedOom:
        """Return the OOM state the run starts from: the counters a previous run of this boot saved, or none."""
        remove_temporaries(os.path.dirname(self.path) or ".", OOM_COUNTERS_TEMPORARY_PREFIX, self._log,
                           "OOM-kill counters")
        try:
            resumed = resumed_oom_state(read_json_file(self.path, MAX_FILE_BYTES), boot_id=self._boot_id,
                                        pods_cgroup=self._pods_cgroup)
        except SampleError as exc:
            self._set_aside(exc.reason, foreign=False)
            return ResumedOom(OomState(), Resumption.NONE_SAVED)
        except UnusableState as exc:
            self._set_aside(exc.reason, foreign=exc.foreign)
            return ResumedOom(OomState(), Resumption.NONE_SAVED)
        fields: dict[str, object] = {"path": self.path, "resumed": str(resumed.resumption)}
        if resumed.saved_at_wall is not None:
            fields["saved_at"] = wall_time_text(resumed.saved_at_wall)
        self._log.info(f"OOM-kill counters {RESUMPTION_TO_DESCRIPTION[resumed.resumption]}", **fields)
        return resumed

    def _set_aside(self, reason: str, *, foreign: bool) -> None:
        self._on_error()
        kind = "of another format version" if foreign else "unusable"
        try:
            target = move_aside(self.path, FOREIGN_SUFFIX if foreign else CORRUPT_SUFFIX, self._clock.wall())
        except OSError as exc:
            self._log.error(f"OOM-kill counters file {kind} and not moved aside; kills before this start are not "
                            "counted", path=self.path, reason=reason, error=exc.strerror or str(exc))
            return
        self._log.error(f"OOM-kill counters file {kind}: moved aside; kills before this start are not counted",
                        path=self.path, reason=reason, moved_to=target)

    def save(self, state: OomState, read_at: datetime) -> None:
        """Save the counters of `state`, read at `read_at`, when they changed since the last save or that save is
        REFRESH_EVERY_S old."""
        if not state.baseline:
            return  # nothing read yet
        counters = oom_counters_document(state, boot_id="", pods_cgroup="", now_wall=0.0)
        if (counters == self._saved_counters and self._saved_at is not None
                and (read_at - self._saved_at).total_seconds() < REFRESH_EVERY_S):
            self._unsaved = (state, read_at)
            return
        self._hand_over(state, read_at, counters)

    def close(self) -> None:
        """Write the last reading (at stop), so the file says when evictd last looked; wait for the write."""
        if self._unsaved is not None:
            state, read_at = self._unsaved
            self._hand_over(state, read_at, oom_counters_document(state, boot_id="", pods_cgroup="", now_wall=0.0))
        if self._writer is not None:
            self._writer.flush()

    def _hand_over(self, state: OomState, read_at: datetime, counters: object) -> None:
        if self._boot_id is None:
            return  # no boot to tie the counters to: a later run could not use them
        document = oom_counters_document(state, boot_id=self._boot_id, pods_cgroup=self._pods_cgroup,
                                         now_wall=read_at.astimezone(UTC).timestamp())
        # Handed over: the next reading does not hand the same counters over again unless this write fails.
        self._saved_counters = counters
        self._saved_at = read_at
        self._unsaved = None
        if self._writer is None:
            self._write(document)
        else:
            self._writer.submit(self.path, lambda: self._write(document))

    def _write(self, document: object) -> None:
        try:
            write_json_atomically(self.path, document, prefix=OOM_COUNTERS_TEMPORARY_PREFIX)
        except OSError as exc:
            self._on_error()
            self._failed_writes += 1
            if exc.errno != self._write_errno:
                self._log.warning("OOM-kill counters not saved: a restart now would count the kills since the last "
                                  "save again, or (with no file) none before it", path=self.path,
                                  error=exc.strerror or str(exc))
            self._write_errno = exc.errno
            self._saved_counters = self._saved_at = None  # the next reading hands its counters over again
            return
        if self._write_errno is not None:
            self._log.info("OOM-kill counters saved again", path=self.path, failed_writes=self._failed_writes)
        self._write_errno = None
        self._failed_writes = 0
