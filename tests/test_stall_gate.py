"""The stall gate (`evictd.core.stall_gate`): a memory stall threshold counts only while the node is in node-wide
reclaim (/proc/vmstat's global scan count grew within STALL_RECLAIM_WINDOW_S), or, for the pods cgroup's stall
signals, while the pods cgroup hit its own limit; unreadable counters make the stall signal absent; the gate off
decides as before. Pure: `assess` on scripted Summaries with a fake clock, and `simulate` for what it shows."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from builders import Gi, Mi, pod, pod_stats, stamp, summary
from cycle_reports import simulate_steps
from evictd.config import load_configuration
from evictd.core.engine import EngineConfig, EngineState, ReclaimThenEvict, assess, reclaim_succeeded
from evictd.core.engine_rules import STALL_SETTLE_S
from evictd.core.errors import ConfigError
from evictd.core.fs_layout import FsLayout
from evictd.core.kubelet_config import EvictionSettings
from evictd.core.pod_parser import pod_from_dict
from evictd.core.settled import near_crossing
from evictd.core.signals import Signal
from evictd.core.stall_gate import (
    SCAN_PAGE_BYTES,
    SHORTAGE_AVAILABLE_SHARE,
    SHORTAGE_SCAN_SHARE,
    STALL_RECLAIM_WINDOW_S,
    CounterTrend,
    ScanSample,
    next_scan_samples,
    next_trend,
    scanned_in_window,
    shortage_of,
    wake_may_open,
)
from evictd.core.summary import MemoryStats, signal_observations
from evictd.core.summary_parser import summary_from_dict
from evictd.core.thresholds import parse_stall_thresholds
from evictd.record.documents import kubelet_config_document
from evictd.record.summary_json import summary_to_dict

SOME = "evictd.io/memory.stall.some"
PODS_SOME = "evictd.io/allocatableMemory.stall.some"
HOG = pod("hog", requests={"memory": "100Mi"}, priority=0)
OTHER = pod("other", requests={"memory": "1Gi"}, priority=0)
PODS = [HOG, OTHER]
STATS = [pod_stats(HOG, memory=1 * Gi), pod_stats(OTHER, memory=500 * Mi)]
NODE_STALL = parse_stall_thresholds({SOME: "10%"}, {}, {}, {})[0]
PODS_STALL = parse_stall_thresholds({PODS_SOME: "10%"}, {}, {}, {})[0]
UNREAD = object()  # a counter not in the Summary (not readable)
# A small node short of memory (a quarter available): 1,000 pages scanned within the window are a shortage on it.
NODE_MEMORY = 256 * Mi
NODE_AVAILABLE = 64 * Mi
HOG_GROWTH = 16 * Mi  # the hog grows this much a reading: a stall may evict it, and only it


def psi(some10: float) -> dict[str, Any]:
    return {"some": {"total": 1000, "avg10": some10, "avg60": 0.0, "avg300": 0.0},
            "full": {"total": 500, "avg10": 0.0, "avg60": 0.0, "avg300": 0.0}}


def stalled(second: int, *, share: float = 30.0, scanned: object = 0, limit_events: object = UNREAD,
            pods_share: float | None = None) -> dict[str, Any]:
    """A Summary document of a node stalled `share`% (`some` avg10) with the global scan count `scanned` and, for the
    pods cgroup (stalled `pods_share`%), its `max` events `limit_events`; the hog `HOG_GROWTH` bigger each `second`."""
    document = summary(memory=NODE_AVAILABLE, memory_ws=NODE_MEMORY - NODE_AVAILABLE, time=stamp(second),
                       pods=[pod_stats(HOG, memory=1 * Gi + second * HOG_GROWTH), STATS[1]],
                       allocatable=16 * Gi if pods_share is not None else None)
    memory = document["node"]["memory"]
    memory["psi"] = psi(share)
    if scanned is not UNREAD:
        memory["reclaim"] = {"globalScanPages": scanned}
    if pods_share is not None:
        pods_memory = document["node"]["systemContainers"][0]["memory"]
        pods_memory["psi"] = psi(pods_share)
        if limit_events is not UNREAD:
            pods_memory["reclaim"] = {"limitEvents": limit_events}
    return document


def cycles(readings: list[tuple[float, dict[str, Any]]], *, thresholds: tuple[Any, ...] = (NODE_STALL,),
           gate: bool = True) -> tuple[EngineState, list[Any]]:
    """Assess each (now, Summary document) in turn; return the last state and every assessment."""
    config = EngineConfig(thresholds=thresholds, stall_requires_node_reclaim=gate)
    state, assessments = EngineState(), []
    pods = [pod_from_dict(p) for p in PODS]
    for now, document in readings:
        state, assessment = assess(state, config, FsLayout(), summary_from_dict(document), pods, now)
        assessments.append(assessment)
    return state, assessments


def met(assessment: Any) -> list[str]:
    return [str(status.threshold.signal) for status in assessment.thresholds]


# --- the rule ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("second_scanned", "second_at", "gate", "expected"), [
    pytest.param(5000, 100.0, True, [SOME], id="share-met-and-global-reclaim-within-the-window-met"),
    pytest.param(1000, 100.0, True, [], id="share-met-no-global-reclaim-held-back"),
    pytest.param(1000, 100.0, False, [SOME], id="gate-off-met-as-before"),
])
def test_a_node_stall_threshold_counts_only_with_global_reclaim(second_scanned: int, second_at: float, gate: bool,
                                                                  expected: list[str]) -> None:
    _, (first, second) = cycles([(90.0, stalled(0, scanned=1000)), (second_at, stalled(1, scanned=second_scanned))],
                                gate=gate)
    assert met(first) == ([SOME] if not gate else [])  # the first reading is a baseline, not an increase
    assert met(second) == expected
    if expected:
        assert isinstance(second.next_step, ReclaimThenEvict) and second.next_step.threshold == NODE_STALL
        assert second.stall_held_back == ()
    else:
        assert second.next_step.__class__.__name__ == "NoneStarved"
        (held,) = second.stall_held_back
        assert (held.threshold, held.share_percent, held.global_scan_pages) == (NODE_STALL, 30.0, 1000)
        assert held.global_reclaim_s_ago is None  # none seen since evictd started


def test_global_reclaim_older_than_the_window_holds_the_threshold_back() -> None:
    window = STALL_RECLAIM_WINDOW_S
    _, assessments = cycles([(0.0, stalled(0, scanned=1000)), (5.0, stalled(1, scanned=2000)),
                             (5.0 + window, stalled(2, scanned=2000)), (5.1 + window, stalled(3, scanned=2000))])
    # At 15.0 the scans of the window (since the reading at 5.0) are none: the shortage is over.
    assert [met(a) for a in assessments] == [[], [SOME], [], []]
    (held,) = assessments[3].stall_held_back
    assert held.global_reclaim_s_ago == pytest.approx(window + 0.1)
    assert held.global_scan_pages == 2000
    assert held.shortage is not None and held.shortage.scanned_pages == 0


def test_unreadable_counters_make_the_stall_signal_absent_never_guessed() -> None:
    state, assessments = cycles([(0.0, stalled(0, scanned=1000)), (1.0, stalled(1, scanned=5000)),
                                 (2.0, stalled(2, scanned=UNREAD))])
    assert met(assessments[1]) == [SOME]
    last = assessments[2]
    assert met(last) == [] and Signal(SOME) not in last.observations  # as a figure not read: no observation
    assert last.stall_held_back == ()  # not held back: absent
    assert Signal("memory.available") in last.observations  # the other signals are untouched
    # The last counter is kept: read again and unchanged, the increase 2 s ago still opens the gate.
    assert state.stall_gate.global_scan == CounterTrend(5000, 1.0, read_at=1.0, grew_after=0.0)
    _, (again,) = cycles_from(state, [(3.0, stalled(3, scanned=5000))])
    assert met(again) == [SOME]


def cycles_from(state: EngineState, readings: list[tuple[float, dict[str, Any]]]) -> tuple[EngineState, list[Any]]:
    config = EngineConfig(thresholds=(NODE_STALL,))
    assessments = []
    for now, document in readings:
        state, assessment = assess(state, config, FsLayout(), summary_from_dict(document),
                                   [pod_from_dict(p) for p in PODS], now)
        assessments.append(assessment)
    return state, assessments


@pytest.mark.parametrize(("limit_events", "scanned", "expected"), [
    pytest.param((10, 25), (1000, 1000), [PODS_SOME], id="pods-cgroup-hit-its-limit-met"),
    pytest.param((10, 10), (1000, 1000), [], id="neither-held-back"),
    pytest.param((UNREAD, UNREAD), (1000, 3000), [PODS_SOME], id="no-limit-events-global-reclaim-opens"),
    pytest.param((UNREAD, UNREAD), (1000, 1000), [], id="no-limit-events-no-global-reclaim-held-back"),
    pytest.param((10, 25), (1000, UNREAD), [PODS_SOME], id="limit-hit-opens-without-vmstat"),
    pytest.param((10, 10), (1000, UNREAD), [], id="no-limit-hit-without-vmstat-absent"),
])
def test_an_allocatable_stall_threshold_counts_with_the_pods_cgroup_at_its_limit_or_global_reclaim(
    limit_events: tuple[object, object], scanned: tuple[object, object], expected: list[str]
) -> None:
    _, (_, second) = cycles([(0.0, stalled(0, scanned=scanned[0], limit_events=limit_events[0], pods_share=30.0)),
                             (1.0, stalled(1, scanned=scanned[1], limit_events=limit_events[1], pods_share=30.0))],
                            thresholds=(PODS_STALL,))
    assert met(second) == expected
    if not expected and scanned[1] is UNREAD:
        assert Signal(PODS_SOME) not in second.observations
    elif not expected:
        assert [held.threshold for held in second.stall_held_back] == [PODS_STALL]


@pytest.mark.parametrize(("last", "value", "expected"), [
    pytest.param(None, 7, CounterTrend(7, read_at=5.0), id="first-reading-is-a-baseline"),
    pytest.param(CounterTrend(7, 1.0, 3.0, 0.5), 9, CounterTrend(9, 5.0, 5.0, 3.0), id="increase"),
    pytest.param(CounterTrend(7, 1.0, 3.0, 0.5), 7, CounterTrend(7, 1.0, 5.0, 0.5), id="unchanged"),
    pytest.param(CounterTrend(7, 1.0, 3.0, 0.5), 3, CounterTrend(3, 1.0, 5.0, 0.5), id="backwards-is-a-new-baseline"),
    pytest.param(CounterTrend(7, 1.0, 3.0, 0.5), None, CounterTrend(7, 1.0, 3.0, 0.5), id="unreadable-keeps-the-last"),
])
def test_next_trend(last: CounterTrend | None, value: int | None, expected: CounterTrend) -> None:
    assert next_trend(last, value, 5.0) == expected


def test_a_threshold_held_back_does_not_fail_reclaim_either() -> None:
    memory = parse_stall_thresholds({SOME: "10%"}, {}, {}, {})
    state, _ = cycles([(0.0, stalled(0, scanned=1000)), (1.0, stalled(1, scanned=1000))], thresholds=tuple(memory))
    assert reclaim_succeeded(state, summary_from_dict(stalled(2, scanned=1000)))
    state_off, _ = cycles([(0.0, stalled(0, scanned=1000)), (1.0, stalled(1, scanned=1000))],
                          thresholds=tuple(memory), gate=False)
    assert not reclaim_succeeded(state_off, summary_from_dict(stalled(2, scanned=1000)))


# --- configuration, recording, simulate -------------------------------------------------------------------------


def test_the_switch_is_on_by_default_refuses_a_non_boolean_and_is_recorded_only_when_off(tmp_path: Any) -> None:
    path = tmp_path / "evictd.yaml"
    head = f"apiVersion: evictd.io/v1alpha1\nkind: EvictdConfiguration\nstallEvictionHard: {{{SOME}: '10%'}}\n"
    path.write_text(head)
    on = load_configuration([str(path)])
    assert on.eviction.stall_requires_node_reclaim and EngineConfig.from_settings(on.eviction).stall_requires_node_reclaim
    assert "stallRequiresNodeReclaim" not in kubelet_config_document(on.eviction)
    path.write_text(head + "stallRequiresNodeReclaim: false\n")
    off = load_configuration([str(path)])
    assert not EngineConfig.from_settings(off.eviction).stall_requires_node_reclaim
    assert kubelet_config_document(off.eviction)["stallRequiresNodeReclaim"] is False
    path.write_text(head + "stallRequiresNodeReclaim: 'no'\n")
    with pytest.raises(ConfigError) as caught:
        load_configuration([str(path)])
    assert (caught.value.key, caught.value.value) == ("EvictdConfiguration: stallRequiresNodeReclaim", "no")
    assert "must be true or false" in str(caught.value)


def test_the_reclaim_counters_round_trip_through_a_recorded_summary() -> None:
    document = stalled(0, scanned=123, limit_events=4, pods_share=5.0)
    parsed = summary_from_dict(document)
    assert parsed.node.memory is not None and parsed.node.memory.reclaim is not None
    assert parsed.node.memory.reclaim.global_scan_pages == 123
    assert summary_from_dict(summary_to_dict(parsed)) == parsed
    assert summary_to_dict(parsed)["node"]["memory"]["reclaim"] == {"globalScanPages": 123}


def test_simulate_shows_a_held_back_stall_threshold_and_evicts_nobody_until_global_reclaim() -> None:
    config = {"evictionHard": {}, "stallEvictionHard": {SOME: "10%"}, "evictionPressureTransitionPeriod": "5m"}
    steps = [{"at": at, "summary": stalled(index, scanned=scanned), "pods": PODS}
             for index, (at, scanned) in enumerate([(0, 1000), (10, 1000), (20, 1000), (30, 9000)])]
    out = simulate_steps({"config": config, "pods": PODS, "steps": steps})
    assert [step.get("stallHeldBack") for step in out] == [[f"{SOME}>=10%"]] * 3 + [None]
    assert [[e["name"] for e in step["evicted"]] for step in out] == [[], [], [], ["hog"]]
    off = simulate_steps({"config": {**config, "stallRequiresNodeReclaim": False}, "pods": PODS, "steps": steps})
    # Gate off, the share alone: the hog goes at the second step, once a reading shows it grew.
    assert [[e["name"] for e in step["evicted"]] for step in off[:2]] == [[], ["hog"]]


def test_after_a_stall_eviction_settled_only_reclaim_read_after_it_counts() -> None:
    # Reclaim grew up to the eviction at 2.0 (read at 1.0 and 2.0); the settle time ends at 2.0 + STALL_SETTLE_S.
    state, _ = cycles([(0.0, stalled(0, scanned=1000)), (1.0, stalled(1, scanned=3000)),
                       (2.0, stalled(2, scanned=5000))])
    state = replace(state, stall_evicted_at=2.0)
    settled_at = 2.0 + STALL_SETTLE_S
    # Still settling: the gate is as before (the settle rule holds the next eviction back).
    _, (settling,) = cycles_from(state, [(settled_at - 0.5, stalled(3, scanned=5000))])
    assert met(settling) == [SOME] and settling.stall_settling == (Signal(SOME),)
    # Settled, no growth since: the reclaim that led to the eviction no longer vouches (before: met until 12.0).
    quiet, (after,) = cycles_from(state, [(settled_at + 0.5, stalled(4, scanned=5000))])
    assert met(after) == [] and [h.threshold for h in after.stall_held_back] == [NODE_STALL]
    # Growth between a reading before the settle end and one after it is not read entirely after it...
    _, (straddling,) = cycles_from(state, [(settled_at + 0.5, stalled(4, scanned=6000))])
    assert met(straddling) == []
    # ...growth between two readings after it is.
    _, (fresh,) = cycles_from(quiet, [(settled_at + 1.0, stalled(5, scanned=6000))])
    assert met(fresh) == [SOME]


# --- PSI wake-ups judged by the gate (`wake_may_open`) ---------------------------------------------------------------


def _held_back_state(*, limit_events: object = UNREAD) -> EngineState:
    """The state after two cycles that read the node stalled 30% with the global scan count still at 1000 (held
    back), the pods cgroup's `max` events at `limit_events` when read."""
    pods_share = None if limit_events is UNREAD else 30.0
    thresholds = (NODE_STALL,) if limit_events is UNREAD else (NODE_STALL, PODS_STALL)
    state, assessments = cycles([(0.0, stalled(0, scanned=1000, limit_events=limit_events, pods_share=pods_share)),
                                 (1.0, stalled(1, scanned=1000, limit_events=limit_events, pods_share=pods_share))],
                                thresholds=thresholds)
    assert met(assessments[-1]) == [] and state.stall_gate.closed  # the premise: held back
    return state


