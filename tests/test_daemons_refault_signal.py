"""evictd's daemons refault signal (`evictd.io/daemons.refault`, `evictd.core.daemon_refault`) as the engine decides
on it: met when the share of the daemons' memory (system.slice's usage, at least `DAEMON_MIN_MEMORY_BYTES`) they
re-read within ~2 s is at or over the threshold; absent on the first reading, after the count went back, or without a
system.slice; held back by the stall gate without node-wide shortage; after any eviction only re-reads read after it
count. Pure: the figure on plain numbers, `assess` on scripted Summaries with a fake clock, the watch's look; then the
configuration, the recorded Summary and system.slice's reader on fixture cgroup trees."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from builders import Gi, Mi, pod, pod_stats, stamp, summary
from cycle_reports import simulate_steps
from evictd.adapters.cgroups import CgroupLayout
from evictd.adapters.daemon_cgroups import daemon_counts, daemons_missing
from evictd.adapters.procfs import PAGE_BYTES
from evictd.config import load_configuration
from evictd.core.daemon_refault import (
    DAEMON_MIN_MEMORY_BYTES,
    DAEMON_REFAULT_MIN_SPAN_S,
    DAEMON_REFAULT_WINDOW_S,
    daemon_memory_bytes,
    daemon_refault_figure,
    daemon_share_base,
    next_daemon_samples,
    protected_file_bytes,
    uncovered_bytes,
)
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
from evictd.core.refault import RefaultSample, refault_figure
from evictd.core.signals import Reading, Signal
from evictd.core.stall_gate import SCAN_PAGE_BYTES
from evictd.core.summary import SYSTEM_CONTAINER_DAEMONS, MemoryStats, ReclaimCounters
from evictd.core.summary_parser import summary_from_dict
from evictd.core.thresholds import parse_stall_thresholds, parse_threshold_config
from evictd.core.wake import WatchedRefault, refault_look, watched_shares
from evictd.record.summary_json import summary_to_dict
from evictd.run.composition import check_settings

DAEMONS = "evictd.io/daemons.refault"
HOG = pod("hog", requests={"memory": "100Mi"}, priority=0)
OTHER = pod("other", requests={"memory": "1Gi"}, priority=0)
PODS = [HOG, OTHER]
# The daemons use 200 MiB: 1% of it is 2 MiB.
USAGE = 200 * Mi
ONE_PERCENT = 2 * Mi
# The node: 5 GiB available + 20 GiB working set; global scans of 1% of it make a shortage (the gate's floor).
SHORTAGE = 256 * Mi // SCAN_PAGE_BYTES
HARD = parse_stall_thresholds({DAEMONS: "50%"}, {}, {}, {})[0]
UNREAD = object()


# --- the figure, on plain numbers ----------------------------------------------------------------------------------


@pytest.mark.parametrize(("readings", "usage", "expected"), [
    pytest.param([(0.0, 0), (2.0, 100 * Mi)], 200 * Mi, 5000, id="half-its-memory-in-2s"),
    pytest.param([(0.0, 0), (1.0, 50 * Mi)], 200 * Mi, 5000, id="over-1s-scaled-to-the-window"),
    pytest.param([(0.0, 0), (4.0, 200 * Mi)], 200 * Mi, 5000, id="over-4s-scaled-down"),
    pytest.param([(0.0, 0), (2.0, 400 * Mi)], 200 * Mi, 10000, id="more-than-its-memory-capped-at-100%"),
    pytest.param([(0.0, 0), (2.0, 16 * Mi)], 4 * Mi, 5000, id="a-tiny-slice-counts-against-the-floor"),
    pytest.param([(0.0, 0), (2.0, 0)], 200 * Mi, 0, id="no-re-reads-0"),
    pytest.param([(0.0, 0), (0.9, 100 * Mi)], 200 * Mi, None, id="under-the-minimum-span-no-figure"),
    pytest.param([(0.0, 0)], 200 * Mi, None, id="one-reading-no-figure"),
    pytest.param([(0.0, 0), (2.0, 100 * Mi)], None, None, id="no-usage-no-figure"),
])
def test_the_figure(readings: list[tuple[float, int]], usage: int | None, expected: int | None) -> None:
    samples: tuple[RefaultSample, ...] = ()
    for at, count in readings:
        samples = next_daemon_samples(samples, RefaultSample(at, count), at)
    figure = daemon_refault_figure(samples, daemon_memory_bytes(MemoryStats(usage_bytes=usage)))
    assert (None if figure is None else figure.refaulted_basis_points) == expected


@pytest.mark.parametrize(("low", "reclaimed", "reread", "expected", "lost"), [
    pytest.param((3, 5), (0, 60 * Mi), 10 * Mi, 3000, 60 * Mi, id="taken-below-the-protection-counts"),
    pytest.param((3, 5), (0, 10 * Mi), 80 * Mi, 4000, 10 * Mi, id="re-reads-when-more"),
    pytest.param((3, 3), (0, 60 * Mi), 10 * Mi, 500, 0, id="reclaimed-above-it-no"),
    pytest.param((None, 5), (0, 60 * Mi), 10 * Mi, 500, 0, id="events-not-read-before-no"),
    pytest.param((3, 5), (None, 60 * Mi), 10 * Mi, 500, 0, id="reclaim-not-read-before-no"),
    pytest.param((3, 5), (60 * Mi, 0), 10 * Mi, 500, 0, id="reclaim-count-went-back-no"),
])
def test_memory_reclaimed_below_the_protection_counts_as_re_read(low: tuple[int | None, int],
                                                                 reclaimed: tuple[int | None, int], reread: int,
                                                                 expected: int, lost: int) -> None:
    """The kernel reclaims below system.slice's memory.low only when nothing else is left (a ``low`` event): what it
    then takes of the daemons is their working set, re-read a second later. On the 2-CPU psi=0 node the re-reads
    reached the threshold about a second after the daemon's last beat (docs/configuration.md, "Thrash without
    PSI"). Of a 200 MiB slice over 2 s."""
    samples: tuple[RefaultSample, ...] = ()
    for at, events, stolen, count in ((0.0, low[0], reclaimed[0], 0), (2.0, low[1], reclaimed[1], reread)):
        samples = next_daemon_samples(samples, RefaultSample(at, count, low_events=events, reclaimed_bytes=stolen),
                                      at)
    figure = daemon_refault_figure(samples, 200 * Mi)
    assert figure is not None
    assert (figure.refaulted_basis_points, figure.lost_bytes) == (expected, lost)


