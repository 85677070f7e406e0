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
from evictd.core.pod_parser import pod_from_dict
from evictd.cycle.report import CycleReport, Decided, Observed
from evictd.observe.metrics import Metrics
from evictd.run.oom_feedback import OomFeedback
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
