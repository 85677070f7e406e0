"""End to end: a real pod hogging memory is evicted by `evictd run` through the Kubernetes API.

The node: the session's private containerd (its test cgroup root is the kubelet's ``cgroupRoot``) with the
pods cgroup ``kubepods`` limited to 400 MiB, as a kubelet limits it to the node's allocatable memory; the test
API server holds the Node and, for every containerd pod, its Pod object. `evictd run` is a real process with
the kubeconfig, the CRI endpoint, a hard ``allocatableMemory.available<250Mi`` threshold, a 3 s pressure
transition period and 1 s housekeeping.

The story: a burstable pod whose container fills a 200 MiB buffer (a real process, real charges in its
container cgroup) pushes the pods cgroup past the threshold. evictd must then do what works from outside the
kubelet, seen from the API server and through the real kubectl: the DisruptionTarget/TerminationByKubelet
condition with the kubelet's message (and nothing of the phase, reason or message, which the kubelet owns),
a graceful DELETE with 1 s and the pod's UID, a Warning Evicted event with the offending-container
annotations, the node event "Attempting to reclaim memory", the EvictdMemoryPressure condition and its
NoSchedule taint. The kubelet stand-in then stops the pod and deletes its object, as the real kubelet does;
the condition and the taint go only after the transition period; a clean stop of evictd removes the taint and
leaves its conditions Unknown. Exactly one eviction. With `recorder: false`, `evictd explain` of that eviction
comes from the eviction journal.
"""

from __future__ import annotations

import json
import time

from e2e_node import ClusterNode, Container, MiB, hog_script, pods_memory_limit
from evictd_process import evictd_command as evictd

from polling import wait_until

PODS_LIMIT_BYTES = 400 * MiB
THRESHOLD = "250Mi"
HOG_MIB = 200
TRANSITION_PERIOD_S = 3.0
CONDITION = "EvictdMemoryPressure"
TAINT = "evictd.io/memory-pressure:NoSchedule"
MESSAGE_PREFIX = f"The node was low on resource: memory. Threshold quantity: {THRESHOLD}, available: "
# A hard threshold: the kubelet's immediateEvictionGracePeriodSeconds.
HARD_GRACE_PERIOD_S = 1
SIGNAL = "allocatableMemory.available"
# The node's evictd (tests/e2e/e2e_node.py) ends its stop with exit status 1 past this.
SHUTDOWN_TIMEOUT_S = 5.0



