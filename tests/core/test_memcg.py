"""The memcg threshold notifier arithmetic (KUBELET_SPEC §13): level, readings, description, refresh cadence,
and when evictd re-arms between refreshes (the drop watch).

The two quantity rows are the spec's examples (from the kubelet's memory_threshold_notifier_test.go
TestUpdateThreshold); the percentage rows are worked out by hand below each row.
"""

from __future__ import annotations

from types import MappingProxyType

import pytest
from hypothesis import given
from hypothesis import strategies as st

from evictd.core.errors import SampleError
from evictd.core.memcg import (
    NOTIFIER_REFRESH_INTERVAL_S,
    approach_watch_level,
    approach_watch_stale,
    armed_inactive_file,
    close_reading_until,
    close_reading_wanted,
    drop_watch_stale,
    drop_watch_wanted,
    firing_needs_cycle,
    level_from,
    level_moved,
    level_unwatched_until_registered,
    memcg_notifier_description,
    memcg_threshold_bytes,
    memory_stats_for,
    notifier_refresh_due,
    stats_behind,
    working_set_from,
    working_set_level,
)
from evictd.core.quantity import Quantity
from evictd.core.signals import Signal
from evictd.core.summary import ContainerStats, MemoryStats, NodeStats, Summary
from evictd.core.thresholds import Threshold, ThresholdValue, parse_percentage

KI = 1024
MI = 1024**2
GI = 1024**3


def memcg_level_and_usage(threshold: Threshold, summary_: Summary) -> tuple[int, int]:
    """The level the notifier arms for `threshold` and the usage it was computed from."""
    available, working_set, usage = memory_stats_for(threshold, summary_)
    return memcg_threshold_bytes(threshold, available, working_set, usage), usage

def level_of(threshold: Threshold, summary_: Summary) -> int:
    return memcg_level_and_usage(threshold, summary_)[0]


def quantity_threshold(text: str, signal: Signal = Signal.MEMORY_AVAILABLE, grace_period_s: float = 0.0) -> Threshold:
    return Threshold(signal=signal, value=ThresholdValue(quantity=Quantity.parse(text)), grace_period_s=grace_period_s)


def percentage_threshold(text: str, signal: Signal = Signal.MEMORY_AVAILABLE) -> Threshold:
    return Threshold(signal=signal, value=ThresholdValue(percentage=parse_percentage(text)))


@pytest.mark.parametrize(
    ("threshold", "available", "working_set", "usage", "expected"),
    [
        pytest.param(quantity_threshold("1Gi"), 3 * GI, 1 * GI, 2 * GI, 4 * GI, id="node-quantity-spec-example"),
        pytest.param(
            quantity_threshold("1Gi", Signal.ALLOCATABLE_MEMORY_AVAILABLE),
            4 * GI,
            1 * GI,
            3 * GI,
            6 * GI,
            id="allocatable-quantity-spec-example",
        ),
        # capacity 4Gi, 25% is exactly 1Gi in float32: 4Gi - 1Gi + (2Gi - 1Gi) inactive file.
        pytest.param(percentage_threshold("25%"), 3 * GI, 1 * GI, 2 * GI, 4 * GI, id="percentage-exact"),
        # 10% is float32 0.100000001490116...: int(10Gi * that) = 1Gi + 16, so the level is 16 bytes
        # below 10Gi - 1Gi + 1Gi.
        pytest.param(
            percentage_threshold("10%"), 9 * GI, 1 * GI, 2 * GI, 10 * GI - 16, id="percentage-float32-truncated"
        ),
        pytest.param(
            percentage_threshold("10%", Signal.ALLOCATABLE_MEMORY_AVAILABLE),
            9 * GI,
            1 * GI,
            2 * GI,
            10 * GI - 16,
            id="allocatable-percentage",
        ),
        # No inactive file: the level is exactly where the working set meets capacity - threshold.
        pytest.param(quantity_threshold("100Mi"), 1 * GI, 1 * GI, 1 * GI, 2 * GI - 100 * MI, id="no-inactive-file"),
        # 100m is a tenth of a byte: the exact sum 5Gi - 0.1 is rounded up once, like Quantity.Value().
        pytest.param(quantity_threshold("100m"), 3 * GI, 1 * GI, 2 * GI, 5 * GI, id="sub-byte-quantity-rounds-up"),
        pytest.param(quantity_threshold("1.5Ki"), 3 * GI, 1 * GI, 2 * GI, 5 * GI - 1536, id="fractional-binary-suffix"),
        # Threshold bigger than capacity plus inactive file: a negative level the adapter refuses to register.
        pytest.param(quantity_threshold("1Gi"), 100 * MI, 100 * MI, 100 * MI, 200 * MI - GI, id="negative-level"),
        # cAdvisor floors the working set at 0, so usage < working set never comes from it; Go's uint64
        # subtraction cast to int64 then gives the same negative inactive file as plain integers.
        pytest.param(
            quantity_threshold("1Mi"), 10 * MI, 5 * MI, 4 * MI, 15 * MI - MI - MI, id="usage-below-working-set"
        ),
    ],
)
def test_memcg_threshold_bytes(
    threshold: Threshold, available: int, working_set: int, usage: int, expected: int
) -> None:
    assert memcg_threshold_bytes(threshold, available, working_set, usage) == expected


