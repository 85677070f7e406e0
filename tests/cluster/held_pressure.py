"""A minute of held memory pressure with nothing to evict, on the real cluster, and the API writes it cost evictd
and the kubelet, counted from the real kube-apiserver's audit log (tests/cluster, bench/cluster_api_writes.py).

Both act in the same minute with the same KubeletConfiguration lines (side_by_side.py's: the pods cgroup made
1200 MiB by `systemReserved`, `evictionHard: {memory.available: 500Mi}`, which both copy to
`allocatableMemory.available`): the kubelet's own eviction on (restarted with them), and `evictd run` with its
shipped cadence (10 s housekeeping interval, memcg and PSI wake-ups on) and its DaemonSet identity. Neither is
under pressure at first (both conditions are checked False); then a `system-node-critical` pod takes HOG_MIB
(900 MiB): `allocatableMemory.available` falls to about 300 MiB and stays there, and there is nothing either
may evict (the node's only other pod is evictd's identity pod, critical too). The pods cgroup keeps the other
jobs of a shared machine out of the figure, so the threshold is held for sure. The minute starts at the
crossing, timed by a 10 ms poll of the pods cgroup, so it holds the crossing, the condition transition and
the held pressure, as a node living through it would.

Counted in the minute from the audit log (every write the API server answered, by each side's user): event
writes (creates and PATCHes, both event APIs) by reason, node status writes (`nodes/status`), node writes
(taints), lease writes (each side's heartbeat: the kubelet's in kube-node-lease, evictd's in its own namespace);
evictd's cycles and wake-ups by cause from its metrics, sampled through the minute.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from backends import RealNode
from evictd_process import EvictdProcess
from node_under_test import MiB, memory_hog, new_name
from real_cluster import EVICTD_NAMESPACE, EVICTD_SERVICE_ACCOUNT, RealCluster
from side_by_side import HOG_MIB, THRESHOLD_MIB, kubelet_evicting

from polling import wait_until

MINUTE_S = 60.0
# The hog pod waits this long before it fills: the crossing comes after the poll has started.
HOG_DELAY_S = 3
CROSSING_TIMEOUT_S = 60.0
CROSSING_POLL_S = 0.01
# The kubelet's restart writes its start-up events and node status; the minute starts after they are done.
KUBELET_SETTLE_S = 15.0
SAMPLE_S = 0.25
# The kubelet's and evictd's memory pressure conditions: both False before the hog fills, or the minute would not
# hold the crossing and the transition.
PRESSURE_CONDITIONS = ("MemoryPressure", "EvictdMemoryPressure")
EVICTD_USER = f"system:serviceaccount:{EVICTD_NAMESPACE}:{EVICTD_SERVICE_ACCOUNT}"
WRITE_VERBS = frozenset({"create", "update", "patch"})


def kubelet_user(node_name: str) -> str:
    return f"system:node:{node_name}"


@dataclass
class Writes:
    """One user's audited writes in the minute."""

    events: Counter[str] = field(default_factory=Counter)  # by event reason ("?" for a PATCH of an unseen event)
    node_status: int = 0
    node: int = 0
    leases: int = 0

    @property
    def event_writes(self) -> int:
        return sum(self.events.values())

    def as_dict(self) -> dict[str, Any]:
        return {"event_writes": self.event_writes, "events_by_reason": dict(sorted(self.events.items())),
                "node_status_writes": self.node_status, "node_writes": self.node, "lease_writes": self.leases}


def _received_at(entry: dict[str, Any]) -> float:
    return datetime.fromisoformat(entry["requestReceivedTimestamp"]).timestamp()


def audited_writes(audit_log: Path, user: str, since: float, until: float) -> Writes:
    """`user`'s writes to events, nodes and leases that the API server received between `since` and `until`
    (wall-clock seconds), from the audit log. A PATCH of an event names it, not its reason: the reason comes
    from that event's create, wherever it is in the log."""
    entries = [json.loads(line) for line in audit_log.read_text().splitlines() if line.strip()]
    reasons = {}
    for entry in entries:
        target, body = entry.get("objectRef") or {}, entry.get("requestObject") or {}
        if target.get("resource") == "events" and entry.get("verb") == "create" and "reason" in body:
            reasons[(target.get("namespace"), (body.get("metadata") or {}).get("name"))] = body["reason"]
    writes = Writes()
    for entry in entries:
        target = entry.get("objectRef") or {}
        if (entry.get("stage") != "ResponseComplete" or entry["user"]["username"] != user
                or entry.get("verb") not in WRITE_VERBS or not since <= _received_at(entry) <= until):
            continue
        resource, subresource = target.get("resource"), target.get("subresource")
        if resource == "events":
            body = entry.get("requestObject") or {}
            writes.events[body.get("reason") or reasons.get((target.get("namespace"), target.get("name")), "?")] += 1
        elif resource == "nodes" and subresource == "status":
            writes.node_status += 1
        elif resource == "nodes" and subresource is None:
            writes.node += 1
        elif resource == "leases":
            writes.leases += 1
    return writes


