"""The eviction manager's handling of adapter failures (KUBELET_SPEC §15)."""

from __future__ import annotations

from typing import Any

from builders import Gi, Mi, fs, pod, pod_stats, summary
from evictd.core.engine import EngineConfig, Eviction, ReclaimAction, effective_thresholds
from evictd.core.errors import CRIError, KubeError, SampleError
from evictd.core.kubelet_config import EvictionSettings
from evictd.core.pods import pod_from_dict
from evictd.core.signals import FsLayout
from evictd.core.summary import Summary, summary_from_dict
from evictd.manager import EvictionManager
from evictd.simulate import FakeClock


class Stats:
    """Scripted summaries, one per call; an exception in the script is raised instead."""

    def __init__(self, *script: dict[str, Any] | Exception) -> None:
        self.script = list(script)

    def summary(self) -> Summary:
        item = self.script.pop(0)
        if isinstance(item, Exception):
            raise item
        return summary_from_dict(item)


class Layout:
    def __init__(self, *script: FsLayout | Exception) -> None:
        self.script = list(script)
        self.calls = 0

    def layout(self) -> FsLayout:
        self.calls += 1
        item = self.script.pop(0)
        if isinstance(item, Exception):
            raise item
        return item


class Pods:
    def __init__(self, *docs: dict[str, Any]) -> None:
        self.pods = [pod_from_dict(d) for d in docs]

    def active_pods(self) -> list[Any]:
        return self.pods


class Reclaimer:
    """Fails the actions named in `failing`; records every call."""

    def __init__(self, failing: set[ReclaimAction] | None = None) -> None:
        self.failing = failing or set()
        self.calls: list[ReclaimAction] = []

    def reclaim(self, action: ReclaimAction) -> int:
        self.calls.append(action)
        if action in self.failing:
            raise CRIError("/runtime.v1.ImageService/RemoveImage", "UNAVAILABLE", "connection refused")
        return 1 << 20


class Evictor:
    def __init__(self, fail: bool = False) -> None:
        self.fail = fail
        self.calls: list[Eviction] = []

    def evict(self, eviction: Eviction) -> None:
        self.calls.append(eviction)
        if self.fail:
            raise KubeError("patch pods/status", 500, "internal error")


VICTIM = pod("victim")
DISK_LOW = summary(nodefs=fs(Gi, 100 * Gi), pods=[pod_stats(VICTIM, rootfs=Gi)])
DISK_OK = summary(nodefs=fs(50 * Gi, 100 * Gi), pods=[pod_stats(VICTIM, rootfs=Gi)])


def manager(stats: Stats, *, layout: Layout | None = None, reclaimer: Reclaimer | None = None,
            evictor: Evictor | None = None, hard: dict[str, str] | None = None) -> EvictionManager:
    config = EngineConfig.from_settings(EvictionSettings(hard=hard or {"nodefs.available": "2Gi"}))
    return EvictionManager(config, stats=stats, layout=layout or Layout(FsLayout()), pods=Pods(VICTIM),
                           reclaimer=reclaimer or Reclaimer(), evictor=evictor or Evictor(), clock=FakeClock())


def test_a_failing_reclaim_action_does_not_stop_the_others() -> None:
    reclaimer = Reclaimer(failing={ReclaimAction.CONTAINER_GC})
    report = manager(Stats(DISK_LOW, DISK_OK), reclaimer=reclaimer).synchronize()
    assert reclaimer.calls == [ReclaimAction.CONTAINER_GC, ReclaimAction.IMAGE_GC]
    assert report.reclaim[0].error is not None and "UNAVAILABLE" in report.reclaim[0].error
    assert report.reclaim[1].freed_bytes == 1 << 20
    assert report.reclaim_succeeded is True and report.evictions == ()


def test_unreadable_stats_after_reclaim_mean_reclaim_failed() -> None:
    evictor = Evictor()
    report = manager(Stats(DISK_LOW, SampleError("/var/lib/kubelet", "statvfs: EIO")), evictor=evictor).synchronize()
    assert report.reclaim_succeeded is False
    assert [e.pod.name for e in evictor.calls] == ["victim"]
    assert "after resource reclaim" in report.errors[0]


def test_a_failed_eviction_still_counts_as_the_cycles_eviction() -> None:
    evictor = Evictor(fail=True)
    report = manager(Stats(summary(memory=Mi, pods=[pod_stats(VICTIM, memory=Gi)])), evictor=evictor,
                     hard={"memory.available": "1Gi"}).synchronize()
    assert [e.pod.name for e in report.evictions] == ["victim"]
    assert report.eviction_errors == ("default/victim: Kubernetes API patch pods/status failed (500): internal error",)
    assert len(evictor.calls) == 1


def test_layout_detection_failure_skips_the_cycle_and_is_retried() -> None:
    layout = Layout(SampleError("/var/lib/containerd", "No such file or directory"), FsLayout())
    m = manager(Stats(DISK_LOW, DISK_LOW), layout=layout, reclaimer=Reclaimer())
    first = m.synchronize()
    assert first.assessment.skipped is not None
    assert first.assessment.skipped.startswith("eviction manager: failed to get HasDedicatedImageFs:")
    assert m.state.layout is None and first.evictions == ()
    second = m.synchronize()
    assert m.state.layout == FsLayout() and layout.calls == 2
    assert second.reclaim_succeeded is False and len(second.evictions) == 1


def test_a_runtime_attached_later_brings_its_layout_and_reclaimer_and_keeps_the_grace_periods() -> None:
    """The layout (and the containerfs thresholds derived from it) is detected again from the runtime's
    filesystems; a soft threshold already counting its grace period keeps counting from when it was met."""
    clock = FakeClock()
    config = EngineConfig.from_settings(EvictionSettings(hard={}, soft={"nodefs.available": "2Gi"},
                                                         soft_grace_period={"nodefs.available": "1m"}))
    before, after = Reclaimer(), Reclaimer()
    m = EvictionManager(config, stats=Stats(DISK_LOW, DISK_LOW, DISK_OK), layout=Layout(FsLayout()),
                        pods=Pods(VICTIM), reclaimer=before, evictor=Evictor(), clock=clock)
    m.synchronize()
    (nodefs,) = [t for t in m.state.thresholds if str(t.signal) == "nodefs.available"]
    assert m.state.first_observed_at == {nodefs: 0.0}
    kept_conditions = m.state.node_conditions
    assert kept_conditions, "a soft threshold met reports the condition at once"

    split = FsLayout(dedicated_imagefs=True, split_containerfs=True)
    runtime_layout = Layout(split)
    m.attach_runtime(runtime_layout, after)
    clock.now = 61.0
    report = m.synchronize()
    assert runtime_layout.calls == 1 and m.state.layout == split
    assert m.state.thresholds == tuple(effective_thresholds(config, split)[0])
    assert m.state.first_observed_at[nodefs] == 0.0, "grace counted from the first cycle, not from the attach"
    assert m.state.node_conditions == kept_conditions
    assert before.calls == [] and after.calls == [r.action for r in report.reclaim] != []


def test_layout_is_detected_once() -> None:
    layout = Layout(FsLayout(dedicated_imagefs=True))
    m = manager(Stats(DISK_OK, DISK_OK, DISK_OK), layout=layout)
    for _ in range(3):
        m.synchronize()
    assert layout.calls == 1 and m.state.layout == FsLayout(dedicated_imagefs=True)

