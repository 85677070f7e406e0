"""Write-behind (evictd.record.write_behind) and the writers that use it, against a disk that really stalls.

The stalling disk: ext4 on a loop device whose backing file lives on another loop-mounted ext4; `fsfreeze` of
that outer filesystem holds every write the loop device makes until it is thawed, while the inner filesystem's
page cache still takes writes: an fsync there waits as it waits for a disk busy with other processes'
write-back (issue #29). A hook that returns while the disk is held did not wait for it. Filling the outer
filesystem makes the inner one's write-back fail (ENOSPC from the loop device), as a failing disk does.
"""

from __future__ import annotations

import json
import os
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from builders import Mi, summary
from clocks import ManualClock
from counter import Counter
from evictd.core.engine import EngineConfig, EngineState, assess
from evictd.core.fs_layout import FsLayout
from evictd.core.kubelet_config import eviction_settings
from evictd.core.summary_parser import summary_from_dict
from evictd.core.thresholds import parse_threshold_config
from evictd.cycle.finished import Cycle
from evictd.cycle.report import CycleReport, Decided, Observed
from evictd.record.engine_state import EngineStateFile
from evictd.record.recorder import FlightRecorder
from evictd.record.recording import read_recording, segment_paths
from evictd.record.segment_files import CLOSED_SUFFIX, OPEN_SUFFIX, in_time_order, segment_lines
from evictd.record.write_behind import WriteBehind
from evictd.state_dir import ENGINE_STATE_FILE, RECORDING_FOLDER
from log_capture import LogCapture

# A hook must return within this while the disk is held (generous: the machine is shared and loaded).
RETURNS_WITHIN_S = 2.0
# How long the disk is held before the test looks: a write that waits for it waits at least this long.
HELD_S = 1.0
# After the disk is released, how long the held writes may take to finish.
FINISH_S = 30.0
CONFIG = EngineConfig(thresholds=tuple(parse_threshold_config([], {}, {"memory.available": "1Gi"},
                                                              {"memory.available": "60s"}, {})))


@dataclass
class StallableDisk:
    mountpoint: Path  # the inner filesystem, where the writers write
    outer: Path

    def hold(self) -> None:
        subprocess.run(["fsfreeze", "--freeze", str(self.outer)], check=True, capture_output=True)

    def release(self) -> None:
        subprocess.run(["fsfreeze", "--unfreeze", str(self.outer)], check=True, capture_output=True)

    def fail(self) -> None:
        """From now on the disk's blocks not written yet fail to write (the outer filesystem is full)."""
        for name, block in (("filler", "1M"), ("filler-small", "4k")):  # dd stops at ENOSPC: the last bytes too
            subprocess.run(["dd", "if=/dev/zero", f"of={self.outer / name}", f"bs={block}"], check=False,
                           capture_output=True)


def loop_mount(image: Path, mountpoint: Path, size: str) -> str:
    subprocess.run(["truncate", "-s", size, str(image)], check=True)
    subprocess.run(["mkfs.ext4", "-q", "-F", "-m", "0", str(image)], check=True, capture_output=True)
    device = subprocess.run(["losetup", "--find", "--show", str(image)], check=True, capture_output=True,
                            text=True).stdout.strip()
    mountpoint.mkdir()
    try:
        subprocess.run(["mount", "-t", "ext4", device, str(mountpoint)], check=True)
    except BaseException:
        subprocess.run(["losetup", "-d", device], capture_output=True, check=False)
        raise
    return device


def unmount(mountpoint: Path, device: str) -> None:
    """Unmount (retried: a loop device on it lets go of its backing file a moment after it is detached)."""
    for _ in range(50):
        if subprocess.run(["umount", str(mountpoint)], capture_output=True, check=False).returncode == 0:
            break
        time.sleep(0.1)
    subprocess.run(["losetup", "-d", device], capture_output=True, check=False)


@pytest.fixture
def stallable_disk(tmp_path: Path) -> Iterator[StallableDisk]:
    outer = tmp_path / "outer"
    outer_device = loop_mount(tmp_path / "outer.img", outer, "48M")
    try:
        inner = tmp_path / "inner"
        inner_device = loop_mount(outer / "inner.img", inner, "96M")  # sparse: larger than the outer
        disk = StallableDisk(inner, outer)
        try:
            yield disk
        finally:
            subprocess.run(["fsfreeze", "--unfreeze", str(outer)], capture_output=True, check=False)
            for name in ("filler", "filler-small"):
                (outer / name).unlink(missing_ok=True)
            unmount(inner, inner_device)
    finally:
        unmount(outer, outer_device)


