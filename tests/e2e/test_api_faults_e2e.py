"""End to end: `evictd run` evicting real pods while the Kubernetes API misbehaves, or is down.

Same node as test_memory_eviction_e2e.py: the session's containerd with its pods cgroup limited to 400 MiB,
a hard ``allocatableMemory.available<250Mi``, 1 s housekeeping; pods that fill a 200 MiB buffer are the
pressure. The test API server's fault switches make the API fail on the way:

* a condition PATCH that never gets an answer (evictd's 2 s limit before an immediate eviction's local
  stop), DELETEs answered 500 and then 429, a crash of evictd (SIGKILL) while writes are pending and a
  restart from the journal in ``stateDir``, a dropped watch and an expired one (410), a 409 on the DELETE
  because the pod was replaced by a same-named pod with a new UID;
* the API entirely down (every request's connection closed unanswered) during a hard threshold.

What must hold: the pod's containers are stopped through the CRI when the API cannot be told (within the
grace period), no decision is lost (condition, deletion and event are written once the API answers, also
by the restarted process), no pod is evicted twice (the server executed at most one DELETE per UID, and
never touched the same-named successor), and the daemon never crashes (alive, /healthz 200).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from containerd_harness import RunningPod
from e2e_node import (
    ClusterNode,
    Container,
    Trigger,
    counter,
    executed_deletes_by_uid,
    hog_script,
    journal,
    pods_memory_limit,
    stopped_on_the_node,
    wait_until,
)
from evictd_process import EvictdProcess

from evictd.core.engine_rules import MINIMUM_GRACE_PERIOD_S

MiB = 1 << 20
PODS_LIMIT_BYTES = 400 * MiB
HOG_MIB = 200
SIGNAL = "allocatableMemory.available"
KUBELET = f"evictionHard: {{{SIGNAL}: 250Mi}}\nevictionPressureTransitionPeriod: 3s\n"
# The pressure outlasts the outage (the hog is stopped at once, the API comes back a few seconds later), so the
# condition evictd could not write meanwhile is still to be written when the API answers again.
KUBELET_PRESSURE_HELD = f"evictionHard: {{{SIGNAL}: 250Mi}}\nevictionPressureTransitionPeriod: 60s\n"
# How long an immediate eviction's API requests may hang before the pod is stopped locally.
IMMEDIATE_REQUEST_TIMEOUT_S = 2.0
# Pressure onset to a decision: a memcg notification and one cycle; generous for a loaded CI machine.
DECISION_SLACK_S = 1.5
EVERY_REQUEST = 1_000_000



def pod_path(pod: RunningPod) -> str:
    return f"/api/v1/namespaces/{pod.namespace}/pods/{pod.name}"


def pod_watches(node: ClusterNode) -> list[Any]:
    """The pod watch requests the server has started to answer (a request is logged once its headers went)."""
    return [r for r in node.apiserver.requests
            if r.method == "GET" and r.path == "/api/v1/pods" and r.param("watch") == "true" and r.status == 200]


def pod_lists(node: ClusterNode) -> list[Any]:
    return [r for r in node.apiserver.requests
            if r.method == "GET" and r.path == "/api/v1/pods" and r.param("watch") != "true" and r.status == 200]


def assert_alive(daemon: EvictdProcess) -> None:
    assert daemon.process.poll() is None, f"evictd exited: {daemon.stderr()}"
    assert daemon.http("/healthz")[0] == 200


def test_faults_while_evicting_lose_no_decision_and_evict_no_pod_twice(node: ClusterNode) -> None:
    faults = node.apiserver.faults
    quiet = node.run_pod("quiet", [Container("app", requests={"memory": "64Mi"})], priority=1000)
    with pods_memory_limit(node, PODS_LIMIT_BYTES):
        first = node.start_evictd(KUBELET, folder="evictd-1")
        first.wait_event("evictd started")
        wait_until(lambda: node.condition("EvictdMemoryPressure"), 15, "the first node status")

        # 1. The condition PATCH hangs until evictd's limit for an immediate eviction, then every DELETE fails.
        hog1_path = "/api/v1/namespaces/e2e/pods/hog1"
        faults.time_out_next(1, method="PATCH", path=hog1_path + "/status$")
        faults.fail_next(EVERY_REQUEST, code=500, method="DELETE", path=hog1_path + "$")
        hog1 = node.run_pod("hog1", [Container("hog", hog_script(HOG_MIB))])
        # The hanging PATCH delays the local stop by at most that limit; then the CRI stops the pod.
        wait_until(lambda: stopped_on_the_node(node, hog1), IMMEDIATE_REQUEST_TIMEOUT_S + MINIMUM_GRACE_PERIOD_S + 5,
                   "hog1 to be stopped through the CRI once the condition PATCH timed out")
        # The retried PATCH went through; the DELETE is still refused: the journal holds what is missing.
        wait_until(lambda: journal(node).get(hog1.uid, {}).get("condition_written"), 10, "the retried PATCH")
        entry = journal(node)[hog1.uid]
        assert entry["stopped_locally"] and not entry["deleted"] and not entry["event_written"]
        assert (entry["signal"], entry["grace_period_s"]) == (SIGNAL, 1)
        wait_until(lambda: len(node.requests_to("DELETE", hog1)) >= 2, 10, "a retried DELETE")
        assert first.metric("evictd_evictions_total", eviction_signal=SIGNAL) == 1
        assert_alive(first)

        # 2. evictd crashes with the deletion and event unwritten; it restarts from the journal while the API
        #    first throttles the DELETE (429), then accepts it.
        first.kill()
        assert not journal(node)[hog1.uid]["deleted"]
        faults.clear()
        faults.throttle_next(1, method="DELETE", path=hog1_path + "$")
        second = node.start_evictd(KUBELET, folder="evictd-2")
        wait_until(lambda: journal(node).get(hog1.uid, {}).get("event_written"), 15,
                   "the restarted evictd to finish hog1's eviction")
        deletes = node.requests_to("DELETE", hog1)
        assert [r.status for r in deletes][-2:] == [429, 200] and {r.status for r in deletes[:-2]} == {500}
        assert deletes[-1].body == {"gracePeriodSeconds": 1, "preconditions": {"uid": hog1.uid}}
        patches = node.requests_to("PATCH", hog1, "status")
        assert len(patches) >= 2 and patches[-1].status == 200  # the hung one, then the written condition
        assert [e["count"] for e in node.pod_events(hog1, "Evicted")] == [1]
        assert counter(second, "evictd_evictions_total", eviction_signal=SIGNAL) == 0  # replayed, not re-decided
        node.wait_gone(hog1)  # the kubelet stand-in ends what the DELETE asked for

        # 3. The watch is cut, then expires (410): evictd must still see pods created afterwards.
        wait_until(lambda: pod_watches(node) and faults.open_watches >= 1, 10, "the restarted evictd's watch")
        lists, watches = len(pod_lists(node)), len(pod_watches(node))
        assert faults.drop_watches() >= 1
        wait_until(lambda: len(pod_watches(node)) > watches, 10, "the watch to resume")
        assert len(pod_lists(node)) == lists, "a dropped watch resumes from its resourceVersion, without a relist"
        assert pod_watches(node)[-1].param("resourceVersion")
        watches = len(pod_watches(node))
        assert faults.expire_watches() >= 1
        wait_until(lambda: len(pod_lists(node)) > lists and len(pod_watches(node)) > watches, 10,
                   "the relist and a new watch after the 410")

        # 4. The DELETE fails until the pod has been replaced by a same-named one with a new UID: 409.
        hog2_path = "/api/v1/namespaces/e2e/pods/hog2"
        faults.fail_next(EVERY_REQUEST, code=500, method="DELETE", path=hog2_path + "$")
        hog2 = node.run_pod("hog2", [Container("hog", hog_script(HOG_MIB))])
        wait_until(lambda: stopped_on_the_node(node, hog2), MINIMUM_GRACE_PERIOD_S + 5,
                   "hog2 to be stopped through the CRI")
        node.terminate(hog2)  # its controller replaces it: the old object goes, a new one comes
        successor = node.run_pod("hog2", [Container("app")])
        assert successor.uid != hog2.uid
        faults.clear()
        wait_until(lambda: journal(node).get(hog2.uid, {}).get("done_at"), 10, "hog2's eviction to end")
        conflicts = [r for r in node.requests_to("DELETE", hog2) if r.status == 409]
        assert conflicts and all(r.body["preconditions"]["uid"] == hog2.uid for r in conflicts)
        time.sleep(2)  # two more cycles: nothing may happen to the successor
        replacement = node.apiserver.store.get_pod(hog2.namespace, hog2.name)
        assert replacement is not None and replacement["metadata"]["uid"] == successor.uid
        assert "deletionTimestamp" not in replacement["metadata"]
        assert replacement["status"]["phase"] == "Running" and "reason" not in replacement["status"]
        assert not node.pod_events(successor, "Evicted")
        assert second.metric("evictd_evictions_total", eviction_signal=SIGNAL) == 1  # hog2 only

        # Nothing evicted twice, the bystander untouched, no decision left pending, and no crash.
        assert executed_deletes_by_uid(node) == {hog1.uid: 1}
        assert all(r.body["preconditions"]["uid"] in (hog1.uid, hog2.uid) for r in node.deletes())
        assert not node.requests_to("DELETE", quiet)
        assert all(entry["done_at"] for entry in journal(node).values())
        assert set(journal(node)) == {hog1.uid, hog2.uid}
        assert_alive(second)
        assert second.stop() == 0


def test_with_the_api_down_a_hard_eviction_stops_the_pod_through_the_cri_and_is_written_later(
    node: ClusterNode, tmp_path: Path
) -> None:
    faults = node.apiserver.faults
    trigger = Trigger(tmp_path / "trigger")
    quiet = node.run_pod("quiet", [Container("app", requests={"memory": "64Mi"})], priority=1000)
    hog = node.run_pod("hog", [Container("hog", hog_script(HOG_MIB, triggered=True), options=trigger.mount())])
    with pods_memory_limit(node, PODS_LIMIT_BYTES):
        daemon = node.start_evictd(KUBELET_PRESSURE_HELD)
        daemon.wait_event("evictd started")
        wait_until(lambda: node.condition("EvictdMemoryPressure"), 15, "the first node status")

        # The API goes down: every request's connection is closed unanswered, open watches are cut.
        faults.reset_next(EVERY_REQUEST)
        faults.drop_watches()
        down_since = len(node.apiserver.requests)
        wait_until(lambda: any(r.status == 0 for r in node.apiserver.requests[down_since:]), 10,
                   "evictd to hit the API while it is down")
        trigger.pull()
        pressure_at = time.monotonic()
        wait_until(lambda: stopped_on_the_node(node, hog), MINIMUM_GRACE_PERIOD_S + DECISION_SLACK_S + 3,
                   "the hog to be stopped through the CRI")
        stopped_after_s = time.monotonic() - pressure_at
        print(f"pressure to containers stopped through the CRI: {stopped_after_s:.2f} s")
        assert stopped_after_s < MINIMUM_GRACE_PERIOD_S + DECISION_SLACK_S, f"stopped after {stopped_after_s:.1f} s"
        evicting = daemon.wait_event("evicting pod", timeout=5, pod=f"{hog.namespace}/{hog.name}")
        assert evicting["grace_period_seconds"] == 1
        assert not stopped_on_the_node(node, quiet)
        assert journal(node)[hog.uid]["stopped_locally"]
        assert not executed_deletes_by_uid(node)
        stored = node.apiserver.store.get_pod(hog.namespace, hog.name)
        assert stored is not None and stored["status"]["phase"] == "Running"  # the API could not be told
        time.sleep(2)
        assert_alive(daemon)

        # The API is back: the condition, the deletion and the event are written from the journal.
        faults.clear()
        wait_until(lambda: journal(node)[hog.uid].get("done_at"), 10, "the pending writes")
        [patch] = [r for r in node.requests_to("PATCH", hog, "status") if r.status == 200]
        assert [(c["type"], c["message"]) for c in patch.body["status"]["conditions"]] == [
            ("DisruptionTarget", evicting["message"])]
        [delete] = [r for r in node.deletes() if r.status == 200]
        assert delete.body == {"gracePeriodSeconds": 1, "preconditions": {"uid": hog.uid}}
        assert executed_deletes_by_uid(node) == {hog.uid: 1}
        events = node.pod_events(hog, "Evicted")
        assert len(events) == 1 and events[0]["message"] == evicting["message"]
        node.wait_gone(hog)
        wait_until(lambda: (node.condition("EvictdMemoryPressure") or {}).get("status") == "True", 10,
                   "the pressure condition written after the outage")
        assert daemon.metric("evictd_evictions_total", eviction_signal=SIGNAL) == 1
        assert not node.requests_to("DELETE", quiet)
        assert_alive(daemon)
        assert daemon.stop() == 0