@given(
    available=st.integers(0, 2**40),
    working_set=st.integers(0, 2**40),
    inactive=st.integers(0, 2**40),
    threshold_bytes=st.integers(1, 2**40),
)
def test_quantity_level_is_available_plus_usage_minus_threshold(
    available: int, working_set: int, inactive: int, threshold_bytes: int
) -> None:
    # capacity - q + (usage - ws) == available + usage - q: the usage at which available would drop to q.
    threshold = quantity_threshold(str(threshold_bytes))
    usage = working_set + inactive
    assert memcg_threshold_bytes(threshold, available, working_set, usage) == available + usage - threshold_bytes


@given(percent=st.integers(1, 99), capacity=st.integers(1, 2**40), working_fraction=st.floats(0, 1))
def test_percentage_level_never_above_the_exact_share(percent: int, capacity: int, working_fraction: float) -> None:
    # Truncation can only make the threshold quantity smaller than the float32 share, never larger.
    working_set = int(capacity * working_fraction)
    threshold = percentage_threshold(f"{percent}%")
    level = memcg_threshold_bytes(threshold, capacity - working_set, working_set, working_set)
    share = capacity * threshold.value.percentage
    assert capacity - share <= level < capacity - share + 1


@pytest.mark.parametrize(
    ("threshold", "expected"),
    [
        pytest.param(quantity_threshold("1Gi"), "hard memory eviction threshold", id="hard-node"),
        pytest.param(quantity_threshold("1Gi", grace_period_s=30.0), "soft memory eviction threshold", id="soft-node"),
        pytest.param(
            quantity_threshold("1Gi", Signal.ALLOCATABLE_MEMORY_AVAILABLE),
            "hard allocatable memory eviction threshold",
            id="hard-allocatable",
        ),
        pytest.param(
            quantity_threshold("1Gi", Signal.ALLOCATABLE_MEMORY_AVAILABLE, grace_period_s=1.0),
            "soft allocatable memory eviction threshold",
            id="soft-allocatable",
        ),
    ],
)
def test_memcg_notifier_description(threshold: Threshold, expected: str) -> None:
    assert memcg_notifier_description(threshold) == expected


NODE_MEMORY = MemoryStats(available_bytes=3 * GI, working_set_bytes=1 * GI, usage_bytes=2 * GI)
PODS_MEMORY = MemoryStats(available_bytes=4 * GI, working_set_bytes=1 * GI, usage_bytes=3 * GI)


def summary(
    node: MemoryStats | None = NODE_MEMORY, pods: MemoryStats | None = PODS_MEMORY, with_pods: bool = True
) -> Summary:
    containers = {"pods": ContainerStats(name="pods", memory=pods)} if with_pods else {}
    return Summary(node=NodeStats(memory=node, system_containers=MappingProxyType(containers)))


