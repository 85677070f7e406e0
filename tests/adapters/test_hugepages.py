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
from evictd.core.followed import HUGEPAGE_AWARE_EVICTION, kubelet_semantics
from evictd.core.signals import Signal
from evictd.core.summary import NodeStats, Summary, signal_observations
from evictd.core.thresholds import parse_threshold_config, thresholds_met

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


MI = 1 << 20


@pytest.mark.parametrize(("gates", "drop"), [
    pytest.param({}, 32 * 2 * MI, id="v1.37-gate-enabled-subtracts-hugepage-capacity"),
    pytest.param({HUGEPAGE_AWARE_EVICTION: False}, 0, id="v1.37-gate-disabled-includes-hugepage-capacity"),
])
def test_v1_37_hugepage_aware_memory_reporting(tmp_path: Path, gates: dict[str, bool], drop: int) -> None:
    # v1.37 test/e2e_node/hugepages_reporting_test.go HugepageAwareMemoryReporting ("with feature gate enabled/
    # disabled"): 32 pages of 2Mi are set aside on a node that already had a 1Gi page. With the gate on the node's
    # memory.available + working set + every hugepages-* capacity (the preallocated 1Gi page too) is the memory
    # capacity, and memory.available drops by the 64Mi set aside; with it off available + working set is the
    # capacity and the 64Mi set aside leaves it as it was. The figures are composed as `evictd run` composes them.
    aware = kubelet_semantics("v1.37.0", gates).hugepage_aware
    capacity = 16 * GI
    reading = MemoryReading(usage_bytes=5 * GI, inactive_file_bytes=1 * GI, working_set_bytes=4 * GI,
                            limit_bytes=None)

    def available(root: str) -> int:
        memory = memory_stats(reading, capacity, AT, hugepages_bytes(root) if aware else 0)
        assert memory.available_bytes is not None
        return memory.available_bytes

    before = available(pools(tmp_path / "before", _1048576="1"))
    after_root = pools(tmp_path / "after", _1048576="1", _2048="32")
    after = available(after_root)
    hugepages = hugepages_bytes(after_root)
    assert hugepages == 1 * GI + 64 * MI
    assert after + reading.working_set_bytes + (hugepages if aware else 0) == capacity
    assert before - after == drop


@pytest.mark.parametrize(("working_set_gi", "met_aware", "met_unaware"), [
    pytest.param(54, False, False, id="v1.37-kep-54Gi-working-set-neither"),
    pytest.param(56, True, False, id="v1.37-kep-56Gi-working-set-only-hugepage-aware"),
    pytest.param(59, True, True, id="v1.37-kep-59Gi-working-set-both"),
])
def test_v1_37_hugepage_aware_threshold_fires_at_the_real_memory_threshold(
        working_set_gi: int, met_aware: bool, met_unaware: bool) -> None:
    # The HugepageAwareEviction KEP's numerical example (the third step its node e2e plan names; the e2e that
    # landed, HugepageAwareMemoryReporting, checks only the reported figure): 64Gi of memory, 2048 pages of 2Mi
    # (4Gi), evictionHard memory.available<5754Mi. A 1.36 kubelet fires only once the working set passes ~58.4Gi;
    # a 1.37 one once it passes 60Gi - 5754Mi (~54.4Gi).
    thresholds = parse_threshold_config([], {"memory.available": "5754Mi"}, {}, {}, {})
    reading = MemoryReading(usage_bytes=working_set_gi * GI, inactive_file_bytes=0,
                            working_set_bytes=working_set_gi * GI, limit_bytes=None)
    met = []
    for version in ("v1.37.0", "v1.36.2"):
        aware = kubelet_semantics(version, {}).hugepage_aware
        memory = memory_stats(reading, 64 * GI, AT, 2048 * 2 * MI if aware else 0)
        observations = signal_observations(Summary(node=NodeStats(node_name="n", memory=memory)))
        met.append(bool(thresholds_met(thresholds, observations, enforce_min_reclaim=False)))
    assert met == [met_aware, met_unaware]
