"""The wait after an eviction (`ClusterSync.wait_for_cleanup`): the kubelet's waitForPodsCleanup, from outside.

A scripted watch and runtime on a fake clock: the pod's own phase (which evictd itself sets to Failed) never
ends the wait; the pod leaving the API does, and so does the runtime reporting nothing of it running (for a pod
evicted for disk, once its disk-backed emptyDir volumes are gone too).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from clocks import ManualClock
from evictd.core.engine import Eviction
from evictd.core.engine_rules import MINIMUM_GRACE_PERIOD_S
from evictd.core.pods import Pod
from evictd.core.signals import Signal
from evictd.core.thresholds import Threshold, ThresholdValue
from evictd.kube.cluster import OVERDUE_MARGIN_S, POD_CLEANUP_POLL_S, POD_CLEANUP_TIMEOUT_S, ClusterSync
from evictd.run.compose_cluster import disk_volumes_left
from log_capture import LogCapture


@dataclass
class ScriptedWatch:
    """`pod(uid)` as PodWatcher answers it: the cached pod, or None once deleted; `is_synced()` False before its
    first list (the cache then holds nothing, which proves nothing)."""

    pods: dict[str, Pod]
    synced: bool = True

    def pod(self, uid: str) -> Pod | None:
        return self.pods.get(uid)

    def is_synced(self) -> bool:
        return self.synced


def eviction(uid: str) -> Eviction:
    """An eviction whose status evictd already wrote: the cached pod is Failed."""
    pod = Pod(name=f"pod-{uid}", namespace="default", uid=uid, status_phase="Failed")
    return Eviction(pod=pod, signal="memory.available", grace_period_override_s=1, effective_grace_period_s=1,
                    message="", annotations={}, conditions=())


def sync(watch: ScriptedWatch, clock: ManualClock, pod_running: Any = None,
         should_stop: Callable[[], bool] = lambda: False, evictor: Any = None, log: Any = None,
         volumes_left: Callable[[str], bool] = lambda uid: False) -> ClusterSync:
    runtime = SimpleNamespace(pod_running=pod_running or (lambda uid: None))  # the runtime slot, as the sync asks it
    return ClusterSync(watcher=watch, evictor=evictor, node_writer=None, events=None,  # type: ignore[arg-type]
                       on_error=lambda error: None, log=log, runtime=runtime, should_stop=should_stop,
                       clock=clock, volumes_left=volumes_left)


def test_a_failed_pod_whose_containers_still_run_is_waited_for_until_they_stop() -> None:
    clock = ManualClock(0.0)
    watch = ScriptedWatch({"a": eviction("a").pod})
    running = {"a": True}
    clock.on_sleep.append(lambda now: running.update(a=now < 1.0))  # its kubelet stops it after 1 s
    assert sync(watch, clock, lambda uid: running[uid]).wait_for_cleanup([eviction("a")])
    assert 1.0 <= clock.now_s < 1.0 + POD_CLEANUP_POLL_S + 1e-9


def test_a_pod_stopped_on_the_node_is_cleaned_up_at_once_even_if_the_api_still_shows_it() -> None:
    clock = ManualClock(0.0)
    watch = ScriptedWatch({"a": eviction("a").pod})  # e.g. stopped locally while the API was down
    assert sync(watch, clock, lambda uid: False).wait_for_cleanup([eviction("a")])
    assert clock.now_s == 0


@pytest.mark.parametrize(("signal", "threshold", "waits"), [
    ("nodefs.available", Threshold(Signal.NODEFS_AVAILABLE, ThresholdValue(percentage=0.1)), True),
    ("", None, True),  # a local storage eviction (its emptyDir or container over its limit)
    ("memory.available", Threshold(Signal.MEMORY_AVAILABLE, ThresholdValue(percentage=0.1)), False),
], ids=["disk-signal", "local-storage", "memory"])
def test_a_pod_evicted_for_disk_is_waited_for_until_its_emptydir_volumes_are_gone_too(
        signal: str, threshold: Threshold | None, waits: bool) -> None:
    """The kubelet waits until the evicted pod is finished, its volumes torn down. On the real node (disk-fill-fast)
    evictd counted a filler stopped with its emptyDir still filling nodefs as gone, and evicted a Guaranteed pod."""
    clock = ManualClock(0.0)
    watch = ScriptedWatch({"a": eviction("a").pod})
    volumes = {"a": True}
    clock.on_sleep.append(lambda now: volumes.update(a=now < 4.0))  # its kubelet tears the emptyDir down after 4 s
    evicted = replace(eviction("a"), signal=signal, threshold=threshold)
    assert sync(watch, clock, lambda uid: False, volumes_left=volumes.__getitem__).wait_for_cleanup([evicted])
    if waits:
        assert 4.0 <= clock.now_s < 4.0 + POD_CLEANUP_POLL_S + 1e-9
    else:
        assert clock.now_s == 0, "a memory eviction: stopped is cleaned up (its emptyDir holds no memory)"


def test_before_the_first_pod_list_only_the_runtime_ends_the_wait() -> None:
    """A pod chosen from the node's pods (no pod list yet) is absent from the empty cache: that proves nothing."""
    clock = ManualClock(0.0)
    watch = ScriptedWatch({}, synced=False)
    running = {"a": True}
    clock.on_sleep.append(lambda now: running.update(a=now < 3.0))  # stopped through the CRI, gone after 3 s
    assert sync(watch, clock, lambda uid: running[uid]).wait_for_cleanup([eviction("a")])
    assert 3.0 <= clock.now_s < 3.0 + POD_CLEANUP_POLL_S + 1e-9