def test_node_threshold_uses_node_memory_and_allocatable_uses_pods_container() -> None:
    assert memory_stats_for(quantity_threshold("1Gi"), summary()) == (3 * GI, 1 * GI, 2 * GI)
    allocatable = quantity_threshold("1Gi", Signal.ALLOCATABLE_MEMORY_AVAILABLE)
    assert memory_stats_for(allocatable, summary()) == (4 * GI, 1 * GI, 3 * GI)
    assert memcg_level_and_usage(quantity_threshold("1Gi"), summary())[0] == 4 * GI
    assert memcg_level_and_usage(allocatable, summary())[0] == 6 * GI


def test_allocatable_without_pods_container_is_the_kubelet_error() -> None:
    allocatable = quantity_threshold("1Gi", Signal.ALLOCATABLE_MEMORY_AVAILABLE)
    with pytest.raises(SampleError) as caught:
        level_of(allocatable, summary(with_pods=False))
    assert caught.value.reason == 'system container "pods" not found in metrics'
    assert caught.value.source == "summary node.systemContainers[pods].memory"
    # The node threshold does not need the pods container.
    assert memcg_level_and_usage(quantity_threshold("1Gi"), summary(with_pods=False))[0] == 4 * GI


@pytest.mark.parametrize(
    ("node", "pods", "signal"),
    [
        pytest.param(None, PODS_MEMORY, Signal.MEMORY_AVAILABLE, id="node-memory-missing"),
        pytest.param(
            MemoryStats(working_set_bytes=GI, usage_bytes=GI), PODS_MEMORY, Signal.MEMORY_AVAILABLE, id="no-available"
        ),
        pytest.param(
            MemoryStats(available_bytes=GI, usage_bytes=GI), PODS_MEMORY, Signal.MEMORY_AVAILABLE, id="no-working-set"
        ),
        pytest.param(
            MemoryStats(available_bytes=GI, working_set_bytes=GI), PODS_MEMORY, Signal.MEMORY_AVAILABLE, id="no-usage"
        ),
        pytest.param(NODE_MEMORY, None, Signal.ALLOCATABLE_MEMORY_AVAILABLE, id="pods-memory-missing"),
        pytest.param(
            NODE_MEMORY, MemoryStats(available_bytes=GI), Signal.ALLOCATABLE_MEMORY_AVAILABLE, id="pods-incomplete"
        ),
    ],
)
def test_incomplete_readings_are_refused(node: MemoryStats | None, pods: MemoryStats | None, signal: Signal) -> None:
    with pytest.raises(SampleError) as caught:
        level_of(quantity_threshold("1Gi", signal), summary(node=node, pods=pods))
    assert caught.value.reason.startswith(
        "summary was incomplete.  Expected MemoryStats and all subfields to be non-nil, but got "
    )


@pytest.mark.parametrize(
    ("last", "now", "due"),
    [
        pytest.param(None, 0.0, True, id="never-refreshed"),
        pytest.param(100.0, 105.0, False, id="five-seconds-later"),
        pytest.param(100.0, 100.0 + NOTIFIER_REFRESH_INTERVAL_S, False, id="exactly-ten-seconds-is-not-enough"),
        pytest.param(100.0, 110.001, True, id="just-over-ten-seconds"),
    ],
)
def test_notifier_refresh_due(last: float | None, now: float, due: bool) -> None:
    assert notifier_refresh_due(last, now) is due


def test_kilobyte_quantities_are_exact() -> None:
    # Quantities are binary exact: 4Ki threshold on 1Mi capacity with 1Ki inactive file.
    assert memcg_threshold_bytes(quantity_threshold("4Ki"), MI - 100 * KI, 100 * KI, 101 * KI) == MI - 4 * KI + KI


def test_level_and_usage_come_from_the_same_readings() -> None:
    stats = MemoryStats(available_bytes=3 * GI, working_set_bytes=1 * GI, usage_bytes=1 * GI + 300 * MI)
    node = NodeStats(memory=stats, system_containers=MappingProxyType({}))
    assert memcg_level_and_usage(quantity_threshold("1Gi"), Summary(node=node)) == (3 * GI + 300 * MI, 1 * GI + 300 * MI)