def returns_within(call: Callable[[], None], timeout_s: float) -> tuple[bool, threading.Thread]:
    """Run `call` on a thread; return whether it returned within `timeout_s` (and the thread, to join later)."""
    thread = threading.Thread(target=call, daemon=True)
    thread.start()
    thread.join(timeout_s)
    return not thread.is_alive(), thread


def cycle(state: EngineState, clock: ManualClock, number: int, available: int) -> Cycle:
    """Run the engine one cycle at the clock's time; return the finished cycle an after-cycle hook gets."""
    new_state, assessment = assess(state, CONFIG, FsLayout(), summary_from_dict(summary(memory=available)), [],
                                   clock.now_s)
    return Cycle(number=number, report=CycleReport(now=clock.now_s, observed=Observed(summary=None),
                                                   decided=Decided(assessment)),
                 state=new_state, started_at=clock.now_s, duration_s=0.0, wall=clock.wall())


def test_a_job_waiting_for_a_key_is_replaced_by_a_newer_one_and_flush_waits_for_all() -> None:
    writer = WriteBehind(LogCapture())
    gate = threading.Event()
    ran: list[str] = []
    started = threading.Event()
    writer.submit("a", lambda: (started.set(), gate.wait(FINISH_S), ran.append("a1")))
    assert started.wait(FINISH_S)  # a1 runs, held by the gate: nothing waits
    writer.submit("a", lambda: ran.append("a2"))
    writer.submit("b", lambda: ran.append("b1"))
    writer.submit("a", lambda: ran.append("a3"))  # replaces a2, which has not started
    assert writer.pending() == 3
    assert not writer.flush(0.2), "a1 is still held"
    gate.set()
    assert writer.flush(FINISH_S)
    assert ran == ["a1", "b1", "a3"]


def test_a_job_that_raises_is_logged_and_the_next_one_runs() -> None:
    log = LogCapture()
    writer = WriteBehind(log)
    ran: list[str] = []
    writer.submit("a", lambda: [][0])
    writer.submit("b", lambda: ran.append("b"))
    assert writer.flush(FINISH_S)
    assert ran == ["b"]
    assert [line[1] for line in log.lines] == ["write-behind job failed"]


def test_the_engine_state_is_saved_off_the_loop_while_the_disk_is_held(stallable_disk: StallableDisk) -> None:
    path = stallable_disk.mountpoint / ENGINE_STATE_FILE
    clock = ManualClock(now_s=1000.0)
    writer = WriteBehind(LogCapture())
    hook = EngineStateFile(str(path), "node-1", log=LogCapture(), on_error=Counter(), clock=clock, writer=writer)
    met = cycle(EngineState(), clock, 1, available=512 * Mi)  # memory.available met: a first-observed time
    stallable_disk.hold()
    try:
        returned, thread = returns_within(lambda: hook(met), RETURNS_WITHIN_S)
        time.sleep(HELD_S)
        assert returned, "the cycle's hook waited for the held disk"
        assert writer.pending() == 1, "the write waits for the disk"
    finally:
        stallable_disk.release()
    thread.join(FINISH_S)
    hook.close()
    assert writer.pending() == 0
    restored = EngineStateFile(str(path), "node-1", log=LogCapture(), on_error=Counter(), clock=clock).restore(
        CONFIG, 60.0)
    assert restored.first_observed_at == met.state.first_observed_at != {}