def test_a_pod_hogging_memory_is_evicted_through_the_api_and_the_pressure_clears_after_the_transition_period(
    node: ClusterNode,
) -> None:
    bystander = node.run_pod("quiet", [Container("app", requests={"memory": "64Mi"})], priority=0)
    with pods_memory_limit(node, PODS_LIMIT_BYTES):
        daemon = node.start_evictd(
            f"evictionHard: {{{SIGNAL}: {THRESHOLD}}}\n"
            f"evictionPressureTransitionPeriod: {TRANSITION_PERIOD_S:g}s\n"
        )
        daemon.wait_event("evictd started")
        wait_until(lambda: node.condition(CONDITION), 15, f"evictd to write {CONDITION}")
        assert node.condition(CONDITION)["status"] == "False"  # type: ignore[index]
        assert TAINT not in node.taint_keys()

        hog = node.run_pod("hog", [Container("hog", hog_script(HOG_MIB), requests={"memory": "32Mi"})])
        # No wait for the charge first: evictd, woken by the memcg notification, can evict before a poll sees it.
        evicting = daemon.wait_event("evicting pod", timeout=20, pod=f"{hog.namespace}/{hog.name}")
        assert evicting["signal"] == SIGNAL and evicting["grace_period_seconds"] == HARD_GRACE_PERIOD_S
        assert evicting["ranking"][0] == f"{hog.namespace}/{hog.name}"
        assert evicting["message"].startswith(MESSAGE_PREFIX), evicting["message"]

        # The API writes: the DELETE with the hard grace period and the UID precondition...
        wait_until(lambda: node.requests_to("DELETE", hog), 10, "the DELETE of the hog")
        deletes = node.requests_to("DELETE", hog)
        assert len(deletes) == 1 and deletes[0].status == 200
        assert deletes[0].body == {"gracePeriodSeconds": HARD_GRACE_PERIOD_S, "preconditions": {"uid": hog.uid}}
        # ... preceded by the condition alone: phase, reason and message are the kubelet's ...
        [patch] = node.requests_to("PATCH", hog, "status")
        assert patch.status == 200 and set(patch.body["status"]) == {"conditions"}
        sent = list(node.apiserver.requests)
        assert sent.index(patch) < sent.index(deletes[0])
        [disruption] = patch.body["status"]["conditions"]
        assert (disruption["type"], disruption["status"], disruption["reason"]) == (
            "DisruptionTarget", "True", "TerminationByKubelet")
        assert disruption["message"] == evicting["message"]
        # ... which the kubelet keeps while it stops the pod; it never reports the pod Failed/Evicted itself.
        node.wait_gone(hog)
        relieved_at = time.monotonic()  # the stand-in stops the containers (freeing the memory) before it deletes
        versions = [obj for _, obj in node.apiserver.store.pod_versions(hog.namespace, hog.name)
                    if obj["metadata"]["uid"] == hog.uid]
        # Every version from evictd's DELETE to the kubelet's final one (grace 0, which removes the object).
        deleting = [v for v in versions if v["metadata"].get("deletionTimestamp")]
        assert deleting[0]["metadata"]["deletionGracePeriodSeconds"] == HARD_GRACE_PERIOD_S
        assert deleting[-1]["metadata"]["deletionGracePeriodSeconds"] == 0
        for version in deleting:
            kept = [c for c in version["status"]["conditions"] if c["type"] == "DisruptionTarget"]
            assert [(c["status"], c["message"]) for c in kept] == [("True", evicting["message"])]
            assert version["status"].get("reason") is None and version["status"].get("message") is None
        # The hog exits 0 on SIGTERM; on a busy machine its shell may not run its trap before the grace period ends,
        # and the runtime's SIGKILL leaves it Failed with 137 (seen once beside the real-cluster tier): never another.
        phases = {v["status"]["phase"] for v in deleting}
        assert phases <= {"Running", "Succeeded", "Failed"} and not {"Succeeded", "Failed"} <= phases, phases
        for version in deleting:
            if version["status"]["phase"] == "Failed":
                [status] = version["status"]["containerStatuses"]
                assert status["state"]["terminated"]["exitCode"] == 137, status
        # ... the Warning Evicted event with the offending-container annotations ...
        wait_until(lambda: node.pod_events(hog, "Evicted"), 10, "the Evicted event")
        events = node.kubectl_json("get", "events", "-n", hog.namespace,
                                   "--field-selector", f"involvedObject.uid={hog.uid},reason=Evicted")["items"]
        assert len(events) == 1
        event = events[0]
        assert (event["type"], event["message"]) == ("Warning", evicting["message"])
        assert event["source"] == {"component": "evictd", "host": node.name}
        annotations = event["metadata"]["annotations"]
        assert set(annotations) == {"offending_containers", "offending_containers_usage", "starved_resource",
                                    "evictd.io/decision"}
        assert (annotations["offending_containers"], annotations["starved_resource"]) == ("hog", "memory")
        assert f"Container hog was using {annotations['offending_containers_usage']}, request is 32Mi" in \
            evicting["message"]
        # The event and the log line name the same decision, which `evictd explain` finds in the recording.
        assert annotations["evictd.io/decision"] == evicting["decision"]
        explained = evictd("explain", "--decision", evicting["decision"], "--state-dir", str(node.state_dir),
                           "--output", "json")
        assert explained.returncode == 0, explained.stderr
        why = json.loads(explained.stdout)
        assert (why["pod"], why["dryRun"], why["message"]) == (f"{hog.namespace}/{hog.name}", False,
                                                             evicting["message"])
        # ... and the node: the reclaim event, the condition and the taint.
        wait_until(lambda: node.node_events("EvictionThresholdMet"), 10, "the EvictionThresholdMet event")
        reclaim = node.node_events("EvictionThresholdMet")[0]
        assert (reclaim["type"], reclaim["message"]) == ("Warning", "Attempting to reclaim memory")
        # The condition and the taint as written (the request log), not as they stand now: on a busy machine the
        # checks above can outlast the transition period, after which both are rightly gone again.
        status_writes = node.apiserver.request_log.matching("PATCH", f"/api/v1/nodes/{node.name}/status")
        written = [c for w in status_writes if w.status == 200
                   for c in (w.body.get("status", {}).get("conditions") or []) if c["type"] == CONDITION]
        assert ("True", "KubeletHasInsufficientMemory") in [(c["status"], c["reason"]) for c in written]
        node_writes = node.apiserver.request_log.matching(None, f"/api/v1/nodes/{node.name}")
        assert any({"key": "evictd.io/memory-pressure", "effect": "NoSchedule"} in [
            {"key": t["key"], "effect": t["effect"]} for t in (w.body.get("spec", {}).get("taints") or [])]
            for w in node_writes if w.method in ("PATCH", "PUT") and w.status == 200 and isinstance(w.body, dict))
        assert [e["reason"] for e in node.node_events("NodeHasInsufficientMemory")] == ["NodeHasInsufficientMemory"]

        # The kubelet stand-in stopped the evicted pod and removed it (above); the memory went with it. The
        # clearing is timed from then, not from here: the checks above take a while on a busy machine.
        wait_until(lambda: node.condition(CONDITION)["status"] == "False", 15,  # type: ignore[index]
                   f"{CONDITION} to go back to False")
        cleared_after_s = time.monotonic() - relieved_at
        assert cleared_after_s >= TRANSITION_PERIOD_S - 0.5, f"cleared after {cleared_after_s:.1f} s"
        assert cleared_after_s < TRANSITION_PERIOD_S + 4, f"cleared after {cleared_after_s:.1f} s"
        wait_until(lambda: TAINT not in node.taint_keys(), 5, "the taint to be removed")
        assert node.condition(CONDITION)["reason"] == "KubeletHasSufficientMemory"  # type: ignore[index]
        wait_until(lambda: node.node_events("NodeHasSufficientMemory"), 5, "the NodeHasSufficientMemory event")

        # Exactly one eviction: one DELETE in all, the bystander untouched.
        assert daemon.metric("evictd_evictions_total", eviction_signal=SIGNAL) == 1
        assert [(r.path, r.body["preconditions"]["uid"]) for r in node.deletes()] == [
            (f"/api/v1/namespaces/{hog.namespace}/pods/{hog.name}", hog.uid)]
        quiet = node.apiserver.store.get_pod(bystander.namespace, bystander.name)
        assert quiet is not None and quiet["status"]["phase"] == "Running"
        assert "deletionTimestamp" not in quiet["metadata"]
        assert daemon.process.poll() is None
        assert daemon.http("/healthz")[0] == 200
        assert daemon.stop() == 0
        # A clean stop: evictd's conditions Unknown, no taint of its own left behind.
        stopped = node.condition(CONDITION)
        assert stopped is not None and (stopped["status"], stopped["reason"]) == ("Unknown", "EvictdStopped")
        assert not [key for key in node.taint_keys() if key.startswith("evictd.io/")]