@pytest.mark.parametrize(("file", "usage", "protected", "available", "expected"), [
    pytest.param(261 * Mi, 300 * Mi, 616 * Mi, 200 * Mi, 61 * Mi, id="all-its-cache-protected-61Mi-not-covered"),
    pytest.param(261 * Mi, 300 * Mi, 616 * Mi, 261 * Mi, 0, id="covered-exactly-0"),
    pytest.param(261 * Mi, 300 * Mi, 616 * Mi, 700 * Mi, 0, id="well-covered-0"),
    pytest.param(2 * Gi, 2 * Gi + 100 * Mi, 616 * Mi, 200 * Mi, 316 * Mi, id="usage-over-the-protection-keeps-516Mi"),
    pytest.param(100 * Mi, 700 * Mi, 616 * Mi, 0, 16 * Mi, id="its-heap-takes-most-of-the-protection"),
    pytest.param(100 * Mi, 800 * Mi, 616 * Mi, 0, 0, id="its-heap-takes-all-of-it"),
    pytest.param(261 * Mi, 300 * Mi, 0, 0, 0, id="no-protection-0"),
    pytest.param(None, 300 * Mi, 616 * Mi, 0, None, id="cache-not-read-none"),
    pytest.param(261 * Mi, 300 * Mi, None, 0, None, id="protection-not-read-none"),
    pytest.param(261 * Mi, 300 * Mi, 616 * Mi, None, None, id="memavailable-not-read-none"),
])
def test_the_protected_cache_the_nodes_available_memory_no_longer_covers(
        file: int | None, usage: int, protected: int | None, available: int | None, expected: int | None) -> None:
    """What the kernel must take of the daemons' protected page cache to give the node's MemAvailable: the protection
    covers the cgroup's usage, so what their other memory (a heap) leaves of it, at most all of their cache. In the
    arena's traces this fell under 0 2.3-8.3 s before the kernel's first reclaim below memory.low."""
    assert uncovered_bytes(file, usage, protected, available) == expected
    if file is not None and protected is not None:
        assert 0 <= protected_file_bytes(file, usage, protected) <= file


def test_the_uncovered_cache_counts_as_a_level_beside_the_re_reads() -> None:
    """Not a rate: the bytes not covered at the newest reading, whatever the span; the larger of it and the re-reads
    (and the breach) is the figure. Of a 200 MiB slice."""
    def figure_of(uncovered: tuple[int | None, int | None], reread: int, span_s: float = 2.0) -> tuple[int, int]:
        samples: tuple[RefaultSample, ...] = ()
        for at, count, level in ((0.0, 0, uncovered[0]), (span_s, reread, uncovered[1])):
            samples = next_daemon_samples(samples, RefaultSample(at, count, uncovered_bytes=level), at)
        figure = daemon_refault_figure(samples, 200 * Mi)
        assert figure is not None
        return figure.refaulted_basis_points, figure.uncovered_bytes
    assert figure_of((0, 60 * Mi), 10 * Mi) == (3000, 60 * Mi)
    assert figure_of((0, 60 * Mi), 10 * Mi, span_s=1.0) == (3000, 60 * Mi)  # not scaled up as the re-reads are
    assert figure_of((0, 60 * Mi), 80 * Mi) == (4000, 60 * Mi)  # the re-reads when more
    assert figure_of((60 * Mi, 0), 10 * Mi) == (500, 0)  # covered again at the newest: only the re-reads
    assert figure_of((None, None), 10 * Mi) == (500, 0)  # not read: the re-reads alone


