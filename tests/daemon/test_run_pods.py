"""`evictd run` end to end on a real pod: allocatable memory pressure from a real process in a real pod cgroup.

The daemon runs as a user runs it (a process with JSON logs), configured like a kubelet whose cgroupRoot is a
private test cgroup: ``<memory|pids>/evictd-test-<random>/kubepods`` limited to 512 MiB, one burstable pod in
it, its emptyDir on a loop-mounted ext4 and its log folder naming it. The only threshold is
``allocatableMemory.available<200Mi`` and the housekeeping interval is an hour, so a decision within seconds
of the pod's allocation can only come from the memcg usage notification on the pods cgroup.
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

from evictd_process import EvictdProcess, memory_wakeups, start_evictd

from evictd.core.quantity import Quantity
from evictd.core.settled import EARLY_CONFIRM_S
from evictd.core.wake import NOTIFICATION_FOLLOW_UPS_S
from real_pod_node import REAL_POD_LIMIT_BYTES, MiB, RealPodNode

POD_LIMIT_BYTES = REAL_POD_LIMIT_BYTES  # the real_pod fixture's
ALLOCATED_BYTES = 360 * MiB  # leaves ~150Mi: past limit minus threshold, well below the limit (no OOM kill)
SLACK_BYTES = 12 * MiB
# A memcg wake-up takes under a millisecond; a cycle reading cgroups and a small ext4 a few more.
DECISION_WITHIN_S = 2.0
MESSAGE_PREFIX = "The node was low on resource: memory. Threshold quantity: 200Mi, available: "


def message_available(event: dict[str, object]) -> int:
    """Return the bytes the eviction message of a log event says were available."""
    message = str(event["message"])
    assert message.startswith(MESSAGE_PREFIX), message
    return Quantity.parse(message[len(MESSAGE_PREFIX):].split(". ")[0]).ceil_int()


def pods_memory(real_pod: RealPodNode) -> str:
    """The pods cgroup's usage and memory.stat figures as the kernel gives them now, in MiB."""
    usage = int(real_pod.memory_file(real_pod.pods_cgroup, "memory.usage_in_bytes").read_text())
    stat = dict(line.split() for line in real_pod.memory_file(real_pod.pods_cgroup, "memory.stat").read_text().splitlines())
    figures = {"usage": usage, **{key: int(stat[key]) for key in ("total_rss", "total_inactive_file", "total_active_file")}}
    return ", ".join(f"{key} {value / MiB:.1f} MiB" for key, value in figures.items())


def inactive_file_bytes(real_pod: RealPodNode) -> int:
    """The pods cgroup's total_inactive_file as memory.stat shows it now."""
    stat = real_pod.memory_file(real_pod.pods_cgroup, "memory.stat").read_text()
    return int(dict(line.split() for line in stat.splitlines())["total_inactive_file"])


def start_watching_the_pod(tmp_path: Path, real_pod: RealPodNode, evictd_processes: list[EvictdProcess]) -> EvictdProcess:
    """Start `evictd run` on the real pod's node (allocatableMemory.available < 200Mi, an hour between ticks, memcg
    wake-ups only) and return once its first cycle finished and the notifiers are armed."""
    daemon = start_evictd(
        tmp_path, evictd_processes,
        kubelet="evictionHard: {allocatableMemory.available: 200Mi}\nenforceNodeAllocatable: []\n",
        evictd="housekeepingInterval: 1h\npsiWakeups: false\n" + real_pod.evictd_settings(tmp_path / "containerd"),
    )
    time.sleep(0.3)  # the notifiers are armed right after the first cycle
    return daemon


