"""The eviction manager's handling of adapter failures (KUBELET_SPEC §15)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from builders import Gi, Mi, fs, pod, pod_stats, summary
from clocks import ManualClock
from evictd.core.engine import EngineConfig, Eviction, ReclaimThenEvict, Skipped
from evictd.core.errors import CRIError, KubeError, SampleError
from evictd.core.fs_layout import FsLayout, ReclaimAction
from evictd.core.kubelet_config import EvictionSettings
from evictd.core.pod_parser import pod_from_dict
from evictd.core.pods import Pod
from evictd.core.summary import Summary
from evictd.core.summary_parser import summary_from_dict
from evictd.core.thresholds import derive_containerfs_thresholds
from evictd.cycle.manager import EvictionManager
from evictd.cycle.report import CycleError, CycleReport, CycleStep, PodListProblem
from evictd.run.runtime_link import NodeLevel


class Stats:
    """Scripted summaries, one per call; an exception in the script is raised instead. `measured`: the pods each
    call was asked to measure; `rereads`: whether each call was a re-read within the cycle; `runtime_waits`: how long
    each was told to wait for the runtime (None: its deadline)."""

    def __init__(self, *script: dict[str, Any] | Summary | Exception) -> None:
        self.script = list(script)
        self.measured: list[list[str]] = []
        self.rereads: list[bool] = []
        self.runtime_waits: list[float | None] = []

    def memory_reading(self) -> None:  # no reading of the memory alone: confirmed on whole Summaries
        return None

    def summary(self, pods: Sequence[Pod], *, reread: bool = False, runtime_wait_s: float | None = None) -> Summary:
        self.measured.append([p.name for p in pods])
        self.rereads.append(reread)
        self.runtime_waits.append(runtime_wait_s)
        item = self.script.pop(0)
        if isinstance(item, Exception):
            raise item
        return item if isinstance(item, Summary) else summary_from_dict(item)


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
                           reclaimer=reclaimer or Reclaimer(), evictor=evictor or Evictor(), clock=ManualClock(0.0))


def test_a_failing_reclaim_action_does_not_stop_the_others() -> None:
    reclaimer = Reclaimer(failing={ReclaimAction.CONTAINER_GC})
    report = manager(Stats(DISK_LOW, DISK_OK), reclaimer=reclaimer).synchronize()
    assert reclaimer.calls == [ReclaimAction.CONTAINER_GC, ReclaimAction.IMAGE_GC]
    assert report.acted.reclaim[0].error is not None and "UNAVAILABLE" in report.acted.reclaim[0].error
    assert report.acted.reclaim[1].freed_bytes == 1 << 20
    assert report.acted.reclaim_succeeded is True and report.acted.evictions == ()


def test_unreadable_stats_after_reclaim_mean_reclaim_failed() -> None:
    evictor = Evictor()
    report = manager(Stats(DISK_LOW, SampleError("/var/lib/kubelet", "statvfs: EIO")), evictor=evictor).synchronize()
    assert report.acted.reclaim_succeeded is False
    assert [e.pod.name for e in evictor.calls] == ["victim"]
    assert report.errors[0].step is CycleStep.STATS and "after resource reclaim" in report.errors[0].description


def test_the_reading_after_reclaim_is_a_fresh_one_not_a_reread() -> None:
    """Reclaim may have removed containers: the reading after it asks every source anew (`reread` False)."""
    stats = Stats(DISK_LOW, DISK_OK)
    manager(stats).synchronize()
    assert stats.rereads == [False, False]


def test_a_failed_eviction_still_counts_as_the_cycles_eviction() -> None:
    evictor = Evictor(fail=True)
    report = manager(Stats(summary(memory=Mi, pods=[pod_stats(VICTIM, memory=Gi)])), evictor=evictor,
                     hard={"memory.available": "1Gi"}).synchronize()
    assert [e.pod.name for e in report.acted.evictions] == ["victim"]
    assert tuple(e.description for e in report.errors_of(CycleStep.EVICTION)) == (
        "default/victim: Kubernetes API patch pods/status failed (500): internal error",)
    assert report.errors_of(CycleStep.EVICTION)[0].pod == "default/victim"  # which pod's eviction failed
    assert len(evictor.calls) == 1


def test_layout_detection_failure_skips_the_cycle_and_is_retried() -> None:
    layout = Layout(SampleError("/var/lib/containerd", "No such file or directory"), FsLayout())
    m = manager(Stats(DISK_LOW, DISK_LOW), layout=layout, reclaimer=Reclaimer())
    first = m.synchronize()
    assert isinstance(first.decided.assessment.next_step, Skipped)
    assert first.decided.assessment.next_step.reason.startswith("eviction manager: failed to get HasDedicatedImageFs:")
    assert first.errors == (CycleError(CycleStep.LAYOUT, first.decided.assessment.next_step.reason),)
    assert m.state.layout is None and first.acted.evictions == ()
    second = m.synchronize()
    assert m.state.layout == FsLayout() and layout.calls == 2
    assert second.acted.reclaim_succeeded is False and len(second.acted.evictions) == 1


def test_a_runtime_attached_later_brings_its_layout_and_reclaimer_and_keeps_the_grace_periods() -> None:
    """The layout (and the containerfs thresholds derived from it) is detected again from the runtime's
    filesystems; a soft threshold already counting its grace period keeps counting from when it was met."""
    clock = ManualClock(0.0)
    config = EngineConfig.from_settings(EvictionSettings(hard={}, soft={"nodefs.available": "2Gi"},
                                                         soft_grace_period={"nodefs.available": "1m"}))
    before, after = Reclaimer(), Reclaimer()
    node = NodeLevel(Layout(FsLayout()), before)
    m = EvictionManager(config, stats=Stats(DISK_LOW, DISK_LOW, DISK_OK), layout=node, pods=Pods(VICTIM),
                        reclaimer=node, evictor=Evictor(), clock=clock, layout_changes=lambda: node.changes)
    m.synchronize()
    (nodefs,) = [t for t in m.state.thresholds if str(t.signal) == "nodefs.available"]
    assert m.state.first_observed_at == {nodefs: 0.0}
    kept_conditions = m.state.node_conditions
    assert kept_conditions, "a soft threshold met reports the condition at once"

    split = FsLayout(dedicated_imagefs=True, split_containerfs=True)
    runtime_layout = Layout(split)
    node.attach(runtime_layout, after)
    clock.now_s = 61.0
    report = m.synchronize()
    assert runtime_layout.calls == 1 and m.state.layout == split
    assert m.state.thresholds == tuple(derive_containerfs_thresholds(config.thresholds, split)[0])
    assert m.state.first_observed_at[nodefs] == 0.0, "grace counted from the first cycle, not from the attach"
    assert m.state.node_conditions == kept_conditions
    assert before.calls == [] and after.calls == [r.action for r in report.acted.reclaim] != []


def test_layout_is_detected_once() -> None:
    layout = Layout(FsLayout(dedicated_imagefs=True))
    m = manager(Stats(DISK_OK, DISK_OK, DISK_OK), layout=layout)
    for _ in range(3):
        m.synchronize()
    assert layout.calls == 1 and m.state.layout == FsLayout(dedicated_imagefs=True)



# --- no pod list from the API: the pods the node shows, hard thresholds only -----------------------------------

NO_POD_LIST = KubeError("list pods", None, "pod cache not synced: connection refused")
STATIC = pod("etcd-node-1", annotations={"kubernetes.io/config.source": "file"})
MEMORY_LOW = summary(memory=Mi, pods=[pod_stats(STATIC, memory=2 * Gi), pod_stats(VICTIM, memory=Gi)])


class Unlisted:
    """A pod source that cannot list (the watch before its first list)."""

    def __init__(self, error: Exception) -> None:
        self.error = error

    def active_pods(self) -> list[Any]:
        raise self.error


def without_pod_list(evictor: Evictor, node_pods: Any, *, hard: dict[str, str] | None = None,
                     soft: dict[str, str] | None = None, stats: Stats | None = None,
                     clock: ManualClock | None = None) -> EvictionManager:
    config = EngineConfig.from_settings(EvictionSettings(hard=hard or {}, soft=soft or {},
                                                         soft_grace_period={signal: "1m" for signal in soft or {}}))
    return EvictionManager(config, stats=stats or Stats(MEMORY_LOW), layout=Layout(FsLayout()),
                           pods=Unlisted(NO_POD_LIST), reclaimer=Reclaimer(), evictor=evictor,
                           clock=clock or ManualClock(0.0), node_pods=node_pods)


def after_grace_period(m: EvictionManager, clock: ManualClock) -> CycleReport:
    """Run a cycle, then another once a soft threshold's 1 m grace period is over; return the second report."""
    m.synchronize()
    clock.advance(61.0)
    return m.synchronize()


