"""A real `evictd run` follows its Node's `evictd.io/mode` label without a restart: a canary (configured `dryRun:
true`, the fleet's setting) is switched to acting with `kubectl label`, and evicts only after the switch.

The node is `real_pod_node`'s (real cgroup v1 hierarchies, a real process allocating in the pod's container cgroup
past `allocatableMemory.available<200Mi`), its pod and Node in the test API server, no container runtime. Before
the switch evictd decides the eviction every cycle and writes nothing (no DELETE, no taint, no Event but its own);
after it, it evicts the pod through the API, says the mode changed (log, an Event on the Node, `evictd_mode`), and
warns that the kubelet races it on `memory.available` (the kubelet's configuration has evictd's threshold there).
"""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

from apiserver import ApiServer
from evictd_process import KUBELET_HEADER, EvictdProcess
from kube_objects import node_manifest

from polling import wait_until
from real_pod_node import MiB, RealPodNode

NODE = "canary-node"
ALLOCATED_BYTES = 360 * MiB  # leaves ~150Mi of the 512 MiB pods cgroup: past the threshold, below the limit
THRESHOLDS = "evictionHard: {allocatableMemory.available: 200Mi, memory.available: 1Mi}\nenforceNodeAllocatable: []\n"
MODE_LABEL = "evictd.io/mode"


def logged_at(event: dict[str, object]) -> float:
    return datetime.fromisoformat(str(event["timestamp"])).timestamp()


def test_a_dry_run_canary_switched_to_acting_by_its_label_evicts_only_after_the_switch(
    tmp_path: Path, real_pod: RealPodNode, apiserver: ApiServer, evictd_processes: list[EvictdProcess]
) -> None:
    apiserver.store.create_node(node_manifest(NODE))
    apiserver.store.create_pod(real_pod.manifest(NODE))
    pod_path = f"/api/v1/namespaces/{real_pod.namespace}/pods/{real_pod.name}"
    kubelet = tmp_path / "kubelet.yaml"
    kubelet.write_text(KUBELET_HEADER + "evictionHard: {memory.available: 1Mi}\n")  # evictd's: they race there
    process = real_pod.start_process()
    daemon = EvictdProcess(
        tmp_path, kubelet=THRESHOLDS, args=("--kubelet-config", str(kubelet)),
        evictd="dryRun: true\nnodeStatusUpdateFrequency: 1s\n"
               + real_pod.evictd_api_settings(tmp_path, NODE, apiserver.kubeconfig_path, "1s"))
    evictd_processes.append(daemon)
    daemon.wait_event("evictd started", timeout=60)
    started = daemon.wait_event("mode", timeout=20)
    assert (started["mode"], started["source"], started["configured_dry_run"]) == ("dry-run", "config", True)
    daemon.wait_for_cycles(2, timeout=30)
    assert daemon.metric("evictd_mode", mode="dry-run") == 1 and daemon.metric("evictd_mode", mode="acting") == 0
    assert daemon.metric("evictd_handover_conflict", signal="memory.available") == 0, "a dry-run races nobody"

    process.do(f"alloc {ALLOCATED_BYTES}")
    would = daemon.wait_event("would evict pod", timeout=20)
    assert would["pod"] == real_pod.key and would["dry_run"] is True
    cycles = daemon.metric("evictd_cycles_total")
    daemon.wait_for_cycles(int(cycles) + 3, timeout=30)  # cycles under pressure, in dry-run
    assert not [r for r in apiserver.requests if r.method in ("DELETE", "PATCH") and r.path.startswith(pod_path)]
    node = apiserver.store.get_node(NODE)
    assert node is not None and not (node.get("spec") or {}).get("taints"), "a dry-run writes no taint"
    assert not any(e.get("event") in ("evicting pod", "kubelet races evictd") for e in daemon.events)

    labelled = apiserver.kubectl("label", "node", NODE, f"{MODE_LABEL}=acting")
    assert labelled.returncode == 0, labelled.stderr
    changed = daemon.wait_event("mode changed", timeout=20)
    assert (changed["previous"], changed["mode"], changed["source"], changed["label"]) == (
        "dry-run", "acting", "node-label", "acting")
    evicting = daemon.wait_event("evicting pod", timeout=20)
    assert evicting["pod"] == real_pod.key and evicting["dry_run"] is False
    wait_until(lambda: [r for r in apiserver.requests if r.method == "DELETE" and r.path == pod_path],
               timeout_s=20, what="the pod's DELETE")
    # Only after the switch: every "would evict" came before it, every "evicting" after.
    would_all = [e for e in daemon.events if e.get("event") == "would evict pod"]
    evicting_all = [e for e in daemon.events if e.get("event") == "evicting pod"]
    assert max(logged_at(e) for e in would_all) <= logged_at(changed) <= min(logged_at(e) for e in evicting_all)

    races = [e for e in daemon.events if e.get("event") == "kubelet races evictd"]
    assert races and all(logged_at(e) >= logged_at(changed) for e in races)
    assert "memory.available" in {e["signal"] for e in races}
    assert daemon.metric("evictd_mode", mode="acting") == 1 and daemon.metric("evictd_mode", mode="dry-run") == 0
    assert daemon.metric("evictd_mode_source", source="node-label") == 1
    assert daemon.metric("evictd_handover_conflict", signal="memory.available") == 1
    assert daemon.metric("evictd_evictions_total", eviction_signal="allocatableMemory.available") >= 1
    wait_until(lambda: [e for e in apiserver.store.events() if e.get("reason") == "EvictdModeChanged"],
               timeout_s=10, what="the mode Event on the Node")
    [event] = [e for e in apiserver.store.events() if e.get("reason") == "EvictdModeChanged"]
    assert event["involvedObject"]["name"] == NODE and "now acting" in event["message"]
    assert daemon.stop() == 0
