"""Pods not measured yet under disk pressure (`evictd.core.disk_figures`) and how `choose_eviction` uses them.

Tier 1: Summary documents through the real parser, one `assess` and `choose_eviction` per case.
"""

from __future__ import annotations

from typing import Any

import pytest

from builders import Gi, Mi, fs, pod, pod_stats, summary
from evictd.core.disk_figures import needs_walked_figures, pods_to_wait_for, unmeasured_pods
from evictd.core.engine import (
    AWAITING_DISK_FIGURES,
    EngineConfig,
    EngineState,
    EvictionChoice,
    ReclaimThenEvict,
    assess,
    choose_eviction,
    layout_of,
    still_met,
)
from evictd.core.fs_layout import FsLayout
from evictd.core.kubelet_config import EvictionSettings
from evictd.core.pod_parser import pod_from_dict
from evictd.core.signals import Signal
from evictd.core.summary import Summary, pod_stats_lookup
from evictd.core.summary_parser import summary_from_dict

GUARANTEED = pod("db", requests={"cpu": "1", "memory": "1Gi"}, limits={"cpu": "1", "memory": "1Gi"})
FILLER = pod("filler", volumes=[{"name": "scratch", "emptyDir": {}}])
# Listing order: the Guaranteed pod first, as in issue 36's disk-fill-fast.
PODS = [pod_from_dict(GUARANTEED), pod_from_dict(FILLER)]
SHORT = fs(1 * Gi, 100 * Gi)  # 1% free: nodefs.available<10% met
PLENTY = fs(80 * Gi, 100 * Gi)


def node_summary(pods: list[dict[str, Any]], nodefs: dict[str, Any] = SHORT) -> Summary:
    return summary_from_dict(summary(nodefs=nodefs, pods=pods))


# The filler's stats with the walker's figures; each pod's stats without them (memory only: not measured yet).
MEASURED = [pod_stats(GUARANTEED, memory=100 * Mi, logs=4096, ephemeral=4096),
            pod_stats(FILLER, memory=10 * Mi, logs=4096, volumes={"scratch": 3 * Gi}, ephemeral=3 * Gi + 4096)]
NOT_MEASURED = [pod_stats(GUARANTEED, memory=100 * Mi), pod_stats(FILLER, memory=10 * Mi)]


def disk_choice(stats: Summary, waited_for: frozenset[str] | None) -> EvictionChoice:
    """The eviction choice of one cycle under a hard nodefs.available<10% on `stats`."""
    config = EngineConfig.from_settings(EvictionSettings(hard={"nodefs.available": "10%"},
                                                         local_storage_capacity_isolation=False))
    state, assessment = assess(EngineState(), config, FsLayout(), stats, PODS, now=0.0)
    step = assessment.next_step
    assert isinstance(step, ReclaimThenEvict)
    return choose_eviction(config, layout_of(state), step, assessment.observations, PODS, stats,
                           disk_figures_waited_for=waited_for)


@pytest.mark.parametrize(
    ("signal", "layout", "needed"),
    [
        pytest.param(Signal.NODEFS_AVAILABLE, FsLayout(), True, id="nodefs-one-filesystem"),
        pytest.param(Signal.NODEFS_INODES_FREE, FsLayout(), True, id="nodefs-inodes"),
        pytest.param(Signal.IMAGEFS_AVAILABLE, FsLayout(), True, id="imagefs-on-nodefs"),
        pytest.param(Signal.NODEFS_AVAILABLE, FsLayout(dedicated_imagefs=True), True, id="nodefs-with-imagefs"),
        pytest.param(Signal.IMAGEFS_AVAILABLE, FsLayout(dedicated_imagefs=True), False,
                     id="dedicated-imagefs-ranks-writable-layers-only"),
        pytest.param(Signal.MEMORY_AVAILABLE, FsLayout(), False, id="memory"),
        pytest.param(Signal.PID_AVAILABLE, FsLayout(), False, id="pids"),
    ],
)
def test_which_rankings_need_the_walkers_figures(signal: Signal, layout: FsLayout, needed: bool) -> None:
    assert needs_walked_figures(signal, layout) is needed


