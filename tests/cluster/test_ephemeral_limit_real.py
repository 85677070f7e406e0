"""Pods' ephemeral-storage limits have one enforcer after the hand-over: the kubelet's port of its own node e2e
scenario LocalStorageCapacityIsolationEviction, on the real kube-apiserver and kubelet v1.36.2 with the kubelet's
thresholds at 0% (the hand-over done) and evictd acting, reading the kubelet's file. The kubelet enforces pods'
limits whatever its thresholds say (`localStorageCapacityIsolation`, true by default and needed for the node's
ephemeral-storage capacity), so evictd as shipped (`ephemeralStorageLimitsEnforcer: auto`) leaves them to it: the
pod over its limit gets one Evicted event, the kubelet's. Runs only in `make test-cluster`.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from backends import RealNode
from node_under_test import new_name, wait_until
from real_cluster import RealCluster
from side_by_side import thresholds

pytestmark = pytest.mark.real_cluster

# The pod writes this much into its writable layer, over its 10 MiB ephemeral-storage limit, then sleeps.
WRITE_MIB = 40
# After the kubelet's eviction, how long evictd (a cycle every second here) has to evict the pod a second time.
AFTER_S = 20.0


def test_a_pod_over_its_ephemeral_storage_limit_is_evicted_once_by_the_kubelet(real_cluster: RealCluster,
                                                                              tmp_path: Path) -> None:
    real_cluster.restart_kubelet()  # every evictionHard threshold 0%, localStorageCapacityIsolation as defaulted
    node = RealNode(real_cluster, tmp_path)
    try:
        acting = node.start_evictd(thresholds(), args=("--kubelet-config", str(real_cluster.kubelet_config_path)))
        started = acting.wait_event("evictd started", timeout=30)
        limits = acting.wait_event("ephemeral-storage limits", timeout=30)
        assert limits["enforcer"] == "kubelet", limits
        name = new_name("over-limit")
        body = {
            "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
            "spec": {"nodeName": node.name, "hostNetwork": True, "restartPolicy": "Never",
                     "containers": [{"name": "app", "image": real_cluster.busybox_image, "imagePullPolicy": "Never",
                                     "command": ["sh", "-c", f"dd if=/dev/zero of=/fill bs=1M count={WRITE_MIB}; "
                                                 "sleep 3600"],
                                     "resources": {"limits": {"ephemeral-storage": "10Mi"}}}]},
        }
        node.core.create_namespaced_pod("default", body)

        def evicted() -> dict[str, Any] | None:
            pod = node.core.read_namespaced_pod(name, "default").to_dict()
            status = pod.get("status") or {}
            return pod if status.get("phase") == "Failed" and status.get("reason") == "Evicted" else None

        pod = wait_until(evicted, 120, "the kubelet to evict the pod over its ephemeral-storage limit")
        assert "ephemeral local storage" in pod["status"]["message"] or "local ephemeral storage" in \
            pod["status"]["message"], pod["status"]["message"]
        time.sleep(AFTER_S)
        events = [e for e in node.core.list_namespaced_event("default").items
                  if e.involved_object.name == name and e.reason == "Evicted"]
        assert [e.source.component for e in events] == ["kubelet"], [(e.source.component, e.message) for e in events]
        _, page = acting.http("/metrics")
        evictions = [line for line in page.splitlines()
                     if line.startswith("evictd_evictions_total{") and not line.endswith(" 0.0")]
        assert evictions == [], "evictd evicted too"
        assert started and acting.stop() == 0
    finally:
        node.core.delete_collection_namespaced_pod("default", grace_period_seconds=0)
        node.close()
