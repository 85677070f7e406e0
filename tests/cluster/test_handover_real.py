"""The hand-over docs/deployment.md describes ("Handing eviction over from the kubelet"), run step by step on the real
kube-apiserver and kubelet v1.36.2, with real memory pressure. Runs only in `make test-cluster`.

1. evictd in dry-run beside the kubelet that evicts: the kubelet evicts the hog, evictd's shadow mode decides
   the same pod with the same message and `evictd shadow-report` says "agree";
2. evictd switched to acting, then the kubelet's thresholds set to `0%` and the kubelet restarted;
3. the next hog is evicted by evictd alone: evictd's DELETE with the hard threshold's grace period, its Evicted
   event and `EvictdMemoryPressure`/taint, while the kubelet neither evicts nor reports `MemoryPressure`.

And the backstop mode the same section recommends: the kubelet keeps a hard `memory.available` threshold well
below evictd's, `evictd check-config --kubelet-config <the kubelet's own file>` says `backstop`, and under
the same pressure evictd evicts at its higher threshold while the kubelet, its lower one never met, neither
evicts nor reports `MemoryPressure`.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from backends import RealNode
from evictd_process import shadow_report
from node_under_test import PodRef, memory_hog, new_name, wait_until
from real_cluster import RealCluster
from side_by_side import HOG_MIB, THRESHOLD_MIB, kubelet_evicting, kubelet_not_evicting, reserved, thresholds

pytestmark = pytest.mark.real_cluster

QUIET = 'trap "exit 0" TERM; echo ready; while true; do sleep 1; done'
# The kubelet's hard memory threshold in backstop mode: far below evictd's THRESHOLD_MIB, and below what the pods
# cgroup has left with the hog at its full HOG_MIB (about 300 MiB), so only evictd's threshold is ever met.
BACKSTOP_MIB = 100


def gradual_hog(node: RealNode) -> PodRef:
    """A hog filling 900 MiB over 20 s: the kubelet's per-pod stats (refreshed by cAdvisor about every 10 s)
    follow it, so the kubelet ranks it as evictd does (a hog filling at once looked idle to it)."""
    return node.run_pod(new_name("hog"), memory_hog(HOG_MIB, steps=9, step_s=2.5), requests={"memory": "32Mi"})


def evicted_by_evictd(node: RealNode, hog: PodRef, message: str) -> None:
    """The kubelet carried out evictd's DELETE (1 s grace) and removed the object; the Evicted event is evictd's."""
    node.wait_gone(hog)
    [event] = node.events(hog, "Evicted")
    assert (event["source"]["component"], event["message"]) == ("evictd", message)
    deleted = [v for v in node.versions(hog) if v.metadata.get("deletionTimestamp")]
    assert deleted and deleted[0].metadata["deletionGracePeriodSeconds"] == 1


def node_condition(node: RealNode, kind: str) -> str | None:
    found = node.condition(kind)
    return None if found is None else str(found["status"])


def test_handing_eviction_over_from_the_kubelet_step_by_step(real_cluster: RealCluster, tmp_path: Path) -> None:
    # Step 1: the kubelet evicts with its thresholds; evictd watches in dry-run with the same configuration.
    real_cluster.restart_kubelet(kubelet_evicting())
    node = RealNode(real_cluster, tmp_path)
    try:
        shadow = node.start_evictd(thresholds(), "dryRun: true\n")
        shadow.wait_event("evictd started", timeout=30)
        quiet = node.run_pod(new_name("quiet"), QUIET, requests={"memory": "64Mi"})
        hog = gradual_hog(node)
        would = shadow.wait_event("would evict pod", timeout=60, pod=f"{hog.namespace}/{hog.name}")

        def evicted_by_the_kubelet() -> dict[str, Any] | None:
            status = (node.pod(hog) or {}).get("status") or {}
            disrupted = [c for c in status.get("conditions") or [] if c.get("type") == "DisruptionTarget"]
            return disrupted[0] if disrupted and status.get("phase") in ("Succeeded", "Failed") else None

        condition = wait_until(evicted_by_the_kubelet, 60, "the kubelet to evict the hog")
        assert condition["reason"] == "TerminationByKubelet"
        assert str(condition["message"]).split("available: ")[0] == would["message"].split("available: ")[0]
        [kubelet_event] = node.events(hog, "Evicted")
        assert kubelet_event["source"]["component"] == "kubelet"
        comparison = shadow.wait_event("shadow comparison", timeout=30)
        assert comparison["outcome"] == "agree"
        assert comparison["evictd"]["pod"] == comparison["kubelet"]["pod"] == f"{hog.namespace}/{hog.name}"
        assert comparison["kubelet_later_by_s"] >= 0
        assert node.pod(quiet) is not None and not node.events(quiet, "Evicted")
        assert shadow.stop() == 0
        report = shadow_report(shadow.state_dir)
        assert report["outcomes"]["agree"] == 1 and report["agreement"] == 1.0 and report["disagreements"] == []
        node.core.delete_namespaced_pod(hog.name, hog.namespace, grace_period_seconds=0)  # no pod GC here
        node.wait_gone(hog)
        wait_until(lambda: node_condition(node, "MemoryPressure") == "False", 60, "the kubelet's pressure to end")

        # Step 2: evictd acting first, then the kubelet's thresholds to 0% and the kubelet restarted.
        acting = node.start_evictd(thresholds())
        acting.wait_event("evictd started", timeout=30)
        real_cluster.restart_kubelet(kubelet_not_evicting())  # every evictionHard threshold "0%"

        # Step 3: the next hog is evicted by evictd, and by evictd alone.
        hog = gradual_hog(node)
        evicting = acting.wait_event("evicting pod", timeout=60, pod=f"{hog.namespace}/{hog.name}")
        assert (evicting["signal"], evicting["grace_period_seconds"]) == ("allocatableMemory.available", 1)
        assert evicting["message"].split("available: ")[0] == would["message"].split("available: ")[0]
        wait_until(lambda: node_condition(node, "EvictdMemoryPressure") == "True", 20, "evictd's pressure condition")
        # The kubelet restarted just before can still rewrite the node's taints after evictd wrote its own (seen
        # here: only node.kubernetes.io/not-ready left); evictd writes them again with its conditions every
        # nodeStatusUpdateFrequency (10 s).
        wait_until(lambda: "evictd.io/memory-pressure:NoSchedule" in node.taint_keys(), 25, "evictd's taint")
        evicted_by_evictd(node, hog, evicting["message"])
        # The kubelet did not evict: no phase/reason of its own eviction, no MemoryPressure of its own.
        assert all(v.status.get("reason") != "Evicted" for v in node.versions(hog))
        assert node_condition(node, "MemoryPressure") == "False"
        assert node.pod(quiet) is not None and not node.events(quiet, "Evicted")
        assert acting.stop() == 0
    finally:
        node.close()
        real_cluster.restart_kubelet()  # its eviction off again, the pods cgroup as the session started it


def kubelet_backstop() -> str:
    """The kubelet's configuration in backstop mode: the same pods cgroup, its hard memory threshold BACKSTOP_MIB."""
    return (reserved() + f"evictionHard: {{memory.available: {BACKSTOP_MIB}Mi}}\n"
            "evictionPressureTransitionPeriod: 5s\n")