def test_readings_are_kept_for_one_window_and_a_count_that_went_back_is_a_new_baseline() -> None:
    samples: tuple[RefaultSample, ...] = ()
    for at in (0.0, 0.5, 1.0, 1.5, 2.0, 2.5, 3.0):
        samples = next_daemon_samples(samples, RefaultSample(at, int(at * 10 * Mi)), at)
    assert [s.read_at for s in samples] == [1.0, 1.5, 2.0, 2.5, 3.0]  # the newest a window old and every later one
    assert samples[-1].read_at - samples[0].read_at == DAEMON_REFAULT_WINDOW_S
    assert next_daemon_samples(samples, RefaultSample(3.5, 0), 3.5) == (RefaultSample(3.5, 0),)
    assert next_daemon_samples(samples, None, 3.5) == samples  # not read: kept as is
    assert daemon_memory_bytes(MemoryStats(usage_bytes=1)) == DAEMON_MIN_MEMORY_BYTES


# --- the engine's rule ---------------------------------------------------------------------------------------------


def node(second: float, *, refaulted: object, scanned: object = 0, usage: int = USAGE,
         low: int | None = None, reclaimed: int | None = None, protected: int | None = None,
         file: int | None = None, node_available: int | None = None) -> dict[str, Any]:
    """A Summary document at `second` whose daemons re-read `refaulted` bytes since their cgroup was made (UNREAD:
    no system.slice), with `low` reclaims below their memory.low and `reclaimed` bytes reclaimed, `protected` bytes
    under memory.low, `file` bytes of page cache and the node's MemAvailable `node_available` beside (None: not
    read), and whose node's global scan count is `scanned`; the hog grows 1 MiB a second."""
    stats = [pod_stats(HOG, memory=1 * Gi + int(second) * Mi), pod_stats(OTHER, memory=500 * Mi)]
    document = summary(memory=5 * Gi, memory_ws=20 * Gi, time=stamp(int(second)), pods=stats)
    if scanned is not UNREAD:
        document["node"]["memory"]["reclaim"] = {"globalScanPages": scanned}
    if refaulted is not UNREAD:
        reclaim: dict[str, object] = {"refaultFileBytes": refaulted}
        reclaim.update({key: value for key, value in (("lowEvents", low), ("reclaimedBytes", reclaimed),
                                                      ("protectedBytes", protected), ("fileBytes", file),
                                                      ("nodeAvailableBytes", node_available))
                        if value is not None})
        document["node"]["systemContainers"] = [{"name": SYSTEM_CONTAINER_DAEMONS, "memory": {
            "time": stamp(int(second)), "usageBytes": usage, "reclaim": reclaim}}]
    return document


def cycles(readings: list[tuple[float, dict[str, Any]]], *, gate: bool = True,
           state: EngineState | None = None) -> tuple[EngineState, list[Any]]:
    config = EngineConfig(thresholds=(HARD,), stall_requires_node_reclaim=gate)
    state, assessments = state or EngineState(), []
    for now, document in readings:
        state, assessment = assess(state, config, FsLayout(), summary_from_dict(document),
                                   [pod_from_dict(p) for p in PODS], now)
        assessments.append(assessment)
    return state, assessments


def met(assessment: Any) -> list[str]:
    return [str(status.threshold.signal) for status in assessment.thresholds]


@pytest.mark.parametrize(("percent", "scans", "gate", "expected", "held"), [
    pytest.param(60, (1000, 1000 + SHORTAGE), True, [DAEMONS], False, id="over-under-shortage-met"),
    pytest.param(50, (1000, 1000 + SHORTAGE), True, [DAEMONS], False, id="at-the-threshold-met"),
    pytest.param(49, (1000, 1000 + SHORTAGE), True, [], False, id="under-not-met"),
    pytest.param(60, (1000, 999 + SHORTAGE), True, [], True, id="reclaim-under-the-floor-held-back"),
    pytest.param(60, (1000, 1000), True, [], True, id="no-global-reclaim-held-back"),
    pytest.param(60, (1000, 1000), False, [DAEMONS], False, id="gate-off-met-on-the-share-alone"),
])
def test_the_rule(percent: int, scans: tuple[int, int], gate: bool, expected: list[str], held: bool) -> None:
    _, (first, second) = cycles([(0.0, node(0, refaulted=1 * Gi, scanned=scans[0])),
                                 (2.0, node(2, refaulted=1 * Gi + percent * ONE_PERCENT, scanned=scans[1]))],
                                gate=gate)
    assert met(first) == [] and Signal(DAEMONS) not in first.observations  # the first reading: absent, not 0
    assert second.observations[Signal(DAEMONS)].available.ceil_int() == 10_000 - percent * 100
    assert met(second) == expected
    if expected:
        assert isinstance(second.next_step, ReclaimThenEvict) and second.next_step.threshold == HARD
    else:
        assert isinstance(second.next_step, NoneStarved)
    assert [report.threshold for report in second.stall_held_back] == ([HARD] if held else [])