@pytest.mark.parametrize(
    ("armed", "level", "moved"),
    [
        pytest.param(1000 * MI, 1000 * MI, False, id="same"),
        pytest.param(1000 * MI, 1008 * MI - 1, False, id="less-than-a-step-up"),
        pytest.param(1000 * MI, 1008 * MI, True, id="a-step-up"),
        pytest.param(1000 * MI, 992 * MI, True, id="a-step-down-page-cache-dropped"),
    ],
)
def test_level_moved(armed: int, level: int, moved: bool) -> None:
    assert level_moved(armed, level) is moved


@pytest.mark.parametrize(
    ("armed_watch", "level", "usage", "stale"),
    [
        pytest.param(None, 2 * GI, 1 * GI, True, id="none-yet"),
        pytest.param(1 * GI - 8 * MI, 2 * GI, 1 * GI, False, id="where-it-belongs"),
        pytest.param(1 * GI - 8 * MI, 2 * GI, 1 * GI - 9 * MI, True, id="usage-fell-below-it-fired"),
        pytest.param(1 * GI - 8 * MI, 2 * GI, 1 * GI + 8 * MI, False, id="usage-rose-a-step"),
        pytest.param(1 * GI - 8 * MI, 2 * GI, 1 * GI + 8 * MI + 1, True, id="usage-rose-more-than-a-step"),
        pytest.param(None, 1 * GI + 64 * MI - 1, 1 * GI, False, id="near-the-level-no-registration-delay"),
        pytest.param(1 * GI - 8 * MI, 1 * GI, 2 * GI, True, id="threshold-met-close-it"),
        pytest.param(None, 1 * GI, 1 * GI, False, id="threshold-met-none-armed"),
        pytest.param(1 * GI - 8 * MI, 2 * GI, 4 * MI, True, id="usage-too-low-for-one-close-it"),
        pytest.param(None, 2 * GI, 4 * MI, False, id="usage-too-low-none-armed"),
    ],
)
def test_drop_watch_stale(armed_watch: int | None, level: int, usage: int, stale: bool) -> None:
    assert drop_watch_stale(armed_watch, level, usage) is stale


def test_drop_watch_level_is_a_step_below_usage() -> None:
    assert drop_watch_wanted(2 * GI, 1 * GI) == 1 * GI - 8 * MI
    assert drop_watch_wanted(2 * GI, 8 * MI) == 0


def test_a_threshold_met_in_the_readings_has_no_drop_watch() -> None:
    assert drop_watch_wanted(2 * GI, 1 * GI) == 1 * GI - 8 * MI
    assert drop_watch_wanted(1 * GI, 1 * GI) == 0, "usage at the level: met"
    assert drop_watch_wanted(1 * GI, 2 * GI) == 0


def test_the_working_set_level_is_the_level_without_its_inactive_file() -> None:
    # 4 GiB available, 1 GiB working set, 300 MiB inactive file: capacity 5 GiB, threshold 1 GiB.
    level = memcg_threshold_bytes(quantity_threshold("1Gi"), 4 * GI, 1 * GI, 1 * GI + 300 * MI)
    assert working_set_level(level, 1 * GI + 300 * MI, 1 * GI) == 4 * GI
    percent = Threshold(signal=Signal.MEMORY_AVAILABLE, value=ThresholdValue(percentage=0.1))
    level = memcg_threshold_bytes(percent, 4 * GI + 1, 1 * GI, 1 * GI + 7)
    assert working_set_level(level, 1 * GI + 7, 1 * GI) == memcg_threshold_bytes(percent, 4 * GI + 1, 1 * GI, 1 * GI)


