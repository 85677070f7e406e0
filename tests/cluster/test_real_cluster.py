"""Smoke test of the real-cluster tier (real_cluster.py): a pod runs through the real kubelet, evictd's
pod-bound token carries the node, and a deleted pod goes. Runs only in `make test-cluster` (marker
``real_cluster``; `make test` deselects it)."""

from __future__ import annotations

import contextlib
import json
import uuid

import pytest
from real_cluster import RealCluster, wait_for

from evictd.cri.client import CriClient

pytestmark = pytest.mark.real_cluster

IDENTITY_POD = "evictd-smoke-identity"
NODE_NAME_EXTRA = "authentication.kubernetes.io/node-name"


def test_pod_runs_on_the_real_kubelet_and_goes(real_cluster: RealCluster) -> None:
    name = f"smoke-{uuid.uuid4().hex[:6]}"
    pod = {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "nodeName": real_cluster.node_name, "hostNetwork": True, "terminationGracePeriodSeconds": 5,
            "containers": [{"name": "app", "image": real_cluster.busybox_image, "imagePullPolicy": "Never",
                            "command": ["sh", "-c", "trap 'exit 0' TERM; echo started; while true; do sleep 1; done"]}],
        },
    }
    real_cluster.kubectl("create", "-f", "-", input=json.dumps(pod))

    running = real_cluster.wait_pod_running(name)
    status = running["status"]["containerStatuses"][0]
    assert status["name"] == "app" and "running" in status["state"]
    container_id = status["containerID"]
    assert container_id.startswith("containerd://")
    # The kubelet's container is containerd's.
    with contextlib.closing(CriClient(real_cluster.containerd_endpoint, 10.0)) as cri:
        assert container_id.removeprefix("containerd://") in {c.id for c in cri.list_containers()}

    kubeconfig = real_cluster.evictd_kubeconfig(IDENTITY_POD)
    whoami = real_cluster.kubectl("auth", "whoami", "-o", "json", kubeconfig=kubeconfig)
    user = json.loads(whoami.stdout)["status"]["userInfo"]
    assert user["username"] == "system:serviceaccount:evictd-system:evictd"
    assert user["extra"][NODE_NAME_EXTRA] == [real_cluster.node_name]
    assert user["extra"]["authentication.kubernetes.io/pod-name"] == [IDENTITY_POD]

    real_cluster.kubectl("delete", "pod", name, "--wait=true", "--timeout=60s")
    wait_for(lambda: real_cluster.pod(name) is None, 30, f"pod {name} to go")
    gone = real_cluster.kubectl("get", "pod", name, check=False)
    assert gone.returncode != 0 and "NotFound" in gone.stderr