def test_no_system_slice_or_no_count_makes_the_signal_absent_never_guessed() -> None:
    _, (_, absent) = cycles([(0.0, node(0, refaulted=UNREAD)), (2.0, node(2, refaulted=UNREAD))], gate=False)
    assert Signal(DAEMONS) not in absent.observations and met(absent) == []
    # The count went back (system.slice made again): a new baseline, absent until a span past it.
    _, assessments = cycles([(0.0, node(0, refaulted=1 * Gi)), (2.0, node(2, refaulted=0)),
                             (4.0, node(4, refaulted=60 * ONE_PERCENT))], gate=False)
    assert [Signal(DAEMONS) in a.observations for a in assessments] == [False, False, True]
    # /proc/vmstat not read with the gate on: the gate's figure is unknown, the signal dropped.
    _, (_, unknown) = cycles([(0.0, node(0, refaulted=0, scanned=UNREAD)),
                              (2.0, node(2, refaulted=60 * ONE_PERCENT, scanned=UNREAD))])
    assert Signal(DAEMONS) not in unknown.observations and met(unknown) == []


def test_a_breach_of_the_daemons_protection_meets_the_threshold_before_any_re_read() -> None:
    """The engine on two cycles 1 s apart: the daemons re-read nothing yet, but the kernel reclaimed 60 % of their
    200 MiB from below their memory.low (two ``low`` events) under node-wide reclaim: met, and the hog that grew
    is evicted. Without the events the same reclaim is no evidence."""
    before = node(0, refaulted=1 * Gi, scanned=1000, low=7, reclaimed=5 * Gi)
    _, (_, breached) = cycles([(0.0, before),
                               (1.0, node(1, refaulted=1 * Gi, scanned=1000 + SHORTAGE, low=9,
                                          reclaimed=5 * Gi + 60 * Mi))])
    assert met(breached) == [DAEMONS]
    assert isinstance(breached.next_step, ReclaimThenEvict) and breached.next_step.threshold == HARD
    _, (_, reclaimed) = cycles([(0.0, before),
                                (1.0, node(1, refaulted=1 * Gi, scanned=1000 + SHORTAGE, low=7,
                                           reclaimed=5 * Gi + 60 * Mi))])
    assert met(reclaimed) == [] and reclaimed.observations[Signal(DAEMONS)].available.ceil_int() == 10_000


def test_protected_cache_the_node_no_longer_covers_meets_the_threshold_before_the_breach() -> None:
    """The engine on two cycles 1 s apart: no re-read, no ``low`` event yet, but MemAvailable (100 MiB) no longer
    covers the 180 MiB of page cache under the daemons' memory.low: the kernel has little else to reclaim. Under
    node-wide reclaim the threshold is met (80 MiB of the 32 MiB floor: capped) and the hog that grew is evicted;
    without that reclaim the gate holds it back; with MemAvailable over the cache it is not met."""
    def at(second: int, scanned: int, available: int) -> dict[str, Any]:
        return node(second, refaulted=1 * Gi, scanned=scanned, low=7, reclaimed=5 * Gi, protected=616 * Mi,
                    file=180 * Mi, node_available=available)
    # Ten cycles covered, then one not: the hog grew 10 MiB meanwhile (a candidate), the other pod not.
    _, assessments = cycles([(float(second), at(second, 1000, 300 * Mi)) for second in range(10)]
                            + [(10.0, at(10, 1000 + SHORTAGE, 100 * Mi))])
    short = assessments[-1]
    assert [met(a) for a in assessments[:-1]] == [[]] * 10
    assert met(short) == [DAEMONS]
    assert short.daemons_refault is not None and short.daemons_refault.uncovered_bytes == 80 * Mi
    assert isinstance(short.next_step, ReclaimThenEvict) and short.next_step.threshold == HARD
    assert short.next_step.stall_candidates == frozenset({HOG["metadata"]["uid"]})  # the pod that grew, not the other
    _, (_, held) = cycles([(0.0, at(0, 1000, 100 * Mi)), (1.0, at(1, 1000, 100 * Mi))])
    assert met(held) == [] and [report.threshold for report in held.stall_held_back] == [HARD]
    _, (_, covered) = cycles([(0.0, at(0, 1000, 300 * Mi)), (1.0, at(1, 1000 + SHORTAGE, 300 * Mi))])
    assert met(covered) == [] and covered.observations[Signal(DAEMONS)].available.ceil_int() == 10_000