def test_a_pod_allocating_past_allocatable_wakes_the_loop_and_would_be_evicted(
    tmp_path: Path, real_pod: RealPodNode, evictd_processes: list[EvictdProcess]
) -> None:
    pod_process = real_pod.start_process()
    daemon = start_watching_the_pod(tmp_path, real_pod, evictd_processes)
    assert daemon.metric("evictd_threshold_met", signal="allocatableMemory.available", kind="hard") == 0
    before = daemon.metric("evictd_signal_available_bytes", signal="allocatableMemory.available")
    assert before > POD_LIMIT_BYTES - 50 * MiB, "the pod is still small"

    pod_process.do(f"alloc {ALLOCATED_BYTES}")
    allocated_at = time.time()

    met = daemon.wait_event("threshold met", timeout=10)
    assert met["threshold"] == "allocatableMemory.available<200Mi (hard)"
    assert met["threshold_quantity"] == "200Mi"
    assert met["_received"] - allocated_at < DECISION_WITHIN_S, "only the memcg notification can wake it this soon"
    # What woke the loop: the notification or the memory watch's look (on v1 it looks beside the levels), or one of
    # the follow-up cycles after it (timer wake-ups) when the notification came a few pages early.
    assert met["woken_by"] and set(met["woken_by"]) <= {"memcg", "memory_watch", "timer"}, \
        f"the line names what woke the loop: {met['woken_by']}"
    assert 0 <= met["decided_after_ms"] < DECISION_WITHIN_S * 1000, "wake-up to decision, in the line"
    # A crossing newly met is confirmed by a second reading (evictd.core.settled); the line says how long that took,
    # a part of the wake-up to decision. (When each confirming reading is taken: tests/core/test_settled.py, on a
    # fake clock; the 100 ms hold's real length stretches with the machine's load.)
    assert EARLY_CONFIRM_S * 1000 <= met["confirmed_after_ms"] <= met["decided_after_ms"], met
    evicted = daemon.wait_event("would evict pod", timeout=5)
    assert evicted["pod"] == real_pod.key == "shop/cart-7d9f"
    assert evicted["signal"] == "allocatableMemory.available"
    assert evicted["threshold"] == "allocatableMemory.available<200Mi (hard)"
    assert evicted["dry_run"] is True
    assert evicted["ranking"] == [real_pod.key]
    assert evicted["message"].startswith(MESSAGE_PREFIX), evicted["message"]
    # The notification fires at the crossing, while the kernel is still charging the allocation: the cycle it
    # wakes sees the pod part-way (but past the threshold); the follow-up cycle a second later sees it settled.
    expected = POD_LIMIT_BYTES - ALLOCATED_BYTES
    assert expected - SLACK_BYTES <= message_available(evicted) < 200 * MiB
    settled = daemon.wait_for(lambda e: e.get("event") == "would evict pod"
                              and message_available(e) <= expected, timeout=5)
    assert expected - SLACK_BYTES <= message_available(settled), settled["message"]
    assert settled["_received"] - evicted["_received"] < 3 * NOTIFICATION_FOLLOW_UPS_S[-1]
    assert daemon.wait_event("node conditions changed")["conditions"] == ["MemoryPressure"]

    assert memory_wakeups(daemon) >= 1  # the usage level or the memory watch, whichever came first
    assert daemon.metric("evictd_dry_run_evictions_total", eviction_signal="allocatableMemory.available") >= 1
    assert daemon.metric("evictd_evictions_total", eviction_signal="allocatableMemory.available") == 0, \
        "nothing carried out: dry-run"
    assert daemon.stop() == 0
    assert not [e for e in daemon.events if e.get("event") in (
        "memory notifier unavailable", "signal source unreadable; its signals are absent", "housekeeping cycle failed")]


PAGE_CACHE_BYTES = 160 * MiB


def test_a_crossing_after_page_cache_was_dropped_is_decided_by_a_wake_up(
    tmp_path: Path, real_pod: RealPodNode, evictd_processes: list[EvictdProcess]
) -> None:
    # The pod's page cache is part of the memcg level armed at the first cycle (limit - threshold + inactive
    # file). Deleting the file drops that cache: the real crossing is now 160 MiB below the armed level, and
    # with an hour between ticks only a re-armed level can bring the decision.
    pod_process = real_pod.start_process()
    with tempfile.TemporaryDirectory(dir="/var/tmp", prefix="evictd-cache-") as folder:  # a disk, not tmpfs
        cached = Path(folder) / "cache.bin"
        pod_process.do(f"write {cached} {PAGE_CACHE_BYTES}")
        daemon = start_watching_the_pod(tmp_path, real_pod, evictd_processes)
        usage = int(real_pod.memory_file(real_pod.pods_cgroup, "memory.usage_in_bytes").read_text())
        assert usage > PAGE_CACHE_BYTES - 8 * MiB, "the page cache is charged to the pods cgroup"
        before = daemon.metric("evictd_signal_available_bytes", signal="allocatableMemory.available")
        assert before > POD_LIMIT_BYTES - 50 * MiB, "the page cache is not in the working set"
        cached.unlink()
    time.sleep(0.5)

    pod_process.do(f"alloc {ALLOCATED_BYTES}")
    allocated_at = time.time()
    usage = int(real_pod.memory_file(real_pod.pods_cgroup, "memory.usage_in_bytes").read_text())
    assert usage < POD_LIMIT_BYTES - 200 * MiB + PAGE_CACHE_BYTES - 8 * MiB, "below the level armed at first"

    try:
        met = daemon.wait_event("threshold met", timeout=10)
    except AssertionError as exc:  # say what the kernel counts now beside what the loop did
        raise AssertionError(f"{exc}; the pods cgroup now: {pods_memory(real_pod)}") from None
    assert met["threshold"] == "allocatableMemory.available<200Mi (hard)"
    assert met["_received"] - allocated_at < DECISION_WITHIN_S, "only a wake-up can bring the decision this soon"
    assert daemon.metric("evictd_wakeups_total", cause="memcg_rearm") >= 1, "the dropped cache woke the loop"
    assert memory_wakeups(daemon) >= 1, "the crossing of the re-armed level (or the watch's look at it)"
    assert daemon.stop() == 0
    assert not [e for e in daemon.events if e.get("event") in (
        "memory notifier unavailable", "housekeeping cycle failed")]


