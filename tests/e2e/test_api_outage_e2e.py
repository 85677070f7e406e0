"""End to end: `evictd run` started while the Kubernetes API server is unreachable, under a hard threshold.

The node of test_memory_eviction_e2e.py (the session's containerd, a kubelet stand-in, the test API server),
but evictd's kubeconfig names an address where nothing listens yet (a `TcpRelay` not started: connection
refused, as when evictd restarts during an API outage), so it never gets a pod list. The pods cgroup is limited
to 700 MiB with a hard ``allocatableMemory.available<250Mi``; four pods hold memory before evictd starts:

* a static pod (run from a "manifest": its sandbox says ``kubernetes.io/config.source: file``), 130 MiB;
* a ``kube-system`` pod of priority system-node-critical, 130 MiB;
* evictd's own pod (its UID in ``EVICTD_POD_UID``, as the DaemonSet passes it), 130 MiB;
* an ordinary pod, the hog, 100 MiB; and a quiet ordinary pod.

Ranked by usage (all the node shows), the three protected pods come before the hog. What must hold: within a
few seconds of the start, the hog's containers are stopped through the CRI and nothing else is; the eviction
is journaled; `/healthz` answers 200 ``degraded: ...`` and ``evictd_degraded`` says why. When the API comes back
(the relay starts), the journaled eviction gets its condition, DELETE and event, and evictd leaves the
degraded state once its pod list is synced.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from apiserver import ApiServer
from e2e_node import (
    ClusterNode,
    Container,
    executed_deletes_by_uid,
    hog_script,
    journal,
    pods_memory_limit,
    stopped_on_the_node,
    wait_until,
    working_set_bytes,
)
from kube_pki import write_kubeconfig
from tcp_relay import TcpRelay

MiB = 1 << 20
PODS_LIMIT_BYTES = 700 * MiB
PROTECTED_MIB = 130
HOG_MIB = 100
# Without the hog ~400 MiB are used (300 MiB available, above the threshold); with it ~500 (200 MiB available).
FILLED_BYTES = (3 * PROTECTED_MIB + HOG_MIB) * MiB
SIGNAL = "allocatableMemory.available"
KUBELET = f"evictionHard: {{{SIGNAL}: 250Mi}}\nevictionPressureTransitionPeriod: 3s\n"
SYSTEM_NODE_CRITICAL_PRIORITY = 2_000_001_000
# evictd's start (Python, the kubernetes client), one refused connection, a cycle, then the CRI stop with the
# 2 s minimum grace period (the hog's shell exits on SIGTERM at once): generous for a loaded 2-core machine.
STOPPED_WITHIN_S = 12.0
# The pod watch retries with a doubling backoff (at most 30 s plus jitter): evictd leaves the degraded state
# at the first retry after the API came back.
RESYNC_WITHIN_S = 70.0
DEGRADED_REASON = "pod-list-unavailable"



@pytest.fixture
def relay(apiserver: ApiServer) -> Iterator[TcpRelay]:
    down = TcpRelay(apiserver.port)
    try:
        yield down
    finally:
        down.stop()


def test_started_with_the_api_unreachable_a_hard_threshold_stops_the_top_ordinary_pod_through_the_cri(
    node: ClusterNode, relay: TcpRelay, tmp_path: Path
) -> None:
    kubeconfig = write_kubeconfig(tmp_path / "kubeconfig-down", relay.url, node.apiserver.ca_path,
                                  client=node.apiserver.pki.client)
    with pods_memory_limit(node, PODS_LIMIT_BYTES):
        static = node.run_static_pod("etcd-e2e", [Container("etcd", hog_script(PROTECTED_MIB))])
        system = node.run_pod("kube-proxy-e2e", [Container("proxy", hog_script(PROTECTED_MIB))],
                              namespace="kube-system", priority=SYSTEM_NODE_CRITICAL_PRIORITY,
                              priority_class="system-node-critical")
        own = node.run_pod("evictd-e2e", [Container("evictd", hog_script(PROTECTED_MIB))], namespace="evictd")
        quiet = node.run_pod("quiet", [Container("app", requests={"memory": "64Mi"})], priority=1000)
        hog = node.run_pod("hog", [Container("hog", hog_script(HOG_MIB))])
        wait_until(lambda: working_set_bytes(node.pods_cgroup) >= FILLED_BYTES, 20, "the pods to fill their memory")
        bystanders = (static, system, own, quiet)

        started = time.monotonic()
        daemon = node.start_evictd(KUBELET, kubeconfig=kubeconfig, env={"EVICTD_POD_UID": own.uid})
        wait_until(lambda: stopped_on_the_node(node, hog), STOPPED_WITHIN_S, "the hog to be stopped through the CRI")
        stopped_after_s = time.monotonic() - started
        print(f"evictd start to the hog's containers stopped through the CRI: {stopped_after_s:.2f} s")

        evicting = daemon.wait_event("evicting pod", timeout=5, pod="e2e/hog")
        assert evicting["grace_period_seconds"] == 1
        assert evicting["threshold"] == f"{SIGNAL}<250Mi (hard)"
        # Ranked by what the node shows: the static pod first (skipped: critical); the kube-system pod and
        # evictd's own are no candidates without the API.
        assert evicting["ranking"] == ["e2e/etcd-e2e", "e2e/hog", "e2e/quiet"]
        daemon.wait_event("cannot evict a critical pod", timeout=1, pod="e2e/etcd-e2e")
        assert not [pod.name for pod in bystanders if stopped_on_the_node(node, pod)]
        entry = journal(node)[hog.uid]
        assert entry["stopped_locally"] and not entry["deleted"] and not entry["condition_written"]
        assert (entry["namespace"], entry["name"], entry["signal"]) == ("e2e", "hog", SIGNAL)

        status, body = daemon.http("/healthz")
        assert status == 200 and body.startswith("degraded: "), body
        assert "pod list" in body
        assert daemon.metric("evictd_degraded", reason=DEGRADED_REASON) == 1
        assert daemon.metric("evictd_evictions_total", eviction_signal=SIGNAL) == 1
        time.sleep(3)  # three more cycles: the threshold is resolved, nobody else is stopped
        assert daemon.metric("evictd_evictions_total", eviction_signal=SIGNAL) == 1
        assert not [pod.name for pod in bystanders if stopped_on_the_node(node, pod)]
        assert not node.apiserver.requests, "nothing could reach the API server"
        assert daemon.process.poll() is None

        # The API comes back: the journaled eviction gets its writes, then the pod list is synced.
        relay.start()
        wait_until(lambda: journal(node)[hog.uid].get("done_at"), 15, "the journaled eviction's API writes")
        [patch] = [r for r in node.requests_to("PATCH", hog, "status") if r.status == 200]
        assert [(c["type"], c["reason"], c["message"]) for c in patch.body["status"]["conditions"]] == [
            ("DisruptionTarget", "TerminationByKubelet", evicting["message"])]
        assert patch.body["metadata"] == {"uid": hog.uid}
        [delete] = [r for r in node.deletes() if r.status == 200]
        assert delete.body == {"gracePeriodSeconds": 1, "preconditions": {"uid": hog.uid}}
        assert executed_deletes_by_uid(node) == {hog.uid: 1}
        events = node.pod_events(hog, "Evicted")
        assert len(events) == 1 and events[0]["message"] == evicting["message"]
        node.wait_gone(hog)

        wait_until(lambda: daemon.http("/healthz") == (200, "ok"), RESYNC_WITHIN_S, "the pod list to be synced")
        assert daemon.metric("evictd_degraded", reason=DEGRADED_REASON) == 0
        time.sleep(2)  # cycles on the API's pod list: still nobody else evicted
        assert daemon.metric("evictd_evictions_total", eviction_signal=SIGNAL) == 1
        assert not [pod.name for pod in bystanders if stopped_on_the_node(node, pod)]
        assert all(r.body["preconditions"]["uid"] == hog.uid for r in node.deletes())
        assert daemon.stop() == 0


def test_restarted_during_an_outage_it_spares_the_critical_pods_of_its_last_pod_list(
    node: ClusterNode, relay: TcpRelay, tmp_path: Path
) -> None:
    """A system-node-critical pod outside kube-system (a CNI agent) cannot be told from the node: the pod list
    of evictd's previous run said so, and the restarted evictd remembers it (``stateDir``)."""
    calico = node.run_pod("calico-node-e2e", [Container("agent", hog_script(PROTECTED_MIB))],
                          namespace="calico-system", priority=SYSTEM_NODE_CRITICAL_PRIORITY,
                          priority_class="system-node-critical")
    hog = node.run_pod("hog", [Container("hog", hog_script(HOG_MIB))])
    wait_until(lambda: working_set_bytes(node.pods_cgroup) >= (PROTECTED_MIB + HOG_MIB) * MiB, 20,
               "the pods to fill their memory")
    record = node.state_dir / "critical-pods.json"

    # The first run has the API (and no pressure: the pods cgroup has no limit yet).
    first = node.start_evictd(KUBELET, folder="evictd-1")
    wait_until(record.exists, 15, "the first run to remember the critical pods")
    assert first.stop() == 0
    assert json.loads(record.read_text()) == {"criticalPodUIDs": [calico.uid]}

    # Restarted during an API outage, with the pods over the threshold: the agent uses the most, the hog goes.
    kubeconfig = write_kubeconfig(tmp_path / "kubeconfig-down", relay.url, node.apiserver.ca_path,
                                  client=node.apiserver.pki.client)
    with pods_memory_limit(node, (PROTECTED_MIB + HOG_MIB) * MiB + 250 * MiB - 60 * MiB):
        second = node.start_evictd(KUBELET, folder="evictd-2", kubeconfig=kubeconfig)
        wait_until(lambda: stopped_on_the_node(node, hog), STOPPED_WITHIN_S, "the hog to be stopped through the CRI")
        evicting = second.wait_event("evicting pod", timeout=5, pod="e2e/hog")
        assert evicting["ranking"] == ["e2e/hog"]  # the agent is no candidate
        assert not stopped_on_the_node(node, calico)
        assert journal(node)[hog.uid]["stopped_locally"]
        assert second.http("/healthz")[1].startswith("degraded: pod-list-unavailable: ")
        assert second.stop() == 0
