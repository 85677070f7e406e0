"""A real `evictd run` with `softEvictionsThroughEvictionAPI` against an Eviction API that never answers (issue #38
item 1: what a timing-out eviction webhook looks like).

The pods and the node live in the test API server (tests/kube/apiserver.py), whose fault switch holds every
`POST .../eviction` unanswered; the stats come from a stand-in kubelet's Summary endpoint (tests/hostile_kubelet.py)
that the test changes between soft and hard memory pressure; no container runtime (a socket that does not exist),
so nothing on the machine is touched. Before the fix the hung POST held the loop for its 10 s timeout, counted as
an eviction, then the loop waited 30 s for the "evicted" pod: hard pressure got its DELETE 30-40 s late, /healthz
said 503, and a stop during the POST ended with exit status 1, the Lease held and the conditions left in place.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from apiserver import ApiServer
from evictd_process import EvictdProcess, summary_api_settings
from kube_objects import node_manifest

from builders import Gi, Mi, pod
from hostile_kubelet import ScriptedKubelet
from polling import wait_until

NODE = "node-1"  # the builders' pods and Summary name this node
PODS = [pod("hog", grace=60), pod("modest", requests={"memory": "100Mi"}, grace=60)]
KUBELET = ("evictionSoft: {memory.available: 2Gi}\nevictionSoftGracePeriod: {memory.available: 1s}\n"
           "evictionHard: {memory.available: 500Mi}\nevictionMaxPodGracePeriod: 20\nenforceNodeAllocatable: []\n")
EVICTION_POST = r".*/pods/[^/]+/eviction"
# A hard threshold has no grace period: the first cycle that sees it deletes, a 1 s interval after the crossing
# (and the Summary's 0.5 s deadline); more is a loop held by something else.
HARD_LATENCY_S = 4.0


@pytest.fixture
def kubelet() -> Iterator[ScriptedKubelet]:
    scripted = ScriptedKubelet([(PODS[0], 2 * Gi), (PODS[1], 1200 * Mi)])
    yield scripted
    scripted.server.close()


def start(tmp_path: Path, apiserver: ApiServer, kubelet: ScriptedKubelet,
          evictd_processes: list[EvictdProcess]) -> EvictdProcess:
    apiserver.store.create_node(node_manifest(NODE))
    for document in PODS:
        apiserver.store.create_pod(document)
    apiserver.faults.time_out_next(100, method="POST", path=EVICTION_POST)
    daemon = EvictdProcess(tmp_path, kubelet=KUBELET, evictd=summary_api_settings(
        tmp_path, apiserver.kubeconfig_path, NODE, kubelet.server.url()) + "softEvictionsThroughEvictionAPI: true\n")
    evictd_processes.append(daemon)
    daemon.wait_event("evictd started", timeout=60)
    return daemon


def hung_post_started(apiserver: ApiServer) -> bool:
    return any(r.status == 0 for r in apiserver.request_log.matching("POST", EVICTION_POST))


def evictd_conditions(apiserver: ApiServer) -> dict[str, str]:
    node = apiserver.store.get_node(NODE)
    assert node is not None
    return {c["type"]: c["status"] for c in node["status"]["conditions"] if c["type"].startswith("Evictd")}


def test_hard_pressure_during_a_hung_eviction_api_post_is_evicted_at_once_and_healthz_stays_ok(
        tmp_path: Path, apiserver: ApiServer, kubelet: ScriptedKubelet, evictd_processes: list[EvictdProcess]) -> None:
    daemon = start(tmp_path, apiserver, kubelet, evictd_processes)
    kubelet.available = 1500 * Mi  # the soft threshold: after its 1 s grace period, a POST that never answers
    assert wait_until(lambda: hung_post_started(apiserver), 10.0)

    health: list[int] = []
    sampling = threading.Event()

    def sample() -> None:
        while not sampling.is_set():
            health.append(daemon.http("/healthz")[0])
            sampling.wait(0.25)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    crossed = time.monotonic()
    kubelet.available = 300 * Mi  # the hard threshold, the POST still hung
    deleted = wait_until(lambda: apiserver.request_log.matching("DELETE", r".*/pods/[^/]+"), HARD_LATENCY_S)
    latency_s = time.monotonic() - crossed
    time.sleep(1.0)  # a few more cycles in the hard pressure, the POST still unanswered
    sampling.set()
    sampler.join()
    assert deleted, f"no DELETE within {HARD_LATENCY_S} s of the hard threshold's crossing"
    [delete] = apiserver.request_log.matching("DELETE", r".*/pods/[^/]+")
    # The pod the hung request asks for is the hard threshold's first candidate too: deleted the kubelet's way.
    assert delete.path.endswith("/pods/hog") and delete.body == {"gracePeriodSeconds": 1,
                                                                 "preconditions": {"uid": "uid-hog"}}
    assert latency_s < HARD_LATENCY_S
    assert health and set(health) == {200}, health
    assert not any(e.get("event") == "evicted pods still present after wait" for e in daemon.events)
    assert daemon.stop() == 0


def test_a_stop_during_a_hung_eviction_api_post_releases_the_lease_and_withdraws_the_conditions(
        tmp_path: Path, apiserver: ApiServer, kubelet: ScriptedKubelet, evictd_processes: list[EvictdProcess]) -> None:
    daemon = start(tmp_path, apiserver, kubelet, evictd_processes)
    kubelet.available = 1500 * Mi
    assert wait_until(lambda: hung_post_started(apiserver), 10.0)
    assert wait_until(lambda: evictd_conditions(apiserver).get("EvictdMemoryPressure") == "True", 5.0)

    sent = time.monotonic()
    assert daemon.stop(timeout=10) == 0
    assert time.monotonic() - sent < 5.0, "within shutdownTimeout"
    assert any(e.get("event") == "node lease released" for e in daemon.events)
    assert evictd_conditions(apiserver)["EvictdMemoryPressure"] == "Unknown"
    # The hung request was never counted as an eviction, nor journaled.
    assert not any(e.get("event") == "evicting pod" for e in daemon.events)