def test_without_a_pod_list_a_hard_threshold_evicts_from_the_pods_the_node_shows() -> None:
    evictor = Evictor()
    stats = Stats(MEMORY_LOW)
    m = without_pod_list(evictor, Pods(STATIC, VICTIM), hard={"memory.available": "1Gi"}, stats=stats)
    report = m.synchronize()
    assert [p.name for p in report.decided.ranked_pods] == ["etcd-node-1", "victim"]
    assert [p.name for p in report.decided.skipped_critical] == ["etcd-node-1"]  # static, known from its sandbox
    assert [e.pod.name for e in evictor.calls] == ["victim"] and evictor.calls[0].grace_period_override_s == 1
    assert report.observed.pod_list_problem == PodListProblem(str(NO_POD_LIST), pods_from_node=True)
    assert report.errors == ()  # not an error: the degraded state says it
    assert report.degraded is not None and report.degraded.startswith(
        "pod-list-unavailable: no pod list from the Kubernetes API, hard thresholds act on the pods the node shows")
    assert stats.measured == [["etcd-node-1", "victim"]]  # what the stats measure


def test_without_a_pod_list_a_soft_threshold_evicts_nobody() -> None:
    evictor, clock = Evictor(), ManualClock(0.0)
    m = without_pod_list(evictor, Pods(STATIC, VICTIM), soft={"memory.available": "1Gi"},
                         stats=Stats(MEMORY_LOW, MEMORY_LOW), clock=clock)
    report = after_grace_period(m, clock)
    assert isinstance(report.decided.assessment.next_step, ReclaimThenEvict)  # met, its grace period over: it would act
    assert evictor.calls == [] and report.acted.evictions == () and report.decided.ranked_pods == ()
    assert report.decided.withheld == "a soft threshold evicts only from the Kubernetes API's pod list"
    assert report.observed.pods_from_node