@pytest.mark.parametrize(("scanned", "limit_events", "expected"), [
    pytest.param(1000, None, False, id="held-back-and-no-counter-moved-no-cycle"),
    pytest.param(1001, None, True, id="global-scans-grew-since-a-cycle-may-open-the-gate"),
    pytest.param(None, None, True, id="global-scans-unreadable-a-cycle-decides"),
])
def test_a_psi_wake_up_earns_a_cycle_only_when_the_gate_may_open(scanned: int | None, limit_events: int | None,
                                                                 expected: bool) -> None:
    gate = _held_back_state().stall_gate
    assert wake_may_open(gate, scanned, limit_events) is expected


def test_a_psi_wake_up_earns_a_cycle_when_the_pods_cgroup_hit_its_limit_since() -> None:
    gate = _held_back_state(limit_events=7).stall_gate
    assert not wake_may_open(gate, 1000, 7)
    assert wake_may_open(gate, 1000, 8)


def test_a_psi_wake_up_always_earns_a_cycle_while_nothing_is_held_back() -> None:
    state, assessments = cycles([(0.0, stalled(0, scanned=1000)), (1.0, stalled(1, scanned=5000))])
    assert met(assessments[-1]) == [SOME]  # the gate open: the stall threshold met
    assert wake_may_open(state.stall_gate, 5000, None)
    state, _ = cycles([(0.0, stalled(0, scanned=1000)), (1.0, stalled(1, scanned=1000))], gate=False)
    assert wake_may_open(state.stall_gate, 1000, None)  # the gate off: nothing is ever held back