def test_page_cache_turned_active_crosses_with_no_charge_and_the_memory_watch_decides_it(
    tmp_path: Path, real_pod: RealPodNode, evictd_processes: list[EvictdProcess]
) -> None:
    # A file read twice turns its cached pages active: the working set (usage less inactive file) grows by the file
    # while usage does not move (kubernetes/kubernetes#43916), so no memcg usage level, drop or approach watch can
    # fire. With an hour between ticks only the memory watch's look can bring the decision (on cgroup v1 too).
    pod_process = real_pod.start_process()
    with tempfile.TemporaryDirectory(dir="/var/tmp", prefix="evictd-active-") as folder:  # a disk, not tmpfs
        cached = Path(folder) / "cache.bin"
        pod_process.do(f"write {cached} {PAGE_CACHE_BYTES}")
        pod_process.do(f"alloc {200 * MiB}")  # ~205 MiB of working set: ~107 MiB short of the 312 MiB level
        # The kernel folds fresh page cache into memory.stat's inactive file late (a CI run's first cycle still saw
        # the file in the working set): start the daemon once the statistics count it.
        deadline = time.monotonic() + 20.0
        while inactive_file_bytes(real_pod) < PAGE_CACHE_BYTES - 8 * MiB and time.monotonic() < deadline:
            time.sleep(0.05)
        daemon = start_watching_the_pod(tmp_path, real_pod, evictd_processes)
        before = daemon.metric("evictd_signal_available_bytes", signal="allocatableMemory.available")
        assert before > 250 * MiB, f"the page cache is not in the working set yet: {pods_memory(real_pod)}"
        usage_before = int(real_pod.memory_file(real_pod.pods_cgroup, "memory.usage_in_bytes").read_text())
        pod_process.do(f"read {cached} 2")
        read_at = time.time()
        usage = int(real_pod.memory_file(real_pod.pods_cgroup, "memory.usage_in_bytes").read_text())
        # Reading cached pages charges nothing, but the host's own reclaim may have taken some of them meanwhile
        # (a CI run's read charged 22 MiB, the suite's files filling the host's memory): what the test needs is that
        # the usage stays short of the level the first cycle armed, about `before - 200 MiB` above the usage then.
        charged, to_level = usage - usage_before, int(before) - 200 * MiB
        assert charged < to_level - 16 * MiB, \
            f"the read charged {charged >> 20} MiB, within 16 MiB of the usage level {to_level >> 20} MiB away"
        try:
            # The tick is an hour away: only a look can bring the decision within this wait. (The look comes within
            # 0.25 s at a steady margin; memory.stat may fold the per-CPU counts in up to 2 s late.)
            met = daemon.wait_event("threshold met", timeout=10)
        except AssertionError as exc:
            raise AssertionError(f"{exc}; the pods cgroup now: {pods_memory(real_pod)}") from None
    assert met["threshold"] == "allocatableMemory.available<200Mi (hard)"
    assert met["_received"] > read_at, "decided after the read"
    assert daemon.metric("evictd_wakeups_total", cause="memory_watch") >= 1, "the memory watch woke the loop"
    assert daemon.stop() == 0
