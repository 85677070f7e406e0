"""What the workload controllers make of an evictd eviction, on the real kube-apiserver, kubelet and
kube-controller-manager v1.36.2 (Job and ReplicaSet controllers). Runs only in `make test-cluster`.

* A Job with `backoffLimit: 0` and a `podFailurePolicy` that ignores `DisruptionTarget`: the evicted pod must
  not count as a failure (else the Job fails at once); the Job controller makes a replacement pod.
* A ReplicaSet's pod: the kubelet removes the evicted pod once its containers stopped, the ReplicaSet controller
  makes a replacement, and the Evicted event stays as the record.

The first pod of each workload takes the `mkdir` lock on a hostPath folder of the test and fills 200 MiB; the
replacement finds the lock taken and stays quiet, so evictd evicts exactly one pod.
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import pytest
from backends import RealNode
from evictd_process import EvictdProcess
from node_under_test import NAMESPACE, MiB, PodRef, memory_hog, wait_until

pytestmark = pytest.mark.real_cluster

HOG_MIB = 200
THRESHOLD_BELOW_MIB = 120
SIGNAL = "allocatableMemory.available"


def first_hog_else_quiet(lock: str) -> str:
    """The container script: the pod that creates `lock` hogs (ignoring SIGTERM, so it ends Failed, as most
    programs killed by a signal do); any later pod idles."""
    hog = memory_hog(HOG_MIB, on_sigterm="")
    return f'if mkdir {lock} 2>/dev/null; then {hog}; else trap "exit 0" TERM; echo quiet; ' \
           "while true; do sleep 1; done; fi"


def pod_template(node: RealNode, name: str, marker: Path, restart_policy: str) -> dict[str, Any]:
    return {
        "metadata": {"labels": {"app": name}},
        "spec": {
            "nodeName": node.name, "hostNetwork": True, "restartPolicy": restart_policy,
            "terminationGracePeriodSeconds": 30,
            "containers": [{"name": "app", "image": node.cluster.busybox_image, "imagePullPolicy": "Never",
                            "command": ["sh", "-c", first_hog_else_quiet("/marker/taken")],
                            "resources": {"requests": {"memory": "32Mi"}},
                            "volumeMounts": [{"name": "marker", "mountPath": "/marker"}]}],
            "volumes": [{"name": "marker", "hostPath": {"path": str(marker), "type": "Directory"}}],
        },
    }


def start_evictd(node: RealNode) -> EvictdProcess:
    threshold_mib = node.settled_allocatable_available_bytes() // MiB - THRESHOLD_BELOW_MIB
    daemon = node.start_evictd(f"evictionHard: {{{SIGNAL}: {threshold_mib}Mi}}\n"
                               "evictionPressureTransitionPeriod: 3s\n")
    daemon.wait_event("evictd started", timeout=30)
    return daemon


def pods_labelled(node: RealNode, app: str) -> list[dict[str, Any]]:
    listed = node.core.list_namespaced_pod(NAMESPACE, label_selector=f"app={app}", _preload_content=False)
    items: list[dict[str, Any]] = json.loads(listed.data)["items"]
    return items


def running_replacement(node: RealNode, app: str, evicted_uid: str) -> dict[str, Any] | None:
    for pod in pods_labelled(node, app):
        statuses = pod["status"].get("containerStatuses") or []
        if pod["metadata"]["uid"] != evicted_uid and statuses and "running" in statuses[0]["state"]:
            return pod
    return None


def test_a_job_ignoring_disruptions_does_not_count_the_evicted_pod_as_a_failure(node: RealNode,
                                                                               tmp_path: Path) -> None:
    from kubernetes import client

    batch = client.BatchV1Api(node.api_client)
    marker = tmp_path / "marker"
    marker.mkdir()
    name = f"job-{uuid.uuid4().hex[:5]}"
    daemon = start_evictd(node)
    batch.create_namespaced_job(NAMESPACE, {
        "apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name},
        "spec": {"backoffLimit": 0,
                 "podFailurePolicy": {"rules": [{"action": "Ignore",
                                                 "onPodConditions": [{"type": "DisruptionTarget"}]}]},
                 "template": pod_template(node, name, marker, "Never")},
    })
    evicting = daemon.wait_event("evicting pod", timeout=90)
    namespace, pod_name = evicting["pod"].split("/")
    [evicted] = [p for p in pods_labelled(node, name) if p["metadata"]["name"] == pod_name]
    evicted_ref = PodRef(namespace, pod_name, evicted["metadata"]["uid"])

    replacement = wait_until(lambda: running_replacement(node, name, evicted_ref.uid), 90,
                             "the Job controller's replacement pod to run")
    assert replacement["metadata"]["ownerReferences"][0]["name"] == name
    node.wait_gone(evicted_ref, 60)  # the Job controller removed its tracking finalizer once it counted the pod
    # The kubelet reported the evicted pod Failed (killed) with evictd's DisruptionTarget: what the policy matched.
    ended = [v for v in node.versions(evicted_ref) if v.status.get("phase") == "Failed"]
    assert ended, "the evicted pod never ended Failed"
    disruption = ended[-1].condition("DisruptionTarget")
    assert disruption is not None and (disruption["status"], disruption["reason"]) == ("True", "TerminationByKubelet")
    job = batch.read_namespaced_job(name, NAMESPACE)
    # backoffLimit 0: a counted failure would have failed the Job at once.
    assert not job.status.failed, f"the Job counted the eviction as a failure: {job.status}"
    assert not [c for c in job.status.conditions or [] if c.type == "Failed" and c.status == "True"]
    assert job.status.active == 1
    assert len(node.events(evicted_ref, "Evicted")) == 1
    assert daemon.stop() == 0


def test_a_replicaset_replaces_its_evicted_pod_and_the_event_stays(node: RealNode, tmp_path: Path) -> None:
    from kubernetes import client

    apps = client.AppsV1Api(node.api_client)
    marker = tmp_path / "marker"
    marker.mkdir()
    name = f"rs-{uuid.uuid4().hex[:5]}"
    daemon = start_evictd(node)
    apps.create_namespaced_replica_set(NAMESPACE, {
        "apiVersion": "apps/v1", "kind": "ReplicaSet", "metadata": {"name": name},
        "spec": {"replicas": 1, "selector": {"matchLabels": {"app": name}},
                 "template": pod_template(node, name, marker, "Always")},
    })
    evicting = daemon.wait_event("evicting pod", timeout=90)
    namespace, pod_name = evicting["pod"].split("/")
    [evicted] = [p for p in pods_labelled(node, name) if p["metadata"]["name"] == pod_name]
    evicted_ref = PodRef(namespace, pod_name, evicted["metadata"]["uid"])

    node.wait_gone(evicted_ref, 60)  # the kubelet removes the object once the containers stopped
    replacement = wait_until(lambda: running_replacement(node, name, evicted_ref.uid), 90,
                             "the ReplicaSet controller's replacement pod to run")
    assert replacement["metadata"]["ownerReferences"][0]["name"] == name
    [event] = node.events(evicted_ref, "Evicted")
    assert (event["source"]["component"], event["message"]) == ("evictd", evicting["message"])
    replica_set = apps.read_namespaced_replica_set(name, NAMESPACE)
    assert replica_set.status.replicas == 1
    # Delete the ReplicaSet first, so RealNode.close does not race its controller re-creating pods.
    apps.delete_namespaced_replica_set(name, NAMESPACE, propagation_policy="Orphan")
    assert daemon.stop() == 0