def test_without_a_pod_list_a_hard_threshold_acts_where_a_soft_one_comes_first() -> None:
    """A soft memory threshold outranks a hard disk one; without the pod list the hard one evicts."""
    evictor, clock = Evictor(), ManualClock(0.0)
    low = summary(memory=Mi, nodefs=fs(Gi, 100 * Gi), pods=[pod_stats(VICTIM, memory=Gi, rootfs=Gi)])
    m = without_pod_list(evictor, Pods(VICTIM), hard={"nodefs.available": "2Gi"}, soft={"memory.available": "1Gi"},
                         stats=Stats(*[low] * 4), clock=clock)
    m.synchronize()
    evictor.calls.clear()  # the first cycle: only the hard disk threshold acted
    clock.advance(61.0)
    report = m.synchronize()
    step = report.decided.assessment.next_step
    assert isinstance(step, ReclaimThenEvict) and str(step.threshold.signal) == "memory.available"
    assert [(e.pod.name, e.signal) for e in evictor.calls] == [("victim", "nodefs.available")]


def test_without_a_pod_list_or_the_nodes_pods_nobody_is_evicted() -> None:
    evictor = Evictor()
    m = without_pod_list(evictor, Unlisted(CRIError("/runtime.v1.RuntimeService/ListPodSandbox", "UNAVAILABLE",
                                                    "connection refused")), hard={"memory.available": "1Gi"})
    report = m.synchronize()
    assert evictor.calls == [] and not report.observed.pods_from_node
    assert report.degraded is not None and "no pod can be evicted" in report.degraded
    assert len(report.errors) == 1 and report.errors[0].step is CycleStep.PODS
    assert "pods unavailable, no pod will be evicted" in report.errors[0].description
    assert "ListPodSandbox" in report.errors[0].description


def test_with_a_pod_list_the_nodes_pods_are_not_asked() -> None:
    evictor = Evictor()
    config = EngineConfig.from_settings(EvictionSettings(hard={"memory.available": "1Gi"}))
    report = EvictionManager(config, stats=Stats(MEMORY_LOW), layout=Layout(FsLayout()), pods=Pods(VICTIM),
                             reclaimer=Reclaimer(), evictor=evictor, clock=ManualClock(0.0),
                             node_pods=Unlisted(AssertionError("asked"))).synchronize()
    assert [e.pod.name for e in evictor.calls] == ["victim"]
    assert report.observed.pod_list_problem is None and not report.observed.pods_from_node and report.degraded is None


