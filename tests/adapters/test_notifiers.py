"""The memory-notification adapter against the real kernel: cgroup v1 memcg thresholds, PSI triggers, the Waiter.

Everything here uses real kernel facilities (REAL_COMPONENTS.md): memory cgroups created under
/sys/fs/cgroup/memory, a cgroup v2 group under /sys/fs/cgroup/unified (for a per-group memory.pressure),
real child processes that allocate anonymous memory or thrash the page cache, real signals. When a
facility is missing the test fails; nothing is skipped. Children are killed and cgroups removed in
finalizers, whatever the outcome.

Measured figures (wake-up latencies, time for PSI to fire) are printed: run with ``-s`` to see them.
"""

from __future__ import annotations

import contextlib
import gc
import os
import select
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType, MappingProxyType

import pytest

from evictd.adapters.memcg_set import MemcgNotifierSet
from evictd.adapters.notifiers import MemcgThresholdNotifier, Notifier, PsiNotifier, Waiter
from evictd.adapters.procfs import has_cap_sys_resource
from evictd.adapters.psi_history import PressureHistory
from evictd.adapters.sensors import Sensors
from evictd.core.errors import ConfigError, SampleError
from evictd.core.memcg import STATS_CATCH_UP_S, MemoryFigures, Watch, memcg_threshold_bytes
from evictd.core.quantity import Quantity
from evictd.core.signals import Signal, StallKind
from evictd.core.summary import ContainerStats, MemoryStats, NodeStats, Summary
from evictd.core.thresholds import Threshold, ThresholdValue
from evictd.core.wake import arming
from polling import wait_until
from real_cgroups import ScriptedChild, memory_stall, temporary_cgroup

MI = 1024**2
MEMCG_ROOT = Path("/sys/fs/cgroup/memory")
UNIFIED_ROOT = Path("/sys/fs/cgroup/unified")
SYSTEM_PRESSURE = "/proc/pressure/memory"

# The threshold sits this far above the test cgroup's usage, and the child allocates this much: the
# crossing then happens in the middle of the allocation, well after registration.
HEADROOM_BYTES = 4 * MI
GROW_BYTES = 12 * MI
CROSSING_ROUNDS = 5
# Generous bound on wake-up latency (measured well under 1 ms on an idle machine): it must only tell an
# event-driven wake-up from polling, and survive a busy CI machine.
MAX_WAKE_LATENCY_S = 0.25
# A wait that must be cut short is given this long, so a missing wake-up shows as a clear failure.
LONG_WAIT_S = 5.0
CHILD_REPLY_TIMEOUT_S = 30.0

# Page-cache thrashing (real_cgroups.memory_stall) produces real memory stall: measured ~0.6-0.9 s of "some"
# stall per second.
PSI_STALL_US = 150_000
PSI_WINDOW_US = 2_000_000
PSI_FIRE_TIMEOUT_S = 20.0
# How long an idle PSI wait lasts: longer than one 2 s window, so a trigger would have had its chance.
PSI_IDLE_WAIT_S = 2.5

ALLOCATOR = r"""
import mmap, os, sys, time
with open(sys.argv[1], "w") as procs:
    procs.write(str(os.getpid()))

def read_int(path):
    with open(path, "rb", buffering=0) as f:
        return int(f.read())

PAGE = mmap.PAGESIZE
CHECK_EVERY_PAGES = 16
regions = []
print("ready", flush=True)
for line in sys.stdin:
    words = line.split()
    if words[0] == "grow":
        watch, level, size = words[1], int(words[2]), int(words[3])
        # Private: Python's default for anonymous maps is MAP_SHARED (shmem), which MADV_DONTNEED cannot free.
        region = mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
        # Small pages only: a transparent huge page would be charged 2 MiB at once, and one freed in
        # part would go back only when the kernel splits it later.
        region.madvise(mmap.MADV_NOHUGEPAGE)
        crossed = -1.0
        for page in range(size // PAGE):
            region[page * PAGE] = 1
            if crossed < 0 and page % CHECK_EVERY_PAGES == CHECK_EVERY_PAGES - 1 and read_int(watch) >= level:
                crossed = time.monotonic()
        regions.append(region)
        print("grown", crossed, time.monotonic(), flush=True)
    elif words[0] == "free":
        # Give pages back 16 at a time (MADV_DONTNEED uncharges them) to time the downward crossing too.
        watch, level = words[1], int(words[2])
        crossed = -1.0
        for region in regions:
            for start in range(0, len(region), CHECK_EVERY_PAGES * PAGE):
                region.madvise(mmap.MADV_DONTNEED, start, min(CHECK_EVERY_PAGES * PAGE, len(region) - start))
                if crossed < 0 and read_int(watch) < level:
                    crossed = time.monotonic()
            region.close()
        regions.clear()
        print("freed", crossed, time.monotonic(), flush=True)
"""

# --------------------------------------------------------------------------------------------------
# Fixtures and helpers


def figures(notifiers: MemcgNotifierSet, summary: Summary) -> Mapping[Threshold, MemoryFigures | SampleError]:
    """What a cycle that read `summary` hands the set (`evictd.core.wake.Arming.memcg`)."""
    memcg = arming(0.0, notifiers.thresholds, summary, {}).memcg
    assert memcg is not None
    return memcg


@pytest.fixture
def memcg_dir() -> Iterator[Path]:
    """A fresh v1 memory cgroup /sys/fs/cgroup/memory/evictd-test-<random>, removed afterwards."""
    with temporary_cgroup(MEMCG_ROOT) as path:
        yield path


@pytest.fixture
def unified_dir() -> Iterator[Path]:
    """A fresh cgroup v2 group /sys/fs/cgroup/unified/evictd-test-<random> (it has memory.pressure)."""
    with temporary_cgroup(UNIFIED_ROOT) as path:
        yield path


