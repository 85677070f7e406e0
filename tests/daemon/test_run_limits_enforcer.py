"""`evictd run` and pods' ephemeral-storage limits (src/evictd/core/limits_enforcer.py): beside a kubelet whose
configuration leaves `localStorageCapacityIsolation` at its default (true), the kubelet enforces them and evictd
does not; with `ephemeralStorageLimitsEnforcer: evictd` it does, as before.

The pod is `real_pod_node`'s (a 2 MiB file in its emptyDir on a loop-mounted ext4) with `sizeLimit: 1Mi`, its
spec in the test API server; evictd is in dry-run, so an enforced limit shows as `would evict pod`.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from apiserver import ApiServer
from evictd_process import KUBELET_HEADER, EvictdProcess
from kube_objects import node_manifest

from real_pod_node import RealPodNode

NODE = "limits-node"
CYCLES = 6  # cycles after the pod's volume was measured: an enforcing evictd decides at the first


@pytest.mark.parametrize(("setting", "enforcer"), [("", "kubelet"), ("ephemeralStorageLimitsEnforcer: evictd\n",
                                                                     "evictd")], ids=["auto-kubelet", "evictd"])
def test_evictd_enforces_an_emptydir_size_limit_only_as_its_enforcer(
    tmp_path: Path, real_pod: RealPodNode, apiserver: ApiServer, evictd_processes: list[EvictdProcess],
    setting: str, enforcer: str,
) -> None:
    apiserver.store.create_node(node_manifest(NODE))
    apiserver.store.create_pod(real_pod.manifest(NODE, volumes=[{"name": real_pod.volume,
                                                                 "emptyDir": {"sizeLimit": "1Mi"}}]))
    kubelet = tmp_path / "kubelet.yaml"
    kubelet.write_text(KUBELET_HEADER + "evictionHard: {memory.available: 100Mi}\n")
    daemon = EvictdProcess(
        tmp_path, kubelet="evictionHard: {memory.available: 1Mi}\nenforceNodeAllocatable: []\n",
        args=("--kubelet-config", str(kubelet)),
        evictd="dryRun: true\n" + setting
               + real_pod.evictd_api_settings(tmp_path, NODE, apiserver.kubeconfig_path, "500ms"))
    evictd_processes.append(daemon)
    said = daemon.wait_event("ephemeral-storage limits", timeout=60)
    assert said["enforcer"] == enforcer, said
    daemon.wait_event("evictd started", timeout=60)
    if enforcer == "evictd":
        evicted = daemon.wait_event("would evict pod", timeout=60)
        assert evicted["pod"] == real_pod.key
        assert evicted["message"] == f'Usage of EmptyDir volume "{real_pod.volume}" exceeds the limit "1Mi". '
    else:
        cycles = daemon.metric("evictd_cycles_total")
        daemon.wait_for_cycles(int(cycles) + CYCLES, timeout=60)
        assert daemon.metric("evictd_pods_without_disk_usage") == 0, "the volume was measured"
        assert not any(e.get("event") == "would evict pod" for e in daemon.events), "the kubelet's to enforce"
    assert daemon.stop() == 0