def test_the_recorder_syncs_off_the_loop_while_the_disk_is_held(stallable_disk: StallableDisk) -> None:
    clock = ManualClock(now_s=1000.0)
    writer = WriteBehind(LogCapture())
    errors = Counter()
    recorder = FlightRecorder(str(stallable_disk.mountpoint), eviction_settings({}), max_bytes=64 << 20,
                              max_age_s=86400.0, dry_run=True, log=LogCapture(), on_error=errors, clock=clock,
                              writer=writer)
    state = EngineState()
    recorder(first := cycle(state, clock, 1, available=4096 * Mi))  # the segment is created before the disk is held
    assert writer.flush(FINISH_S)
    stallable_disk.hold()
    try:
        def three_cycles() -> None:
            for number in (2, 3, 4):
                clock.advance(0.01)
                recorder(cycle(first.state, clock, number, available=512 * Mi))

        returned, thread = returns_within(three_cycles, RETURNS_WITHIN_S)
        time.sleep(HELD_S)
        assert returned, "the recorder's hook waited for the held disk"
        assert 1 <= writer.pending() <= 2, "one fdatasync runs, held, and at most one waits (later ones replace it)"
    finally:
        stallable_disk.release()
    thread.join(FINISH_S)
    recorder.close(compress=False)
    assert writer.pending() == 0 and errors.count == 0
    [segment] = (stallable_disk.mountpoint / RECORDING_FOLDER).glob(f"*{OPEN_SUFFIX}")
    lines = [json.loads(line) for line in segment.read_text().splitlines()]
    assert [line["cycle"] for line in lines] == [1, 2, 3, 4]


def test_a_sync_that_fails_off_the_loop_is_counted_and_logged_at_the_next_line(stallable_disk: StallableDisk) -> None:
    clock = ManualClock(now_s=1000.0)
    writer = WriteBehind(LogCapture())
    errors = Counter()
    log = LogCapture()
    recorder = FlightRecorder(str(stallable_disk.mountpoint), eviction_settings({}), max_bytes=64 << 20,
                              max_age_s=86400.0, dry_run=True, log=log, on_error=errors, clock=clock, writer=writer)
    first = cycle(EngineState(), clock, 1, available=4096 * Mi)
    recorder(first)
    assert writer.flush(FINISH_S) and errors.count == 0
    stallable_disk.fail()
    # Each line goes to the page cache; once one reaches a block the disk cannot write, its sync fails off the
    # loop, and the next line says so.
    for number in range(2, 200):
        clock.advance(1.0)
        recorder(cycle(first.state, clock, number, available=512 * Mi))
        assert writer.flush(FINISH_S)
        if errors.count:
            break
    recorder.close(compress=False)
    assert errors.count >= 1
    assert ("warning", "flight recorder cannot write; the loop goes on without it") in [
        (level, event) for level, event, _ in log.lines]


# The recorder's segments span 1/24 of maxAge: 100 s here, so a cycle 150 s after the last one rotates.
SEGMENT_AGE_S = 100.0


def rotate(recorder: FlightRecorder, clock: ManualClock, first: Cycle) -> None:
    """Cycle 2 comes past the first segment's age (a rotation), cycle 3 a second after it."""
    for number, seconds in ((2, 1.5 * SEGMENT_AGE_S), (3, 1.0)):
        clock.advance(seconds)
        recorder(cycle(first.state, clock, number, available=512 * Mi))


@dataclass
class HeldRecorder:
    """A recorder whose write-behind thread is held by a job waiting on `gate` (as a disk that stalls holds it)."""

    recorder: FlightRecorder
    writer: WriteBehind
    clock: ManualClock
    errors: Counter
    log: LogCapture
    folder: Path
    gate: threading.Event
    first: Cycle

    def rotate(self) -> None:
        rotate(self.recorder, self.clock, self.first)

    def names(self) -> list[str]:
        return sorted(os.listdir(self.folder))


@pytest.fixture
def held_recorder(tmp_path: Path) -> Iterator[HeldRecorder]:
    clock = ManualClock(now_s=1000.0)
    writer = WriteBehind(LogCapture())
    errors, log = Counter(), LogCapture()
    recorder = FlightRecorder(str(tmp_path), eviction_settings({}), max_bytes=64 << 20,
                              max_age_s=24 * SEGMENT_AGE_S, dry_run=True, log=log, on_error=errors,
                              clock=clock, writer=writer)
    first = cycle(EngineState(), clock, 1, available=4096 * Mi)
    recorder(first)
    assert writer.flush(FINISH_S)
    gate, started = threading.Event(), threading.Event()
    writer.submit("held", lambda: (started.set(), gate.wait(FINISH_S)))
    assert started.wait(FINISH_S)
    try:
        yield HeldRecorder(recorder, writer, clock, errors, log, tmp_path / RECORDING_FOLDER, gate, first)
    finally:
        gate.set()
        recorder.close()


