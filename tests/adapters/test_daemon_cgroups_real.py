"""The daemons refault signal on this host's real cgroup v1 memory hierarchy (`evictd.adapters.daemon_cgroups`): a
real ``system.slice`` cgroup (below a temporary one, which a cgroupfs folder's ``memory`` link points at, so the
layout finds it at its root as on a node) with a process re-reading a file on disk. While the file fits its cgroup
the reading counts no re-reads; once ``memory.limit_in_bytes`` pushes it out of cache each pass re-reads it, and
the signal's figure sees it, as do its watch thread, the node's Summary through the stall gate and check-config. Needs root and cgroup v1's memory hierarchy: fails without."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from evictd.adapters.cgroups import CgroupLayout, CgroupReader
from evictd.adapters.daemon_cgroups import daemon_counts, daemons_missing
from evictd.adapters.node_stats import NodeStatsSource
from evictd.adapters.notifiers import Waiter
from evictd.adapters.pod_disk_usage import PodDiskStore
from evictd.adapters.sensors import daemons_refault_watch
from evictd.core.daemon_refault import daemon_memory_bytes, daemon_refault_figure
from evictd.core.protections import DAEMONS_NODE_HOW
from evictd.core.refault import RefaultSample
from evictd.core.signals import Signal
from evictd.core.stall_gate import StallGate, gated_observations, observe
from evictd.core.summary import SYSTEM_CONTAINER_DAEMONS, MemoryStats, signal_observations
from evictd.core.wake import Wake
from real_cgroups import CGROUP_MOUNT, temporary_cgroup

MiB = 1 << 20
FILE_BYTES = 48 * MiB
LIMIT_BYTES = 24 * MiB  # half the file: every pass re-reads what the last one pushed out
WINDOW_S = 2.0
# The reader waits for a line on stdin (sent once it is in system.slice), then reads the file over and over.
READER = r"""
import sys
sys.stdin.readline()
while True:
    with open(sys.argv[1], "rb", buffering=0) as fh:
        while fh.read(1 << 20):
            pass
