"""`evictd run` decides memory crossings on settled figures (issue #37, item 2), on a real pod cgroup (cgroup v1).

The node of tests/daemon/test_run_pods.py: a 512 MiB pods cgroup, ``allocatableMemory.available<200Mi`` (a
working set of 312 MiB crosses it), an hour between ticks, so only memcg wake-ups bring cycles. A real tenant
process in the pod's container cgroup (tests/memory_tenant.py):

* holds a working set 38 MiB under the level and writes then deletes a 64 MiB file 10 times a second: page cache
  that usage counts and the working set does not. Before the rules a cycle read usage before ``memory.stat`` and a
  deletion between the two read as up to 43 MiB of working set (an innocent pod evicted in 2 of 2 runs of the
  issue), and each write ran a cycle and 12-21 follow-ups;
* holds a working set 4 MiB under the level and crosses it for 80 ms every 2 s (a short dip: no eviction), then
  crosses it and stays (decided within a second).
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from pathlib import Path

from evictd_process import EvictdProcess
from test_run_pods import start_watching_the_pod

from evictd.core.settled import CROSSING_HOLD_S
from memory_tenant import start_tenant, stop_tenant
from real_pod_node import MiB, RealPodNode

LEVEL_AVAILABLE_BYTES = 200 * MiB  # the threshold: met once available < 200Mi


def test_page_cache_written_and_deleted_under_the_level_evicts_no_one_and_costs_few_cycles(
    tmp_path: Path, real_pod: RealPodNode, evictd_processes: list[EvictdProcess]
) -> None:
    daemon = start_watching_the_pod(tmp_path, real_pod, evictd_processes)
    with tempfile.TemporaryDirectory(dir="/var/tmp", prefix="evictd-churn-") as folder:  # a disk, not tmpfs
        tenant = start_tenant(real_pod, LEVEL_AVAILABLE_BYTES, 38 * MiB, "churn", folder)
        try:
            cycles_before = daemon.metric("evictd_cycles_total")
            time.sleep(6.0)  # ~60 files written and deleted
            cycles = daemon.metric("evictd_cycles_total") - cycles_before
            loop = daemon.loop_counts()
            clear = daemon.metric("evictd_signal_available_bytes", signal="allocatableMemory.available")
        finally:
            stop_tenant(tenant)
    assert daemon.stop() == 0
    assert clear > LEVEL_AVAILABLE_BYTES + 20 * MiB, "the working set stayed clear of the level"
    wrong = [e for e in daemon.events if e.get("event") in ("would evict pod", "threshold met")]
    assert not wrong, wrong[:3]
    # A write crossing the usage level armed with less page cache is page cache on settled figures (no cycle); a
    # drop watch judged near the level earns one cycle, no follow-ups (before: a cycle and 22 follow-ups each time).
    assert cycles <= 6, f"{cycles:.0f} cycles in 6 s; {loop}"


def test_an_80_ms_dip_every_2_s_evicts_no_one_and_a_crossing_that_holds_is_decided_fast(
    tmp_path: Path, real_pod: RealPodNode, evictd_processes: list[EvictdProcess]
) -> None:
    daemon = start_watching_the_pod(tmp_path, real_pod, evictd_processes)
    # 4 MiB under the level; each dip goes 4 MiB past it. (Once 8 KiB under: the interpreter's own memory, not
    # counted then, ate the margin, and v1's threshold events, checked every 128 pages charged or freed, missed the
    # crossing that held.)
    tenant = start_tenant(real_pod, LEVEL_AVAILABLE_BYTES, 4 * MiB, "dip", str(8 * MiB), "3", on_time=True)
    try:
        assert tenant.stdout is not None
        held, *lasted_ms = tenant.stdout.readline().split()
        assert held == "held"
        held_at = time.time()
        evicted = daemon.wait_event("would evict pod", timeout=10)
    finally:
        stop_tenant(tenant)
    assert daemon.stop() == 0
    # No dip evicted. A dip is meant to be shorter than the hold, but a SCHED_FIFO tenant's 80 ms took 83-94 ms in
    # the loaded parallel tier, and 103 ms once (CI at 401de20): a dip that outlasted the hold and was not evicted
    # passes; one that was evicted fails, saying whose the fault may be.
    dips_ms = [float(ms) for ms in lasted_ms]
    assert evicted["_received"] > held_at, (
        f"a dip evicted (dips {lasted_ms} ms, all shorter than the hold)" if max(dips_ms) < CROSSING_HOLD_S * 1000
        else f"a dip evicted, but a dip outlasted the {CROSSING_HOLD_S * 1000:.0f} ms hold: {lasted_ms} ms")
    assert evicted["_received"] - held_at < 1.0, "the crossing that holds is decided within a second"
    assert evicted["pod"] == real_pod.key
    crossings = [e for e in daemon.events if e.get("event") == "threshold met"]
    assert crossings and crossings[0]["_received"] > held_at, "no dip made a condition either"


def test_a_tenant_flapping_across_the_level_20_times_a_second_is_read_about_once_a_second(
    tmp_path: Path, real_pod: RealPodNode, evictd_processes: list[EvictdProcess]
) -> None:
    daemon = start_watching_the_pod(tmp_path, real_pod, evictd_processes)
    tenant = start_tenant(real_pod, LEVEL_AVAILABLE_BYTES, 4 * MiB, "flap", str(8 * MiB), "20")
    try:
        time.sleep(1.0)  # the first crossings are chased: four changes make it flapping
        cycles_before = daemon.metric("evictd_cycles_total")
        time.sleep(4.0)
        cycles = daemon.metric("evictd_cycles_total") - cycles_before
    finally:
        stop_tenant(tenant)
    assert daemon.stop() == 0
    # Flapping, a notification brings a cycle a second after the last (and the tick, an hour away): about 2 a
    # second with the confirmations of the hard threshold. Chased, it ran 37 a second (162 cycles in 4 s). Whether a
    # given cycle decides depends on where in the tenant's period its two readings fall (about 1 in 4 of them):
    # bench/flapping_tenant.py counts the decisions (8 in 20 s), a test of a few seconds cannot.
    assert 2 <= cycles <= 12, f"{cycles:.0f} cycles in 4 s"


# The churn case in repeated short runs, each with its own daemon and tenant (the crossing's phase against the
# writes differs each time). `make test` runs 2 of 7 s; the hand check of issue 64 sets EVICTD_CHURN_RUNS=20,
# EVICTD_CHURN_SECONDS=60 and EVICTD_CHURN_RECORD=<file> (a JSON line per run: bench/results/page_cache_churn.jsonl).
CHURN_RUNS = int(os.environ.get("EVICTD_CHURN_RUNS", "2"))
CHURN_SECONDS = float(os.environ.get("EVICTD_CHURN_SECONDS", "7"))
# The working set's distance under the level, MiB (the 38; a smaller one makes the case harsher).
CHURN_UNDER_MIB = int(os.environ.get("EVICTD_CHURN_UNDER_MIB", "38"))


def test_page_cache_churn_under_the_level_evicts_no_one_in_repeated_runs(
    tmp_path: Path, real_pod: RealPodNode, evictd_processes: list[EvictdProcess]
) -> None:
    outcomes = []
    for run in range(CHURN_RUNS):
        (tmp_path / f"run{run}").mkdir()
        daemon = start_watching_the_pod(tmp_path / f"run{run}", real_pod, evictd_processes)
        with tempfile.TemporaryDirectory(dir="/var/tmp", prefix="evictd-churn-") as folder:  # a disk, not tmpfs
            tenant = start_tenant(real_pod, LEVEL_AVAILABLE_BYTES, CHURN_UNDER_MIB * MiB, "churn", folder)
            try:
                cycles_before = daemon.metric("evictd_cycles_total")
                time.sleep(CHURN_SECONDS)
                cycles = daemon.metric("evictd_cycles_total") - cycles_before
            finally:
                stop_tenant(tenant)
        assert daemon.stop() == 0
        events = daemon.events
        outcomes.append({"run": run + 1, "seconds": CHURN_SECONDS, "under_mib": CHURN_UNDER_MIB, "cycles": int(cycles),
                         "threshold_met": sum(1 for e in events if e.get("event") == "threshold met"),
                         "would_evict": sum(1 for e in events if e.get("event") == "would evict pod"),
                         # How a wrong decision was made: its confirmation's delay and the figure it decided on.
                         "decisions": [{"confirmed_after_ms": e.get("confirmed_after_ms"),
                                        "message": str(e.get("message", ""))[:120]}
                                       for e in events if e.get("event") in ("threshold met", "would evict pod")]})
    record = os.environ.get("EVICTD_CHURN_RECORD")
    if record:
        with open(record, "a", encoding="utf-8") as out:
            out.writelines(json.dumps(outcome) + "\n" for outcome in outcomes)
    evicting = [outcome for outcome in outcomes if outcome["would_evict"] or outcome["threshold_met"]]
    assert not evicting, f"{len(evicting)} of {CHURN_RUNS} runs met the threshold on page cache: {evicting}"