def test_a_segment_rotation_does_not_wait_for_the_write_behind_thread(held_recorder: HeldRecorder) -> None:
    held = held_recorder
    returned, thread = returns_within(held.rotate, RETURNS_WITHIN_S)
    assert returned, "the rotation waited for the write-behind thread"
    (old,) = held.names()
    assert old.endswith(OPEN_SUFFIX), "the old segment waits to be compressed; the next lines, to be written"
    held.gate.set()
    thread.join(FINISH_S)
    assert held.writer.flush(FINISH_S)
    compressed, new = held.names()
    assert compressed == old.removesuffix(OPEN_SUFFIX) + CLOSED_SUFFIX, "compressed once released"
    assert [json.loads(line)["cycle"] for line in (held.folder / new).read_text().splitlines()] == [2, 3], \
        "the next lines went on into the new segment"
    assert held.errors.count == 0


def test_readers_read_a_segment_still_closing_beside_the_open_one_and_after_its_close(
        held_recorder: HeldRecorder) -> None:
    held = held_recorder
    held.rotate()
    assert all(name.endswith(OPEN_SUFFIX) for name in held.names()) and len(held.names()) == 1
    records, skipped = read_recording(str(held.folder))
    assert skipped == 0 and [r.cycle for r in records] == [1], "the lines after it are not written yet"
    listed = segment_paths(str(held.folder))  # a reader lists the folder; the close finishes before it reads
    held.gate.set()
    assert held.writer.flush(FINISH_S)
    assert not os.path.exists(listed[0]), "compressed, and the plain file removed"
    problems: list[str] = []
    lines = [json.loads(raw) for path, _ in in_time_order(listed) for raw in segment_lines(path, problems.append)
             if raw is not None]
    assert problems == [] and [line["cycle"] for line in lines] == [1], "read from the compressed copy"
    records, skipped = read_recording(str(held.folder))
    assert skipped == 0 and [r.cycle for r in records] == [1, 2, 3]
    assert held.errors.count == 0


def test_a_stop_finishes_a_pending_close_and_compresses_the_open_segment(held_recorder: HeldRecorder) -> None:
    held = held_recorder
    held.rotate()
    stopped, thread = returns_within(held.recorder.close, HELD_S)
    assert not stopped, "the stop waits for the pending close"
    held.gate.set()
    thread.join(FINISH_S)
    assert not thread.is_alive()
    names = held.names()
    assert len(names) == 2 and all(name.endswith(CLOSED_SUFFIX) for name in names), \
        "as a stop leaves it: every segment compressed, no plain or temporary file"
    assert [r.cycle for r in read_recording(str(held.folder))[0]] == [1, 2, 3]
    assert held.writer.pending() == 0 and held.errors.count == 0


def test_a_close_that_fails_off_the_loop_is_reported_at_the_next_line_and_the_plain_segment_kept(
        held_recorder: HeldRecorder) -> None:
    held = held_recorder
    held.rotate()
    old = held.names()[0]
    (held.folder / ("." + old.removesuffix(OPEN_SUFFIX) + CLOSED_SUFFIX)).mkdir()  # its temporary cannot be written
    held.gate.set()
    assert held.writer.flush(FINISH_S)
    assert held.errors.count == 0 and held.log.lines == [], "nothing said in the thread"
    for number in (4, 5, 6):
        held.clock.advance(1.0)
        held.recorder(cycle(held.first.state, held.clock, number, available=512 * Mi))  # never raises
        assert held.writer.flush(FINISH_S), "the lines are written by the write-behind thread"
    assert held.errors.count == 1
    assert [(level, event) for level, event, _ in held.log.lines] == [
        ("warning", "flight recorder cannot write; the loop goes on without it"),
        ("info", "flight recorder writing again")], "said again once a line after it is written (5, seen at 6)"
    assert old in held.names(), "the plain segment stays, and is read as it is"
    records, skipped = read_recording(str(held.folder))
    assert skipped == 0 and [r.cycle for r in records] == [1, 2, 3, 5, 6], \
        "the line that reported it is lost, as a failed sync's is"