class Child:
    """A Python child process speaking a line protocol on stdin/stdout, read with a timeout."""

    def __init__(self, script: str, *args: str) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-c", script, *args], stdin=subprocess.PIPE, stdout=subprocess.PIPE, bufsize=0
        )
        self._buffer = b""

    def send(self, line: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(line.encode() + b"\n")

    def read(self, expected: str) -> list[str]:
        """Return the words after `expected` on the child's next line; fail if it does not come in time."""
        assert self.proc.stdout is not None
        deadline = time.monotonic() + CHILD_REPLY_TIMEOUT_S
        while b"\n" not in self._buffer:
            remaining = deadline - time.monotonic()
            ready, _, _ = select.select([self.proc.stdout], [], [], max(0.0, remaining))
            if not ready:
                pytest.fail(f"child sent no {expected!r} line within {CHILD_REPLY_TIMEOUT_S} s")
            chunk = os.read(self.proc.stdout.fileno(), 4096)
            if not chunk:
                pytest.fail(f"child exited ({self.proc.wait()}) before sending {expected!r}")
            self._buffer += chunk
        line, self._buffer = self._buffer.split(b"\n", 1)
        words = line.decode().split()
        assert words[0] == expected, f"child said {line!r}, expected {expected!r}"
        return words[1:]

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        for stream in (self.proc.stdin, self.proc.stdout):
            if stream is not None:
                stream.close()


@pytest.fixture
def spawn() -> Iterator[Callable[..., Child]]:
    """Start children with `spawn(script, *args)`; all are killed and reaped afterwards."""
    children: list[Child] = []

    def start(script: str, *args: str) -> Child:
        child = Child(script, *args)
        children.append(child)
        return child

    try:
        yield start
    finally:
        for child in children:
            child.kill()


@pytest.fixture
def waiter() -> Iterator[Waiter]:
    with contextlib.closing(Waiter(time.monotonic)) as instance:
        yield instance


def read_int(path: Path) -> int:
    return int(path.read_text())


def notifier_fd_count(*roots: Path) -> int:
    """Count this process's open descriptors of the kinds notifiers open: eventfds, and files under the cgroup
    and pressure trees or under `roots` (fixture trees). Other descriptors are left out on purpose: earlier
    tests' servers, clients and subprocess pipes close theirs on their own time, which a plain count of every
    descriptor saw as a leak or a double close (fresh-clone CI runs). Garbage is collected first so objects
    of earlier tests waiting for the collector do not close notifier descriptors in the middle of a count."""
    gc.collect()
    prefixes = ("/sys/fs/cgroup/", "/proc/pressure/", *(f"{root}/" for root in roots))
    count = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except FileNotFoundError:
            continue  # the descriptor listdir itself used, or one closed meanwhile
        count += target == "anon_inode:[eventfd]" or target.startswith(prefixes)
    return count


def some_stall_total_us(path: str) -> int:
    """Return the cumulative "some" stall time of a pressure file, in microseconds."""
    with open(path) as pressure:
        first = pressure.readline()
    return int(first.split("total=")[1])


def wait_for_descriptions(waiter: Waiter, notifiers: Sequence[Notifier], wanted: set[str],
                          timeout_s: float) -> tuple[set[str], set[str], float]:
    """Wait on `notifiers` until every description in `wanted` fired or `timeout_s` passed.

    Returns (the causes seen, the descriptions seen, seconds until the last wanted one fired).
    """
    start = time.monotonic()
    deadline = start + timeout_s
    causes: set[str] = set()
    seen: list[str] = []
    waiter.set_notifiers([Recorded(notifier, seen) for notifier in notifiers])
    try:
        while not wanted <= set(seen) and time.monotonic() < deadline:
            causes.update(waiter.wait(deadline - time.monotonic()))
    finally:
        waiter.set_notifiers([])
    return causes, set(seen), time.monotonic() - start


class Recorded:
    """A notifier wrapped to record its description each time it fired (the Waiter consumes it exactly then).

    Closing the wrapper leaves the notifier open: its owner closes it (the Waiter closes what it stops using).
    """

    def __init__(self, inner: Notifier, fired: list[str]) -> None:
        self.inner = inner
        self.fired = fired
        self.poll_events = inner.poll_events

    @property
    def description(self) -> str:
        return self.inner.description

    @property
    def cause(self) -> str:  # a memcg notifier set says, once consumed, which kind of its notifiers fired
        return self.inner.cause

    def fileno(self) -> int:
        return self.inner.fileno()

    def consume(self) -> None:
        self.inner.consume()
        # A memcg notifier set names, once consumed, every threshold that fired.
        self.fired.extend(self.inner.description.split(", "))

    def close(self) -> None:
        pass


def memory_threshold(text: str, signal_: Signal = Signal.MEMORY_AVAILABLE) -> Threshold:
    return Threshold(signal=signal_, value=ThresholdValue(quantity=Quantity.parse(text)))


def summary_with(node: MemoryStats, pods: MemoryStats | None) -> Summary:
    containers = {"pods": ContainerStats(name="pods", memory=pods)} if pods is not None else {}
    return Summary(node=NodeStats(memory=node, system_containers=MappingProxyType(containers)))


def stats_for_level(usage: int, headroom: int, threshold_bytes: int) -> MemoryStats:
    """Return readings whose memcg level is `usage + headroom` (working set = usage, no inactive file)."""
    return MemoryStats(available_bytes=headroom + threshold_bytes, working_set_bytes=usage, usage_bytes=usage)


def is_closed(notifier: Notifier) -> bool:
    """A notifier is closed once its descriptor is given up: `fileno` then raises ValueError, as a closed file's."""
    try:
        notifier.fileno()
    except ValueError:
        return True
    return False


def wait_rearmed(notifiers: MemcgNotifierSet) -> None:
    """Wait until the set's re-arming thread did what it was asked."""
    deadline = time.monotonic() + LONG_WAIT_S
    while notifiers.rearming:
        assert time.monotonic() < deadline, "the re-arming thread did not finish"
        time.sleep(0.005)


class PipeNotifier:
    """A test double Notifier backed by a pipe: `fire()` makes it ready, `hang_up()` closes the write end."""

    cause = "fake"
    poll_events = select.POLLIN

    def __init__(self, description: str = "fake notifier") -> None:
        self.description = description
        self._read_fd, self._write_fd = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        self.consumed = 0
        self.closed = False

    def fire(self) -> None:
        os.write(self._write_fd, b"x")

    def hang_up(self) -> None:
        os.close(self._write_fd)
        self._write_fd = -1

    def fileno(self) -> int:
        return self._read_fd

    def consume(self) -> None:
        self.consumed += len(os.read(self._read_fd, 4096))

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            for fd in (self._read_fd, self._write_fd):
                if fd >= 0:
                    os.close(fd)


# --------------------------------------------------------------------------------------------------
# cgroup v1 memory thresholds


def test_memcg_threshold_fires_on_upward_and_downward_crossings(
    memcg_dir: Path, spawn: Callable[..., Child], waiter: Waiter, record_property: Callable[[str, object], None]
) -> None:
    usage_file = memcg_dir / "memory.usage_in_bytes"
    child = spawn(ALLOCATOR, str(memcg_dir / "cgroup.procs"))
    child.read("ready")
    level = read_int(usage_file) + HEADROOM_BYTES
    notifier = MemcgThresholdNotifier(str(memcg_dir), level, "test memory threshold")
    waiter.set_notifiers([notifier])
    assert waiter.wait(0) == [], "registering below the level must not fire by itself"

    up: list[float] = []
    down: list[float] = []
    for _ in range(CROSSING_ROUNDS):
        sent = time.monotonic()
        child.send(f"grow {usage_file} {level} {GROW_BYTES}")
        causes = waiter.wait(LONG_WAIT_S)
        woke = time.monotonic()
        crossed, _done = (float(word) for word in child.read("grown"))
        assert causes == ["memcg"]
        assert crossed > 0, "the child never saw usage reach the level"
        assert woke - sent < LONG_WAIT_S / 2
        assert read_int(usage_file) >= level
        up.append(woke - crossed)

        child.send(f"free {usage_file} {level}")
        causes = waiter.wait(LONG_WAIT_S)
        woke = time.monotonic()
        crossed, _done = (float(word) for word in child.read("freed"))
        assert causes == ["memcg"], "the downward crossing must fire too"
        assert crossed > 0, "the child never saw usage drop below the level"
        assert read_int(usage_file) < level
        down.append(woke - crossed)

        assert waiter.wait(0) == [], "each crossing fires once and is consumed"

    # The child notes a crossing after each 16 pages, while the kernel checks about every 128 pages
    # charged or uncharged: either side can come first, so a latency may be slightly negative.
    for direction, latencies in (("up", up), ("down", down)):
        print(
            f"memcg wake-up latency {direction} (ms): median {statistics.median(latencies) * 1000:.3f}, "
            f"max {max(latencies) * 1000:.3f}, all {[round(x * 1000, 3) for x in latencies]}"
        )
        record_property(f"memcg_latency_{direction}_ms", [round(x * 1000, 3) for x in latencies])
        assert max(latencies) < MAX_WAKE_LATENCY_S


def test_memcg_threshold_on_the_root_memory_cgroup(
    memcg_dir: Path, spawn: Callable[..., Child], waiter: Waiter
) -> None:
    # memory.available's notifier watches the hierarchy root; a child's charges count there too. Other processes
    # move the root's usage meanwhile: one that gives back more than the child takes (a parallel test deleting a
    # file's page cache) keeps the root under the level, as the child, which watches the root's usage, then says
    # (`crossed` -1); that try proves nothing and another is made.
    root_usage = MEMCG_ROOT / "memory.usage_in_bytes"
    child = spawn(ALLOCATOR, str(memcg_dir / "cgroup.procs"))
    child.read("ready")
    tries = []
    for _ in range(3):
        level = read_int(root_usage) + 64 * MI
        waiter.set_notifiers([MemcgThresholdNotifier(str(MEMCG_ROOT), level, "hard memory eviction threshold")])
        child.send(f"grow {root_usage} {level} {128 * MI}")
        causes = waiter.wait(LONG_WAIT_S)
        woke = time.monotonic()
        crossed, _done = (float(word) for word in child.read("grown"))
        if crossed >= 0 or causes:
            break
        tries.append(read_int(root_usage) - level)
        waiter.set_notifiers([])
        child.send(f"free {root_usage} {level}")
        child.read("freed")
    else:
        pytest.fail(f"the root's usage never reached a level 64 MiB above it in 3 tries (ended {tries} bytes from it)")
    assert causes == ["memcg"]
    print(f"root memcg wake-up latency (ms): {(woke - crossed) * 1000:.3f}")


def test_memcg_registration_failures_raise_sample_error_and_leak_nothing(
    tmp_path: Path, memcg_dir: Path, unified_dir: Path
) -> None:
    before = notifier_fd_count(tmp_path)
    with pytest.raises(SampleError) as missing:
        MemcgThresholdNotifier(str(memcg_dir / "no-such-cgroup"), MI, "x")
    assert missing.value.source == str(memcg_dir / "no-such-cgroup" / "memory.usage_in_bytes")
    assert missing.value.reason.startswith("ENOENT")

    # cgroup v2 has no usage thresholds: no memory.usage_in_bytes, so nothing to register.
    with pytest.raises(SampleError) as v2:
        MemcgThresholdNotifier(str(unified_dir), MI, "x")
    assert v2.value.source.endswith("memory.usage_in_bytes")

    # The usage file opens but there is no event_control: the first descriptor must be closed again.
    (tmp_path / "memory.usage_in_bytes").write_text("0\n")
    with pytest.raises(SampleError) as no_control:
        MemcgThresholdNotifier(str(tmp_path), MI, "x")
    assert no_control.value.source == str(tmp_path / "cgroup.event_control")

    with pytest.raises(SampleError, match="negative threshold of -1 bytes"):
        MemcgThresholdNotifier(str(memcg_dir), -1, "x")
    assert notifier_fd_count(tmp_path) == before


def test_memcg_notifier_close_is_idempotent_and_releases_the_eventfd(memcg_dir: Path) -> None:
    before = notifier_fd_count()
    notifier = MemcgThresholdNotifier(str(memcg_dir), 100 * MI, "x")
    assert notifier.cause == "memcg"
    assert notifier.poll_events == select.POLLIN
    assert notifier_fd_count() == before + 1, "only the eventfd stays open after registration"
    notifier.consume()  # nothing crossed: consuming an empty counter is harmless
    notifier.close()
    notifier.close()
    assert is_closed(notifier)
    assert notifier_fd_count() == before
    with pytest.raises(ValueError, match="closed"):
        notifier.fileno()


# --------------------------------------------------------------------------------------------------
# The kubelet's notifier set


def test_memcg_notifier_set_arms_one_notifier_per_memory_threshold_and_both_fire(
    memcg_dir: Path, spawn: Callable[..., Child], waiter: Waiter
) -> None:
    # The test cgroup plays the memory hierarchy root; its kubepods child is the pods cgroup.
    pods_dir = memcg_dir / "kubepods"
    pods_dir.mkdir()
    thresholds = [
        memory_threshold("1Mi"),
        memory_threshold("2Mi", Signal.ALLOCATABLE_MEMORY_AVAILABLE),
        Threshold(signal=Signal.NODEFS_AVAILABLE, value=ThresholdValue(quantity=Quantity.parse("1Gi"))),
    ]
    notifiers = MemcgNotifierSet(thresholds, memory_root=str(memcg_dir), pods_cgroup="/kubepods", monotonic=time.monotonic)
    assert [t.signal for t in notifiers.thresholds] == [Signal.MEMORY_AVAILABLE, Signal.ALLOCATABLE_MEMORY_AVAILABLE]
    child = spawn(ALLOCATOR, str(pods_dir / "cgroup.procs"))
    child.read("ready")
    node_usage = read_int(memcg_dir / "memory.usage_in_bytes")
    pods_usage = read_int(pods_dir / "memory.usage_in_bytes")
    summary = summary_with(stats_for_level(node_usage, 4 * MI, MI), stats_for_level(pods_usage, 6 * MI, 2 * MI))
    try:
        assert notifiers.update(figures(notifiers, summary), now=100.0) == []
        node, pods = notifiers.armed(Watch.LEVEL)
        assert (node.cgroup_dir, node.threshold_bytes) == (str(memcg_dir), node_usage + 4 * MI)
        assert (pods.cgroup_dir, pods.threshold_bytes) == (str(pods_dir), pods_usage + 6 * MI)
        assert node.threshold_bytes == memcg_threshold_bytes(thresholds[0], 5 * MI, node_usage, node_usage)
        assert (node.description, pods.description) == (
            "hard memory eviction threshold",
            "hard allocatable memory eviction threshold",
        )

        child.send(f"grow {pods_dir / 'memory.usage_in_bytes'} {pods_usage + 6 * MI} {GROW_BYTES}")
        causes, seen, elapsed = wait_for_descriptions(waiter, notifiers.notifiers,
                                                      {node.description, pods.description}, LONG_WAIT_S)
        child.read("grown")
        assert causes == {"memcg"}
        assert seen == {node.description, pods.description}
        assert elapsed < LONG_WAIT_S / 2

        # Not due again until strictly more than 10 s later (and the level did not move meanwhile).
        armed = (notifiers.armed(Watch.LEVEL), notifiers.armed(Watch.DROP))
        assert notifiers.update(figures(notifiers, summary), now=110.0) == []
        assert (notifiers.armed(Watch.LEVEL), notifiers.armed(Watch.DROP)) == armed
        assert notifiers.update(figures(notifiers, summary), now=110.5) == []
        wait_rearmed(notifiers)
        new_node, new_pods = notifiers.armed(Watch.LEVEL)
        assert is_closed(node) and is_closed(pods)
        assert not is_closed(new_node) and not is_closed(new_pods)
    finally:
        notifiers.close()


def test_memcg_notifier_set_keeps_old_notifier_on_bad_readings_and_drops_it_on_failed_registration(
    memcg_dir: Path,
) -> None:
    (memcg_dir / "kubepods").mkdir()
    thresholds = [memory_threshold("1Mi"), memory_threshold("2Mi", Signal.ALLOCATABLE_MEMORY_AVAILABLE)]
    notifiers = MemcgNotifierSet(thresholds, memory_root=str(memcg_dir), pods_cgroup="kubepods", monotonic=time.monotonic)
    good = summary_with(stats_for_level(0, 100 * MI, MI), stats_for_level(0, 100 * MI, 2 * MI))
    try:
        assert notifiers.update(figures(notifiers, good), now=0.0) == []
        node, pods = notifiers.armed(Watch.LEVEL)

        # Incomplete pods memory stats, at the next refresh: the kubelet errors out before touching the allocatable
        # notifier.
        incomplete = MemoryStats(available_bytes=MI, working_set_bytes=MI, usage_bytes=None)
        errors = notifiers.update(figures(notifiers, summary_with(stats_for_level(0, 100 * MI, MI), incomplete)),
                                  now=11.0)
        wait_rearmed(notifiers)
        assert [(f.description, f.error.reason[:23]) for f in errors] == [
            ("hard allocatable memory eviction threshold", "summary was incomplete.")
        ]
        assert is_closed(node), "the node notifier was re-armed"
        assert not is_closed(pods) and pods in notifiers.armed(Watch.LEVEL)

        # A level below zero cannot be registered: the old notifier is already gone, as in the kubelet.
        negative = summary_with(
            stats_for_level(0, 100 * MI, MI),
            MemoryStats(available_bytes=0, working_set_bytes=MI, usage_bytes=MI),
        )
        assert notifiers.update(figures(notifiers, negative), now=22.0) == []
        wait_rearmed(notifiers)
        errors = notifiers.update(figures(notifiers, negative), now=23.0)  # the thread's failures, with the next cycle
        assert [f.description for f in errors] == ["hard allocatable memory eviction threshold"]
        assert "negative threshold" in errors[0].error.reason
        assert is_closed(pods)
        assert [n.description for n in notifiers.armed(Watch.LEVEL)] == ["hard memory eviction threshold"]
    finally:
        notifiers.close()
    assert notifiers.notifiers == ()


def real_memory_stats(cgroup: Path, capacity: int) -> MemoryStats:
    """Readings of a real memory cgroup as the stats source makes them (working set = usage - inactive file)."""
    usage = read_int(cgroup / "memory.usage_in_bytes")
    stat = dict(line.split() for line in (cgroup / "memory.stat").read_text().splitlines())
    working_set = max(usage - int(stat["total_inactive_file"]), 0)
    return MemoryStats(available_bytes=capacity - working_set, working_set_bytes=working_set, usage_bytes=usage)


def test_dropped_page_cache_fires_the_drop_watch_and_the_next_update_re_arms_the_level(
    memcg_dir: Path, waiter: Waiter
) -> None:
    # The test cgroup plays the memory hierarchy root, with a capacity of 1 GiB and a 512Mi threshold: the level
    # is 512 MiB + the cgroup's inactive file pages, which the child's file puts at about 64 MiB.
    capacity = 1024 * MI
    notifiers = MemcgNotifierSet([memory_threshold("512Mi")], memory_root=str(memcg_dir), pods_cgroup="kubepods", monotonic=time.monotonic)
    child = ScriptedChild("page cache writer")
    (memcg_dir / "cgroup.procs").write_text(f"{child.pid}\n")
    try:
        with tempfile.TemporaryDirectory(dir="/var/tmp", prefix="evictd-cache-") as folder:  # a disk, not tmpfs
            cached = Path(folder) / "cache.bin"
            child.do(f"alloc {32 * MI}")  # so that usage stays above a step once the cache is gone
            child.do(f"write {cached} {64 * MI}")
            before = real_memory_stats(memcg_dir, capacity)
            assert notifiers.update(figures(notifiers, summary_with(before, None)), now=0.0) == []
            (level,), (drop_watch,) = notifiers.armed(Watch.LEVEL), notifiers.armed(Watch.DROP)
            assert level.threshold_bytes > 512 * MI + 56 * MI, "the page cache is in the level"
            assert drop_watch.threshold_bytes == before.usage_bytes - 8 * MI
            assert drop_watch.description == "hard memory eviction threshold: usage fell"
            cached.unlink()  # the cache goes with the file: usage falls by 64 MiB
        causes, seen, _ = wait_for_descriptions(waiter, notifiers.notifiers, {drop_watch.description}, LONG_WAIT_S)
        assert causes == {"memcg_rearm"} and seen == {drop_watch.description}

        after = real_memory_stats(memcg_dir, capacity)
        assert notifiers.update(figures(notifiers, summary_with(after, None)), now=1.0) == [], "between refreshes"
        wait_rearmed(notifiers)
        (new_level,), (new_drop_watch,) = notifiers.armed(Watch.LEVEL), notifiers.armed(Watch.DROP)
        assert is_closed(level) and is_closed(drop_watch)
        assert new_level.threshold_bytes == memcg_threshold_bytes(
            memory_threshold("512Mi"), after.available_bytes or 0, after.working_set_bytes or 0, after.usage_bytes or 0)
        assert new_level.threshold_bytes < level.threshold_bytes - 56 * MI, "the dropped cache left the level"
        assert new_drop_watch.threshold_bytes == (after.usage_bytes or 0) - 8 * MI

        # Readings that moved neither: nothing is registered again (a registration waits for an RCU grace period).
        assert notifiers.update(figures(notifiers, summary_with(after, None)), now=2.0) == []
        assert (notifiers.armed(Watch.LEVEL), notifiers.armed(Watch.DROP)) == ((new_level,), (new_drop_watch,))
    finally:
        notifiers.close()
        child.stop()


def cached_child(memcg_dir: Path, folder: str) -> tuple[ScriptedChild, Path]:
    """A child in the test cgroup holding 32 MiB of its own and 64 MiB of clean page cache (a file in `folder`)."""
    child = ScriptedChild("page cache writer")
    (memcg_dir / "cgroup.procs").write_text(f"{child.pid}\n")
    cached = Path(folder) / "cache.bin"
    child.do(f"alloc {32 * MI}")
    child.do(f"write {cached} {64 * MI}")
    return child, cached


def test_page_cache_dropped_past_the_drop_watch_re_arms_the_set_itself_without_a_cycle(
    memcg_dir: Path, waiter: Waiter
) -> None:
    # Capacity 1 GiB, a 512Mi threshold: the working set (about 32 MiB) is far from the 512 MiB it is met at.
    capacity = 1024 * MI
    notifiers = MemcgNotifierSet([memory_threshold("512Mi")], memory_root=str(memcg_dir), pods_cgroup="kubepods", monotonic=time.monotonic)
    with tempfile.TemporaryDirectory(dir="/var/tmp", prefix="evictd-cache-") as folder:  # a disk, not tmpfs
        child, cached = cached_child(memcg_dir, folder)
        try:
            assert notifiers.update(figures(notifiers, summary_with(real_memory_stats(memcg_dir, capacity), None)), now=0.0) == []
            (level,), (drop_watch,) = notifiers.armed(Watch.LEVEL), notifiers.armed(Watch.DROP)
            cached.unlink()  # usage falls by 64 MiB, past the drop watch
            causes, _, _ = wait_for_descriptions(waiter, notifiers.notifiers, {drop_watch.description}, LONG_WAIT_S)
            assert causes == {"memcg_rearm"}, "page cache only: no cycle"
            wait_rearmed(notifiers)  # no update: the firing re-armed the set on its own reading
            after = real_memory_stats(memcg_dir, capacity)
            (new_level,), (new_drop_watch,) = notifiers.armed(Watch.LEVEL), notifiers.armed(Watch.DROP)
            assert is_closed(drop_watch) and is_closed(level)
            assert abs(new_drop_watch.threshold_bytes - ((after.usage_bytes or 0) - 8 * MI)) < 8 * MI
            assert new_level.threshold_bytes < level.threshold_bytes - 56 * MI, "the level followed the cache"
        finally:
            notifiers.close()
            child.stop()


def held_registrations(notifiers: MemcgNotifierSet, in_hand: threading.Event,
                       release: threading.Event) -> Callable[[tuple[int, Watch, int, int]], object]:
    """The set's registration, held as an RCU grace period on a loaded node holds it: it sets `in_hand`, then waits
    for `release` before registering. The tests put it in place of the set's `_arm` once armed."""
    arm = notifiers._arm

    def held_arm(job: tuple[int, Watch, int, int]) -> object:
        in_hand.set()
        assert release.wait(LONG_WAIT_S)
        return arm(job)

    return held_arm


def test_a_re_arm_asked_while_one_is_in_hand_follows_it_instead_of_being_dropped(memcg_dir: Path) -> None:
    # Page cache dropped in two steps: the second firing asks for the level again while the thread still
    # registers the first (a registration waits for an RCU grace period). Dropping that request left the level
    # armed from the older figures, too high, and the crossing below it woke nothing (a flaky end-to-end test).
    notifiers = MemcgNotifierSet([memory_threshold("512Mi")], memory_root=str(memcg_dir), pods_cgroup="kubepods", monotonic=time.monotonic)
    in_hand, release = threading.Event(), threading.Event()
    held_arm = held_registrations(notifiers, in_hand, release)
    try:
        assert notifiers.update(figures(notifiers, summary_with(stats_for_level(0, 900 * MI, 512 * MI), None)), now=0.0) == []
        (first,) = notifiers.armed(Watch.LEVEL)
        assert first.threshold_bytes == 900 * MI
        notifiers._arm = held_arm  # type: ignore[method-assign]
        # Two later cycles' readings, the level a step and more lower each time (not yet due for a refresh).
        notifiers.update(figures(notifiers, summary_with(stats_for_level(0, 800 * MI, 512 * MI), None)), now=1.0)
        assert in_hand.wait(LONG_WAIT_S)
        notifiers.update(figures(notifiers, summary_with(stats_for_level(0, 700 * MI, 512 * MI), None)), now=2.0)
        release.set()
        wait_rearmed(notifiers)
        (level,) = notifiers.armed(Watch.LEVEL)
        assert level.threshold_bytes == 700 * MI, "the newest figures' level, not the one in hand when asked"
        assert is_closed(first)
    finally:
        release.set()
        notifiers.close()


@dataclass
class HeldSet:
    """A 512Mi notifier set on the test cgroup with an allocating child in it, and its registrations held on demand
    (`hold`: from then on each waits for `release`, as an RCU grace period on a loaded node holds it)."""

    notifiers: MemcgNotifierSet
    child: ScriptedChild
    in_hand: threading.Event = field(default_factory=threading.Event)
    release: threading.Event = field(default_factory=threading.Event)

    def hold(self) -> None:
        self.notifiers._arm = held_registrations(  # type: ignore[method-assign]
            self.notifiers, self.in_hand, self.release)


@contextlib.contextmanager
def held_set(memcg_dir: Path) -> Iterator[HeldSet]:
    notifiers = MemcgNotifierSet([memory_threshold("512Mi")], memory_root=str(memcg_dir), pods_cgroup="kubepods", monotonic=time.monotonic)
    child = ScriptedChild("allocator")
    (memcg_dir / "cgroup.procs").write_text(f"{child.pid}\n")
    held = HeldSet(notifiers, child)
    try:
        yield held
    finally:
        held.release.set()
        notifiers.close()
        child.stop()


def test_a_crossing_while_a_lower_level_is_being_registered_wakes_the_loop(memcg_dir: Path, waiter: Waiter) -> None:
    # Page cache dropped: the level is re-armed lower, and the kernel's registration waits for an RCU grace
    # period (100 ms and more on a loaded node; held here). Until it is in place only the old level, too high,
    # is watched: a crossing of the new one must still wake the loop, from usage read in its place.
    with held_set(memcg_dir) as held:
        notifiers, child, in_hand, release = held.notifiers, held.child, held.in_hand, held.release
        usage = read_int(memcg_dir / "memory.usage_in_bytes")
        assert notifiers.update(figures(notifiers, summary_with(stats_for_level(usage, 200 * MI, 512 * MI), None)), now=0.0) == []
        assert notifiers.recheck_s is None, "the kernel watches the level: nothing to read in its place"
        held.hold()
        notifiers.update(figures(notifiers, summary_with(stats_for_level(usage, 40 * MI, 512 * MI), None)), now=1.0)
        assert in_hand.wait(LONG_WAIT_S)
        waiter.set_notifiers([notifiers])
        sensing = Sensors(waiter, notifiers, ())
        assert sensing.wait(0.05) == [], "not crossed yet"
        child.do(f"alloc {64 * MI}")  # past the new level, 136 MiB short of the old one
        started = time.monotonic()
        assert sensing.wait(LONG_WAIT_S) == ["memcg"]
        assert time.monotonic() - started < MAX_WAKE_LATENCY_S
        assert notifiers.description == "hard memory eviction threshold (crossed while re-armed)"
        release.set()
        wait_rearmed(notifiers)
        assert notifiers.recheck_s is None, "registered: the kernel watches it again"
        # A threshold met in the readings: its level, below usage, announces usage falling past it, which the
        # old level, higher, does first; reading usage in its place would see it "crossed" every 2 ms (a storm
        # of cycles, seen at 3,814 in a minute beside a page-cache churner).
        release.clear()
        assert notifiers.update(figures(notifiers, summary_with(stats_for_level(usage, -100 * MI, 512 * MI), None)), now=2.0) == []
        notifiers.update(figures(notifiers, summary_with(stats_for_level(usage, -120 * MI, 512 * MI), None)), now=3.0)
        assert notifiers.rearming and notifiers.recheck_s is None


def test_a_raised_level_is_read_in_its_place_once_the_old_one_fired(memcg_dir: Path, waiter: Waiter) -> None:
    # Page cache written: usage reaches the level although the working set did not (the level fired early), and the
    # cycle raises it. The old level, now below usage, announces nothing more while usage rises, and the new one
    # waits for an RCU grace period (held here): a crossing meanwhile must still wake the loop.
    with held_set(memcg_dir) as held:
        notifiers, child = held.notifiers, held.child
        usage = read_int(memcg_dir / "memory.usage_in_bytes")
        assert notifiers.update(figures(notifiers, summary_with(stats_for_level(usage, 16 * MI, 512 * MI), None)), now=0.0) == []
        (old,) = notifiers.armed(Watch.LEVEL)
        child.do(f"alloc {32 * MI}")  # past the old level
        causes, _, _ = wait_for_descriptions(waiter, notifiers.notifiers, {old.description}, LONG_WAIT_S)
        assert causes == {"memcg"}
        held.hold()
        now_usage = read_int(memcg_dir / "memory.usage_in_bytes")
        # The cycle's readings: that was page cache, the level is now 40 MiB above usage.
        notifiers.update(figures(notifiers, summary_with(stats_for_level(now_usage, 40 * MI, 512 * MI), None)), now=1.0)
        assert held.in_hand.wait(LONG_WAIT_S)
        assert notifiers.recheck_s == 0.002, "the old level is below usage: usage is read in the new one's place"
        waiter.set_notifiers([notifiers])
        sensing = Sensors(waiter, notifiers, ())
        assert sensing.wait(0.05) == [], "not crossed yet"
        child.do(f"alloc {64 * MI}")  # past the new level
        started = time.monotonic()
        assert sensing.wait(LONG_WAIT_S) == ["memcg"]
        assert time.monotonic() - started < MAX_WAKE_LATENCY_S
        assert "hard memory eviction threshold (crossed while re-armed)" in notifiers.description.split(", ")


def test_a_crossing_the_next_cycle_does_not_see_is_read_until_the_statistics_show_it(
    memcg_dir: Path, waiter: Waiter
) -> None:
    # memory.stat can count page cache already gone for up to 2 s: usage crossed the level, but the cycle's figures
    # (memory.stat's) say not met yet. Nothing announces the moment they catch up, so they are read until then. (A
    # real pods cgroup had its crossing found only by the next hourly tick, once in four runs.) A watch's firing
    # judged on such figures lowers a level but never raises it.
    with held_set(memcg_dir) as held:
        notifiers, child = held.notifiers, held.child
        usage = read_int(memcg_dir / "memory.usage_in_bytes")
        assert notifiers.update(figures(notifiers, summary_with(stats_for_level(usage, 16 * MI, 512 * MI), None)), now=0.0) == []
        (level,) = notifiers.armed(Watch.LEVEL)
        child.do(f"alloc {32 * MI}")  # past the level
        causes, _, _ = wait_for_descriptions(waiter, notifiers.notifiers, {level.description}, LONG_WAIT_S)
        assert causes == {"memcg"}
        assert notifiers.recheck_s is None
        # The cycle's figures: 64 MiB of inactive file the cgroup no longer has (stale statistics), which puts the
        # working set 24 MiB short of the threshold: not met. The cgroup's memory.stat, read now, says met.
        now_usage = read_int(memcg_dir / "memory.usage_in_bytes")
        working_set = now_usage - 64 * MI
        stale = MemoryStats(available_bytes=24 * MI + 512 * MI, working_set_bytes=working_set, usage_bytes=now_usage)
        notifiers.update(figures(notifiers, summary_with(stale, None)), now=1.0)
        assert notifiers.recheck_s == 0.002
        waiter.set_notifiers([notifiers])
        sensing = Sensors(waiter, notifiers, ())
        assert sensing.wait(LONG_WAIT_S) == ["memcg"]
        assert notifiers.description == "hard memory eviction threshold (met once the kernel's statistics caught up)"


def test_a_level_raised_while_the_old_one_is_above_usage_is_not_read_in_its_place(memcg_dir: Path) -> None:
    # A level raised while the one armed is still above usage: that one fires first, nothing to read meanwhile.
    notifiers = MemcgNotifierSet([memory_threshold("512Mi")], memory_root=str(memcg_dir), pods_cgroup="kubepods", monotonic=time.monotonic)
    in_hand, release = threading.Event(), threading.Event()
    held_arm = held_registrations(notifiers, in_hand, release)
    try:
        usage = read_int(memcg_dir / "memory.usage_in_bytes")
        assert notifiers.update(figures(notifiers, summary_with(stats_for_level(usage, 40 * MI, 512 * MI), None)), now=0.0) == []
        notifiers._arm = held_arm  # type: ignore[method-assign]
        notifiers.update(figures(notifiers, summary_with(stats_for_level(usage, 80 * MI, 512 * MI), None)), now=1.0)
        assert in_hand.wait(LONG_WAIT_S)
        assert notifiers.recheck_s is None
    finally:
        release.set()
        notifiers.close()


@contextlib.contextmanager
def cached_set(memcg_dir: Path, fresh_inactive: Callable[[], int] | None = None
               ) -> Iterator[tuple[MemcgNotifierSet, ScriptedChild, Path]]:
    """A 512Mi `memory.available` notifier set with the test cgroup as its memory root (its fresh inactive file read
    by `fresh_inactive`), beside `cached_child`: 32 MiB of the child's own and 64 MiB of page cache (the file)."""
    notifiers = MemcgNotifierSet([memory_threshold("512Mi")], memory_root=str(memcg_dir), pods_cgroup="kubepods", monotonic=time.monotonic,
                                 fresh_inactive_file=fresh_inactive)
    with tempfile.TemporaryDirectory(dir="/var/tmp", prefix="evictd-cache-") as folder:  # a disk, not tmpfs
        child, cached = cached_child(memcg_dir, folder)
        try:
            yield notifiers, child, cached
        finally:
            notifiers.close()
            child.stop()


def readings_short_of_the_threshold(memcg_dir: Path, short_bytes: int) -> MemoryStats:
    """The test cgroup's readings with a capacity that puts memory.stat's working set `short_bytes` short of 512Mi."""
    working_set = real_memory_stats(memcg_dir, 1024 * MI).working_set_bytes or 0
    return real_memory_stats(memcg_dir, working_set + 512 * MI + short_bytes)


def test_a_threshold_met_on_the_fresh_inactive_file_is_read_until_the_statistics_say_so(
    memcg_dir: Path, waiter: Waiter
) -> None:
    # Beside a writer, the root's memory.stat counted a deleted file's 256 MiB of page cache for up to 139 ms after
    # /proc/meminfo had let it go (bench/memcg_stat_lag.py). The level is armed as if the cache were gone (a fresh
    # figure of 0 here), and until the statistics say met (no usage threshold announces that: usage does not move),
    # they are read.
    with cached_set(memcg_dir, lambda: 0) as (notifiers, child, _):
        readings = readings_short_of_the_threshold(memcg_dir, 32 * MI)  # met if the 64 MiB cache were gone
        assert notifiers.update(figures(notifiers, summary_with(readings, None)), now=0.0) == []
        (level,) = notifiers.armed(Watch.LEVEL)
        working_set_level = (readings.working_set_bytes or 0) + 32 * MI
        assert level.threshold_bytes == working_set_level, "armed without the cache memory.stat still counts"
        assert notifiers.recheck_s == 0.002
        waiter.set_notifiers([notifiers])
        sensing = Sensors(waiter, notifiers, ())
        assert sensing.wait(0.05) == [], "memory.stat does not say met yet"
        child.do(f"alloc {48 * MI}")  # memory.stat's working set passes the threshold
        started = time.monotonic()
        assert sensing.wait(LONG_WAIT_S) == ["memcg"]
        assert time.monotonic() - started < MAX_WAKE_LATENCY_S
        assert notifiers.description == "hard memory eviction threshold (met once the kernel's statistics caught up)"
        assert notifiers.recheck_s is None, "said once"


def test_the_statistics_are_read_for_a_bounded_time_and_not_at_all_without_a_fresh_figure(
    memcg_dir: Path, waiter: Waiter
) -> None:
    with cached_set(memcg_dir, lambda: 0) as (notifiers, _, _):
        assert notifiers.update(figures(notifiers, summary_with(readings_short_of_the_threshold(memcg_dir, 32 * MI), None)), 0.0) == []
        waiter.set_notifiers([notifiers])
        sensing = Sensors(waiter, notifiers, ())
        started = time.monotonic()
        assert sensing.wait(STATS_CATCH_UP_S + 0.5) == []
        assert time.monotonic() - started >= STATS_CATCH_UP_S
        assert notifiers.recheck_s is None, "the statistics never caught up: no reading past 2.5 s"
    with cached_set(memcg_dir) as (notifiers, _, _):
        readings = readings_short_of_the_threshold(memcg_dir, 32 * MI)
        assert notifiers.update(figures(notifiers, summary_with(readings, None)), now=0.0) == []
        (level,) = notifiers.armed(Watch.LEVEL)
        # The working-set level plus memory.stat's inactive file: 32 MiB above usage.
        assert level.threshold_bytes == (readings.usage_bytes or 0) + 32 * MI
        assert notifiers.recheck_s is None


def test_page_cache_dropped_while_usage_rises_is_caught_by_the_approach_watch(memcg_dir: Path, waiter: Waiter) -> None:
    # The level holds the page cache of its arming. When that cache goes while anonymous memory grows by more,
    # usage never falls past the drop watch, and the level stays too high by the cache: the crossing below it
    # woke nothing (seen black-box beside a writer whose files come and go: a crossing decided 51 ms late). The
    # approach watch, halfway to the level, re-judges it on fresh figures as usage rises.
    with cached_set(memcg_dir) as (notifiers, child, cached):
        readings = readings_short_of_the_threshold(memcg_dir, 400 * MI)  # met when the working set grows 400 MiB
        assert notifiers.update(figures(notifiers, summary_with(readings, None)), now=0.0) == []
        (level,), (approach,) = notifiers.armed(Watch.LEVEL), notifiers.armed(Watch.APPROACH)
        usage = readings.usage_bytes or 0
        assert approach.threshold_bytes == usage + (level.threshold_bytes - usage) // 2
        assert approach.description == "hard memory eviction threshold: usage rose halfway"
        waiter.set_notifiers([notifiers])
        sensing = Sensors(waiter, notifiers, ())
        child.do(f"alloc {80 * MI}")
        cached.unlink()  # 64 MiB of cache gone, usage still 16 MiB above where the level was armed
        child.do(f"alloc {200 * MI}")  # past the approach watch: the level is judged again
        assert "memcg_rearm" in sensing.wait(LONG_WAIT_S) or notifiers.description.endswith("usage rose halfway")
        wait_rearmed(notifiers)
        assert notifiers.armed(Watch.LEVEL)[0].threshold_bytes < level.threshold_bytes - 56 * MI, "the cache left the level"
        child.do(f"alloc {136 * MI}")  # the working set is 416 MiB up: met
        causes: list[str] = []
        deadline = time.monotonic() + LONG_WAIT_S
        while "memcg" not in causes and time.monotonic() < deadline:
            causes = sensing.wait(deadline - time.monotonic())
        assert "memcg" in causes, "the crossing woke the loop"


def test_a_drop_watch_firing_near_the_threshold_needs_a_cycle(memcg_dir: Path, waiter: Waiter) -> None:
    notifiers = MemcgNotifierSet([memory_threshold("512Mi")], memory_root=str(memcg_dir), pods_cgroup="kubepods", monotonic=time.monotonic)
    with tempfile.TemporaryDirectory(dir="/var/tmp", prefix="evictd-cache-") as folder:
        child, cached = cached_child(memcg_dir, folder)
        try:
            before = real_memory_stats(memcg_dir, 1024 * MI)
            # A capacity that puts the working set 32 MiB short of the threshold: met after 32 MiB more.
            near = real_memory_stats(memcg_dir, (before.working_set_bytes or 0) + 512 * MI + 32 * MI)
            assert notifiers.update(figures(notifiers, summary_with(near, None)), now=0.0) == []
            (drop_watch,) = notifiers.armed(Watch.DROP)
            cached.unlink()
            causes, seen, _ = wait_for_descriptions(waiter, notifiers.notifiers, {drop_watch.description}, LONG_WAIT_S)
            assert causes == {"memcg"} and seen == {drop_watch.description}
        finally:
            notifiers.close()
            child.stop()


def test_a_met_threshold_has_no_drop_watch_and_its_level_wakes_the_loop_only_when_no_longer_met_or_met_again(
    memcg_dir: Path, waiter: Waiter
) -> None:
    notifiers = MemcgNotifierSet([memory_threshold("512Mi")], memory_root=str(memcg_dir), pods_cgroup="kubepods", monotonic=time.monotonic)
    with tempfile.TemporaryDirectory(dir="/var/tmp", prefix="evictd-cache-") as folder:
        child, cached = cached_child(memcg_dir, folder)
        try:
            working_set = real_memory_stats(memcg_dir, 1024 * MI).working_set_bytes or 0
            # Met by 16 MiB: the level sits 16 MiB below the working set plus the cache.
            capacity = working_set + 512 * MI - 16 * MI
            met = real_memory_stats(memcg_dir, capacity)
            assert notifiers.update(figures(notifiers, summary_with(met, None)), now=0.0) == []
            (level,) = notifiers.armed(Watch.LEVEL)
            assert notifiers.armed(Watch.DROP) == (), "usage falling cannot make a met threshold met"
            assert level.threshold_bytes < (met.usage_bytes or 0)
            cached.unlink()  # usage falls 64 MiB, past the level, but the working set is where it was
            causes, _, _ = wait_for_descriptions(waiter, notifiers.notifiers, {level.description}, LONG_WAIT_S)
            assert causes == {"memcg_rearm"}, "still met: no cycle"
            wait_rearmed(notifiers)
            (new_level,) = notifiers.armed(Watch.LEVEL)
            assert is_closed(level) and new_level.threshold_bytes < level.threshold_bytes - 56 * MI
            child.do("free")  # the working set falls 32 MiB: no longer met
            causes, _, _ = wait_for_descriptions(waiter, notifiers.notifiers, {level.description}, LONG_WAIT_S)
            assert causes == {"memcg"}
            assert notifiers.update(figures(notifiers, summary_with(real_memory_stats(memcg_dir, capacity), None)), now=1.0) == []
            wait_rearmed(notifiers)  # the cycle saw it no longer met
            child.do(f"alloc {32 * MI}")  # met again: the same level, crossed the other way, is a crossing
            causes, _, _ = wait_for_descriptions(waiter, notifiers.notifiers, {level.description}, LONG_WAIT_S)
            assert causes == {"memcg"}
        finally:
            notifiers.close()
            child.stop()


def test_a_stall_is_judged_on_fresh_figures_against_the_threshold(memcg_dir: Path) -> None:
    notifiers = MemcgNotifierSet([memory_threshold("512Mi")], memory_root=str(memcg_dir), pods_cgroup="kubepods", monotonic=time.monotonic)
    child = ScriptedChild("allocator")
    (memcg_dir / "cgroup.procs").write_text(f"{child.pid}\n")
    try:
        assert not notifiers.may_change_decision(), "no readings yet: nothing a cycle could decide on either"
        child.do(f"alloc {32 * MI}")
        working_set = real_memory_stats(memcg_dir, 1024 * MI).working_set_bytes or 0
        # A capacity that puts the working set 48 MiB short of the threshold: within 64 MiB, a cycle.
        assert notifiers.update(figures(notifiers, summary_with(real_memory_stats(memcg_dir, working_set + 560 * MI), None)), 0.0) == []
        assert notifiers.may_change_decision()
        child.do("free")  # 32 MiB further away, read afresh: far
        assert not notifiers.may_change_decision()
    finally:
        notifiers.close()
        child.stop()


def test_a_crossing_between_the_reading_and_the_registration_is_signalled(
    memcg_dir: Path, spawn: Callable[..., Child], waiter: Waiter
) -> None:
    # The kernel only signals crossings after the registration; the level was computed from an earlier reading.
    usage_file = memcg_dir / "memory.usage_in_bytes"
    child = spawn(ALLOCATOR, str(memcg_dir / "cgroup.procs"))
    child.read("ready")
    seen = read_int(usage_file)
    child.send(f"grow {usage_file} {seen + GROW_BYTES} {GROW_BYTES}")
    child.read("grown")
    level = seen + GROW_BYTES // 2  # crossed after the reading `seen`, before the registration
    with contextlib.closing(MemcgThresholdNotifier(str(memcg_dir), level, "late", usage_seen=seen)) as late:
        waiter.set_notifiers([late])
        assert waiter.wait(0) == ["memcg"]
        assert waiter.wait(0) == [], "signalled once"
    in_time = MemcgThresholdNotifier(str(memcg_dir), level, "in time", usage_seen=read_int(usage_file))
    with contextlib.closing(in_time):
        waiter.set_notifiers([in_time])
        assert waiter.wait(0) == [], "no crossing since the reading: nothing to signal"
    with contextlib.closing(MemcgThresholdNotifier(str(memcg_dir), level, "no reading")) as plain:
        waiter.set_notifiers([plain])
        assert waiter.wait(0) == [], "without a reading, as the kernel: only later crossings"


# --------------------------------------------------------------------------------------------------
# PSI triggers


def test_psi_registration_on_system_pressure_and_idle_timeout(waiter: Waiter) -> None:
    stall_before = some_stall_total_us(SYSTEM_PRESSURE)
    notifier = PsiNotifier(SYSTEM_PRESSURE, PSI_STALL_US, PSI_WINDOW_US)
    assert notifier.description == "psi memory some 150ms/2s"
    assert (notifier.cause, notifier.poll_events) == ("psi", select.POLLPRI)
    waiter.set_notifiers([notifier])
    start = time.monotonic()
    causes = waiter.wait(PSI_IDLE_WAIT_S)
    elapsed = time.monotonic() - start
    # /proc/pressure/memory is machine-wide: another process on this machine could really stall for
    # 150 ms meanwhile. Then firing is right; otherwise the wait must run out quietly. The file's total is not the
    # trigger's: it lags it (59 ms in the file when a trigger fired, 233 ms 0.5 s later) and may stay under the
    # threshold (47 ms two seconds after a trigger fired beside another test's thrash, under -n 4). So a firing
    # must be matched by real stall in the file within a window, not by the trigger's whole threshold.
    if causes:
        assert causes == ["psi"]
        assert wait_until(lambda: some_stall_total_us(SYSTEM_PRESSURE) > stall_before, PSI_WINDOW_US / 1e6), \
            "fired with no stall at all in /proc/pressure/memory"
    else:
        assert elapsed >= PSI_IDLE_WAIT_S - 0.01


def test_psi_on_an_idle_cgroup_times_out_cleanly_although_the_file_always_polls_readable(
    unified_dir: Path, waiter: Waiter
) -> None:
    pressure = str(unified_dir / "memory.pressure")
    notifier = PsiNotifier(pressure, PSI_STALL_US, PSI_WINDOW_US, kind="full")
    assert notifier.description == "psi memory full 150ms/2s"
    # Kernel fact the Waiter depends on: a PSI file reports POLLIN at once, trigger fired or not.
    raw = select.poll()
    raw.register(notifier.fileno(), select.POLLIN | select.POLLPRI)
    assert raw.poll(0) == [(notifier.fileno(), select.POLLIN)]
    waiter.set_notifiers([notifier])
    start = time.monotonic()
    assert waiter.wait(PSI_IDLE_WAIT_S) == []
    assert time.monotonic() - start >= PSI_IDLE_WAIT_S - 0.01


def test_psi_one_second_window_is_refused_before_anything_is_opened(tmp_path: Path) -> None:
    # privileged=None reads CapEff: root on these machines lacks CAP_SYS_RESOURCE.
    assert has_cap_sys_resource() is False
    missing = str(tmp_path / "no-such-pressure-file")
    with pytest.raises(ConfigError) as caught:
        PsiNotifier(missing, 100_000, 1_000_000)
    assert str(caught.value) == (
        "psiWindow: invalid value '1s': PSI trigger window must be a whole multiple of 2s without "
        "CAP_SYS_RESOURCE (the kernel answers EINVAL otherwise)"
    )


def test_the_kernel_refuses_what_the_validation_refuses_and_needs_the_nul(memcg_dir: Path) -> None:
    # The validation mirrors the kernel: written anyway, a 1 s window gets EINVAL, mapped to SampleError.
    with pytest.raises(SampleError) as refused:
        PsiNotifier(SYSTEM_PRESSURE, 100_000, 1_000_000, privileged=True)
    assert refused.value.source == SYSTEM_PRESSURE
    assert refused.value.reason.startswith("EINVAL")
    # Without the NUL terminator the kernel overwrites the last digit: "2000000" becomes "200000".
    fd = os.open(SYSTEM_PRESSURE, os.O_RDWR | os.O_NONBLOCK)
    try:
        with pytest.raises(OSError) as raw:
            os.write(fd, b"some 150000 2000000")
        assert raw.value.errno == 22  # EINVAL
        os.write(fd, b"some 150000 2000000\0")
        with pytest.raises(OSError) as busy:
            os.write(fd, b"some 150000 2000000\0")
        assert busy.value.errno == 16, "one trigger per open file (EBUSY)"
    finally:
        os.close(fd)
    with pytest.raises(SampleError) as not_there:
        PsiNotifier(str(memcg_dir / "memory.pressure"), PSI_STALL_US, PSI_WINDOW_US)
    assert not_there.value.reason.startswith("ENOENT")


@pytest.mark.parametrize(
    ("cap_eff", "expected"),
    [
        pytest.param("000001ffffffffff", True, id="all-capabilities"),
        pytest.param("000001fffeffffff", False, id="no-cap-sys-resource"),
        pytest.param("0000000001000000", True, id="only-cap-sys-resource"),
    ],
)
def test_has_cap_sys_resource_reads_cap_eff(tmp_path: Path, cap_eff: str, expected: bool) -> None:
    (tmp_path / "self").mkdir()
    (tmp_path / "self" / "status").write_text(f"Name:\tevictd\nCapPrm:\t000001ffffffffff\nCapEff:\t{cap_eff}\n")
    assert has_cap_sys_resource(str(tmp_path)) is expected


def test_has_cap_sys_resource_errors(tmp_path: Path) -> None:
    with pytest.raises(SampleError) as missing:
        has_cap_sys_resource(str(tmp_path))
    assert missing.value.source == str(tmp_path / "self" / "status")
    (tmp_path / "self").mkdir()
    (tmp_path / "self" / "status").write_text("Name:\tevictd\n")
    with pytest.raises(SampleError, match="no CapEff line"):
        has_cap_sys_resource(str(tmp_path))


def test_psi_fires_on_real_memory_stall(memcg_dir: Path, unified_dir: Path, waiter: Waiter) -> None:
    group_pressure = str(unified_dir / "memory.pressure")
    with (
        # The group's trigger is judged far from any threshold (what `MemcgNotifierSet.may_change_decision` says).
        contextlib.closing(PsiNotifier(group_pressure, PSI_STALL_US, PSI_WINDOW_US,
                                       description="group memory stall", judge=lambda: False)) as in_group,
        contextlib.closing(PsiNotifier(SYSTEM_PRESSURE, PSI_STALL_US, PSI_WINDOW_US,
                                       description="machine memory stall")) as machine,
    ):
        assert some_stall_total_us(group_pressure) == 0
        with memory_stall(memcg_dir, also_in=[unified_dir]):
            causes, seen, elapsed = wait_for_descriptions(
                waiter, [in_group, machine], {"group memory stall", "machine memory stall"}, PSI_FIRE_TIMEOUT_S
            )
            group_stall_us = some_stall_total_us(group_pressure)
    print(f"PSI some 150ms/2s fired after {elapsed:.2f} s of thrashing; group stall {group_stall_us / 1e6:.2f} s")
    assert causes == {"psi", "psi_far"}
    assert seen == {"group memory stall", "machine memory stall"}
    assert group_stall_us >= PSI_STALL_US
    assert read_int(memcg_dir / "memory.failcnt") > 0, "the thrashers hit their limit"


# A stall threshold of `some` 7.5%: its trigger is `some 150000 2000000`, the stall the wake-up test above waits for
# (25% was not reached within 20 s in one CI run of four workers on two cores: CPU-starved thrashers stall less).
THRESHOLD_SHARE = 7.5


def test_a_thresholds_trigger_fires_once_its_share_of_the_window_stalled_and_the_reading_after_takes_it(
        memcg_dir: Path, unified_dir: Path, waiter: Waiter) -> None:
    """The rule of `evictd.core.psi_window.with_firings` on a real kernel: a trigger at a threshold's share of the
    window fires only once the stall within the trailing window reached it, and the reading right after the firing
    takes the share, which evictd's own window could not give yet (no reading a second old).

    What the kernel had seen comes from a sampler of the stall `total` every 20 ms, read from the parent group's
    file, never from the trigger's own: without CAP_SYS_RESOURCE (root here lacks it) the kernel judges a trigger
    only at its 2 s averaging tick, and a read of the same file that lands just past the tick takes the tick's
    turn, so the sampler on the trigger's file put the firings off by whole ticks (at 6, 12 and 18 s, 0.5 s after
    the stall had crossed; one run in three not within 20 s). The thrashers are the parent's only tasks, so its
    `some` stall is the child's."""
    with temporary_cgroup(unified_dir) as child:
        group_pressure = str(child / "memory.pressure")
        parent_pressure = str(unified_dir / "memory.pressure")
        history = PressureHistory()
        fired_at: list[float] = []

        def note() -> None:
            fired_at.append(time.monotonic())
            history.note_firing(group_pressure, StallKind.SOME, THRESHOLD_SHARE, PSI_WINDOW_US / 1e6)

        samples: list[tuple[float, int]] = []
        stop = threading.Event()

        def sample() -> None:
            while not stop.is_set():
                samples.append((time.monotonic(), some_stall_total_us(parent_pressure)))
                time.sleep(0.02)

        stall_us = round(PSI_WINDOW_US * THRESHOLD_SHARE / 100)
        with contextlib.closing(PsiNotifier(group_pressure, stall_us, PSI_WINDOW_US, description="group at 7.5%",
                                            on_fire=note)) as trigger:
            sampler = threading.Thread(target=sample, daemon=True)
            sampler.start()
            try:
                with memory_stall(memcg_dir, also_in=[child]):
                    _, seen, _ = wait_for_descriptions(waiter, [trigger], {"group at 7.5%"}, PSI_FIRE_TIMEOUT_S)
                    reading = history.read(group_pressure)
            finally:
                stop.set()
                sampler.join()
    assert seen == {"group at 7.5%"} and len(fired_at) == 1
    assert reading is not None and reading.some.recent == THRESHOLD_SHARE, "the first reading: the firing's share"
    # What the kernel had seen: the stall within the 2 s before the firing, from the samples around it.
    fired = fired_at[0]
    before = [total for at, total in samples if at <= fired - PSI_WINDOW_US / 1e6]
    start_total = before[-1] if before else samples[0][1]
    at_firing = max(total for at, total in samples if at <= fired + 0.05)
    print(f"{THRESHOLD_SHARE}% trigger fired; {(at_firing - start_total) / 1e3:.0f} ms stalled in the 2 s before")
    assert at_firing - start_total >= 0.8 * stall_us, "the trigger's share had stalled within its window"


# --------------------------------------------------------------------------------------------------
# The Waiter


def test_wait_times_out_with_no_causes(waiter: Waiter) -> None:
    start = time.monotonic()
    assert waiter.wait(0.2) == []
    assert 0.19 <= time.monotonic() - start < 1.0
    assert waiter.wait(-1.0) == [], "a deadline in the past polls once without blocking"


def test_a_wait_without_notifiers_ends_only_on_its_deadline_or_a_wake_and_leaves_firings_pending(
        waiter: Waiter) -> None:
    notifier = PipeNotifier()
    waiter.set_notifiers([notifier])
    notifier.fire()
    start = time.monotonic()
    assert waiter.wait(0.1, notifiers=False) == [], "a firing does not end it"
    assert 0.09 <= time.monotonic() - start < 1.0
    assert notifier.consumed == 0, "nor is it consumed"
    timer = threading.Timer(0.05, waiter.wake)
    timer.start()
    try:
        assert waiter.wait(LONG_WAIT_S, notifiers=False) == ["signal"], "a wake (a stop) still ends it"
    finally:
        timer.cancel()
    assert waiter.wait(LONG_WAIT_S) == ["fake"], "the firing is reported by the next wait that polls the notifiers"
    assert notifier.consumed == 1


def test_pending_says_the_next_wait_returns_at_once_and_consumes_nothing(waiter: Waiter) -> None:
    """What ends the wait for the node's report (a wait off the waiter) once a wake-up is due."""
    notifier = PipeNotifier()
    waiter.set_notifiers([notifier])
    assert not waiter.pending()
    notifier.fire()
    assert waiter.pending() and waiter.pending(), "asked twice: still pending"
    assert notifier.consumed == 0
    assert waiter.wait(LONG_WAIT_S) == ["fake"] and not waiter.pending()
    waiter.wake()
    assert waiter.pending()
    assert waiter.wait(LONG_WAIT_S) == ["signal"] and not waiter.pending()
    notifier.hang_up()
    assert waiter.pending(), "a broken notifier is reported by the next wait too"


def test_wake_from_another_thread_interrupts_wait(waiter: Waiter) -> None:
    timer = threading.Timer(0.1, waiter.wake)
    start = time.monotonic()
    timer.start()
    try:
        causes = waiter.wait(LONG_WAIT_S)
    finally:
        timer.cancel()
    assert causes == ["signal"]
    assert time.monotonic() - start < 0.1 + MAX_WAKE_LATENCY_S


def test_wake_from_a_signal_handler_interrupts_wait(waiter: Waiter) -> None:
    def handler(signum: int, frame: FrameType | None) -> None:
        waiter.wake()

    previous = signal.signal(signal.SIGALRM, handler)
    try:
        start = time.monotonic()
        signal.setitimer(signal.ITIMER_REAL, 0.1)
        causes = waiter.wait(LONG_WAIT_S)
        elapsed = time.monotonic() - start
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    assert causes == ["signal"]
    assert 0.09 <= elapsed < 0.1 + MAX_WAKE_LATENCY_S


def test_a_signal_that_does_not_wake_does_not_end_the_wait(waiter: Waiter) -> None:
    hits: list[int] = []

    def handler(signum: int, frame: FrameType | None) -> None:
        hits.append(signum)

    previous = signal.signal(signal.SIGALRM, handler)
    try:
        start = time.monotonic()
        signal.setitimer(signal.ITIMER_REAL, 0.05)
        causes = waiter.wait(0.3)
        elapsed = time.monotonic() - start
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    assert hits == [signal.SIGALRM]
    assert causes == []
    assert elapsed >= 0.29


def test_wakes_before_wait_are_kept_and_coalesce(waiter: Waiter) -> None:
    for _ in range(70_000):  # more than a pipe holds: extra wakes must neither block nor raise
        waiter.wake()
    start = time.monotonic()
    assert waiter.wait(LONG_WAIT_S) == ["signal"]
    assert time.monotonic() - start < MAX_WAKE_LATENCY_S
    assert waiter.wait(0.05) == [], "the pipe was drained in one go"


def test_fired_notifiers_are_consumed_and_reported_once_per_cause(waiter: Waiter) -> None:
    first, second, quiet = PipeNotifier("first"), PipeNotifier("second"), PipeNotifier("quiet")
    waiter.set_notifiers([first, second, quiet])
    first.fire()
    second.fire()
    waiter.wake()
    causes = waiter.wait(LONG_WAIT_S)
    assert sorted(causes) == ["fake", "signal"]
    assert (first.consumed, second.consumed, quiet.consumed) == (1, 1, 0)
    assert waiter.wait(0) == []
    assert (first.consumed, second.consumed, quiet.consumed) == (1, 1, 0)


def test_a_hung_up_notifier_is_reported_once_then_left_out(waiter: Waiter) -> None:
    broken, healthy = PipeNotifier("broken"), PipeNotifier("healthy")
    waiter.set_notifiers([broken, healthy])
    broken.hang_up()
    assert waiter.wait(LONG_WAIT_S) == ["fake"]
    assert broken.consumed == 0, "a hung-up notifier is dropped, not consumed"
    start = time.monotonic()
    assert waiter.wait(0.2) == [], "a hung-up descriptor must not make wait spin"
    assert time.monotonic() - start >= 0.19
    healthy.fire()
    assert waiter.wait(LONG_WAIT_S) == ["fake"]
    assert (healthy.consumed, broken.consumed) == (1, 0)
    waiter.set_notifiers([healthy])
    assert broken.closed


def test_set_notifiers_closes_replaced_ones_and_keeps_reused_ones(waiter: Waiter) -> None:
    kept, replaced = PipeNotifier("kept"), PipeNotifier("replaced")
    waiter.set_notifiers([kept, replaced])
    fresh = PipeNotifier("fresh")
    waiter.set_notifiers([kept, fresh, fresh])
    assert replaced.closed and not kept.closed
    assert waiter.notifiers == (kept, fresh)
    waiter.close()
    assert kept.closed and fresh.closed
    waiter.wake()  # harmless once closed
    waiter.close()
    with pytest.raises(ValueError, match="closed"):
        waiter.wait(0)


def test_refreshing_notifiers_a_hundred_times_leaks_no_descriptors(
    memcg_dir: Path, unified_dir: Path, waiter: Waiter
) -> None:
    psi = PsiNotifier(str(unified_dir / "memory.pressure"), PSI_STALL_US, PSI_WINDOW_US)
    before = notifier_fd_count()
    notifiers = MemcgNotifierSet([memory_threshold("1Mi")], memory_root=str(memcg_dir), pods_cgroup="kubepods", monotonic=time.monotonic)
    summary = summary_with(stats_for_level(0, 100 * MI, MI), None)
    waiter.set_notifiers([psi])
    replaced: list[MemcgThresholdNotifier] = []
    for step in range(100):
        # A fresh notifier by hand as well as the set's, as the loop would for a second threshold.
        by_hand = MemcgThresholdNotifier(str(memcg_dir), 200 * MI + step, "by hand")
        # The first time armed here and now, then every 10 s by the re-arming thread.
        assert notifiers.update(figures(notifiers, summary), now=11.0 * step) == []
        wait_rearmed(notifiers)
        replaced.extend(notifiers.armed(Watch.LEVEL))
        replaced.append(by_hand)
        waiter.set_notifiers([*notifiers.notifiers, by_hand, psi])
        assert waiter.wait(0) == []
    assert notifier_fd_count() == before + 3, \
        "only the current memcg notifiers and the set's own wake-up are open besides the kept PSI one"
    assert all(is_closed(n) for n in replaced[:-2])
    assert not is_closed(psi)
    waiter.set_notifiers([psi])
    notifiers.close()
    assert notifier_fd_count() == before


def test_an_endless_timeout_is_accepted(waiter: Waiter) -> None:
    waiter.wake()
    assert waiter.wait(float("inf")) == ["signal"]


def test_the_sensors_read_no_clock_of_their_own() -> None:
    """Times come from the loop's clock (`monotonic=`): no sensor reads `time.monotonic` or the wall clock itself."""
    import ast

    import evictd.adapters.memcg_set
    import evictd.adapters.notifiers
    import evictd.adapters.sensors

    clocks = {"monotonic", "monotonic_ns", "time", "time_ns", "perf_counter", "perf_counter_ns"}
    for module in (evictd.adapters.notifiers, evictd.adapters.sensors, evictd.adapters.memcg_set):
        tree = ast.parse(Path(str(module.__file__)).read_text())
        reads = [node.lineno for node in ast.walk(tree) if isinstance(node, ast.Attribute)
                 and isinstance(node.value, ast.Name) and node.value.id == "time" and node.attr in clocks]
        assert reads == [], f"{module.__name__} reads a clock of its own at lines {reads}"
