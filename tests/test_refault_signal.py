"""evictd's refault signal (`evictd.io/memory.refault`, `evictd.core.refault`) as the engine decides on it: met when
the share of the node's memory refaulted within ~10 s is at or over the threshold, absent on the first reading or
after the count went back, held back by the stall gate without node-wide reclaim (counted with the gate off), and
waiting for the stall settle rule after an eviction for it. Pure: `assess` on scripted Summaries with a fake clock;
then the configuration, `simulate`, the recorded Summary and /proc/vmstat's reader on fixture files."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from builders import Gi, Mi, pod, pod_stats, stamp, summary
from cycle_reports import simulate_steps
from evictd.adapters.procfs import PAGE_BYTES, vmstat_counts
from evictd.config import load_configuration
from evictd.core.engine import (
    EngineConfig,
    EngineState,
    Eviction,
    NoneStarved,
    ReclaimThenEvict,
    assess,
    note_evictions,
)
from evictd.core.engine_rules import STALL_SETTLE_S
from evictd.core.errors import ConfigError
from evictd.core.fs_layout import FsLayout
from evictd.core.pod_parser import pod_from_dict
from evictd.core.signals import Signal
from evictd.core.stall_gate import SCAN_PAGE_BYTES
from evictd.core.summary_parser import summary_from_dict
from evictd.core.thresholds import parse_stall_thresholds, parse_threshold_config
from evictd.record.summary_json import summary_to_dict
from evictd.run.composition import check_settings

REFAULT = "evictd.io/memory.refault"
HOG = pod("hog", requests={"memory": "100Mi"}, priority=0)
OTHER = pod("other", requests={"memory": "1Gi"}, priority=0)
PODS = [HOG, OTHER]
STATS = [pod_stats(HOG, memory=1 * Gi), pod_stats(OTHER, memory=500 * Mi)]
# The node: 5 GiB available + 20 GiB working set = 25 GiB of memory; 1% of it is 256 MiB.
ONE_PERCENT = 256 * Mi
# Global scans of 1% of the node's memory within the window: the stall gate's floor of a shortage (in pages).
SHORTAGE = ONE_PERCENT // SCAN_PAGE_BYTES
HARD = parse_stall_thresholds({REFAULT: "5%"}, {}, {}, {})[0]
UNREAD = object()


def node(second: int, *, refaulted: object, scanned: object = 0, activated: object = UNREAD) -> dict[str, Any]:
    """A Summary document whose node has refaulted `refaulted` bytes since boot (activated `activated`) with the global
    scan count `scanned` (UNREAD: not in it, as when /proc/vmstat could not be read); the hog grows 1 MiB a second."""
    stats = [pod_stats(HOG, memory=1 * Gi + second * Mi), STATS[1]]
    document = summary(memory=5 * Gi, memory_ws=20 * Gi, time=stamp(second), pods=stats)
    reclaim: dict[str, Any] = {}
    for key, value in (("globalScanPages", scanned), ("refaultFileBytes", refaulted), ("activateFileBytes", activated)):
        if value is not UNREAD:
            reclaim[key] = value
    if reclaim:
        document["node"]["memory"]["reclaim"] = reclaim
    return document


def cycles(readings: list[tuple[float, dict[str, Any]]], *, thresholds: tuple[Any, ...] = (HARD,), gate: bool = True,
           state: EngineState | None = None) -> tuple[EngineState, list[Any]]:
    config = EngineConfig(thresholds=thresholds, stall_requires_node_reclaim=gate)
    state, assessments = state or EngineState(), []
    for now, document in readings:
        state, assessment = assess(state, config, FsLayout(), summary_from_dict(document),
                                   [pod_from_dict(p) for p in PODS], now)
        assessments.append(assessment)
    return state, assessments


def met(assessment: Any) -> list[str]:
    return [str(status.threshold.signal) for status in assessment.thresholds]


@pytest.mark.parametrize(("refaulted_percent", "scans", "gate", "expected", "held"), [
    pytest.param(6, (1000, 1000 + SHORTAGE), True, [REFAULT], False, id="over-with-global-reclaim-met"),
    pytest.param(5, (1000, 1000 + SHORTAGE), True, [REFAULT], False, id="at-the-threshold-met"),
    pytest.param(4, (1000, 1000 + SHORTAGE), True, [], False, id="under-not-met"),
    pytest.param(6, (1000, 999 + SHORTAGE), True, [], True, id="over-with-reclaim-under-the-floor-held-back"),
    pytest.param(6, (1000, 1000), True, [], True, id="over-without-global-reclaim-held-back"),
    pytest.param(6, (1000, 1000), False, [REFAULT], False, id="gate-off-met-on-the-share-alone"),
])
def test_the_rule(refaulted_percent: int, scans: tuple[int, int], gate: bool, expected: list[str],
                  held: bool) -> None:
    _, (first, second) = cycles([(0.0, node(0, refaulted=10 * Gi, scanned=scans[0])),
                                 (10.0, node(10, refaulted=10 * Gi + refaulted_percent * ONE_PERCENT,
                                             scanned=scans[1]))], gate=gate)
    assert met(first) == [] and Signal(REFAULT) not in first.observations  # the first reading: absent, not 0
    assert met(second) == expected
    assert second.observations[Signal(REFAULT)].available.ceil_int() == 10_000 - refaulted_percent * 100
    if expected:
        assert isinstance(second.next_step, ReclaimThenEvict) and second.next_step.threshold == HARD
        assert second.next_step.resource == "memory"
    else:
        assert isinstance(second.next_step, NoneStarved)
    if held:  # the gate is what keeps it from being met: without it, this case is the gate-off one
        (report,) = second.stall_held_back
        assert (report.threshold, report.share_percent, report.global_scan_pages) == (HARD, 6.0, scans[1])
        assert report.shortage is not None
        assert (report.shortage.scanned_pages, report.shortage.floor_pages) == (scans[1] - scans[0], SHORTAGE)
    else:
        assert second.stall_held_back == ()


def test_a_counter_that_went_back_is_a_new_baseline_absent_until_the_next_span() -> None:
    _, assessments = cycles([(0.0, node(0, refaulted=10 * Gi, scanned=0)),
                             (10.0, node(10, refaulted=1 * Gi, scanned=SHORTAGE)),
                             (20.0, node(20, refaulted=1 * Gi + 6 * ONE_PERCENT, scanned=2 * SHORTAGE))])
    assert [Signal(REFAULT) in a.observations for a in assessments] == [False, False, True]
    assert [met(a) for a in assessments] == [[], [], [REFAULT]]


def test_no_refault_count_or_no_vmstat_makes_the_signal_absent_never_guessed() -> None:
    _, (_, no_count) = cycles([(0.0, node(0, refaulted=UNREAD)), (10.0, node(10, refaulted=UNREAD, scanned=9))],
                              gate=False)
    assert Signal(REFAULT) not in no_count.observations and met(no_count) == []
    # /proc/vmstat not read at all (no reclaim block): the gate's figure is unknown too, the signal dropped.
    _, (_, _, unread) = cycles([(0.0, node(0, refaulted=0)), (10.0, node(10, refaulted=0, scanned=5)),
                                (20.0, node(20, refaulted=UNREAD, scanned=UNREAD))], gate=True)
    assert Signal(REFAULT) not in unread.observations and met(unread) == [] and unread.stall_held_back == ()
    assert Signal("memory.available") in unread.observations


def test_activations_are_reported_with_a_held_back_threshold() -> None:
    _, (_, second) = cycles([(0.0, node(0, refaulted=0, activated=0)),
                             (10.0, node(10, refaulted=6 * ONE_PERCENT, activated=2 * ONE_PERCENT))])
    (report,) = second.stall_held_back
    assert (report.share_percent, report.activated_percent) == (6.0, 2.0)


def test_after_an_eviction_for_it_the_settle_rule_holds_the_next_one_back() -> None:
    soft = parse_stall_thresholds({}, {REFAULT: "3%"}, {REFAULT: "0s"}, {})
    readings = [(0.0, node(0, refaulted=0, scanned=0)),
                (10.0, node(10, refaulted=6 * ONE_PERCENT, scanned=SHORTAGE))]
    state, (_, decided) = cycles(readings, thresholds=(HARD, *soft))
    assert isinstance(decided.next_step, ReclaimThenEvict)
    eviction = Eviction(pod=pod_from_dict(HOG), signal=REFAULT, grace_period_override_s=1, effective_grace_period_s=1,
                        message="", annotations={}, conditions=(), threshold=HARD)
    state = note_evictions(state, [eviction], 10.0)
    assert state.stall_evicted_at == 10.0
    # 1 s later, still refaulting with reclaim: met, but waiting for the last eviction to settle.
    _, (settling,) = cycles([(11.0, node(11, refaulted=12 * ONE_PERCENT, scanned=2 * SHORTAGE))],
                            thresholds=(HARD, *soft), state=state)
    assert REFAULT in met(settling) and settling.stall_settling == (Signal(REFAULT),)
    assert isinstance(settling.next_step, NoneStarved)
    assert settling.settle_ends_in_s == pytest.approx(STALL_SETTLE_S - 1.0)


def test_configuration_takes_it_in_the_stall_maps_and_refuses_a_bad_share(tmp_path: Path) -> None:
    path = tmp_path / "evictd.yaml"
    head = "apiVersion: evictd.io/v1alpha1\nkind: EvictdConfiguration\n"
    path.write_text(head + f"stallEvictionSoft: {{{REFAULT}: '5%'}}\nstallEvictionSoftGracePeriod: {{{REFAULT}: 30s}}\n")
    (threshold,) = [t for t in load_configuration([str(path)]).eviction.thresholds() if t.signal == REFAULT]
    assert threshold.grace_period_s == 30.0
    for value in ("101%", "5", "2.345%"):
        path.write_text(head + f"stallEvictionHard: {{{REFAULT}: '{value}'}}\n")
        with pytest.raises(ConfigError) as caught:
            load_configuration([str(path)])
        assert (caught.value.key, caught.value.value) == (f"EvictdConfiguration: stallEvictionHard[{REFAULT}]", value)
        assert "share of the node's memory refaulted in 10 s" in str(caught.value)


def test_the_kubelets_summary_cannot_feed_it(tmp_path: Path) -> None:
    path = tmp_path / "evictd.yaml"
    path.write_text("apiVersion: evictd.io/v1alpha1\nkind: EvictdConfiguration\nstatsSource: kubelet\n"
                    f"kubeletSummaryURL: https://127.0.0.1:10250/stats/summary\ncgroupfsPath: {tmp_path}\n"
                    f"stallRequiresNodeReclaim: false\nstallEvictionHard: {{{REFAULT}: '5%'}}\n")
    with pytest.raises(ConfigError) as caught:
        check_settings(load_configuration([str(path)]))
    assert (caught.value.key, caught.value.value) == ("statsSource", "kubelet")
    assert "no refault counts" in str(caught.value)


def test_simulate_shows_it_as_the_stall_signals_held_back_then_evicting() -> None:
    config = {"evictionHard": {}, "stallEvictionHard": {REFAULT: "5%"}}
    counts = [(0, 0, 1000), (10, 6, 1000), (20, 12, 1000), (30, 18, 1000 + SHORTAGE)]
    steps = [{"at": at, "summary": node(at, refaulted=percent * ONE_PERCENT, scanned=scanned), "pods": PODS}
             for at, percent, scanned in counts]
    out = simulate_steps({"config": config, "pods": PODS, "steps": steps})
    assert [step.get("stallHeldBack") for step in out] == [None, [f"{REFAULT}>=5%"], [f"{REFAULT}>=5%"], None]
    assert [[e["name"] for e in step["evicted"]] for step in out] == [[], [], [], ["hog"]]


def test_the_counts_round_trip_through_a_recorded_summary() -> None:
    parsed = summary_from_dict(node(0, refaulted=4096, activated=8192, scanned=3))
    assert summary_from_dict(summary_to_dict(parsed)) == parsed
    assert summary_to_dict(parsed)["node"]["memory"]["reclaim"] == {
        "globalScanPages": 3, "refaultFileBytes": 4096, "activateFileBytes": 8192}


@pytest.mark.parametrize(("lines", "expected"), [
    pytest.param("workingset_refault_anon 7\nworkingset_refault_file 10\nworkingset_activate_anon 1\n"
                 "workingset_activate_file 4\n", (10, 4), id="linux-5.9-and-later"),
    pytest.param("workingset_refault 10\nworkingset_activate 4\n", (10, 4), id="before-5.9"),
    pytest.param("", (None, None), id="no-counts-absent"),
])
def test_vmstat_counts(tmp_path: Path, lines: str, expected: tuple[int | None, int | None]) -> None:
    (tmp_path / "vmstat").write_text(f"nr_free_pages 5\n{lines}pgscan_kswapd 2\npgscan_direct 3\n")
    counts = vmstat_counts(tmp_path)
    assert counts.global_scan_pages == 5
    assert (counts.refault_file_bytes, counts.activate_file_bytes) == tuple(
        None if pages is None else pages * PAGE_BYTES for pages in expected)


def test_after_any_eviction_refaults_read_before_it_settled_are_no_evidence() -> None:
    """Issue 61: the refault signal evicted the Guaranteed pod 7.7-8.2 s after a memory.available eviction of the
    leaker, on refaults of daemons re-reading their files and counted from before it. Any eviction now starts the
    settle wait, and after it only refaults (and scans) read after the settle end count."""
    (memory,) = parse_threshold_config([], {"memory.available": "1Gi"}, {}, {}, {})
    readings = [(0.0, node(0, refaulted=0, scanned=0)),
                (10.0, node(10, refaulted=6 * ONE_PERCENT, scanned=SHORTAGE))]
    state, (_, decided) = cycles(readings)
    assert isinstance(decided.next_step, ReclaimThenEvict)
    leaker = Eviction(pod=pod_from_dict(HOG), signal="memory.available", grace_period_override_s=1,
                      effective_grace_period_s=1, message="", annotations={}, conditions=(), threshold=memory)
    state = note_evictions(state, [leaker], 10.0)
    # 1 s later: the refault threshold waits for that eviction to settle, as after one of its own.
    state, (settling,) = cycles([(11.0, node(11, refaulted=8 * ONE_PERCENT, scanned=2 * SHORTAGE))], state=state)
    assert settling.stall_settling == (Signal(REFAULT),) and isinstance(settling.next_step, NoneStarved)
    # 7.7 s and 8.2 s after it, still refaulting 6% per 10 s: the readings since the settle end (14 s) span too
    # little for a figure, so the signal is absent, not met on the refaults from before.
    for at, percent in ((17.7, 12.6), (18.2, 12.9)):
        state, (after,) = cycles([(at, node(int(at), refaulted=round(percent * ONE_PERCENT),
                                            scanned=3 * SHORTAGE))], state=state)
        assert Signal(REFAULT) not in after.observations and met(after) == []