def test_after_any_eviction_only_re_reads_read_after_it_count() -> None:
    """The daemons re-reading their files as relief lets them back in is no thrash: after the leaker's
    memory.available eviction the threshold waits for it to settle, then counts only readings from the settle's end
    (the node-wide refault signal evicted a bystander on such re-reads, issue 61)."""
    (memory,) = parse_threshold_config([], {"memory.available": "1Gi"}, {}, {}, {})
    state, _ = cycles([(0.0, node(0, refaulted=0, scanned=0)), (2.0, node(2, refaulted=0, scanned=SHORTAGE))])
    leaker = Eviction(pod=pod_from_dict(HOG), signal="memory.available", grace_period_override_s=1,
                      effective_grace_period_s=1, message="", annotations={}, conditions=(), threshold=memory)
    state = note_evictions(state, [leaker], 2.0)
    # 1 s later, re-reading with reclaim: met on the readings from before, but waiting for that eviction to settle.
    state, (settling,) = cycles([(3.0, node(3, refaulted=90 * ONE_PERCENT, scanned=2 * SHORTAGE))], state=state)
    assert met(settling) == [DAEMONS]
    assert settling.stall_settling == (Signal(DAEMONS),) and isinstance(settling.next_step, NoneStarved)
    # Settled (6 s): the re-reads of relief before it are no evidence; one reading after it spans nothing.
    settled_at = 2.0 + STALL_SETTLE_S
    state, (after,) = cycles([(settled_at + 0.5, node(7, refaulted=150 * ONE_PERCENT, scanned=3 * SHORTAGE))],
                             state=state)
    assert Signal(DAEMONS) not in after.observations and met(after) == []
    # Re-reads and reclaim that go on after it count again.
    _, (again,) = cycles([(settled_at + 2.5, node(9, refaulted=260 * ONE_PERCENT, scanned=4 * SHORTAGE))],
                         state=state)
    assert met(again) == [DAEMONS]


def test_the_block_round_trips_through_a_recorded_summary() -> None:
    parsed = summary_from_dict(node(0, refaulted=4096, scanned=3))
    assert summary_from_dict(summary_to_dict(parsed)) == parsed
    (daemons,) = [c for c in summary_to_dict(parsed)["node"]["systemContainers"]
                  if c["name"] == SYSTEM_CONTAINER_DAEMONS]
    assert daemons["memory"]["reclaim"] == {"refaultFileBytes": 4096} and daemons["memory"]["usageBytes"] == USAGE
    breached = summary_from_dict(node(0, refaulted=4096, scanned=3, low=2, reclaimed=8192))
    assert summary_from_dict(summary_to_dict(breached)) == breached
    (daemons,) = [c for c in summary_to_dict(breached)["node"]["systemContainers"]
                  if c["name"] == SYSTEM_CONTAINER_DAEMONS]
    assert daemons["memory"]["reclaim"] == {"refaultFileBytes": 4096, "lowEvents": 2, "reclaimedBytes": 8192}
    approaching = summary_from_dict(node(0, refaulted=4096, scanned=3, protected=616 * Mi, file=200 * Mi,
                                         node_available=100 * Mi))
    assert summary_from_dict(summary_to_dict(approaching)) == approaching
    (daemons,) = [c for c in summary_to_dict(approaching)["node"]["systemContainers"]
                  if c["name"] == SYSTEM_CONTAINER_DAEMONS]
    assert daemons["memory"]["reclaim"] == {"refaultFileBytes": 4096, "protectedBytes": 616 * Mi,
                                            "fileBytes": 200 * Mi, "nodeAvailableBytes": 100 * Mi}


# --- the watch between cycles ----------------------------------------------------------------------------------


DAEMONS_READING = Reading.DAEMONS_MEMORY_REFAULT


