"""The flight recorder: an after-cycle hook that keeps what every cycle saw and decided, in stateDir.

Each cycle is one line (`evictd.record.recording`) appended to the open segment in chunks (never built whole as
bytes) and fdatasynced: a crash loses at most the line being written (a cut line is skipped on reading). A segment is
closed (gzipped, fsynced, renamed) before it holds more than its first line and 1/16 of `maxBytes`, or spans 1/24 of
`maxAge`; then the oldest closed segments go until the recording fits `maxBytes` and `maxAge`. With a `WriteBehind`
the loop only hands lines and closes over; the thread writes, syncs, compresses and enforces the bounds in order;
pending lines are bounded (past it a cycle is not recorded, and the next line is whole); a stop waits at most
STOP_FLUSH_S; a failed sync or close is raised at the next line. The recorder never stops the loop: a full or
unwritable stateDir is logged once, counted (`evictd_errors_total{source="recorder"}`), its partial line cut off,
and retried next cycle whole. It records in dry-run too. A run's first line carries its start engine state. Lines
stay cheap: Summary and pods as changes, ranking keys from the report, repeated text kept.
"""

from __future__ import annotations

import contextlib
import errno
import os
import threading
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta

from evictd.clock import SYSTEM_CLOCK, Clock
from evictd.core.engine import EngineState
from evictd.core.fs_layout import FsLayout
from evictd.core.kubelet_config import EvictionSettings
from evictd.core.pods import Pod
from evictd.core.saved_state import state_document
from evictd.cycle.finished import Cycle
from evictd.cycle.ids import run_id
from evictd.cycle.manager import FRESH_STATE
from evictd.kube.atomic_file import remove_temporaries
from evictd.log import Log
from evictd.record.decision import RankingEncoder, decision_of
from evictd.record.documents import kubelet_config_document
from evictd.record.line_json import ABSENT, dumps
from evictd.record.model import Encoded, Line, PodChanges, encode_line_parts
from evictd.record.recording import PodListEncoder, segment_paths
from evictd.record.segment_files import OPEN_SUFFIX, compress_segment, next_sequence
from evictd.record.summary_json import SummaryChangesEncoder
from evictd.record.write_behind import WriteBehind
from evictd.state_dir import RECORDING_TEMPORARY_PREFIX, StateDir

# What one segment holds at most, as a share of the recorder's bounds.
SEGMENT_SHARE_OF_BYTES = 16
SEGMENT_SHARE_OF_AGE = 24
MIN_SEGMENT_BYTES = 64 << 10
# A segment dated more than this after the clock's now was written while the clock ran ahead.
FUTURE_SLACK_S = 60.0
# A line is written in chunks of at most this many characters, small enough to fit in what its released parts free.
WRITE_CHUNK_CHARS = 1 << 16
# At stop, how long the segments' closes handed over may still take (the shutdown deadline bounds the whole stop).
STOP_FLUSH_S = 5.0


# With a writer: lines handed over and not yet written may hold this much (a stalled disk costs lines, not time).
MIN_PENDING_BYTES = 16 << 20


@dataclass(slots=True)
class _Segment:
    """A segment file being written, or handed over to be closed; with a writer only its thread touches the file."""

    path: str
    fd: int | None  # None once closed: a sync handed over before its close finds nothing left to sync
    # Lines handed over (as chunks) and not yet written, their bytes, and the size written whole.
    pending: list[tuple[bytes, ...]] = field(default_factory=list)
    pending_bytes: int = 0
    written: int = 0
    opened: bool = False  # the writer's thread opened the file (it opens it at the first line)
    # A write failed: later lines are dropped (they are changes against a line the file lacks); a new segment follows.
    broken: bool = False
    lock: threading.Lock = field(default_factory=threading.Lock)