def recorder_on(disk: StallableDisk) -> tuple[ManualClock, WriteBehind, Counter, FlightRecorder, Path]:
    """A flight recorder with a write-behind, recording on `disk`: its clock, writer, error count, itself, folder."""
    clock = ManualClock(now_s=1000.0)
    writer = WriteBehind(LogCapture())
    errors = Counter()
    recorder = FlightRecorder(str(disk.mountpoint), eviction_settings({}), max_bytes=64 << 20,
                              max_age_s=24 * SEGMENT_AGE_S, dry_run=True, log=LogCapture(), on_error=errors,
                              clock=clock, writer=writer)
    return clock, writer, errors, recorder, disk.mountpoint / RECORDING_FOLDER


def test_a_line_does_not_wait_for_a_held_disk(stallable_disk: StallableDisk) -> None:
    # Appending to the segment was the loop's last file write: under a writer's load it waited in the kernel for
    # the disk (traced in D state: a page under writeback, ext4's block allocation; up to 237 ms between a
    # crossing and its wake-up). The recording's own filesystem frozen holds any write to it as long as it is.
    clock, writer, errors, recorder, folder = recorder_on(stallable_disk)
    try:
        first = cycle(EngineState(), clock, 1, available=4096 * Mi)
        recorder(first)
        assert writer.flush(FINISH_S)
        freeze = ["fsfreeze", "--freeze", str(stallable_disk.mountpoint)]
        subprocess.run(freeze, check=True, capture_output=True)
        try:
            clock.advance(1.0)
            returned, thread = returns_within(
                lambda: recorder(cycle(first.state, clock, 2, available=512 * Mi)), RETURNS_WITHIN_S)
            time.sleep(HELD_S)
            on_disk = [r.cycle for r in read_recording(str(folder))[0]]
        finally:
            subprocess.run(["fsfreeze", "--unfreeze", str(stallable_disk.mountpoint)], check=True, capture_output=True)
        thread.join(FINISH_S)
        assert returned, "the line waited for the held disk"
        assert on_disk == [1], "written by the write-behind thread, once the disk lets it"
        assert writer.flush(FINISH_S)
        assert [r.cycle for r in read_recording(str(folder))[0]] == [1, 2] and errors.count == 0
    finally:
        recorder.close()


def test_lines_past_the_pending_bound_are_not_recorded_and_the_next_one_is_whole(
        held_recorder: HeldRecorder) -> None:
    held = held_recorder
    held.recorder._pending_limit = 1  # the thread is held: the next line is past it
    held.clock.advance(1.0)
    held.recorder(cycle(held.first.state, held.clock, 2, available=512 * Mi))  # never raises
    assert held.errors.count == 1
    assert held.log.lines[0][2]["error"] == "0 bytes of earlier lines not written yet"
    held.recorder._pending_limit = 16 << 20
    held.clock.advance(1.0)
    held.recorder(cycle(held.first.state, held.clock, 3, available=512 * Mi))
    held.gate.set()
    assert held.writer.flush(FINISH_S)
    records, skipped = read_recording(str(held.folder))
    assert skipped == 0 and [r.cycle for r in records] == [1, 3]
    assert records[-1].pods == records[0].pods, "cycle 3 whole: its pod list is not changes since cycle 2"


def test_a_rotation_returns_while_the_disk_is_held_and_the_old_segment_is_compressed_after(
        stallable_disk: StallableDisk) -> None:
    clock, writer, errors, recorder, folder = recorder_on(stallable_disk)
    try:
        first = cycle(EngineState(), clock, 1, available=4096 * Mi)
        recorder(first)
        assert writer.flush(FINISH_S)
        stallable_disk.hold()
        try:
            returned, thread = returns_within(lambda: rotate(recorder, clock, first), RETURNS_WITHIN_S)
            time.sleep(HELD_S)
            pending = writer.pending()
        finally:
            stallable_disk.release()
        thread.join(FINISH_S)
        assert writer.flush(FINISH_S)
        assert returned, "the rotation waited for the held disk"
        assert pending >= 1, "the old segment's close waited for the disk"
        old, new = sorted(os.listdir(folder))
        assert old.endswith(CLOSED_SUFFIX) and new.endswith(OPEN_SUFFIX)
        assert [r.cycle for r in read_recording(str(folder))[0]] == [1, 2, 3] and errors.count == 0
    finally:
        recorder.close()  # nothing left open on the disk before it is unmounted, whatever the outcome