class MetricSampler:
    """Samples evictd's cycle count every SAMPLE_S in a thread: when each cycle of the minute was seen."""

    def __init__(self, daemon: EvictdProcess) -> None:
        self.daemon = daemon
        self.samples: list[tuple[float, float]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            with contextlib.suppress(AssertionError, OSError):
                self.samples.append((time.time(), self.daemon.metric("evictd_cycles_total")))
            self._stop.wait(SAMPLE_S)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)


@dataclass
class HeldMinute:
    """What one minute of held pressure cost each side."""

    available_before_mib: int  # allocatableMemory.available before the hog filled, and at the minute's end
    available_after_mib: int
    started_at: float
    evictd: Writes
    kubelet: Writes
    cycles: int  # evictd's cycles that began in the minute
    wakeups: dict[str, float]  # evictd's wake-ups in the minute, by cause
    cycle_times_s: list[float]  # when each cycle count rose, seconds into the minute (within SAMPLE_S)
    conditions: list[str]  # the kubelet's and evictd's memory pressure conditions at the minute's end

    def as_dict(self) -> dict[str, Any]:
        return {"minute_s": MINUTE_S, "threshold_mib": THRESHOLD_MIB,
                "allocatable_memory_available_mib": {"before": self.available_before_mib,
                                                     "held": self.available_after_mib},
                "evictd": {**self.evictd.as_dict(), "cycles": self.cycles, "wakeups": self.wakeups,
                           "cycle_times_s": [round(t, 2) for t in self.cycle_times_s]},
                "kubelet": self.kubelet.as_dict()}


WAKEUP_CAUSES = ("timer", "memcg", "memcg_rearm", "psi", "psi_far", "memory_watch", "signal", "eviction")


def wakeups(daemon: EvictdProcess) -> dict[str, float]:
    found = {}
    for cause in WAKEUP_CAUSES:
        with contextlib.suppress(AssertionError):  # a cause never seen has no sample yet
            found[cause] = daemon.metric("evictd_wakeups_total", cause=cause)
    return found


def hold_a_minute(cluster: RealCluster, node: RealNode) -> HeldMinute:
    """Run the minute (see the module's description) and count what each side wrote. The kubelet is left with
    its eviction on and its pods cgroup small: the caller restarts it as it wants it."""
    cluster.restart_kubelet(kubelet_evicting())
    restarted = time.monotonic()
    daemon = node.start_evictd(kubelet_evicting(), cadence="")
    try:
        daemon.wait_event("evictd started", timeout=60)
        daemon.wait_for_cycles(1, timeout=30)
        time.sleep(max(0.0, KUBELET_SETTLE_S - (time.monotonic() - restarted)))
        before = node.allocatable_available_bytes() // MiB
        pressure = {kind: (node.condition(kind) or {}).get("status") for kind in PRESSURE_CONDITIONS}
        if before <= THRESHOLD_MIB or set(pressure.values()) != {"False"}:
            raise AssertionError(f"pressure before the hog (allocatableMemory.available {before} MiB, conditions "
                                 f"{pressure})")
        cycles_before, wakeups_before = daemon.metric("evictd_cycles_total"), wakeups(daemon)
        hog = node.run_pod(new_name("held"), f"sleep {HOG_DELAY_S}; " + memory_hog(HOG_MIB),
                           priority_class="system-node-critical")
        sampler = MetricSampler(daemon)
        try:
            wait_until(lambda: node.allocatable_available_bytes() < THRESHOLD_MIB * MiB, CROSSING_TIMEOUT_S,
                       "the hog to take allocatableMemory.available below the threshold", interval_s=CROSSING_POLL_S)
            started = time.time()
            time.sleep(MINUTE_S)
            ended = time.time()
            held = node.allocatable_available_bytes() // MiB
            # The minute's cycles: since the last count sampled before the crossing.
            cycles_before = max([count for at, count in sampler.samples if at <= started] or [cycles_before])
            cycles = daemon.metric("evictd_cycles_total") - cycles_before
            woken = {cause: count - wakeups_before.get(cause, 0.0) for cause, count in wakeups(daemon).items()}
            conditions = [str((node.condition(kind) or {}).get("status")) for kind in PRESSURE_CONDITIONS]
        finally:
            sampler.stop()
            node.core.delete_namespaced_pod(hog.name, hog.namespace, grace_period_seconds=0)
            node.wait_gone(hog)
    finally:
        daemon.stop()
    rises, last = [], cycles_before
    for at, count in sampler.samples:
        rises += [at - started] * int(count - last)
        last = max(last, count)
    return HeldMinute(available_before_mib=before, available_after_mib=held, started_at=started,
                      evictd=audited_writes(cluster.audit_log, EVICTD_USER, started, ended),
                      kubelet=audited_writes(cluster.audit_log, kubelet_user(cluster.node_name), started, ended),
                      cycles=int(cycles), wakeups={k: v for k, v in woken.items() if v},
                      cycle_times_s=[t for t in rises if 0 <= t <= ended - started], conditions=conditions)