class FlightRecorder:
    """Appends every cycle to the recording in `<state_dir>/recording` (see the module's description)."""

    def __init__(self, state_dir: str, settings: EvictionSettings, *, max_bytes: int, max_age_s: float,
                 dry_run: bool | Callable[[], bool], log: Log, on_error: Callable[[], None] = lambda: None,
                 clock: Clock = SYSTEM_CLOCK, run: str | None = None, start_state: EngineState = FRESH_STATE,
                 node_name: str = "", process: str | None = None, writer: WriteBehind | None = None) -> None:
        self.folder = StateDir(state_dir).recording
        self._config = kubelet_config_document(settings)
        self._max_bytes = max_bytes
        self._max_age_s = max_age_s
        self._segment_bytes = max(MIN_SEGMENT_BYTES, max_bytes // SEGMENT_SHARE_OF_BYTES)
        self._segment_age_s = max_age_s / SEGMENT_SHARE_OF_AGE
        self._dry_run = dry_run
        self._recorded_dry_run: bool | None = None  # the dryRun last written (a line carries it again on a change)
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
        self._segment: _Segment | None = None
        self._size = 0
        self._first_line_bytes = 0  # the open segment's first line: it and a share of changes make a segment
        self._opened_at = 0.0
        self._failing: str | None = None
        self._started = False
        self._sequence = 1  # the run's sequence (`Line.sequence`), known at its first segment
        # The engine state the run started from, written on the run's first line (None once written or tried).
        self._start_state: EngineState | None = start_state
        self._node_name = node_name
        self._writer = writer  # None: fdatasync and closes in the caller's thread
        self._off_loop_errors: deque[OSError] = deque()  # what jobs off the loop raised, for the next line
        self._pending_limit = max(MIN_PENDING_BYTES, 2 * self._segment_bytes)
        # Lines known written, and how many were at the last failure told ("writing again" once one is written).
        self._lines_written = 0
        self._lines_written_at_failure = 0
        # The plain segments open or handed over to be closed: never deleted, nor opened again, until closed.
        self._live: set[str] = set()
        self._live_lock = threading.Lock()

    def __call__(self, cycle: Cycle) -> None:
        """Record one finished cycle; a failure is logged and counted, never raised."""
        wall = cycle.wall.timestamp()
        try:
            if self._segment is not None and wall - self._opened_at >= self._segment_age_s:
                self._close_segment()
            if self._segment is None:
                self._open_segment(wall)
            line, pods = self._line(cycle, wall)
            if self._size and self._size - self._first_line_bytes + _size(line) > self._segment_bytes:
                del line  # (before the whole line is built)
                # A segment holds its whole first line and its share of changes: the recording keeps hours.
                self._close_segment()
                self._open_segment(wall)
                line, pods = self._line(cycle, wall)
            self._append(line)
        except OSError as exc:
            self._failed(exc)
            return
        finally:
            self._start_state = None  # the run's first cycle only: a later one did not start from it
        self._pods.commit(pods)
        if cycle.report.observed.summary is not None:
            self._summaries.commit()
        self._layout = cycle.state.layout
        if self._failing is not None and self._lines_written > self._lines_written_at_failure:
            self._log.info("flight recorder writing again", folder=self.folder)
            self._failing = None

    def close(self, *, compress: bool = True) -> None:
        """Close the open segment, compressed (without `compress`, left as plain lines, as readers read an open
        segment), and wait (at most STOP_FLUSH_S) for the closes handed over; errors are logged and counted."""
        try:
            self._close_segment(compress=compress)
            if self._writer is not None and not self._writer.flush(STOP_FLUSH_S):
                self._log.warning("flight recorder: a segment still closing at stop, left as a crash leaves it",
                                  folder=self.folder)
            self._raise_off_loop_error()
        except OSError as exc:
            self._failed(exc)

    # --- one line --------------------------------------------------------------------------------------

    def _line(self, cycle: Cycle, wall: float) -> tuple[list[str], Sequence[Pod]]:
        """The cycle's line as the text parts `_append` writes, and the pods it holds."""
        report = cycle.report
        observed = report.observed
        layout = cycle.state.layout
        first = self._size == 0
        dry_run = self._dry_run() if callable(self._dry_run) else self._dry_run
        pods = self._pods.encode(observed.pods)
        # The Summaries, most of a line: kept as text by their encoder, written as changes since the last line.
        field, summary = (self._summaries.encode(observed.summary) if observed.summary is not None
                          else ("summary", "null"))
        after, after_wait = report.acted.after_reclaim, report.acted.after_disk_wait
        start = self._start_state
        # The ranking (every pod, under pressure) likewise, as text kept per pod.
        decision = replace(decision_of(report, ranking=False), ranking=self._ranking.encode(report))
        line = Line(
            run=self._run, cycle=cycle.number, wall=wall, now=report.now, decision=decision,
            sequence=self._sequence if first else None,
            dry_run=dry_run if first or dry_run != self._recorded_dry_run else None,
            config=self._config if first else None,
            engine_state=ABSENT if start is None else None if start == FRESH_STATE else state_document(
                start, node_name=self._node_name, now=report.now, now_wall=wall),
            layout=layout if layout is not None and (first or layout != self._layout) else None,
            pods=None if pods is None or isinstance(pods, PodChanges) else pods,
            pod_changes=pods if isinstance(pods, PodChanges) else None,
            summary=Encoded(summary) if field == "summary" else None,
            summary_changes=Encoded(summary) if field == "summaryChanges" else None,
            after_reclaim=None if after is None else Encoded(self._summaries.whole(after)),
            after_disk_wait=None if after_wait is None else Encoded(self._summaries.whole(after_wait)))
        self._recorded_dry_run = dry_run
        return encode_line_parts(line), observed.pods

    def _append(self, line: list[str]) -> None:
        """Write `line`'s parts at the segment's end in chunks of at most WRITE_CHUNK_CHARS (emptying `line` as it
        goes) and sync; on failure cut off what was written. With a writer, hand the chunks over (`_write_out`); a
        failure there is raised at a later line."""
        segment = self._segment
        assert segment is not None
        if self._writer is not None:
            chunks = tuple(_chunks(line))
            size = sum(map(len, chunks))
            with segment.lock:
                failed = bool(self._off_loop_errors)
                if not failed:
                    if segment.pending_bytes + size > self._pending_limit:
                        raise OSError(errno.ENOBUFS, f"{segment.pending_bytes} bytes of earlier lines not written yet")
                    segment.pending.append(chunks)
                    segment.pending_bytes += size
            if failed:
                # A failure may have cut this segment's lines short: the next line starts a new segment.
                if segment.written:
                    self._close_segment(compress=False)
                else:
                    self._size = 0
                    segment.broken = False
                self._raise_off_loop_error()
            self._writer.submit(self.folder, lambda: self._write_out(segment))
            if not self._size:
                self._first_line_bytes = size
            self._size += size
            return
        self._raise_off_loop_error()
        assert segment.fd is not None
        written = 0
        fd = segment.fd
        try:
            for chunk in _chunks(line):
                end = written + len(chunk)
                while written < end:
                    written += os.write(fd, chunk[len(chunk) - (end - written):])
            os.fdatasync(fd)
            self._lines_written += 1
        except OSError:
            if written:
                try:
                    os.ftruncate(fd, self._size)
                except OSError:
                    # The next line starts a new segment: the cut one reads up to here.
                    self._close_segment(compress=False)
            raise
        if not self._size:
            self._first_line_bytes = written
        self._size += written

    def _write_out(self, segment: _Segment) -> None:
        """Write and sync the lines handed over for `segment` (the writer's thread); a failure cuts off the partial
        line, drops the lines after it and is kept for the loop's next line (`_append`)."""
        with segment.lock:
            lines, segment.pending, segment.pending_bytes = segment.pending, [], 0
            if segment.broken or (segment.opened and segment.fd is None):
                return  # after a failure, or closed
        written = 0
        try:
            if not segment.opened:
                segment.fd = os.open(segment.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600)
                segment.opened = True
                segment.written = os.fstat(segment.fd).st_size
            assert segment.fd is not None
            for line in lines:
                written = 0
                for chunk in line:
                    end = written + len(chunk)
                    while written < end:
                        written += os.write(segment.fd, chunk[len(chunk) - (end - written):])
                segment.written += written
            if lines:
                os.fdatasync(segment.fd)
                self._lines_written += len(lines)
        except OSError as exc:
            if written and segment.fd is not None:
                with contextlib.suppress(OSError):  # what is left of a cut line is skipped on reading
                    os.ftruncate(segment.fd, segment.written)
            with segment.lock:
                segment.broken = True
                segment.pending, segment.pending_bytes = [], 0
                self._off_loop_errors.append(exc)

    # --- off the loop ----------------------------------------------------------------------------------

    def _off_loop(self, key: str, job: Callable[[], None]) -> None:
        """Run `job` on the write-behind thread as `key` (without one: now); its OSError is raised at the next line."""
        if self._writer is None:
            job()
            return

        def reported() -> None:
            try:
                job()
            except OSError as exc:
                self._off_loop_errors.append(exc)

        self._writer.submit(key, reported)

    def _raise_off_loop_error(self) -> None:
        """Raise the first error of the jobs off the loop since the last line, counting the others."""
        errors = self._off_loop_errors
        if not errors:
            return
        first = errors.popleft()
        while errors:
            errors.popleft()
            self._on_error()
        raise first

    # --- segments ----------------------------------------------------------------------------------------

    def _open_segment(self, wall: float) -> None:
        os.makedirs(self.folder, exist_ok=True)
        if not self._started:  # what earlier runs left may have aged out meanwhile, or was cut by a crash
            # This run's place after every run in the folder, read before the tidy may delete any.
            self._sequence = next_sequence(segment_paths(self.folder))
            self._off_loop(f"tidy {self.folder}", self._tidy)
            self._started = True
        opened = datetime.fromtimestamp(wall, UTC)
        with self._live_lock:
            while (path := self._segment_path(opened)) in self._live:  # the clock stepped back onto one closing
                opened += timedelta(microseconds=1)
            self._live.add(path)
        if self._writer is not None:
            self._segment = _Segment(path, None)  # opened by the writer's thread, at its first line
            self._size = 0  # a name not used before (`_live`, the microseconds and the process in it)
        else:
            try:
                fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600)
            except OSError:
                with self._live_lock:
                    self._live.discard(path)
                raise
            self._segment = _Segment(path, fd, opened=True)
            self._size = os.fstat(fd).st_size
        self._opened_at = wall
        self._first_line_bytes = 0
        if self._size == 0:
            self._pods.reset()
            self._summaries.reset()

    def _segment_path(self, opened: datetime) -> str:
        return os.path.join(self.folder, f"{opened:%Y%m%dT%H%M%S.%fZ}-{self._process}{OPEN_SUFFIX}")

    def _close_segment(self, *, compress: bool = True) -> None:
        """Hand the open segment over to be closed (and compressed), then the bounds enforced; without a writer
        raises what that raises (with one: at the next line)."""
        segment = self._segment
        self._segment = None
        self._size = 0
        self._pods.reset()
        self._summaries.reset()
        if segment is not None:
            self._off_loop(f"close {segment.path}", lambda: self._finish(segment, compress=compress))

    def _tidy(self) -> None:
        remove_temporaries(self.folder, RECORDING_TEMPORARY_PREFIX, self._log, "recording")
        self._enforce_bounds()

    def _finish(self, segment: _Segment, *, compress: bool) -> None:
        """Sync and close `segment`'s file, compress it with `compress`, then enforce the bounds (off the loop)."""
        if self._writer is not None:
            self._write_out(segment)  # lines handed over after the last write-out ran
        with segment.lock:
            fd, segment.fd, opened, segment.opened = segment.fd, None, segment.opened, True
        compress = compress and opened  # a segment whose first line was never written has no file
        try:
            if fd is not None:
                try:
                    os.fdatasync(fd)  # a sync handed over before and replaced by the next segment's did not run
                finally:
                    os.close(fd)
            if compress:
                compress_segment(self.folder, segment.path)
        finally:
            with self._live_lock:
                self._live.discard(segment.path)
            if compress:
                self._enforce_bounds()

    def _enforce_bounds(self) -> None:
        """Delete the oldest closed segments until the rest, with room for a whole open segment, fit `maxBytes`, and
        every segment older than `maxAge` (one dated in the future is dated now). Open or closing segments stay."""
        now = self._clock.wall().timestamp()
        with self._live_lock:
            live = set(self._live)
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
        total = sum(size for _, size, _ in sizes) + self._segment_bytes + self._first_line_bytes
        for path, size, modified in sizes:
            if path not in live and (total > self._max_bytes or now - modified > self._max_age_s):
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(path)
                total -= size

    def _failed(self, exc: OSError) -> None:
        self._on_error()
        self._pods.reset()
        self._summaries.reset()
        self._layout = None
        reason = f"{exc.strerror or exc}"
        self._lines_written_at_failure = self._lines_written
        if self._failing is None:
            self._log.warning("flight recorder cannot write; the loop goes on without it", folder=self.folder,
                              error=reason)
        self._failing = reason


def _size(line: Sequence[str]) -> int:
    """The length of `line` in UTF-8 bytes, without encoding it (ASCII but for the strings kept raw)."""
    return sum(len(part) if part.isascii() else len(part.encode()) for part in line)


def _chunks(line: list[str]) -> Iterator[bytes]:
    """The parts of `line` as UTF-8 bytes in chunks of about WRITE_CHUNK_CHARS (a longer part is cut), each part
    released from `line` once chunked, so a line is in memory about once."""
    if sum(map(len, line)) <= WRITE_CHUNK_CHARS:  # most lines: one chunk
        yield "".join(line).encode()
        return
    pending: list[str] = []
    count = 0
    for index, part in enumerate(line):
        line[index] = ""
        for start in range(0, len(part), WRITE_CHUNK_CHARS):
            piece = part if len(part) <= WRITE_CHUNK_CHARS else part[start:start + WRITE_CHUNK_CHARS]
            pending.append(piece)
            count += len(piece)
            if count >= WRITE_CHUNK_CHARS:
                yield "".join(pending).encode()
                pending, count = [], 0
    if pending:
        yield "".join(pending).encode()