def test_the_watch_wakes_the_loop_at_the_share_under_reclaim() -> None:
    shares = watched_shares((HARD,), None, Signal.DAEMONS_REFAULT)
    assert shares == (5000,) and watched_shares((HARD,), None) == ()  # the node's refault signal watches nothing
    watched = WatchedRefault()
    woken = []
    # Looks every 0.5 s; re-reads of 10% of 200 MiB a look (40% over 2 s), then 20% (the window reaches 50% at 3 s).
    counts = [0, 10, 20, 30, 40, 50, 70, 90, 110, 130, 150, 170]
    for look, percent in enumerate(counts):
        now = look * 0.5
        watched, woke = refault_look(DAEMONS_READING, watched, percent * ONE_PERCENT, USAGE, 1000 + look * SHORTAGE, now,
                                     shares, gated=True)
        woken.append(woke)
    # At 1 s the window shows 40%, half the share passed: one wake-up for a baseline (its cycle reads the daemons,
    # so the cycle at the share compares with a reading a window back, not the last 10 s tick). At 3 s the share:
    # a wake-up; then at most one a second while it holds.
    assert woken == [False, False, True, False, False, False, True, False, True, False, True, False]
    # No re-read yet, but 30 % of their memory reclaimed below their memory.low between two looks: a wake-up.
    watched, breach = WatchedRefault(), []
    for look, (events, stolen) in enumerate(((4, 0), (4, 0), (4, 0), (5, 60 * Mi))):
        watched, woke = refault_look(DAEMONS_READING, watched, 0, USAGE, 1000 + look * SHORTAGE, look * 0.5, shares,
                                     gated=True, low_events=events, reclaimed_bytes=stolen)
        breach.append(woke)
    assert breach == [False, False, False, True]
    # Nothing re-read or taken yet, but 120 MiB (60 %) of their protected cache no longer covered: a wake-up at once.
    watched, approach = WatchedRefault(), []
    for look, level in enumerate((0, 0, 0, 120 * Mi)):
        watched, woke = refault_look(DAEMONS_READING, watched, 0, USAGE, 1000 + look * SHORTAGE, look * 0.5, shares,
                                     gated=True, uncovered_bytes=level)
        approach.append(woke)
    assert approach == [False, False, False, True]
    # Gated, the same re-reads without global reclaim wake nothing.
    watched, still = WatchedRefault(), []
    for look, percent in enumerate(counts):
        watched, woke = refault_look(DAEMONS_READING, watched, percent * ONE_PERCENT, USAGE, 1000, look * 0.5, shares,
                                     gated=True)
        still.append(woke)
    assert not any(still)


# --- configuration ------------------------------------------------------------------------------------------------


def test_configuration_takes_it_in_the_stall_maps_and_refuses_a_bad_share(tmp_path: Path) -> None:
    path = tmp_path / "evictd.yaml"
    head = "apiVersion: evictd.io/v1alpha1\nkind: EvictdConfiguration\n"
    path.write_text(head + f"stallEvictionHard: {{{DAEMONS}: '50%'}}\n")
    (threshold,) = [t for t in load_configuration([str(path)]).eviction.thresholds() if t.signal == DAEMONS]
    assert threshold == HARD
    for value in ("101%", "50"):
        path.write_text(head + f"stallEvictionHard: {{{DAEMONS}: '{value}'}}\n")
        with pytest.raises(ConfigError) as caught:
            load_configuration([str(path)])
        assert (caught.value.key, caught.value.value) == (f"EvictdConfiguration: stallEvictionHard[{DAEMONS}]", value)
        assert "share of the daemons' memory re-read in 2 s" in str(caught.value)


def test_the_kubelets_summary_cannot_feed_it(tmp_path: Path) -> None:
    path = tmp_path / "evictd.yaml"
    path.write_text("apiVersion: evictd.io/v1alpha1\nkind: EvictdConfiguration\nstatsSource: kubelet\n"
                    f"kubeletSummaryURL: https://127.0.0.1:10250/stats/summary\ncgroupfsPath: {tmp_path}\n"
                    f"stallRequiresNodeReclaim: false\nstallEvictionHard: {{{DAEMONS}: '50%'}}\n")
    with pytest.raises(ConfigError) as caught:
        check_settings(load_configuration([str(path)]))
    assert (caught.value.key, caught.value.value) == ("statsSource", "kubelet")
    assert DAEMONS in str(caught.value)


# --- system.slice's reader, on fixture trees ----------------------------------------------------------------------


@pytest.mark.parametrize(("version", "stat", "counted", "pages"), [
    pytest.param(2, "anon 1\nworkingset_refault_anon 3\nworkingset_refault_file 10\npgmajfault 99\n",
                 "workingset_refault_file", 10, id="v2-linux-5.9-and-later"),
    pytest.param(2, "anon 1\nworkingset_refault 10\npgmajfault 99\n", "workingset_refault", 10, id="v2-before-5.9"),
    pytest.param(2, "anon 1\npgfault 500\npgmajfault 7\n", "pgmajfault", 7, id="v2-major-faults-where-no-refaults"),
    pytest.param(1, "cache 1\nworkingset_refault_file 2\ntotal_cache 5\ntotal_workingset_refault_file 10\n"
                 "total_pgmajfault 99\n", "total_workingset_refault_file", 10, id="v1-the-hierarchys-total"),
    pytest.param(1, "cache 1\npgmajfault 3\ntotal_cache 5\ntotal_pgmajfault 7\n", "total_pgmajfault", 7,
                 id="v1-major-faults-where-no-refaults"),
])
def test_daemon_counts(tmp_path: Path, version: int, stat: str, counted: str, pages: int) -> None:
    hierarchy = tmp_path / "memory" if version == 1 else tmp_path
    folder = hierarchy / "system.slice"
    folder.mkdir(parents=True)
    (folder / "memory.stat").write_text(stat)
    (folder / ("memory.usage_in_bytes" if version == 1 else "memory.current")).write_text(f"{USAGE}\n")
    layout = CgroupLayout(version=version, root=tmp_path, base="kubepods")  # cgroupRoot does not move system.slice
    counts = daemon_counts(layout)
    assert counts is not None
    assert (counts.counted, counts.refault_bytes, counts.usage_bytes) == (counted, pages * PAGE_BYTES, USAGE)
    assert daemons_missing(layout) is None
    # Its anonymous memory beside: v2's `anon`, v1's hierarchical `total_rss` (absent in these v1 files: None).
    assert counts.anon_bytes == (1 if version == 2 else None)
    # No memory.events, no pgsteal or file line: none read (v1 has none).
    assert (counts.low_events, counts.reclaimed_bytes, counts.file_bytes) == (None, None, None)