def test_unmeasured_pods_are_those_with_stats_but_no_ephemeral_storage_block() -> None:
    stats = node_summary([MEASURED[0], NOT_MEASURED[1]])
    lookup = pod_stats_lookup(stats, PODS)
    assert [p.name for p in unmeasured_pods(Signal.NODEFS_AVAILABLE, FsLayout(), PODS, lookup)] == ["filler"]
    assert unmeasured_pods(Signal.MEMORY_AVAILABLE, FsLayout(), PODS, lookup) == ()
    # A pod without any stats entry is the kubelet's "no stats" case (ranked first), not a pod waiting for figures.
    lookup = pod_stats_lookup(node_summary([MEASURED[0]]), PODS)
    assert unmeasured_pods(Signal.NODEFS_AVAILABLE, FsLayout(), PODS, lookup) == ()


@pytest.mark.parametrize(
    ("waited_for", "expected"),
    [
        pytest.param(None, [], id="nothing-to-wait-with"),
        pytest.param(frozenset(), ["db", "filler"], id="none-waited-for"),
        pytest.param(frozenset({"uid-db"}), ["filler"], id="one-waited-for"),
        pytest.param(frozenset({"uid-db", "uid-filler"}), [], id="all-waited-for"),
    ],
)
def test_pods_to_wait_for_are_the_unmeasured_ones_not_waited_for_yet(
        waited_for: frozenset[str] | None, expected: list[str]) -> None:
    assert [p.name for p in pods_to_wait_for(PODS, waited_for)] == expected


def test_the_first_cycle_ranks_nobody_while_no_pod_is_measured_and_names_the_pods_to_wait_for() -> None:
    choice = disk_choice(node_summary(NOT_MEASURED), waited_for=frozenset())
    assert choice.eviction is None and choice.ranking == ()
    assert choice.withheld == AWAITING_DISK_FIGURES
    assert [p.name for p in choice.awaiting] == [p.name for p in choice.unmeasured] == ["db", "filler"]


def test_once_measured_the_filler_is_evicted_never_the_guaranteed_pod() -> None:
    choice = disk_choice(node_summary(MEASURED), waited_for=frozenset())
    assert choice.awaiting == () and choice.unmeasured == ()
    assert choice.eviction is not None and choice.eviction.pod.name == "filler"


def test_after_the_wait_evictd_ranks_on_what_it_has_and_names_the_pods_still_unmeasured() -> None:
    choice = disk_choice(node_summary(NOT_MEASURED), waited_for=frozenset({"uid-db", "uid-filler"}))
    assert choice.awaiting == () and [p.name for p in choice.unmeasured] == ["db", "filler"]
    # Both count as using no disk: the tie goes to listing order, as in the kubelet.
    assert choice.eviction is not None and choice.eviction.pod.name == "db"


def test_without_anything_to_wait_with_the_ranking_is_the_kubelets() -> None:
    choice = disk_choice(node_summary(NOT_MEASURED), waited_for=None)
    assert choice.awaiting == () and choice.eviction is not None and choice.eviction.pod.name == "db"
    assert [p.name for p in choice.unmeasured] == ["db", "filler"]


def test_still_met_reads_the_steps_thresholds_on_the_stats_read_after_the_wait() -> None:
    config = EngineConfig.from_settings(EvictionSettings(hard={"nodefs.available": "10%"},
                                                         local_storage_capacity_isolation=False))
    _, assessment = assess(EngineState(), config, FsLayout(), node_summary(NOT_MEASURED), PODS, now=0.0)
    step = assessment.next_step
    assert isinstance(step, ReclaimThenEvict)
    assert still_met(step, node_summary(MEASURED))
    assert not still_met(step, node_summary(MEASURED, nodefs=PLENTY))
