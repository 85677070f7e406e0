"""Soft evictions through the Eviction API on the real kube-apiserver, kubelet and kube-controller-manager v1.36.2,
with the disruption controller computing a real PodDisruptionBudget. Runs only in `make test-cluster`.

Two best-effort pods on the node: `guarded` holds the most memory (ranked first for memory) and is covered by a
PodDisruptionBudget with `minAvailable: 1` (its only pod: no disruption allowed); `free` holds less and has no
budget. evictd runs with its DaemonSet identity (RBAC, the optional eviction-api-rbac.yaml and the
node-restriction policy from deploy/kubernetes, in force) and a soft `allocatableMemory.available` threshold both pods keep met, with
`softEvictionsThroughEvictionAPI: true`. The API server refuses to evict `guarded` (429, DisruptionBudget),
evictd moves to `free` in the same round of requests (off the loop; both reported by the cycle after it) and
evicts it through the Eviction API; the refusal is logged with the
budget and counted in evictd_eviction_api_refusals_total.
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest
from backends import RealNode
from node_under_test import NAMESPACE, MiB, memory_hog, wait_until

pytestmark = pytest.mark.real_cluster

GUARDED_MIB = 200
FREE_MIB = 60
SIGNAL = "allocatableMemory.available"
EVICTION_API_RBAC = Path(__file__).resolve().parents[2] / "deploy" / "kubernetes" / "eviction-api-rbac.yaml"
BUDGET_MESSAGE = "Cannot evict pod as it would violate the pod's disruption budget."


def budget_status(node: RealNode, name: str) -> dict[str, Any]:
    from kubernetes import client

    budget = client.PolicyV1Api(node.api_client).read_namespaced_pod_disruption_budget(name, NAMESPACE)
    status = budget.status
    return {"observed": (status.observed_generation or 0) >= budget.metadata.generation,
            "allowed": status.disruptions_allowed, "current": status.current_healthy,
            "desired": status.desired_healthy}


def test_a_budget_blocks_the_soft_eviction_of_the_top_pod_and_evictd_evicts_the_next(node: RealNode) -> None:
    from kubernetes import client

    suffix = uuid.uuid4().hex[:5]
    guarded_name, free_name, budget_name = f"guarded-{suffix}", f"free-{suffix}", f"guarded-{suffix}-pdb"
    guarded = node.run_pod(guarded_name, memory_hog(GUARDED_MIB))
    free = node.run_pod(free_name, memory_hog(FREE_MIB))
    client.PolicyV1Api(node.api_client).create_namespaced_pod_disruption_budget(NAMESPACE, {
        "apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": budget_name},
        "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": guarded_name}}},
    })
    # The disruption controller has counted the guarded pod: 1 healthy, 1 desired, no disruption allowed.
    wait_until(lambda: budget_status(node, budget_name) == {"observed": True, "allowed": 0, "current": 1,
                                                            "desired": 1},
               60, "the disruption controller to compute the budget")

    # A soft threshold both pods keep met (their memory stays): crossed from the first cycle, grace 2 s.
    threshold_mib = node.allocatable_available_bytes() // MiB + 100
    # The Eviction API is granted only by the optional manifest the option's docs name (not the kustomization).
    node.cluster.kubectl("apply", "-f", str(EVICTION_API_RBAC))
    daemon = node.start_evictd(f"evictionSoft: {{{SIGNAL}: {threshold_mib}Mi}}\n"
                               f"evictionSoftGracePeriod: {{{SIGNAL}: 2s}}\n"
                               "evictionMaxPodGracePeriod: 5\n"
                               "evictionPressureTransitionPeriod: 3s\n",
                               "softEvictionsThroughEvictionAPI: true\n")
    daemon.wait_event("evictd started", timeout=30)

    refused = daemon.wait_event("Eviction API refused to evict pod; trying the next candidate", timeout=90,
                                pod=f"{NAMESPACE}/{guarded_name}")
    assert (refused["budget"], refused["reason"], refused["status"], refused["message"]) == (
        budget_name, "DisruptionBudget", 429, BUDGET_MESSAGE)
    evicting = daemon.wait_event("evicting pod", timeout=30, pod=f"{NAMESPACE}/{free_name}")
    assert evicting["cycle"] == refused["cycle"], "the refusal and the eviction are reported by the same cycle"
    assert evicting["through_eviction_api"] is True and evicting["grace_period_seconds"] == 5
    assert daemon.metric("evictd_eviction_api_refusals_total", reason="DisruptionBudget") >= 1

    # The API server evicted `free` (its own DisruptionTarget condition) and the kubelet removes it.
    node.wait_gone(free, 90)
    ended = [v for v in node.versions(free) if v.condition("DisruptionTarget") is not None]
    assert ended, "the evicted pod never carried a DisruptionTarget condition"
    disruption = ended[-1].condition("DisruptionTarget")
    assert disruption is not None and (disruption["status"], disruption["reason"]) == (
        "True", "EvictionByEvictionAPI")
    assert len(node.events(free, "Evicted")) == 1
    # The budget held: `guarded` was never deleted, and never evicted.
    still = node.pod(guarded)
    assert still is not None and not still["metadata"].get("deletionTimestamp")
    assert not [e for e in daemon.events if e.get("event") == "evicting pod"
                and e.get("pod") == f"{NAMESPACE}/{guarded_name}"]
    assert node.events(guarded, "Evicted") == []
    client.PolicyV1Api(node.api_client).delete_namespaced_pod_disruption_budget(budget_name, NAMESPACE)
    assert daemon.stop() == 0
