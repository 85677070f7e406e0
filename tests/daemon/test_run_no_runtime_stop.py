"""A real `evictd run` with no container runtime and an API that does not take the deletion: a hard eviction is
carried out through the pod's cgroup, not left running while the next pod pays.

Seen in issue 36's arena (the stand-in node, which has no runtime; evictd-stall on the thrash, run 4 of 5): the
starved API server timed out the grower's eviction, nothing stopped the grower, and 30 s on, with the stall still
there, the next pod of the ranking, the Guaranteed one, was evicted for it. With a runtime attached the pod is
stopped through the CRI (and through its cgroup when the runtime hangs: tests/e2e/test_api_faults_e2e.py); with
none, its processes are now killed through its cgroup (`evictd.cri.RuntimeSlot`).

The pod is `real_pod_node`'s (real cgroup v1 hierarchies, a real process allocating in the container cgroup), its
spec in the test API server, which answers every PATCH (the DisruptionTarget condition, the eviction's first
write) and DELETE of the pod with a 503; the runtime endpoint is a
socket nobody serves. `allocatableMemory.available<200Mi` is crossed by the process's allocation.
"""

from __future__ import annotations

import json
import signal
from pathlib import Path

from apiserver import ApiServer
from evictd_process import EvictdProcess
from kube_objects import node_manifest

from real_pod_node import MiB, RealPodNode

NODE = "runtime-less-node"
ALLOCATED_BYTES = 360 * MiB  # leaves ~150Mi of the 512 MiB pods cgroup: past the threshold, below the limit
EVERY_REQUEST = 1_000_000


def test_with_no_runtime_and_the_api_refusing_a_hard_eviction_kills_the_pod_through_its_cgroup(
    tmp_path: Path, real_pod: RealPodNode, apiserver: ApiServer, evictd_processes: list[EvictdProcess]
) -> None:
    apiserver.store.create_node(node_manifest(NODE))
    apiserver.store.create_pod(real_pod.manifest(NODE))
    pod_path = f"/api/v1/namespaces/{real_pod.namespace}/pods/{real_pod.name}"
    apiserver.faults.fail_next(EVERY_REQUEST, code=503, method="PATCH", path=pod_path + "/status$")
    apiserver.faults.fail_next(EVERY_REQUEST, code=503, method="DELETE", path=pod_path + "$")
    process = real_pod.start_process()
    daemon = EvictdProcess(
        tmp_path, kubelet="evictionHard: {allocatableMemory.available: 200Mi}\nenforceNodeAllocatable: []\n",
        evictd=real_pod.evictd_api_settings(tmp_path, NODE, apiserver.kubeconfig_path, "1s"))
    evictd_processes.append(daemon)
    daemon.wait_event("evictd started", timeout=60)
    daemon.wait_for_cycles(2, timeout=30)

    assert process.proc.stdin is not None  # the allocation's "ok" may never come: the process is killed meanwhile
    process.proc.stdin.write(f"alloc {ALLOCATED_BYTES}\n")
    process.proc.stdin.flush()
    evicting = daemon.wait_event("evicting pod", timeout=20)
    assert evicting["pod"] == real_pod.key
    failed = daemon.wait_for(lambda e: e.get("event", "").startswith("eviction failed"), timeout=20)
    assert "pod stopped by killing its 1 processes through its cgroup (no container runtime answers)" \
        in failed["error"], failed
    assert "API writes pending" in failed["error"], failed
    assert process.proc.wait(timeout=10) == -signal.SIGKILL, "the pod's process was killed through its cgroup"
    # The decision is not lost: journaled as stopped on the node, its API writes still to do.
    entry = {e["uid"]: e for e in json.loads((daemon.state_dir / "evictions.json").read_text())["evictions"]}[
        real_pod.uid]
    assert entry["stopped_locally"] and not entry["deleted"], entry
    # The API was asked first (the condition's PATCH, refused), and nobody else is stopped for the same pressure.
    assert [r for r in apiserver.requests if r.method == "PATCH" and r.path == pod_path + "/status"], \
        "the API was asked first"
    assert not [e for e in daemon.events if e.get("event") == "evicting pod" and e.get("pod") != real_pod.key]