"""


@pytest.fixture
def node(tmp_path: Path) -> Iterator[tuple[CgroupLayout, Path, Path]]:
    """A layout whose v1 memory hierarchy is a temporary cgroup holding a real system.slice, and a file on disk."""
    memory_root = CGROUP_MOUNT / "memory"
    assert (memory_root / "memory.stat").is_file(), "this test needs cgroup v1's memory hierarchy"
    with temporary_cgroup(memory_root) as top:
        cgroupfs = tmp_path / "cgroupfs"
        cgroupfs.mkdir()
        (cgroupfs / "memory").symlink_to(top)
        data = tmp_path / "working-set"
        with open(data, "wb") as fh:
            for _ in range(FILE_BYTES // MiB):
                fh.write(os.urandom(MiB))
            fh.flush()
            os.fsync(fh.fileno())
            os.posix_fadvise(fh.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)  # read in system.slice, charged to it
        yield CgroupLayout(version=1, root=cgroupfs), top, data


def reader_in(slice_folder: Path, data: Path) -> subprocess.Popen[str]:
    reader = subprocess.Popen([sys.executable, "-c", READER, str(data)], stdin=subprocess.PIPE, text=True)
    (slice_folder / "cgroup.procs").write_text(str(reader.pid))
    assert reader.stdin is not None
    reader.stdin.write("go\n")
    reader.stdin.flush()
    return reader


def share_over(layout: CgroupLayout, seconds: float) -> tuple[int, int]:
    """The bytes re-read within `seconds` and the figure's share of the daemons' memory (basis points)."""
    first = daemon_counts(layout)
    time.sleep(seconds)
    second = daemon_counts(layout)
    assert first is not None and second is not None
    assert first.counted == second.counted == "total_workingset_refault_file", "this kernel's v1 memory.stat"
    samples = [RefaultSample(0.0, first.refault_bytes), RefaultSample(seconds, second.refault_bytes)]
    figure = daemon_refault_figure(samples, daemon_memory_bytes(MemoryStats(usage_bytes=second.usage_bytes)))
    assert figure is not None
    return second.refault_bytes - first.refault_bytes, figure.refaulted_basis_points


def test_the_reading_sees_the_daemons_re_read_their_files_once_pushed_out_of_cache(
        node: tuple[CgroupLayout, Path, Path]) -> None:
    layout, top, data = node
    assert daemons_missing(layout) is not None and daemon_counts(layout) is None  # no system.slice yet: unavailable
    slice_folder = top / "system.slice"
    slice_folder.mkdir()
    assert daemons_missing(layout) is None
    reader = reader_in(slice_folder, data)
    try:
        time.sleep(1.0)  # the first pass reads the file in: no re-reads
        # Up to three windows: reclaim by the rest of a busy host once pushed 2 MiB of the file out in one.
        for _ in range(3):
            fitting_bytes, fitting_share = share_over(layout, WINDOW_S)
            if fitting_bytes < MiB and fitting_share < 300:
                break
        (slice_folder / "memory.limit_in_bytes").write_text(str(LIMIT_BYTES))
        time.sleep(0.5)
        thrash_bytes, thrash_share = share_over(layout, WINDOW_S)
        counts = daemon_counts(layout)
        assert counts is not None and counts.usage_bytes <= LIMIT_BYTES
    finally:
        reader.kill()
        reader.wait()
    assert fitting_bytes < MiB and fitting_share < 300, (fitting_bytes, fitting_share)
    assert thrash_bytes >= FILE_BYTES - LIMIT_BYTES, thrash_bytes  # at least a pass's worth within the window
    assert thrash_share >= 5000, thrash_share  # re-read half its memory (the floor's, 32 MiB) and more in 2 s


def test_the_watch_wakes_the_loop_when_the_daemons_re_read_their_memory(node: tuple[CgroupLayout, Path, Path]) -> None:
    layout, top, data = node
    slice_folder = top / "system.slice"
    slice_folder.mkdir()
    (slice_folder / "memory.limit_in_bytes").write_text(str(LIMIT_BYTES))
    watch = daemons_refault_watch(layout, gated=False, monotonic=time.monotonic)
    waiter = Waiter(time.monotonic)
    waiter.set_notifiers([watch])
    try:
        watch.look_for((5000,))  # 50% of the daemons' memory within the window
        assert waiter.wait(2.0) == []  # nobody re-reads yet
        reader = reader_in(slice_folder, data)
        try:
            started = time.monotonic()
            assert waiter.wait(10.0) == [Wake.DAEMONS_REFAULT_WATCH]
            assert time.monotonic() - started < 2 * WINDOW_S + 1.0
        finally:
            reader.kill()
            reader.wait()
    finally:
        waiter.close()


def test_the_nodes_summary_carries_the_daemons_and_the_gate_makes_their_figure(
        node: tuple[CgroupLayout, Path, Path], tmp_path: Path) -> None:
    layout, top, data = node
    slice_folder = top / "system.slice"
    slice_folder.mkdir()
    (slice_folder / "memory.limit_in_bytes").write_text(str(LIMIT_BYTES))
    cgroups = CgroupReader(layout)
    source = NodeStatsSource(node_name="node-1", cgroups=cgroups, disk_usage=PodDiskStore(),
                             kubelet_root=str(tmp_path), image_fs_path=str(tmp_path), container_fs_path=str(tmp_path),
                             memory_pressure=True, daemon_refaults=True)
    reader = reader_in(slice_folder, data)
    try:
        gate, started = StallGate(), time.monotonic()
        first = source.summary([])
        gate = observe(gate, first, 0.0, enabled=False)
        time.sleep(WINDOW_S)
        second = source.summary([])
        gate = observe(gate, second, time.monotonic() - started, enabled=False)
    finally:
        reader.kill()
        reader.wait()
        cgroups.close()
    daemons = second.node.system_containers[SYSTEM_CONTAINER_DAEMONS].memory
    assert daemons is not None and daemons.usage_bytes is not None and daemons.usage_bytes <= LIMIT_BYTES
    assert gate.daemons_refault is not None and gate.daemons_refault.refaulted_basis_points >= 5000
    observed = gated_observations(signal_observations(second), gate)[Signal.DAEMONS_REFAULT]
    assert observed.available.ceil_int() == 10_000 - gate.daemons_refault.refaulted_basis_points
    # Without a threshold on it nothing reads system.slice.
    plain_cgroups = CgroupReader(layout)
    plain = NodeStatsSource(node_name="node-1", cgroups=plain_cgroups, disk_usage=PodDiskStore(),
                            kubelet_root=str(tmp_path), image_fs_path=str(tmp_path),
                            container_fs_path=str(tmp_path), memory_pressure=True)
    try:
        assert SYSTEM_CONTAINER_DAEMONS not in plain.summary([]).node.system_containers
    finally:
        plain_cgroups.close()


def check_config_protection(cgroupfs: Path, tmp_path: Path) -> dict[str, str]:
    config = tmp_path / "evictd.yaml"
    config.write_text("apiVersion: evictd.io/v1alpha1\nkind: EvictdConfiguration\n"
                      f"cgroupfsPath: {cgroupfs}\nstallEvictionHard: {{evictd.io/daemons.refault: '50%'}}\n")
    done = subprocess.run([sys.executable, "-m", "evictd", "check-config", "--config", str(config), "-o", "json"],
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    (row,) = [p for p in json.loads(done.stdout)["protections"] if p["protection"] == "daemons_refault"]
    return row


def test_check_config_says_whether_the_daemons_signal_can_act_here(node: tuple[CgroupLayout, Path, Path],
                                                                   tmp_path: Path) -> None:
    layout, top, _ = node
    absent = check_config_protection(layout.root, tmp_path)
    assert (absent["state"], absent["how"]) == ("unavailable", DAEMONS_NODE_HOW)
    assert absent["detail"].endswith("memory/system.slice: no such cgroup (no systemd system.slice in the memory "
                                     "hierarchy)")
    (top / "system.slice").mkdir()
    present = check_config_protection(layout.root, tmp_path)
    assert (present["state"], present["detail"]) == (
        "active", "evictd.io/daemons.refault (hard): system.slice's re-reads within 2 s, or its memory reclaimed "
        "below memory.low, or its page cache under memory.low that MemAvailable no longer covers, of its memory that "
        "is neither anonymous nor protected by memory.low")