def test_a_lagging_inactive_file_counts_for_no_more_than_usage() -> None:
    # Seen on a real cgroup a moment after 160 MiB of page cache was dropped: usage 1 MiB, memory.stat still
    # saying 129 MiB of inactive file. The level is the working-set level plus what usage holds, not 129 MiB more.
    assert working_set_from(1 * MI, 129 * MI) == 0
    assert level_from(312 * MI, 1 * MI, 129 * MI) == 313 * MI
    assert working_set_from(134 * MI, 129 * MI) == 5 * MI
    assert level_from(312 * MI, 134 * MI, 129 * MI) == 441 * MI, "consistent figures: the whole inactive file"


@pytest.mark.parametrize(
    ("met", "drop_watch", "working_set", "cycle"),
    [
        # Working-set level 4 GiB throughout.
        pytest.param(False, True, 1 * GI, False, id="drop-watch-far-page-cache"),
        pytest.param(False, True, 4 * GI - 64 * MI + 1, True, id="drop-watch-within-64Mi"),
        pytest.param(False, True, 4 * GI - 64 * MI, False, id="drop-watch-64Mi-away"),
        pytest.param(False, False, 4 * GI, True, id="level-not-met-crossed"),
        pytest.param(False, False, 4 * GI - 8 * MI + 1, True, id="level-not-met-within-a-step-a-crossing"),
        pytest.param(False, False, 4 * GI - 8 * MI, False, id="level-not-met-a-step-below-page-cache"),
        pytest.param(False, False, 3 * GI, False, id="level-not-met-far-below-page-cache"),
        pytest.param(True, False, 4 * GI + 100 * MI, False, id="met-level-page-cache-fell"),
        pytest.param(True, False, 4 * GI, False, id="met-level-still-met-at-the-level"),
        pytest.param(True, False, 4 * GI - 1, True, id="met-level-no-longer-met"),
        pytest.param(True, True, 4 * GI + 100 * MI, False, id="met-a-drop-watch-not-closed-yet"),
    ],
)
def test_firing_needs_cycle(met: bool, drop_watch: bool, working_set: int, cycle: bool) -> None:
    assert firing_needs_cycle(met, drop_watch=drop_watch, working_set_level_bytes=4 * GI,
                              working_set_bytes=working_set) is cycle


def test_a_level_is_armed_with_the_lower_of_the_two_inactive_files() -> None:
    # Seen on the root memory cgroup beside a writer: memory.stat still counting a deleted file's 256 MiB of page
    # cache, /proc/meminfo no longer. The level is armed as if the file were gone (the earliest crossing).
    assert armed_inactive_file(1086 * MI, 830 * MI) == 830 * MI
    # Page cache just written, not yet in memory.stat: the decision reads memory.stat, so the level does too.
    assert armed_inactive_file(830 * MI, 1086 * MI) == 830 * MI
    assert armed_inactive_file(830 * MI, None) == 830 * MI, "no fresh figure (a cgroup below the root)"


@pytest.mark.parametrize(
    ("usage", "stat_inactive", "fresh_inactive", "behind"),
    [
        # Working-set level 4 GiB throughout.
        pytest.param(5 * GI, 1 * GI + 256 * MI, 1 * GI, True, id="met-on-fresh-not-on-stat"),
        pytest.param(5 * GI + 8 * MI, 1 * GI + 256 * MI, 1 * GI + 8 * MI, True, id="met-on-fresh-exactly-at-the-level"),
        pytest.param(5 * GI, 1 * GI + 8 * MI, 1 * GI, False, id="a-step-apart-is-noise"),
        pytest.param(5 * GI, 1 * GI + 9 * MI, 1 * GI, True, id="more-than-a-step-apart"),
        pytest.param(5 * GI, 1 * GI, 1 * GI, False, id="met-on-both"),
        pytest.param(5 * GI, 1 * GI + 256 * MI, 1 * GI + 200 * MI, False, id="not-met-on-either"),
        pytest.param(5 * GI, 1 * GI, 1 * GI + 256 * MI, False, id="stat-behind-the-other-way"),
        pytest.param(5 * GI, 2 * GI, None, False, id="no-fresh-figure"),
    ],
)
def test_stats_behind(usage: int, stat_inactive: int, fresh_inactive: int | None, behind: bool) -> None:
    assert stats_behind(4 * GI, usage, stat_inactive, fresh_inactive) is behind