def test_a_stall_threshold_earns_no_follow_up_cycles() -> None:
    """Follow-ups are for a byte crossing a few pages short; a stall share (basis points) was always 'near'."""
    observations = signal_observations(summary_from_dict(stalled(0, share=30.0, scanned=1000)))
    assert Signal.MEMORY_STALL_SOME in observations
    assert not near_crossing((NODE_STALL,), observations)
    hard = EngineConfig.from_settings(EvictionSettings(hard={"memory.available": "1Gi"})).thresholds
    assert near_crossing((*hard, NODE_STALL), signal_observations(summary_from_dict(summary(memory=Gi + Mi))))


# --- a real shortage, not a trickle of reclaim (issue 61) ------------------------------------------------------------

GiB_PAGES = Gi // SCAN_PAGE_BYTES


@pytest.mark.parametrize(("readings", "after", "expected"), [
    pytest.param([(0.0, 100), (10.0, 5100)], None, 5000, id="a-window-apart"),
    pytest.param([(0.0, 100), (2.0, 5100)], None, 5000, id="a-short-span-is-not-scaled-up"),
    pytest.param([(0.0, 100), (20.0, 5100)], None, 2500, id="a-long-span-is-scaled-down-to-the-window"),
    pytest.param([(0.0, 100)], None, 0, id="one-reading-no-figure"),
    pytest.param([(0.0, 100), (3.0, 4100), (6.0, 5100)], 3.0, 1000, id="only-readings-after-the-eviction-settled"),
    pytest.param([(0.0, 100), (3.0, 5100)], 4.0, 0, id="none-read-after-it-yet"),
])
def test_scanned_in_window(readings: list[tuple[float, int]], after: float | None, expected: int) -> None:
    samples = tuple(ScanSample(at, pages) for at, pages in readings)
    assert scanned_in_window(samples, after) == expected