def test_daemon_counts_reads_the_reclaims_below_memory_low_on_v2(tmp_path: Path) -> None:
    folder = tmp_path / "system.slice"
    folder.mkdir()
    (folder / "memory.stat").write_text("anon 1\nfile 4096\nfile_mapped 7\nworkingset_refault_file 10\n"
                                        "pgscan 900\npgsteal 300\n")
    (folder / "memory.current").write_text(f"{USAGE}\n")
    (folder / "memory.events").write_text("low 4\nhigh 0\nmax 0\noom 0\noom_kill 0\noom_group_kill 0\n")
    counts = daemon_counts(CgroupLayout(version=2, root=tmp_path))
    assert counts is not None and (counts.low_events, counts.reclaimed_bytes) == (4, 300 * PAGE_BYTES)
    assert counts.file_bytes == 4096  # its page cache, in bytes already; not file_mapped
    (folder / "memory.events").write_text("high 0\nmax 0\n")  # a kernel without the line
    counts = daemon_counts(CgroupLayout(version=2, root=tmp_path))
    assert counts is not None and (counts.low_events, counts.reclaimed_bytes) == (None, 300 * PAGE_BYTES)


@pytest.mark.parametrize(("usage", "anon", "expected"), [
    pytest.param(300 * Mi, 50 * Mi, 250 * Mi, id="usage-less-its-heap"),
    pytest.param(300 * Mi, None, 300 * Mi, id="anon-not-read-all-of-it"),
    pytest.param(60 * Mi, 50 * Mi, DAEMON_MIN_MEMORY_BYTES, id="at-least-the-floor"),
    pytest.param(40 * Mi, 50 * Mi, DAEMON_MIN_MEMORY_BYTES, id="anon-over-usage-read-apart"),
])
def test_the_share_is_of_the_daemons_memory_that_is_not_anonymous(usage: int, anon: int | None,
                                                                    expected: int) -> None:
    """A daemon's heap is never re-read from a file: the arena's daemons held 50 MiB of it, which put the thrash's
    figure at 11-15 % of their usage against 13-18 % of the rest (docs/configuration.md)."""
    assert daemon_share_base(usage, anon) == expected
    assert daemon_memory_bytes(MemoryStats(usage_bytes=usage, rss_bytes=anon)) == expected


@pytest.mark.parametrize(("usage", "anon", "protected", "expected"), [
    pytest.param(1000 * Mi, 100 * Mi, 624 * Mi, 376 * Mi, id="the-part-beyond-the-protection"),
    pytest.param(1000 * Mi, 500 * Mi, 200 * Mi, 500 * Mi, id="no-more-than-the-files"),
    pytest.param(300 * Mi, 50 * Mi, 624 * Mi, DAEMON_MIN_MEMORY_BYTES, id="all-protected-the-floor"),
    pytest.param(300 * Mi, 50 * Mi, 0, 250 * Mi, id="nothing-protected"),
    pytest.param(300 * Mi, 50 * Mi, None, 250 * Mi, id="not-read"),
])
def test_the_share_is_of_what_the_kernel_may_reclaim_beyond_the_protection(usage: int, anon: int, protected: int | None,
                                                                           expected: int) -> None:
    """memory.low keeps the protected part from reclaim: the re-reads come from the rest. Taken of all of it, the
    moving daemon's thrash under a 624 MiB memory.low met 10 % only 40-50 s in, while the kubelet stand-in stalled
    10.7-15.4 s (docs/configuration.md, "Keeping the daemons' memory")."""
    assert daemon_share_base(usage, anon, protected) == expected
    stats = MemoryStats(usage_bytes=usage, rss_bytes=anon, reclaim=ReclaimCounters(protected_bytes=protected))
    assert daemon_memory_bytes(stats) == expected


