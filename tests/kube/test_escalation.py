"""Issue #43: a hard threshold cuts a soft eviction short, and a background eviction holds soft evictions.

Against the test API server with the real EvictionManager, KubePodEvictor, journal, pod watch and the daemon's
`TerminatingEvictions` / `BackgroundEvictions` (as `build_cluster` wires them); only the stats and the manager's
clock are scripted.

1. Escalation: a 3 GiB pod soft-evicted with a 600 s grace period that keeps running (it ignores SIGTERM: the test
   API server leaves it terminating) holds the memory when a hard threshold is met. evictd deletes it again with
   the hard grace period (1 s) instead of evicting a 200 MiB bystander; it does so once, as a follow-up of the
   first eviction (issue #73: no second Evicted event, not counted again).
   A pod evicted at once and stopped on the node that runs again (the kubelet restarted it before it saw the
   deletion) is stopped on the node again, with no second DELETE or event; one stopped for good lets the next go.
2. Pending release: with `softEvictionsThroughEvictionAPI`, a pod whose eviction the API accepted and carries out
   in the background (annotated eviction in progress, not deleted) holds the next soft eviction for the same
   shortfall until it is gone or `PENDING_RELEASE_DEADLINE_S` passed; a hard threshold is not held.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from apiserver import ApiServer
from evictd_kube_support import evictd_api_client

from builders import Gi, Mi, pod, pod_stats, summary
from clocks import ManualClock
from evictd.commands.simulate import FixedLayout
from evictd.core.engine import EngineConfig, Eviction, FollowUpKind
from evictd.core.fs_layout import FsLayout
from evictd.core.kubelet_config import eviction_settings
from evictd.core.pods import Pod
from evictd.core.summary import Summary
from evictd.core.summary_parser import summary_from_dict
from evictd.cycle.eviction_api_route import EvictionApiRoute
from evictd.cycle.manager import EvictionManager
from evictd.kube.cluster import PENDING_RELEASE_DEADLINE_S, BackgroundEvictions, EvictablePods, TerminatingEvictions
from evictd.kube.events import EventRecorder
from evictd.kube.eviction_requests import EvictionRequests
from evictd.kube.evictor import KubePodEvictor
from evictd.kube.journal import EvictionJournal
from evictd.kube.pod_watch import PodWatcher
from evictd.run.compose_node import ReportOnlyReclaimer
from log_capture import LogCapture
from polling import wait_until

NODE = "node-1"
HOLDER = pod("holder", grace=600)  # best effort: ranked first for memory
BYSTANDERS = [pod(f"bystander-{n}", requests={"memory": "100Mi"}, grace=30) for n in range(3)]
KUBELET = {"evictionHard": {"memory.available": "500Mi"}, "evictionSoft": {"memory.available": "1Gi"},
           "evictionSoftGracePeriod": {"memory.available": "1s"}, "evictionMaxPodGracePeriod": 600}


class Stats:
    def __init__(self, available: int) -> None:
        self.available = available
        self.measured: list[list[str]] = []
        self.holder_processes: int | None = None  # None: not counted (as the Summary API may leave it)

    def memory_reading(self) -> None:  # no reading of the memory alone: confirmed on whole Summaries
        return None

    def summary(self, pods: Sequence[Pod], *, reread: bool = False, runtime_wait_s: float | None = None) -> Summary:
        self.measured.append([p.name for p in pods])
        return summary_from_dict(summary(memory=self.available, pods=[
            pod_stats(HOLDER, memory=3 * Gi, processes=self.holder_processes),
            *(pod_stats(b, memory=200 * Mi) for b in BYSTANDERS)]))


class StoppingRuntime:
    """An attached container runtime that stops each pod it is asked to (what the runtime link does), and remembers
    which."""

    attached = True
    can_stop = True

    def __init__(self) -> None:
        self.stopped: list[str] = []

    def stop_pod(self, eviction: Eviction) -> str:
        self.stopped.append(eviction.pod.name)
        return "through the container runtime"


def build(apiserver: ApiServer, tmp_path: Path, *, api: bool,
          runtime: StoppingRuntime | None = None) -> Iterator[tuple[EvictionManager, Stats, Any]]:
    for document in (HOLDER, *BYSTANDERS):
        apiserver.store.create_pod(document)
    client = evictd_api_client(apiserver)
    watcher = PodWatcher(client, NODE)
    watcher.start()
    assert wait_until(watcher.is_synced, 5.0)
    journal = EvictionJournal(str(tmp_path / "evictions.json"), log=LogCapture())
    clock = ManualClock(0.0)
    evictor = KubePodEvictor(client, journal, EventRecorder(client, NODE), clock=clock,
                             **({} if runtime is None else {"runtime": runtime}))
    requests = EvictionRequests(evictor, request_timeout_s=5.0) if api else None
    route = None if requests is None else EvictionApiRoute(
        requests, max_candidates=3, deadline_s=300.0,
        pending_release=BackgroundEvictions(watcher, journal, clock=clock).pending_release)
    stats = Stats(800 * Mi)
    manager = EvictionManager(
        EngineConfig.from_settings(eviction_settings(KUBELET)), stats=stats, layout=FixedLayout(FsLayout()),
        pods=EvictablePods(watcher, journal), reclaimer=ReportOnlyReclaimer(), evictor=evictor, clock=clock,
        eviction_api=route, terminating=TerminatingEvictions(watcher, journal))
    yield manager, stats, (clock, requests, watcher, journal)
    watcher.stop()
    client.close()


def deletes(apiserver: ApiServer) -> list[tuple[str, int]]:
    """The DELETEs of pods sent, in order: (pod name, grace period)."""
    return [(r.path.rsplit("/", 1)[1], r.body["gracePeriodSeconds"]) for r in
            apiserver.request_log.matching("DELETE", None) if "/pods/" in r.path]


def evicted_events(apiserver: ApiServer, name: str) -> int:
    """How many Evicted events name the pod `name`."""
    return sum(1 for e in apiserver.store.events() if e["reason"] == "Evicted" and e["involvedObject"]["name"] == name)


@pytest.fixture
def kubelet_way(apiserver: ApiServer, tmp_path: Path) -> Iterator[tuple[EvictionManager, Stats, Any]]:
    yield from build(apiserver, tmp_path, api=False)


@pytest.fixture
def through_api(apiserver: ApiServer, tmp_path: Path) -> Iterator[tuple[EvictionManager, Stats, Any]]:
    yield from build(apiserver, tmp_path, api=True)


def test_a_hard_threshold_deletes_the_soft_evicted_pod_again_with_the_hard_grace_period_before_any_bystander(
    apiserver: ApiServer, kubelet_way: tuple[EvictionManager, Stats, Any]
) -> None:
    manager, stats, (clock, _, watcher, _) = kubelet_way
    assert manager.synchronize().acted.evictions == ()  # the soft grace period starts
    clock.advance(1.0)
    soft = manager.synchronize()
    assert [(e.pod.name, e.effective_grace_period_s) for e in soft.acted.evictions] == [("holder", 600)]
    assert wait_until(lambda: (p := watcher.pod(HOLDER["metadata"]["uid"])) is not None
                      and p.deletion_timestamp is not None, 5.0)
    # Still under soft pressure only: the holder, already evicted with its grace period, is not evicted again.
    clock.advance(1.0)
    assert manager.synchronize().acted.evictions[0].pod.name == "bystander-0"  # the kubelet's way for soft
    stats.available = 300 * Mi  # the holder ignores SIGTERM and keeps its 3 GiB: a hard threshold is met
    clock.advance(1.0)
    hard = manager.synchronize()
    assert hard.acted.evictions == ()  # not a second eviction: a follow-up of the first
    [follow_up] = hard.acted.follow_ups
    assert (follow_up.eviction.pod.name, follow_up.kind) == ("holder", FollowUpKind.ESCALATED)
    assert follow_up.how == "deleted with a 1 s grace period (its eviction gave 600 s)"
    assert hard.decided.ranked_pods[0].name == "holder"
    assert "holder" in stats.measured[-1]  # its memory was measured to rank it
    assert deletes(apiserver)[-1] == ("holder", 1)
    stored = apiserver.store.get_pod("default", "holder")
    assert stored is not None and stored["metadata"]["deletionGracePeriodSeconds"] == 1
    # Escalated once: its journal entry now says 1 s, and the next pod goes for the same hard shortfall.
    clock.advance(1.0)
    assert [e.pod.name for e in manager.synchronize().acted.evictions] == ["bystander-1"]
    assert [name for name, _ in deletes(apiserver)].count("holder") == 2
    assert evicted_events(apiserver, "holder") == 1


@pytest.fixture
def with_runtime(apiserver: ApiServer, tmp_path: Path) -> Iterator[tuple[EvictionManager, Stats, Any]]:
    runtime = StoppingRuntime()
    for built in build(apiserver, tmp_path, api=False, runtime=runtime):
        yield built[0], built[1], (*built[2], runtime)


@pytest.mark.parametrize("processes", [2, None, 0])
def test_a_pod_stopped_on_the_node_that_runs_again_is_stopped_again_not_evicted_twice_nor_a_bystander(
    apiserver: ApiServer, with_runtime: tuple[EvictionManager, Stats, Any], processes: int | None
) -> None:
    """The real fleet's race: evictd's hard eviction stopped the hog's container on the node before the kubelet saw
    the deletion, the kubelet started it again (restartPolicy Always) and it refilled. A cycle 1 s after the eviction,
    the pod still listed and terminating, ranks it first again: it is stopped on the node again, never deleted or
    announced a second time (the real cluster showed two Evicted events for one pod), and no bystander goes. Its
    processes not counted (None, as a Summary may leave them) is taken as running. One that stays stopped (no process
    left) holds nothing, and the next pod goes."""
    manager, stats, (clock, _, watcher, journal, runtime) = with_runtime
    stats.available = 300 * Mi  # the hard threshold is met at once
    first = manager.synchronize()
    assert [(e.pod.name, e.effective_grace_period_s) for e in first.acted.evictions] == [("holder", 1)]
    assert runtime.stopped == ["holder"]  # stopped on the node beside the API writes
    uid = HOLDER["metadata"]["uid"]
    assert journal.get(uid).stopped_locally
    assert wait_until(lambda: (p := watcher.pod(uid)) is not None and p.deletion_timestamp is not None, 5.0)
    stats.holder_processes = processes  # started again by the kubelet, refilled to 3 GiB; or still stopped
    clock.advance(1.0)
    again = manager.synchronize()
    if processes == 0:
        assert [e.pod.name for e in again.acted.evictions] == ["bystander-0"] and again.acted.follow_ups == ()
        return
    assert again.acted.evictions == ()
    [follow_up] = again.acted.follow_ups
    assert (follow_up.eviction.pod.name, follow_up.kind) == ("holder", FollowUpKind.STOPPED_AGAIN)
    assert runtime.stopped == ["holder", "holder"]
    assert deletes(apiserver) == [("holder", 1)] and evicted_events(apiserver, "holder") == 1


def test_a_pod_releasing_in_the_background_holds_soft_evictions_until_its_deadline(
    apiserver: ApiServer, through_api: tuple[EvictionManager, Stats, Any]
) -> None:
    manager, stats, (clock, requests, watcher, _) = through_api
    apiserver.store.evict_in_background("default", "holder")
    manager.synchronize()  # the soft grace period starts
    clock.advance(1.0)
    first = manager.synchronize()
    assert first.acted.eviction_api is not None and first.acted.eviction_api.asked[0] == "default/holder"
    assert wait_until(lambda: requests.asking() is None, 5.0)
    clock.advance(1.0)
    accepted = manager.synchronize()  # reports the round: accepted, the pod not deleted
    assert [e.pod.name for e in accepted.acted.evictions] == ["holder"]
    assert wait_until(lambda: (p := watcher.pod(HOLDER["metadata"]["uid"])) is not None
                      and "descheduler.alpha.kubernetes.io/eviction-in-progress" in p.annotations, 5.0)
    for _ in range(3):
        clock.advance(10.0)
        held = manager.synchronize()
        assert held.acted.evictions == () and held.acted.eviction_api is not None
        assert held.acted.eviction_api.pending_release == "default/holder"
        assert held.acted.eviction_api.asked == ()
    assert deletes(apiserver) == []
    # A hard threshold is not held: it evicts as the kubelet does.
    stats.available = 300 * Mi
    clock.advance(1.0)
    hard = manager.synchronize().acted
    # Its one eviction was the API's: this deletes it with the hard grace, a follow-up (no second Evicted event).
    assert hard.evictions == ()
    assert [(f.eviction.pod.name, f.kind) for f in hard.follow_ups] == [("holder", FollowUpKind.ESCALATED)]
    assert deletes(apiserver) == [("holder", 1)] and evicted_events(apiserver, "holder") == 1
    # Past the deadline a soft eviction goes on.
    stats.available = 800 * Mi
    clock.advance(PENDING_RELEASE_DEADLINE_S)
    late = manager.synchronize()
    assert late.acted.eviction_api is not None and late.acted.eviction_api.pending_release is None
