"""The two nodes the contract tests run on (see node_under_test.py): the stand-ins, and a real cluster."""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from e2e_node import ClusterNode, Container, pods_memory_limit
from evictd_process import EvictdProcess
from node_under_test import NAMESPACE, MiB, NodeUnderTest, PodRef, new_name, wait_until

from evictd.adapters.cgroups import detect_cgroup_layout

# The stand-in kubelet limits its pods cgroup as a kubelet limits it to the node's allocatable memory.
STAND_IN_ALLOCATABLE_BYTES = 600 * MiB
POD_START_TIMEOUT_S = 60.0
# The tests' cadence: a cycle every second, no PSI wake-ups (a stall elsewhere on the machine would add cycles).
# An empty cadence leaves evictd's shipped defaults (10 s, every wake-up on).
TEST_CADENCE = "housekeepingInterval: 1s\npsiWakeups: false\n"


def daemon_settings(node_name: str, kubeconfig: Path, endpoint: str, cgroup_root: str, kubelet_root: Path,
                    pod_logs_dir: Path, state_dir: Path, cadence: str = TEST_CADENCE) -> str:
    """The EvictdConfiguration lines of `evictd run` on a node, the same for both backends."""
    return (f"nodeName: {node_name}\n"
            f"kubeconfig: {kubeconfig}\n"
            f"containerRuntimeEndpoint: {endpoint}\n"
            f"cgroupRoot: {cgroup_root}\n"
            f"kubeletRootDir: {kubelet_root}\n"
            f"podLogsDir: {pod_logs_dir}\n"
            f"stateDir: {state_dir}\n"
            + cadence
            + "shutdownTimeout: 5s\n")


class StandInNode(NodeUnderTest):
    """The test API server, a real containerd and the kubelet stand-in (tests/e2e)."""

    def __init__(self, cluster: ClusterNode) -> None:
        self.cluster = cluster
        self.name = cluster.name
        self._limit = contextlib.ExitStack()
        self._limit.enter_context(pods_memory_limit(cluster, STAND_IN_ALLOCATABLE_BYTES))
        super().__init__(cluster.apiserver.api_client())

    def run_pod(self, name: str, script: str, *, requests: Mapping[str, str] | None = None,
                finalizers: Sequence[str] = ()) -> PodRef:
        running = self.cluster.run_pod(name, [Container("app", script, requests=dict(requests or {}))],
                                       namespace=NAMESPACE, finalizers=finalizers)
        self.cluster.runtime.wait_for_output(running, "app")
        return PodRef(running.namespace, running.name, running.uid)

    def start_evictd(self, kubelet: str, evictd: str = "") -> EvictdProcess:
        daemon = self.cluster.start_evictd(kubelet, evictd, folder=new_name("evictd"))
        self.daemons.append(daemon)
        return daemon

    def pods_cgroup(self) -> Path:
        return self.cluster.pods_cgroup

    def close(self) -> None:
        super().close()
        self.cluster.stop_all()
        self._limit.close()


class RealNode(NodeUnderTest):
    """A real kube-apiserver and kubelet v1.36.2 (tests/cluster/real_cluster.py); evictd with its DaemonSet identity."""

    IDENTITY_POD = "evictd-identity"

    def __init__(self, cluster: Any, folder: Path) -> None:
        from kubernetes import config

        self.cluster = cluster
        self.name = cluster.node_name
        self.folder = folder
        cluster.kubectl("create", "namespace", NAMESPACE, check=False)
        super().__init__(config.new_client_from_config(config_file=str(cluster.admin_kubeconfig)))

    def run_pod(self, name: str, script: str, *, requests: Mapping[str, str] | None = None,
                finalizers: Sequence[str] = (), priority_class: str = "") -> PodRef:
        """Run the pod (see NodeUnderTest); `priority_class` names its PriorityClass (`system-node-critical`: a
        pod neither the kubelet nor evictd evicts)."""
        metadata: dict[str, Any] = {"name": name, "labels": {"app": name}}
        if finalizers:
            metadata["finalizers"] = list(finalizers)
        body: dict[str, Any] = {
            "apiVersion": "v1", "kind": "Pod", "metadata": metadata,
            "spec": {
                "nodeName": self.name, "hostNetwork": True, "terminationGracePeriodSeconds": 30,
                "containers": [{"name": "app", "image": self.cluster.busybox_image, "imagePullPolicy": "Never",
                                "command": ["sh", "-c", script],
                                "resources": {"requests": dict(requests)} if requests else {}}],
            },
        }
        if priority_class:
            body["spec"]["priorityClassName"] = priority_class
        created = self.core.create_namespaced_pod(NAMESPACE, body, _preload_content=False)
        uid = json.loads(created.data)["metadata"]["uid"]
        ref = PodRef(NAMESPACE, name, uid)

        def running() -> bool:
            pod = self.pod(ref)
            statuses = ((pod or {}).get("status") or {}).get("containerStatuses") or []
            return bool(statuses) and all("running" in (s.get("state") or {}) for s in statuses)

        wait_until(running, POD_START_TIMEOUT_S, f"pod {name} to run")
        time.sleep(0.3)  # the shell's trap is set before it prints; give it the moment the stand-in waits for
        return ref

    def start_evictd(self, kubelet: str, evictd: str = "", *, cadence: str = TEST_CADENCE,
                     args: tuple[str, ...] = ()) -> EvictdProcess:
        """Start `evictd run` with the node's settings; `cadence=""` runs it with the shipped interval and wake-ups;
        `args` follow `--config` (e.g. `--kubelet-config`)."""
        self.cluster.ensure_identity_pod(self.IDENTITY_POD)
        work = self.folder / new_name("evictd")
        work.mkdir(parents=True)
        (work / "state").mkdir()
        settings = daemon_settings(self.name, self.cluster.evictd_kubeconfig(self.IDENTITY_POD),
                                   self.cluster.containerd_endpoint, self.cluster.cgroup_root,
                                   self.cluster.kubelet_root, self.cluster.pod_logs_dir, work / "state", cadence)
        daemon = EvictdProcess(work, kubelet=kubelet, evictd=settings + evictd, args=args)
        self.daemons.append(daemon)
        return daemon

    def pods_cgroup(self) -> Path:
        return detect_cgroup_layout().memory_hierarchy / self.cluster.cgroup_root.strip("/") / "kubepods"

    def close(self) -> None:
        super().close()
        # Leave the cluster as found for the next test: no pod of ours, no evictd taint or condition.
        for pod in self.core.list_namespaced_pod(NAMESPACE).items:
            ref = PodRef(NAMESPACE, pod.metadata.name, pod.metadata.uid)
            if pod.metadata.finalizers:
                with contextlib.suppress(Exception):
                    self.remove_finalizers(ref)
            with contextlib.suppress(Exception):
                self.core.delete_namespaced_pod(pod.metadata.name, NAMESPACE, grace_period_seconds=0)
        wait_until(lambda: not self.core.list_namespaced_pod(NAMESPACE).items, 60, "the contract pods to go")
