"""Hugepage-aware memory.available on this machine with hugepages really reserved (run as root).

The fixture reserves RESERVED_PAGES more 2 MiB pages through /proc/sys/vm/nr_hugepages and puts the count back
after; a machine where that cannot be done fails the tests, never skips them. The kernel's own figure of the
reservation (`Hugetlb:` of /proc/meminfo, every pool's pages at their size) is the independent check of evictd's
sysfs total; the node's memory.available then differs by exactly that total with the gate on, as a 1.37
kubelet's adjustForHugePages computes, and not at all with it off (1.36).
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from evictd.adapters.cgroups import CgroupReader, detect_cgroup_layout
from evictd.adapters.hugepages import hugepages_bytes
from evictd.adapters.node_stats import memory_stats
from evictd.adapters.procfs import mem_total_bytes, meminfo_bytes

NR_HUGEPAGES = Path("/proc/sys/vm/nr_hugepages")
RESERVED_PAGES = 64  # 128 MiB of 2 MiB pages: enough to see, small enough not to squeeze the machine
PAGE_BYTES = 2 << 20  # the default hugepage size on x86-64, the pool nr_hugepages sizes
ROOT = Path(__file__).resolve().parents[2]
AT = datetime(2026, 11, 28, tzinfo=UTC)

pytestmark = pytest.mark.serial  # it takes memory from the whole machine while it runs


@pytest.fixture
def reserved() -> Iterator[int]:
    """Reserve RESERVED_PAGES more default-size hugepages; yield the pages now reserved; restore the count."""
    assert os.geteuid() == 0, "reserving hugepages needs root"
    before = int(NR_HUGEPAGES.read_text())
    wanted = before + RESERVED_PAGES
    try:
        NR_HUGEPAGES.write_text(f"{wanted}\n")
        got = int(NR_HUGEPAGES.read_text())
        assert got == wanted, f"the kernel reserved {got} pages of the {wanted} asked (memory too fragmented?)"
        yield got
    finally:
        NR_HUGEPAGES.write_text(f"{before}\n")
        assert int(NR_HUGEPAGES.read_text()) == before


def test_the_sysfs_total_is_the_kernels_own_figure_of_the_reservation(reserved: int) -> None:
    total = hugepages_bytes()
    assert total >= reserved * PAGE_BYTES
    assert total == meminfo_bytes("Hugetlb")


def test_memory_available_subtracts_the_reservation_with_the_gate_on_and_not_off(reserved: int) -> None:
    cgroups = CgroupReader(detect_cgroup_layout())
    try:
        reading = cgroups.memory("")  # one reading for both figures: the working set does not move between them
    finally:
        cgroups.close()
    capacity, total = mem_total_bytes(), hugepages_bytes()
    off = memory_stats(reading, capacity, AT).available_bytes
    on = memory_stats(reading, capacity, AT, total).available_bytes
    assert off == max(0, capacity - reading.working_set_bytes)  # 1.36: root limit (MemTotal) - working set
    assert on == max(0, capacity - reading.working_set_bytes - meminfo_bytes("Hugetlb"))  # 1.37
    assert off is not None and on is not None and off - on == total >= RESERVED_PAGES * PAGE_BYTES


def check_config(tmp_path: Path, hard: int, evictd_doc: str) -> subprocess.CompletedProcess[str]:
    config = tmp_path / "config.yaml"
    config.write_text("apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n"
                      f"evictionHard: {{memory.available: \"{hard}\"}}\n{evictd_doc}")
    return subprocess.run([sys.executable, "-m", "evictd", "check-config", "--config", str(config),
                           "--kubelet-config", "", "--kubelet-flags", ""], cwd=ROOT, capture_output=True,
                          text=True, timeout=60, check=False)


def test_check_config_names_the_gate_and_the_threshold_padded_by_the_hugepage_total(
        reserved: int, tmp_path: Path) -> None:
    total = hugepages_bytes()
    padded = total + (100 << 20)  # 100Mi, padded by the hugepage total as operators did for the old signal
    aware = check_config(tmp_path, padded, "---\napiVersion: evictd.io/v1alpha1\nkind: EvictdConfiguration\n"
                         "kubeletVersion: v1.37.0\n")
    assert aware.returncode == 0, aware.stderr
    assert "kubelet semantics followed: v1.37 (kubeletVersion v1.37.0); HugepageAwareEviction: on" in aware.stdout
    assert f"node hugepages: {total} bytes" in aware.stdout
    assert f"warning: padded-by-hugepages: evictionHard.memory.available: {padded}: " in aware.stderr
    assert "evictionHard.memory.available: 100Mi" in aware.stderr  # the fix names the value without the padding
    opted_out = check_config(tmp_path, padded, "featureGates: {HugepageAwareEviction: false}\n---\n"
                             "apiVersion: evictd.io/v1alpha1\nkind: EvictdConfiguration\nkubeletVersion: v1.37.0\n")
    assert "HugepageAwareEviction: off (featureGates.HugepageAwareEviction: false)" in opted_out.stdout
    assert "padded-by-hugepages" not in opted_out.stderr


SLACK_BYTES = 32 << 20  # what this machine's working set may move between two reads a moment apart


def test_run_reads_the_node_as_the_kubelet_it_follows_does(reserved: int, tmp_path: Path) -> None:
    # The composition of `evictd run`: the node source built from a configuration naming a 1.37 kubelet
    # subtracts the hugepages; one naming none (v1.36) does not.
    from evictd.config import load_configuration
    from evictd.run.compose_node import build_stats_source

    old = tmp_path / "old.yaml"
    old.write_text("apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n")
    new = tmp_path / "new.yaml"
    new.write_text(old.read_text() + "---\napiVersion: evictd.io/v1alpha1\nkind: EvictdConfiguration\n"
                   "kubeletVersion: v1.37.0\n")
    cgroups = CgroupReader(detect_cgroup_layout())
    try:
        figures = []
        for path in (old, new, old, new):  # interleaved, so a drift of the working set cannot pass for the gap
            parts = build_stats_source(load_configuration([str(path)]), cgroups, "node-1")
            memory = parts.source.summary([]).node.memory
            assert memory is not None and memory.available_bytes is not None
            figures.append(memory.available_bytes)
    finally:
        cgroups.close()
    total = hugepages_bytes()
    for gap in (figures[0] - figures[1], figures[2] - figures[3]):
        assert abs(gap - total) <= SLACK_BYTES, (gap, total)
