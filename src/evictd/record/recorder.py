"""The flight recorder: an after-cycle hook that keeps what every cycle saw and decided, in stateDir.

Each cycle becomes one line (`evictd.record.recording`) appended to the open segment (in chunks of at most 1 MiB:
a line is never built whole as bytes) and fdatasynced, so a crash loses at most the cycle being written and
never touches earlier lines (a line cut short is skipped on reading). A segment is closed (gzip-compressed beside
it, fsynced, renamed, the plain file removed) before it would hold more than 1/16 of `maxBytes`, or once it spans
1/24 of `maxAge`; then the oldest closed segments are deleted until the recording, with room for a whole open
segment, fits in `maxBytes`, and every segment whose last cycle is older than `maxAge` (segments go whole: the
oldest cycle kept may be up to 1/12 of `maxAge` older).

With a `WriteBehind` (as `evictd run` builds it) the fdatasync runs on its thread, off the loop (a line is
written in the loop, to the page cache); a crash then loses at most the lines written since the last sync that
finished. A failed sync is raised at the next line (as a failed write is), and the fd is closed only once no
sync on it waits or runs.

The recorder never stops the loop: a full filesystem (ENOSPC) or an unwritable stateDir makes it log once
(and once again when it writes again), count `evictd_errors_total{source="recorder"}`, cut off any partial
line it left, and try again next cycle with the whole pod list and Summary. In dry-run it records too: the
decisions are what an operator trying thresholds wants to see.

The run's first line carries the engine state the run started from (`start_state`: what
`engine_state_file` restored after a restart, or null), so that a replay of the run starts where the daemon did.

What makes a line cheap (it is written every cycle, beside a cycle of a few ms): the Summary and the pod list
are written as what changed since the last line, the ranking's keys are the ones the cycle sorted by (carried in
the report), and what stays from cycle to cycle (a pod's reference, disk figures, name and criticality in the
ranking) is kept as text.
"""

from __future__ import annotations

import contextlib
import gzip
import os
import shutil
from collections.abc import Callable, Iterator, Sequence
from dataclasses import replace
from datetime import UTC, datetime

from evictd.clock import SYSTEM_CLOCK, Clock
from evictd.core.engine import EngineState
from evictd.core.fs_layout import FsLayout
from evictd.core.kubelet_config import EvictionSettings
from evictd.core.pods import Pod
from evictd.core.saved_state import state_document
from evictd.kube.atomic_file import remove_temporaries
from evictd.log import Log
from evictd.record.documents import kubelet_config_document
from evictd.record.model import ABSENT, Encoded, Line, PodChanges, dumps, encode_line_parts
from evictd.record.recording import (
    CLOSED_SUFFIX,
    OPEN_SUFFIX,
    PodListEncoder,
    RankingEncoder,
    decision_of,
    run_id,
    segment_paths,
)
from evictd.record.summary_json import SummaryChangesEncoder
from evictd.run.after_cycle import Cycle
from evictd.run.manager import FRESH_STATE
from evictd.run.write_behind import WriteBehind
from evictd.state_dir import RECORDING_TEMPORARY_PREFIX, StateDir

# What one segment holds at most, as a share of the recorder's bounds.
SEGMENT_SHARE_OF_BYTES = 16
SEGMENT_SHARE_OF_AGE = 24
MIN_SEGMENT_BYTES = 64 << 10
# A segment dated more than this after the clock's now was written while the clock ran ahead.
FUTURE_SLACK_S = 60.0
# A line is written in chunks of at most this many characters (UTF-8 bytes: at most 4 times as many).
WRITE_CHUNK_CHARS = 1 << 20