@pytest.mark.parametrize(
    ("level", "usage", "armed", "met", "unwatched"),
    [
        pytest.param(900 * MI, 500 * MI, 1000 * MI, False, True, id="lowered-the-old-level-is-too-high"),
        pytest.param(900 * MI, 500 * MI, 800 * MI, False, False, id="raised-the-old-level-fires-first"),
        pytest.param(900 * MI, 850 * MI, 800 * MI, False, True, id="raised-after-the-old-one-fired"),
        pytest.param(900 * MI, 500 * MI, None, False, True, id="none-armed"),
        pytest.param(900 * MI, 950 * MI, 1000 * MI, False, False, id="usage-already-past-the-new-level"),
        pytest.param(900 * MI, 500 * MI, 1000 * MI, True, False, id="met-usage-falling-is-announced"),
    ],
)
def test_level_unwatched_until_registered(level: int, usage: int, armed: int | None, met: bool,
                                          unwatched: bool) -> None:
    assert level_unwatched_until_registered(level, usage, armed, met) is unwatched


def test_the_approach_watch_sits_halfway_to_the_level_until_it_is_near() -> None:
    assert approach_watch_level(3 * GI, 1 * GI) == 2 * GI
    assert approach_watch_level(1 * GI + 129 * MI, 1 * GI) == 1 * GI + 64 * MI + MI // 2
    assert approach_watch_level(1 * GI + 128 * MI, 1 * GI) == 0, "within 128 MiB: read closely instead"
    assert approach_watch_level(1 * GI, 2 * GI) == 0, "met: none"


@pytest.mark.parametrize(
    ("armed", "level", "usage", "stale"),
    [
        pytest.param(None, 3 * GI, 1 * GI, True, id="none-armed-one-wanted"),
        pytest.param(None, 1 * GI + 100 * MI, 1 * GI, False, id="none-armed-none-wanted"),
        pytest.param(2 * GI, 1 * GI + 100 * MI, 1 * GI, True, id="armed-none-wanted"),
        pytest.param(2 * GI, 3 * GI, 2 * GI, True, id="usage-passed-it"),
        pytest.param(2 * GI, 3 * GI, 1 * GI + 100 * MI, False, id="usage-rose-less-than-128Mi"),
        pytest.param(2 * GI, 3 * GI, 1 * GI + 130 * MI, True, id="usage-rose-more-than-128Mi"),
        pytest.param(2 * GI, 3 * GI - 200 * MI, 1 * GI, True, id="the-level-fell-200Mi"),
    ],
)
def test_approach_watch_stale(armed: int | None, level: int, usage: int, stale: bool) -> None:
    assert approach_watch_stale(armed, level, usage) is stale


def test_close_reading_within_128Mi_of_a_threshold_not_met() -> None:
    assert close_reading_wanted(False, 4 * GI, 4 * GI - 127 * MI)
    assert not close_reading_wanted(False, 4 * GI, 4 * GI - 128 * MI)
    assert not close_reading_wanted(True, 4 * GI, 4 * GI - 1), "met: the decision already stands on it"


@pytest.mark.parametrize(
    ("met", "behind", "crossed_at", "until"),
    [
        pytest.param(False, True, None, 12.5, id="statistics-behind-2.5s-from-now"),
        pytest.param(False, False, 9.0, 11.5, id="crossed-lately-not-met-2.5s-from-the-crossing"),
        pytest.param(True, False, 9.0, None, id="crossed-and-met"),
        pytest.param(False, False, 7.5, None, id="crossed-too-long-ago"),
        pytest.param(False, False, None, None, id="nothing"),
        pytest.param(False, True, 9.0, 12.5, id="behind-wins"),
    ],
)
def test_close_reading_until(met: bool, behind: bool, crossed_at: float | None, until: float | None) -> None:
    assert close_reading_until(10.0, met=met, behind=behind, crossed_at=crossed_at) == until