def test_a_base_older_than_a_window_gives_way_to_a_fresher_one() -> None:
    """A housekeeping tick 10 s back, then a baseline cycle 1.5 s back: the figure is the last 1.5 s's, scaled to
    the window, not the 10 s average (which would dilute a thrash that began a second ago)."""
    samples: tuple[RefaultSample, ...] = ()
    for at, count in ((0.0, 0), (8.5, 0), (10.0, 30 * Mi)):
        samples = next_daemon_samples(samples, RefaultSample(at, count), at)
    figure = daemon_refault_figure(samples, 200 * Mi)
    assert figure is not None and figure.span_s == 1.5 and figure.refaulted_basis_points == 2000  # 40 MiB of 200
    # Without a reading at least a second old but the tick, the tick it is.
    samples = next_daemon_samples(next_daemon_samples((), RefaultSample(0.0, 0), 0.0), RefaultSample(10.0, 30 * Mi),
                                  10.0)
    figure = daemon_refault_figure(samples, 200 * Mi)
    assert figure is not None and figure.span_s == 10.0 and figure.refaulted_basis_points == 300


def test_cycles_a_second_and_a_half_apart_judge_the_last_span_not_the_two() -> None:
    """The one-CPU guest's onset: woken cycles 1.6 s then 1.1 s apart, the re-reads speeding up. The newest reading
    a window old is 2.7 s back; with a base up to two windows old it averaged the slow start in (6.5 % here, under a
    10 % threshold). A base older than the window gives way to the cycle before: 10.1 %, met a cycle sooner."""
    samples: tuple[RefaultSample, ...] = ()
    for at, count in ((0.0, 0), (1.6, 7 * Mi), (2.7, 19 * Mi)):
        samples = next_daemon_samples(samples, RefaultSample(at, count), at)
    figure = daemon_refault_figure(samples, 215 * Mi)
    assert figure is not None and round(figure.span_s, 1) == 1.1
    assert 1010 <= figure.refaulted_basis_points <= 1015  # 12 MiB in 1.1 s, scaled to 2 s, of 215 MiB
    # The same readings judged as before, a base up to two windows old: 19 MiB in 2.7 s.
    before = refault_figure(samples, 215 * Mi, window_s=DAEMON_REFAULT_WINDOW_S,
                            min_span_s=DAEMON_REFAULT_MIN_SPAN_S, stale_s=2 * DAEMON_REFAULT_WINDOW_S)
    assert before is not None and round(before.span_s, 1) == 2.7 and before.refaulted_basis_points == 654  # 6.5 %


def test_without_system_slice_or_its_counts_the_signal_is_unavailable_and_says_why(tmp_path: Path) -> None:
    layout = CgroupLayout(version=2, root=tmp_path)
    assert daemon_counts(layout) is None
    assert daemons_missing(layout) == f"{tmp_path}/system.slice: no such cgroup (no systemd system.slice in the " \
                                      "memory hierarchy)"
    (tmp_path / "system.slice").mkdir()
    assert daemons_missing(layout) == f"{tmp_path}/system.slice/memory.stat: absent (no memory controller on " \
                                      "system.slice)"
    (tmp_path / "system.slice" / "memory.stat").write_text("anon 1\nfile 2\n")
    (tmp_path / "system.slice" / "memory.current").write_text("3\n")
    assert daemon_counts(layout) is None
    assert daemons_missing(layout) == (f"{tmp_path}/system.slice/memory.stat has no workingset_refault_file or "
                                       "workingset_refault or pgmajfault")


def test_simulate_holds_it_back_without_shortage_then_evicts_the_pod_that_grew() -> None:
    """The hog grows 1 MiB a second, the other pod sits still: only the hog may pay for the daemons' thrash, once it
    grew `POD_GROWTH_MIN_BYTES` (8 MiB, at 8 s; at 6 s nobody may be evicted)."""
    config = {"evictionHard": {}, "stallEvictionHard": {DAEMONS: "50%"}}
    counts = [(0, 0, 1000), (2, 60, 1000), (4, 120, 1000), (6, 180, 1000 + SHORTAGE), (8, 240, 1000 + 2 * SHORTAGE)]
    steps = [{"at": at, "summary": node(at, refaulted=percent * ONE_PERCENT, scanned=scanned), "pods": PODS}
             for at, percent, scanned in counts]
    out = simulate_steps({"config": config, "pods": PODS, "steps": steps})
    assert [step.get("stallHeldBack") for step in out] == [None, [f"{DAEMONS}>=50%"], [f"{DAEMONS}>=50%"], None, None]
    assert [[t["signal"] for t in step["thresholdsMet"]] for step in out][3:] == [[DAEMONS], [DAEMONS]]
    assert [[e["name"] for e in step["evicted"]] for step in out] == [[], [], [], [], ["hog"]]