def test_scan_readings_keep_the_newest_a_window_old_and_restart_when_the_count_goes_back() -> None:
    kept: tuple[ScanSample, ...] = ()
    for at, pages in ((0.0, 10), (4.0, 20), (11.0, 30), (15.0, 40)):
        kept = next_scan_samples(kept, pages, at)
    assert kept == (ScanSample(4.0, 20), ScanSample(11.0, 30), ScanSample(15.0, 40))
    assert next_scan_samples(kept, None, 16.0) == kept
    assert next_scan_samples(kept, 5, 16.0) == (ScanSample(16.0, 5),)


# A 1 GiB node (available + working set): its floor is 1% of it, 2,621 pages of 4 KiB.
FLOOR_1GIB = 2621


@pytest.mark.parametrize(("available", "scanned", "short"), [
    pytest.param(100 * Mi, FLOOR_1GIB, True, id="scans-at-the-floor-little-available"),
    # The hostile check: kswapd scanning 32 KiB every 5 s (16 pages in 10 s) while a pod thrashes in its own limit.
    pytest.param(100 * Mi, 16, False, id="a-trickle-of-kswapd-is-no-shortage"),
    pytest.param(100 * Mi, FLOOR_1GIB - 1, False, id="a-page-under-the-floor"),
    # A stream through cold page cache scans hard; what it scans is inactive cache, counted available.
    pytest.param(Gi // 2, 100 * FLOOR_1GIB, False, id="half-the-memory-available-is-no-shortage"),
    pytest.param(Gi // 2 - Mi, 100 * FLOOR_1GIB, True, id="just-under-half-available"),
])
def test_a_shortage_needs_scans_of_1pct_of_memory_in_the_window_and_memory_available_under_half(
        available: int, scanned: int, short: bool) -> None:
    memory = MemoryStats(available_bytes=available, working_set_bytes=Gi - available)
    shortage = shortage_of(memory, (ScanSample(0.0, 1000), ScanSample(10.0, 1000 + scanned)), None)
    assert shortage.floor_pages == FLOOR_1GIB == round(GiB_PAGES * SHORTAGE_SCAN_SHARE)
    assert (shortage.scanned_pages, shortage.short) == (scanned, short)
    assert SHORTAGE_AVAILABLE_SHARE == 0.5


def test_without_memory_figures_there_is_no_shortage() -> None:
    shortage = shortage_of(MemoryStats(working_set_bytes=Gi), (ScanSample(0.0, 0), ScanSample(1.0, 10**9)), None)
    assert shortage.floor_pages is None and not shortage.short


def hostile(second: int, *, scanned: int, available: int = NODE_AVAILABLE,
            thrasher_usage: int = 200 * Mi) -> dict[str, Any]:
    """The node while a pod thrashes in its own 200 MiB limit (usage pinned, its own `some` 60%), two bystanders
    sitting still (`some` 40%: they stall too) and, from the second reading, nobody growing."""
    document = stalled(second, share=40.0, scanned=scanned)
    document["node"]["memory"]["availableBytes"] = available
    document["node"]["memory"]["workingSetBytes"] = NODE_MEMORY - available
    document["pods"] = [
        {**pod_stats(THRASHER, memory=150 * Mi), "memory": {"workingSetBytes": 150 * Mi + second * 4 * Mi,
                                                           "usageBytes": thrasher_usage, "psi": psi(60.0)}},
        {**pod_stats(HOG, memory=1 * Gi), "memory": {"workingSetBytes": 1 * Gi, "psi": psi(40.0)}},
        {**pod_stats(OTHER, memory=500 * Mi), "memory": {"workingSetBytes": 500 * Mi, "psi": psi(40.0)}},
    ]
    return document


THRASHER = pod("thrasher", requests={"memory": "50Mi"}, priority=0)


def test_a_trickle_of_reclaim_beside_an_own_limit_thrash_evicts_nobody() -> None:
    """Issue 61's hostile check: the gate stays closed on a trickle, and were it open the bystanders that sat still
    are no candidates, nor is the thrasher pinned at its limit."""
    pods = [*PODS, THRASHER]
    trickle = [(at, hostile(index, scanned=1000 + 8 * index)) for index, at in enumerate((0.0, 5.0, 10.0, 15.0))]
    steps = [{"at": at, "summary": document, "pods": pods} for at, document in trickle]
    config = {"evictionHard": {}, "stallEvictionHard": {SOME: "10%"}, "evictionPressureTransitionPeriod": "5m"}
    out = simulate_steps({"config": config, "pods": pods, "steps": steps})
    assert [step.get("stallHeldBack") for step in out] == [[f"{SOME}>=10%"]] * 4
    assert all(step["evicted"] == [] for step in out)
    # Even with the gate off (the share alone), nobody qualifies: the bystanders sat still, the thrasher is pinned.
    off = simulate_steps({"config": {**config, "stallRequiresNodeReclaim": False}, "pods": pods, "steps": steps})
    assert all(step["evicted"] == [] for step in off)
    assert [step["thresholdsMet"] != [] for step in off] == [True] * 4


def test_with_a_shortage_only_the_pod_that_grew_and_stalls_pays() -> None:
    pods = [*PODS, THRASHER]
    steps = []
    for index, at in enumerate((0.0, 5.0, 10.0)):
        document = hostile(index, scanned=1000 + 5000 * index)
        document["pods"][1]["memory"]["workingSetBytes"] = 1 * Gi + index * 16 * Mi  # the hog grows
        steps.append({"at": at, "summary": document, "pods": pods})
    config = {"evictionHard": {}, "stallEvictionHard": {SOME: "10%"}, "evictionPressureTransitionPeriod": "5m"}
    out = simulate_steps({"config": config, "pods": pods, "steps": steps})
    assert [[e["name"] for e in step["evicted"]] for step in out] == [[], ["hog"], []]


def test_with_a_kubelet_threshold_met_too_the_kubelets_decides_as_the_kubelets_does() -> None:
    """The grower rule is the stall family's own: where memory.available is met as well, it picks the pod by the
    kubelet's ranking (the hog, still, over its request most), under its own signal and figures."""
    config = {"evictionHard": {"memory.available": "100Mi"}, "stallEvictionHard": {SOME: "10%"},
              "stallRequiresNodeReclaim": False, "evictionPressureTransitionPeriod": "5m"}
    pods = [*PODS, THRASHER]
    steps = []
    for index, (at, available) in enumerate(((0.0, 200 * Mi), (5.0, 200 * Mi), (10.0, 50 * Mi))):
        document = hostile(index, scanned=1000, available=available)
        document["pods"][2]["memory"]["workingSetBytes"] = 500 * Mi + index * 16 * Mi  # `other` grows
        steps.append({"at": at, "summary": document, "pods": pods})
    out = simulate_steps({"config": config, "pods": pods, "steps": steps})
    assert [[(e["name"], e["signal"]) for e in step["evicted"]] for step in out] == [
        [], [("other", SOME)], [("hog", "memory.available")]]
    assert out[2]["evicted"][0]["message"].startswith("The node was low on resource: memory. Threshold quantity: "
                                                      "100Mi, available: 50Mi.")