@pytest.mark.parametrize("pod_running", [None, lambda uid: None], ids=["no-runtime", "runtime-cannot-tell"])
def test_without_an_answer_from_the_runtime_only_the_pod_leaving_the_api_ends_the_wait(pod_running: Any) -> None:
    clock = ManualClock(0.0)
    watch = ScriptedWatch({"a": eviction("a").pod, "b": eviction("b").pod})
    clock.on_sleep.append(lambda now: watch.pods.pop("a") if now >= 2 and "a" in watch.pods else None)
    clock.on_sleep.append(lambda now: watch.pods.pop("b") if now >= 3 and "b" in watch.pods else None)
    assert sync(watch, clock, pod_running).wait_for_cleanup([eviction("a"), eviction("b")])
    assert 3.0 <= clock.now_s < 3.0 + POD_CLEANUP_POLL_S + 1e-9


def test_the_wait_ends_after_the_kubelets_timeout() -> None:
    clock = ManualClock(0.0)
    watch = ScriptedWatch({"a": eviction("a").pod})
    assert not sync(watch, clock, lambda uid: True).wait_for_cleanup([eviction("a")])
    assert clock.now_s == pytest.approx(POD_CLEANUP_TIMEOUT_S)


def test_a_daemon_asked_to_stop_gives_up_waiting() -> None:
    clock = ManualClock(0.0)
    watch = ScriptedWatch({"a": eviction("a").pod})
    cluster = sync(watch, clock, lambda uid: True, should_stop=lambda: clock.now_s >= 1.0)  # SIGTERM after 1 s
    assert not cluster.wait_for_cleanup([eviction("a")])
    assert 1.0 <= clock.now_s < 1.0 + POD_CLEANUP_POLL_S + 1e-9


def test_a_hard_threshold_met_ends_the_wait_at_once() -> None:
    """Issue #43: the wait sleeps on the daemon's pause (its waiter, woken by memory notifications), which ends it
    when a hard threshold is met; the kubelet waits out its 30 s whatever happens meanwhile."""
    clock = ManualClock(0.0)
    watch = ScriptedWatch({"a": eviction("a").pod})

    def pause(seconds: float) -> bool:
        clock.advance(seconds)
        return clock.now_s >= 2.0  # the hard crossing, 2 s into the wait

    assert not sync(watch, clock, lambda uid: True).wait_for_cleanup([eviction("a")], pause)
    assert 2.0 <= clock.now_s < 2.0 + POD_CLEANUP_POLL_S + 1e-9


class OverdueStops:
    """The evictor's `stop_overdue`, recorded: stopping a pod makes the runtime report it stopped."""

    def __init__(self, running: dict[str, bool], clock: ManualClock) -> None:
        self.running = running
        self.clock = clock
        self.stopped_at: dict[str, float] = {}

    def stop_overdue(self, evicted: Eviction) -> str:
        self.stopped_at[evicted.pod.uid] = self.clock.now_s
        self.running[evicted.pod.uid] = False
        return "by killing its 1 processes through its cgroup"


def test_a_pod_evicted_at_once_that_still_runs_past_its_grace_period_is_stopped_locally() -> None:
    """Issue 36's real node: the API took the hard eviction, the kubelet, starved, did not kill the pod, and the
    kernel's OOM killer did 30 s later. A soft eviction's pod is left to its kubelet (its grace period is the point)."""
    clock = ManualClock(0.0)
    hard = eviction("a")  # a local-storage or hard eviction: grace period 1 s, stopped with 2 s
    soft = replace(eviction("b"), threshold=Threshold(Signal.MEMORY_AVAILABLE, ThresholdValue(percentage=0.2),
                                                      grace_period_s=30.0))
    watch = ScriptedWatch({"a": hard.pod, "b": soft.pod})
    running = {"a": True, "b": True}
    stops = OverdueStops(running, clock)
    log = LogCapture()
    cluster = sync(watch, clock, lambda uid: running[uid], evictor=stops, log=log)
    assert not cluster.wait_for_cleanup([hard, soft])
    assert list(stops.stopped_at) == ["a"], "only the pod evicted at once"
    assert MINIMUM_GRACE_PERIOD_S + OVERDUE_MARGIN_S <= stops.stopped_at["a"] \
        < MINIMUM_GRACE_PERIOD_S + OVERDUE_MARGIN_S + POD_CLEANUP_POLL_S + 1e-9
    assert log.named("evicted pod still running past its grace period: stopped locally")


def test_the_volumes_left_are_the_pods_disk_backed_emptydirs_under_the_kubelet_root(tmp_path: Path) -> None:
    left = disk_volumes_left(str(tmp_path))
    scratch = tmp_path / "pods" / "a" / "volumes" / "kubernetes.io~empty-dir" / "scratch"
    scratch.mkdir(parents=True)
    assert left("a"), "its emptyDir is still on the disk"
    scratch.rmdir()  # the kubelet tore it down
    assert not left("a")
    assert not left("b"), "no folder of the pod at all"
    assert not left("../a"), "not a pod UID: cannot tell, no wait on it"
