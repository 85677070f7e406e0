"""The node's hugepage total (`evictd.adapters.hugepages`) from a fake sysfs tree, its place in the node's
memory.available (`evictd.adapters.node_stats.memory_stats`), and the kubelet's observation of it."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from evictd.adapters.cgroups import MemoryReading
from evictd.adapters.hugepages import hugepages_bytes
from evictd.adapters.node_stats import memory_stats
from evictd.core.errors import SampleError
from evictd.core.signals import Signal
from evictd.core.summary import NodeStats, Summary, signal_observations

GI = 1 << 30
AT = datetime(2026, 11, 28, tzinfo=UTC)


def pools(root: Path, **counts: str) -> str:
    """A /sys/kernel/mm/hugepages tree: `kB=count` per pool (hugepages-<kB>kB/nr_hugepages)."""
    for size, count in counts.items():
        folder = root / f"hugepages-{size.lstrip('_')}kB"
        folder.mkdir(parents=True)
        (folder / "nr_hugepages").write_text(f"{count}\n")
    (root / "README").mkdir(exist_ok=True)  # not a pool: ignored
    return str(root)


def test_the_total_sums_every_pool_at_its_page_size(tmp_path: Path) -> None:
    root = pools(tmp_path / "hugepages", _1048576="2", _2048="512")
    assert hugepages_bytes(root) == 2 * GI + 512 * 2 * 1024 * 1024


def test_no_hugetlb_support_is_no_hugepages_and_a_bad_count_names_its_file(tmp_path: Path) -> None:
    assert hugepages_bytes(str(tmp_path / "absent")) == 0
    root = pools(tmp_path / "hugepages", _2048="lots")
    with pytest.raises(SampleError) as caught:
        hugepages_bytes(root)
    assert "hugepages-2048kB/nr_hugepages" in str(caught.value) and "lots" in str(caught.value)


@pytest.mark.parametrize(("hugepages", "available"), [(0, 10 * GI), (4 * GI, 6 * GI), (64 * GI, 0)])
def test_the_node_figure_subtracts_the_hugepages_and_the_kubelet_observes_what_is_left(
        hugepages: int, available: int) -> None:
    # Upstream's vector: a 60Gi limit, a 50Gi working set, 4Gi of 1Gi pages: 6Gi left; more pages than left: 0.
    reading = MemoryReading(usage_bytes=55 * GI, inactive_file_bytes=5 * GI, working_set_bytes=50 * GI,
                            limit_bytes=None)
    memory = memory_stats(reading, 60 * GI, AT, hugepages)
    assert memory.available_bytes == available
    observed = signal_observations(Summary(node=NodeStats(node_name="n", memory=memory)))[Signal.MEMORY_AVAILABLE]
    # The eviction manager's capacity is available + working set (helpers.go makeSignalObservations), so a
    # percentage threshold resolves against the memory hugepages leave.
    assert (observed.available.ceil_int(), observed.capacity.ceil_int()) == (available, available + 50 * GI)