def test_the_eviction_names_the_offending_container_as_the_kubelet_does(node: ClusterNode) -> None:
    """The kubelet's message and event annotations name each container using more than its request."""
    with pods_memory_limit(node, PODS_LIMIT_BYTES):
        daemon = node.start_evictd(f"evictionHard: {{{SIGNAL}: {THRESHOLD}}}\n")
        daemon.wait_event("evictd started")
        hog = node.run_pod("hog", [Container("hog", hog_script(HOG_MIB), requests={"memory": "32Mi"}),
                                   Container("sidecar", requests={"memory": "16Mi"})])
        evicting = daemon.wait_event("evicting pod", timeout=15, pod=f"{hog.namespace}/{hog.name}")
        wait_until(lambda: node.pod_events(hog, "Evicted"), 10, "the Evicted event")
        annotations = node.pod_events(hog, "Evicted")[0]["metadata"]["annotations"]
        # The sidecar's few hundred KiB stay under its 16Mi request: only the hog offends.
        assert (annotations["offending_containers"], annotations["starved_resource"]) == ("hog", "memory")
        # Decided as the pods cgroup crossed the threshold, the hog still filling its buffer: it held most of
        # the 150 MiB the crossing takes.
        assert int(annotations["offending_containers_usage"].removesuffix("Ki")) * 1024 > 100 * MiB
        sentence = f"Container hog was using {annotations['offending_containers_usage']}, request is 32Mi, " \
                   "has larger consumption of memory. "
        assert evicting["message"].endswith(sentence), evicting["message"]
        # Nobody stops the hog here: evictd is still waiting for it to go (the kubelet's wait, up to 30 s). A
        # SIGTERM must end that wait at once, not run into the shutdown deadline (5 s here, exit status 1).
        time.sleep(1)
        assert not any(e.get("event", "").startswith("evicted pods") for e in daemon.events)
        asked = time.monotonic()
        assert daemon.stop() == 0, "stopped before the shutdown deadline"
        assert time.monotonic() - asked < SHUTDOWN_TIMEOUT_S  # 0.3 s here at load 12, not the kubelet's 30 s wait


