"""OOM-kill feedback on a real OOM kill: a real process over its pod cgroup's limit, killed by the kernel.

A kubelet-like pod (tests/real_pod_node.py) in a cgroup of the test's own: the pod cgroup is limited to 64 MiB
and its process allocates 256 MiB, so the kernel's OOM killer kills it in the pod's container cgroup (never
anything outside the test's cgroups). The real counter reader and the daemon's feedback step then count that
kill once, attribute it to the right pod and container, and judge it against what evictd was doing.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from builders import pod
from clocks import ManualClock
from evictd.adapters.cgroups import CgroupReader
from evictd.adapters.oom_counters import OomCounters
from evictd.core.engine import Assessment, EngineState, NoneStarved, ThresholdStatus
from evictd.core.kubelet_config import eviction_settings
from evictd.core.oom import Activity, OomScope, PodOomKill
from evictd.core.oom_saved import Resumption
from evictd.core.pod_parser import pod_from_dict
from evictd.cycle.finished import Cycle
from evictd.cycle.report import CycleReport, Decided, Observed
from evictd.observe.metrics import Metrics
from evictd.record.oom_counters_file import OomCountersFile
from evictd.run.oom_feedback import OomFeedback
from log_capture import LogCapture
from real_cgroups import CGROUP_MOUNT, HIERARCHIES, remove_cgroups
from real_pod_node import MiB, RealPodNode

POD_LIMIT_BYTES = 64 * MiB


@pytest.fixture
def real_pod(tmp_path: Path) -> Iterator[RealPodNode]:
    node = RealPodNode(kubelet_root=tmp_path / "kubelet", pod_logs_dir=tmp_path / "logs",
                       pods_limit_bytes=512 * MiB)
    try:
        node.create(volume_files={}, log_bytes=0)
        yield node
    finally:
        node.teardown()


def test_a_real_oom_kill_in_a_pod_is_counted_once_and_attributed_to_its_pod(real_pod: RealPodNode) -> None:
    the_pod = pod_from_dict(pod(real_pod.name, namespace=real_pod.namespace, uid=real_pod.uid))
    bystander = pod_from_dict(pod("bystander", uid="uid-bystander"))
    quiet = CycleReport(now=0.0, observed=Observed(pods=(the_pod, bystander)), decided=Decided(Assessment(NoneStarved())))
    counters = OomCounters(CgroupReader(real_pod.layout))
    clock = ManualClock(0.0)
    feedback = OomFeedback(counters, dry_run=False, container_names=lambda uid: {real_pod.container_id: "app"}
                           if uid == real_pod.uid else {}, clock=clock)
    metrics = Metrics()
    process = real_pod.start_process()
    process.do(f"alloc {8 * MiB}")

    baseline = feedback.observe(quiet)
    assert not baseline.has_kills and feedback.problems == ()
    # A soft memory threshold is met, its grace period running, when the kernel kills the pod's process.
    soft = next(t for t in eviction_settings({
        "evictionSoft": {"memory.available": "1Gi"}, "evictionSoftGracePeriod": {"memory.available": "1m"},
    }).thresholds())
    pressure = CycleReport(now=10.0, observed=Observed(pods=quiet.observed.pods),
                           decided=Decided(Assessment(NoneStarved(), thresholds=(ThresholdStatus(soft, False, 5.0),))))
    clock.now_s = 10.0
    assert not feedback.observe(pressure).has_kills

    real_pod.oom_kill(process, POD_LIMIT_BYTES)
    clock.now_s = 20.0
    report = feedback.observe(pressure)
    metrics.record_cycle(CycleReport(now=20.0, observed=Observed(), decided=Decided(Assessment(NoneStarved())),
                                     oom=report), EngineState(), 0.0, datetime.now(UTC), dry_run=False)

    assert report.pod_kills == (PodOomKill(pod_uid=real_pod.uid, container_id=real_pod.container_id,
                                           cgroup=real_pod.pod_cgroup, kills=1, pod_key="shop/cart-7d9f",
                                           container_name="app"),)
    assert report.pods_kills == 1, "the test's pods cgroup saw exactly this kill"
    assert report.node_kills >= 1, "the machine's counter counts it too (and any other kill on the machine)"
    assert report.activity is Activity.GRACE_PERIOD and report.too_late_kills == report.node_kills
    assert feedback.problems == ()
    sample = metrics.registry.get_sample_value
    assert sample("evictd_oom_kills_total", {"scope": str(OomScope.POD)}) == 1
    assert sample("evictd_oom_kills_total", {"scope": str(OomScope.PODS)}) == 1
    assert sample("evictd_oom_kills_too_late_total", {"activity": "grace-period"}) == report.node_kills

    clock.now_s = 30.0
    again = feedback.observe(pressure)
    assert again.pod_kills == () and again.pods_kills == 0, "a kill is counted once"
    raw = (real_pod.memory_file(real_pod.container_cgroup, "memory.oom_control")).read_text()
    assert "oom_kill 1\n" in raw, raw


def test_a_real_kill_while_evictd_was_down_in_a_container_cgroup_removed_since_is_counted_on_the_machine_only(
    real_pod: RealPodNode, tmp_path: Path
) -> None:
    """cgroup v1 counts a kill only in the killed process's cgroup: once a runtime removed it, the next start
    finds the kill on the machine's counter and no longer in a pod (cgroup v2's hierarchical pod counter keeps it:
    tests/test_oom_counters_file.py)."""
    the_pod = pod_from_dict(pod(real_pod.name, namespace=real_pod.namespace, uid=real_pod.uid))
    quiet = CycleReport(now=0.0, observed=Observed(pods=(the_pod,)), decided=Decided(Assessment(NoneStarved())))
    clock = ManualClock(0.0)

    def start() -> tuple[OomFeedback, Resumption | None]:
        counters = OomCounters(CgroupReader(real_pod.layout))
        saved = OomCountersFile(str(tmp_path / "state" / "oom-counters.json"), boot_id=counters.boot_id(),
                                pods_cgroup=counters.pods_cgroup_name, log=LogCapture(), on_error=lambda: None,
                                clock=clock)
        feedback = OomFeedback(counters, dry_run=False, container_names=lambda uid: {}, clock=clock, saved=saved)
        resumed = feedback.resume()
        return feedback, None if resumed is None else resumed.resumption

    def cycle(feedback: OomFeedback) -> None:
        clock.now_s += 10.0
        feedback.save(Cycle(number=1, report=quiet, state=EngineState(), started_at=clock.now_s, duration_s=0.0,
                            wall=clock.wall()))

    process = real_pod.start_process()
    feedback, resumption = start()
    assert resumption is Resumption.NONE_SAVED
    assert not feedback.observe(quiet).has_kills and feedback.problems == ()
    cycle(feedback)
    feedback.close()

    real_pod.oom_kill(process, POD_LIMIT_BYTES)  # evictd down; then the runtime removes the container's cgroup
    remove_cgroups([CGROUP_MOUNT / hierarchy / real_pod.container_cgroup for hierarchy in HIERARCHIES])

    feedback, resumption = start()
    assert resumption is Resumption.RESUMED
    report = feedback.observe(quiet)
    assert report.activity is Activity.NOT_RUNNING and feedback.problems == ()
    assert report.node_kills >= 1, "the machine's counter still has it"
    assert (report.pods_kills, report.pod_kills) == (0, ()), "no cgroup still present counts it"
    cycle(feedback)
    feedback.close()
