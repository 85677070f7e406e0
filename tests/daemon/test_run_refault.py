"""`evictd run` with evictd's refault signal (`evictd.io/memory.refault`) on this machine's real /proc/vmstat
(cgroup v1, 24 GiB): a cgroup thrashing its page cache inside its own small memory limit refaults the node's
``workingset_refault_file`` count by far more than a low refault threshold within 10 s, without any global reclaim
(the machine never runs short). With the stall gate on (the default) evictd holds the threshold back and evicts
nobody; the same thrash with the gate off meets it and would evict the pod, woken by the refault watch (its
housekeeping interval is 30 s). Both daemons watch the same thrash at once, so the test lasts about one refault
window."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from evictd_process import EvictdProcess, start_evictd

from evictd.adapters.procfs import global_reclaim_scan_pages, mem_total_bytes, vmstat_counts
from real_cgroups import CGROUP_MOUNT, memory_stall, temporary_cgroup
from real_pod_node import RealPodNode

# Whole-machine counters: nothing else may reclaim globally meanwhile.
pytestmark = pytest.mark.quiet_machine

REFAULT = "evictd.io/memory.refault"
HELD_BACK = "stall threshold held back: no node-wide reclaim"
# 0.1% of this machine's 24 GiB is ~25 MiB re-read within 10 s; the thrash (two readers of a 128 MiB file in a 40 MiB
# cgroup) refaults several times that.
THRESHOLD_PERCENT = 0.1


def refaulted_bytes() -> int:
    counts = vmstat_counts()
    assert counts.refault_file_bytes is not None, "this kernel counts no workingset_refault_file"
    return counts.refault_file_bytes


def test_a_cgroup_thrashing_in_its_own_limit_refaults_without_global_reclaim_and_evicts_nobody(
    tmp_path: Path, real_pod: RealPodNode, evictd_processes: list[EvictdProcess]
) -> None:
    settings = (f"housekeepingInterval: 1s\npsiWakeups: false\nstallEvictionHard: {{{REFAULT}: "
                f"'{THRESHOLD_PERCENT}%'}}\n" + real_pod.evictd_settings(tmp_path / "containerd"))
    (tmp_path / "on").mkdir()
    (tmp_path / "off").mkdir()
    with temporary_cgroup(CGROUP_MOUNT / "memory") as memcg, memory_stall(memcg):
        scanned_before, refaulted_before, started = global_reclaim_scan_pages(), refaulted_bytes(), time.monotonic()
        gated = start_evictd(tmp_path / "on", evictd_processes, kubelet="evictionHard: {}\n", evictd=settings)
        # The gate off, and a 30 s housekeeping interval: only the refault watch can bring the crossing before the
        # second tick.
        ungated = start_evictd(tmp_path / "off", evictd_processes, kubelet="evictionHard: {}\n",
                               evictd=settings.replace("housekeepingInterval: 1s", "housekeepingInterval: 30s")
                               + "stallRequiresNodeReclaim: false\n")
        # Gate off: the share refaulted reaches the threshold once the watch's figure has its span (5 s, read once a
        # second), and the pod would go.
        met = ungated.wait_event("threshold met", timeout=20)
        assert met["woken_by"] == ["refault_watch"], met
        evicted = ungated.wait_event("would evict pod", timeout=5)
        assert (evicted["pod"], evicted["signal"], evicted["dry_run"]) == (real_pod.key, REFAULT, True)
        assert evicted["message"].startswith("The node was low on resource: memory. Threshold quantity: 9991, ")
        # Gate on: the same share is held back (no node-wide reclaim since evictd started), once, and nobody goes.
        held = gated.wait_event(HELD_BACK, timeout=10)
        assert held["threshold"] == f"{REFAULT}>={THRESHOLD_PERCENT:g}% (hard)"
        assert held["refaulted_percent"] >= THRESHOLD_PERCENT and "stalled_percent" not in held
        assert held["activated_percent"] is not None and held["global_reclaim_s_ago"] is None
        cycles = gated.metric("evictd_cycles_total")
        time.sleep(2.5)
        assert gated.metric("evictd_cycles_total") >= cycles + 2
        assert not [e for e in gated.events if e.get("event") in ("would evict pod", "threshold met")], gated.events
        assert sum(e.get("event") == HELD_BACK for e in gated.events) == 1
        assert gated.metric("evictd_threshold_met", signal=REFAULT, kind="hard") == 0
        assert gated.metric("evictd_signal_available_basis_points", signal=REFAULT) <= 10_000 - THRESHOLD_PERCENT * 100
        # The premise, on the real kernel: the node's refault count grew by more than the threshold's share per 10 s
        # while the global reclaim scans (what opens the gate) did not move.
        elapsed_s = time.monotonic() - started
        refaulted = refaulted_bytes() - refaulted_before
        scanned = global_reclaim_scan_pages() - scanned_before
        per_10s_percent = refaulted * 10 / elapsed_s * 100 / mem_total_bytes()
        print(f"node refaulted {refaulted >> 20} MiB in {elapsed_s:.1f} s ({per_10s_percent:.2f}% of memory per 10 s;"
              f" held back at {held['refaulted_percent']}%, activated {held['activated_percent']}%); global pgscan "
              f"+{scanned} pages")
        assert per_10s_percent > THRESHOLD_PERCENT
        assert scanned == 0
        assert gated.stop() == 0 and ungated.stop() == 0