def test_explain_falls_back_to_the_journal_when_the_recorder_is_off(node: ClusterNode) -> None:
    """With `recorder: false` nothing is recorded: `evictd explain --last` and `evictd explain POD` print what the
    eviction journal holds (pod, signal, the kubelet's message, grace period, the API steps done) and say that
    the ranked table, first-met times and reclaim are not available, the recording not holding that cycle."""
    with pods_memory_limit(node, PODS_LIMIT_BYTES):
        daemon = node.start_evictd(f"evictionHard: {{{SIGNAL}: {THRESHOLD}}}\n", "recorder: false\n")
        daemon.wait_event("evictd started")
        hog = node.run_pod("hog", [Container("hog", hog_script(HOG_MIB), requests={"memory": "32Mi"})])
        key = f"{hog.namespace}/{hog.name}"
        evicting = daemon.wait_event("evicting pod", timeout=20, pod=key)
        assert "decision" not in evicting, "a run that does not record names no decision"
        wait_until(lambda: node.pod_events(hog, "Evicted"), 10, "the Evicted event")
        node.wait_gone(hog)
        assert not (node.state_dir / "recording").exists(), "recorder: false writes no recording"

        last = evictd("explain", "--last", "--state-dir", str(node.state_dir), "--output", "json")
        assert last.returncode == 0, last.stderr
        why = json.loads(last.stdout)
        assert (why["source"], why["pod"], why["uid"], why["signal"]) == ("journal", key, hog.uid, SIGNAL)
        assert why["message"] == evicting["message"] and why["decision"] is None
        assert why["effectiveGracePeriodSeconds"] == evicting["grace_period_seconds"] == 1
        assert why["annotations"]["offending_containers"] == "hog"
        steps = why["apiSteps"]
        assert steps["condition_written"] and steps["delete_sent"] and steps["deleted"] and steps["event_written"]
        assert why["notRecorded"] == "the run of evictd that decided it did not record (recorder: false)"
        assert "the recording does not hold that cycle" in why["notAvailable"]
        assert "ranking" not in why and "threshold" not in why, "nothing made up that only the recording knows"

        by_pod = evictd("explain", hog.name, "--state-dir", str(node.state_dir))
        assert by_pod.returncode == 0, by_pod.stderr
        lines = by_pod.stdout.splitlines()
        assert lines[0].endswith(f"evicted {key} for {SIGNAL}, grace 1s (from the eviction journal)"), lines[0]
        assert f"  message: {evicting['message']}" in lines
        assert "ranked table" in by_pod.stdout and "the recording does not hold that cycle" in by_pod.stdout

        # A pod evicted by neither: one line, exit status 1, naming both sources.
        unknown = evictd("explain", "e2e/nobody", "--state-dir", str(node.state_dir))
        assert unknown.returncode == 1 and unknown.stdout == ""
        assert unknown.stderr.startswith("evictd: no recorded cycles in ") and "nor in the journal" in unknown.stderr
        # `--now` needs the recording: there is none.
        now = evictd("explain", "--now", "--state-dir", str(node.state_dir))
        assert now.returncode == 1 and now.stderr.startswith("evictd: no recorded cycles in ")
        assert daemon.stop() == 0