def check_config_json(evictd_config: Path, kubelet_config: Path) -> dict[str, Any]:
    """`evictd check-config -o json` of evictd's configuration beside the kubelet's file, as an operator runs it."""
    done = subprocess.run([sys.executable, "-m", "evictd", "check-config", "--config", str(evictd_config),
                           "--kubelet-config", str(kubelet_config), "-o", "json"],
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    document: dict[str, Any] = json.loads(done.stdout)
    return document


def test_backstop_mode_evictd_evicts_above_the_kubelets_threshold(real_cluster: RealCluster, tmp_path: Path) -> None:
    node = RealNode(real_cluster, tmp_path)
    try:
        # docs/deployment.md step 2, backstop mode: evictd acting first, then the kubelet's threshold lowered
        # below evictd's (not to 0%) and the kubelet restarted.
        acting = node.start_evictd(thresholds())
        acting.wait_event("evictd started", timeout=30)
        real_cluster.restart_kubelet(kubelet_backstop())
        assert real_cluster.kubelet_configz()["evictionHard"]["memory.available"] == f"{BACKSTOP_MIB}Mi"

        # check-config with the kubelet's own file says backstop for memory (and its allocatable copy).
        handover = check_config_json(acting.config_path, real_cluster.kubelet_config_path)["handover"]
        assert handover["kubeletConfig"] == f"--kubelet-config {real_cluster.kubelet_config_path}"
        assert handover["mode"] == "backstop" and not handover["evictdDryRun"]
        verdicts = {v["signal"]: v for v in handover["signals"]}
        for signal in ("memory.available", "allocatableMemory.available"):
            verdict = verdicts[signal]
            assert (verdict["evicts"], verdict["evictd"], verdict["kubelet"], verdict["problem"]) == (
                "evictd-first", f"hard <{THRESHOLD_MIB}Mi", f"hard <{BACKSTOP_MIB}Mi", False), verdict

        # Real pressure: evictd evicts the hog at its threshold; the kubelet's, lower, is never met.
        before = node.condition("MemoryPressure")
        assert before is not None and before["status"] == "False"
        quiet = node.run_pod(new_name("quiet"), QUIET, requests={"memory": "64Mi"})
        hog = gradual_hog(node)
        evicting = acting.wait_event("evicting pod", timeout=60, pod=f"{hog.namespace}/{hog.name}")
        assert (evicting["signal"], evicting["grace_period_seconds"]) == ("allocatableMemory.available", 1)
        assert evicting["message"].startswith(f"The node was low on resource: memory. Threshold quantity: "
                                              f"{THRESHOLD_MIB}Mi"), evicting["message"]
        wait_until(lambda: node_condition(node, "EvictdMemoryPressure") == "True", 20, "evictd's pressure condition")
        evicted_by_evictd(node, hog, evicting["message"])
        # The kubelet, the backstop, did not act: no eviction of its own (its status Failed/Evicted, its Evicted
        # event; the DisruptionTarget condition is evictd's, written as the kubelet writes it), and its
        # MemoryPressure never left False (a True in between would have moved the lastTransitionTime).
        assert all(v.status.get("reason") != "Evicted" for v in node.versions(hog))
        after = node.condition("MemoryPressure")
        assert after is not None
        assert (after["status"], after["lastTransitionTime"]) == ("False", before["lastTransitionTime"]), after
        assert node.pod(quiet) is not None and not node.events(quiet, "Evicted")
        assert acting.stop() == 0
    finally:
        node.close()
        real_cluster.restart_kubelet()  # its eviction off again, the pods cgroup as the session started it