def test_a_manager_starts_from_the_state_it_is_built_with() -> None:
    """What a restart restored is given at construction: a soft threshold's grace period goes on counting from
    when the last run first saw it met, and no layout detected by the last run is kept over this one's."""
    config = EngineConfig.from_settings(EvictionSettings(hard={}, soft={"nodefs.available": "2Gi"},
                                                         soft_grace_period={"nodefs.available": "1m"}))
    first = EvictionManager(config, stats=Stats(DISK_LOW, DISK_LOW), layout=Layout(FsLayout()), pods=Pods(VICTIM),
                            reclaimer=Reclaimer(), evictor=Evictor(), clock=ManualClock(0.0))
    first.synchronize()
    restored = replace(first.state, layout=None)
    evictor = Evictor()
    second = EvictionManager(config, stats=Stats(DISK_LOW, DISK_LOW), layout=Layout(FsLayout()), pods=Pods(VICTIM),
                             reclaimer=Reclaimer(), evictor=evictor, clock=ManualClock(61.0), state=restored)
    assert second.state is restored
    report = second.synchronize()
    assert [e.pod.name for e in report.acted.evictions] == ["victim"] == [e.pod.name for e in evictor.calls]
    fresh = EvictionManager(config, stats=Stats(DISK_LOW, DISK_LOW), layout=Layout(FsLayout()), pods=Pods(VICTIM),
                            reclaimer=Reclaimer(), evictor=Evictor(), clock=ManualClock(61.0))
    assert fresh.synchronize().acted.evictions == (), "a fresh manager's grace period has only just started"


class DiskFigures:
    """Records each wait for pods' disk figures (returns at once: the scripted stats say what the wait brought)."""

    def __init__(self) -> None:
        self.waits: list[tuple[list[str], float]] = []

    def wait_for_disk_figures(self, pods: Sequence[Pod], timeout_s: float) -> None:
        self.waits.append(([p.name for p in pods], timeout_s))


def waiting_manager(stats: Stats, figures: DiskFigures, evictor: Evictor) -> EvictionManager:
    config = EngineConfig.from_settings(EvictionSettings(hard={"nodefs.available": "2Gi"}))
    return EvictionManager(config, stats=stats, layout=Layout(FsLayout()), pods=Pods(VICTIM), reclaimer=Reclaimer(),
                           evictor=evictor, clock=ManualClock(0.0), disk_figures=figures, disk_figures_wait_s=1.5)


MEASURED_LOW = summary(nodefs=fs(Gi, 100 * Gi), pods=[pod_stats(VICTIM, rootfs=Gi, ephemeral=Gi)])


def test_a_disk_ranking_waits_once_for_a_pod_without_disk_figures_then_ranks_on_the_stats_read_after() -> None:
    figures, evictor = DiskFigures(), Evictor()
    # The cycle's stats, those after reclaim (no figures yet), then those read after the wait (measured).
    report = waiting_manager(Stats(DISK_LOW, DISK_LOW, MEASURED_LOW), figures, evictor).synchronize()
    assert figures.waits == [(["victim"], 1.5)]
    assert [p.name for p in report.decided.awaited_disk_figures] == ["victim"]
    assert report.decided.unmeasured == ()
    assert [e.pod.name for e in evictor.calls] == ["victim"]


def test_no_eviction_when_the_pressure_is_gone_after_the_wait_for_disk_figures() -> None:
    figures, evictor = DiskFigures(), Evictor()
    report = waiting_manager(Stats(DISK_LOW, DISK_LOW, DISK_OK), figures, evictor).synchronize()
    assert len(figures.waits) == 1
    assert evictor.calls == [] and report.acted.evictions == ()
    assert report.decided.withheld == "the threshold was no longer met after the wait for pods' disk figures"


def test_unreadable_stats_after_the_wait_for_disk_figures_evict_nobody() -> None:
    figures, evictor = DiskFigures(), Evictor()
    stats = Stats(DISK_LOW, DISK_LOW, SampleError("/var/lib/kubelet", "statvfs: EIO"))
    report = waiting_manager(stats, figures, evictor).synchronize()
    assert evictor.calls == []
    assert [e.description for e in report.errors_of(CycleStep.STATS)] == [
        "eviction manager: failed to get summary stats after waiting for disk figures: "
        "/var/lib/kubelet: statvfs: EIO"]