class FlightRecorder:
    """Appends every cycle to the recording in `<state_dir>/recording` (see the module's description)."""

    def __init__(self, state_dir: str, settings: EvictionSettings, *, max_bytes: int, max_age_s: float,
                 dry_run: bool, log: Log, on_error: Callable[[], None] = lambda: None,
                 clock: Clock = SYSTEM_CLOCK, run: str | None = None, start_state: EngineState = FRESH_STATE,
                 node_name: str = "", process: str | None = None, writer: WriteBehind | None = None) -> None:
        self.folder = StateDir(state_dir).recording
        self._config = kubelet_config_document(settings)
        self._max_bytes = max_bytes
        self._max_age_s = max_age_s
        self._segment_bytes = max(MIN_SEGMENT_BYTES, max_bytes // SEGMENT_SHARE_OF_BYTES)
        self._segment_age_s = max_age_s / SEGMENT_SHARE_OF_AGE
        self._dry_run = dry_run
        self._log = log
        self._on_error = on_error
        self._clock = clock
        # What names this process in segment names and the run's name: its PID, or what `process` says.
        self._process = process or str(os.getpid())
        self._run = run if run is not None else run_id(clock.wall().timestamp(), self._process)
        self._pods = PodListEncoder()
        self._summaries = SummaryChangesEncoder(dumps)
        self._ranking = RankingEncoder()
        self._layout: FsLayout | None = None
        self._fd: int | None = None
        self._path = ""
        self._size = 0
        self._opened_at = 0.0
        self._failing: str | None = None
        self._started = False
        # The engine state the run started from, written on the run's first line (None once written or tried).
        self._start_state: EngineState | None = start_state
        self._node_name = node_name
        self._writer = writer  # None: fdatasync in the caller's thread
        self._sync_error: OSError | None = None  # what the last fdatasync off the loop raised

    def __call__(self, cycle: Cycle) -> None:
        """Record one finished cycle; a failure is logged and counted, never raised."""
        wall = cycle.wall.timestamp()
        try:
            if self._fd is not None and wall - self._opened_at >= self._segment_age_s:
                self._close_segment()
            if self._fd is None:
                self._open_segment(wall)
            line, pods = self._line(cycle, wall)
            if self._size and self._size + _size(line) > self._segment_bytes:
                del line  # (before the whole line is built)
                self._close_segment()  # a segment never grows past its share, so neither does the recording
                self._open_segment(wall)
                line, pods = self._line(cycle, wall)
            self._append(line)
        except OSError as exc:
            self._failed(exc)
            return
        finally:
            self._start_state = None  # the run's first cycle only: a later one did not start from it
        self._pods.commit(pods)
        if cycle.report.summary is not None:
            self._summaries.commit()
        self._layout = cycle.state.layout
        if self._failing is not None:
            self._log.info("flight recorder writing again", folder=self.folder)
            self._failing = None

    def close(self, *, compress: bool = True) -> None:
        """Close the open segment, compressed (without `compress`, left as plain lines, as readers read an open
        segment); errors are logged and counted."""
        try:
            if self._fd is not None:
                if compress:
                    self._close_segment()
                else:
                    self._drop_segment()
        except OSError as exc:
            self._failed(exc)

    # --- one line --------------------------------------------------------------------------------------

    def _line(self, cycle: Cycle, wall: float) -> tuple[list[str], Sequence[Pod]]:
        """The cycle's line as the text parts `_append` writes, and the pods it holds."""
        report = cycle.report
        layout = cycle.state.layout
        first = self._size == 0
        pods = self._pods.encode(report.pods)
        # The Summaries are most of a line: written as text their encoder keeps from cycle to cycle, as what
        # changed since the last line (whole on a segment's first line and after a failed write).
        field, summary = self._summaries.encode(report.summary) if report.summary is not None else ("summary", "null")
        after = report.after_reclaim
        start = self._start_state
        # The ranking (every pod, under pressure) likewise, as text kept per pod.
        decision = replace(decision_of(report, ranking=False), ranking=self._ranking.encode(report))
        line = Line(
            run=self._run, cycle=cycle.number, wall=wall, now=report.now, decision=decision,
            dry_run=self._dry_run if first else None, config=self._config if first else None,
            engine_state=ABSENT if start is None else None if start == FRESH_STATE else state_document(
                start, node_name=self._node_name, now=report.now, now_wall=wall),
            layout=layout if layout is not None and (first or layout != self._layout) else None,
            pods=None if pods is None or isinstance(pods, PodChanges) else pods,
            pod_changes=pods if isinstance(pods, PodChanges) else None,
            summary=Encoded(summary) if field == "summary" else None,
            summary_changes=Encoded(summary) if field == "summaryChanges" else None,
            after_reclaim=None if after is None else Encoded(self._summaries.whole(after)))
        return encode_line_parts(line), report.pods

    def _append(self, line: Sequence[str]) -> None:
        """Write the parts of `line` at the end of the segment (a chunk of at most WRITE_CHUNK_CHARS characters at
        a time: a segment's first line is megabytes at thousands of pods, and bytes of it all at once would be
        one more copy of it in memory) and sync it; on failure cut off what was written."""
        assert self._fd is not None
        if self._sync_error is not None:
            failed, self._sync_error = self._sync_error, None
            raise failed
        written = 0
        fd = self._fd
        try:
            for chunk in _chunks(line):
                end = written + len(chunk)
                while written < end:
                    written += os.write(fd, chunk[len(chunk) - (end - written):])
            if self._writer is None:
                os.fdatasync(fd)
            else:
                self._writer.submit(self.folder, lambda: self._sync(fd))
        except OSError:
            if written:
                try:
                    os.ftruncate(self._fd, self._size)
                except OSError:
                    self._drop_segment()  # the next line starts a new segment: the cut one reads up to here
            raise
        self._size += written

    def _sync(self, fd: int) -> None:
        try:
            os.fdatasync(fd)
        except OSError as exc:
            self._sync_error = exc

    # --- segments ----------------------------------------------------------------------------------------

    def _open_segment(self, wall: float) -> None:
        os.makedirs(self.folder, exist_ok=True)
        if not self._started:  # what earlier runs left may have aged out meanwhile, or was cut by a crash
            remove_temporaries(self.folder, RECORDING_TEMPORARY_PREFIX, self._log, "recording")
            self._enforce_bounds()
            self._started = True
        stamp = datetime.fromtimestamp(wall, UTC).strftime("%Y%m%dT%H%M%S.%fZ")
        self._path = os.path.join(self.folder, f"{stamp}-{self._process}{OPEN_SUFFIX}")
        self._fd = os.open(self._path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600)
        self._size = os.fstat(self._fd).st_size
        self._opened_at = wall
        if self._size == 0:
            self._pods.reset()
            self._summaries.reset()

    def _drop_segment(self) -> None:
        if self._fd is not None:
            if self._writer is not None:
                self._writer.flush()  # no sync may run on a closed (or reused) descriptor
            os.close(self._fd)
        self._fd = None
        self._size = 0
        self._pods.reset()
        self._summaries.reset()

    def _close_segment(self) -> None:
        path = self._path
        self._drop_segment()
        compressed = path[: -len(OPEN_SUFFIX)] + CLOSED_SUFFIX
        temporary = os.path.join(self.folder, RECORDING_TEMPORARY_PREFIX + os.path.basename(compressed))
        try:
            # Owner-only, whatever the umask (the DaemonSet sets none): a recording holds every pod's details.
            descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC,
                                 0o600)
            os.fchmod(descriptor, 0o600)
            with open(path, "rb") as source, os.fdopen(descriptor, "wb") as target:
                with gzip.GzipFile(fileobj=target, mode="wb", compresslevel=6, mtime=0) as zipped:
                    shutil.copyfileobj(source, zipped)
                target.flush()
                os.fsync(target.fileno())
            os.replace(temporary, compressed)
            os.unlink(path)  # a crash before this leaves both: readers take the compressed one
        except OSError:
            if os.path.exists(temporary):
                os.unlink(temporary)
            raise  # the plain segment stays, and is read as it is
        finally:
            self._enforce_bounds()

    def _enforce_bounds(self) -> None:
        """Delete the oldest closed segments until the rest, with room for a whole open segment, fit in
        `maxBytes`, and every segment older than `maxAge`. A segment dated in the future (written while the
        clock ran ahead) is dated now, so that it ages out `maxAge` from now."""
        now = self._clock.wall().timestamp()
        sizes: list[tuple[str, int, float]] = []
        for path in segment_paths(self.folder):
            try:
                status = os.stat(path)
                modified = status.st_mtime
                if modified > now + FUTURE_SLACK_S:
                    os.utime(path, (now, now))
                    modified = now
            except OSError:
                continue
            sizes.append((path, status.st_size, modified))
        total = sum(size for _, size, _ in sizes) + self._segment_bytes
        for path, size, modified in sizes:
            if total > self._max_bytes or now - modified > self._max_age_s:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(path)
                total -= size

    def _failed(self, exc: OSError) -> None:
        self._on_error()
        self._pods.reset()
        self._summaries.reset()
        self._layout = None
        reason = f"{exc.strerror or exc}"
        if self._failing is None:
            self._log.warning("flight recorder cannot write; the loop goes on without it", folder=self.folder,
                              error=reason)
        self._failing = reason


def _size(line: Sequence[str]) -> int:
    """The length of `line` in bytes, UTF-8-encoded (without encoding it: a line is ASCII but for strings the JSON
    encoder was told to keep, and `isascii` reads a flag)."""
    return sum(len(part) if part.isascii() else len(part.encode()) for part in line)


def _chunks(line: Sequence[str]) -> Iterator[bytes]:
    """The parts of `line` as UTF-8 bytes, in chunks of about WRITE_CHUNK_CHARS characters (a longer part is cut)."""
    if sum(map(len, line)) <= WRITE_CHUNK_CHARS:  # most lines: one chunk
        yield "".join(line).encode()
        return
    pending: list[str] = []
    count = 0
    for part in line:
        for start in range(0, len(part), WRITE_CHUNK_CHARS):
            piece = part if len(part) <= WRITE_CHUNK_CHARS else part[start:start + WRITE_CHUNK_CHARS]
            pending.append(piece)
            count += len(piece)
            if count >= WRITE_CHUNK_CHARS:
                yield "".join(pending).encode()
                pending, count = [], 0
    if pending:
        yield "".join(pending).encode()
