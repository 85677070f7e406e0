"""Pool nodes for the real-cluster tier: more kubelets, each with its own containerd, added to a RealCluster.

Job: turn one started RealCluster (its etcd, kube-apiserver, controller-manager and scheduler) into a fleet:
``MultiNodeCluster`` adds kubelet nodes in pools (the ``pool`` node label), so that a test can run one evictd
per node, with its own configuration, as a DaemonSet would across a fleet. Each added node is a RealCluster
in node mode (``control_plane=``): its own private containerd, kubelet root folder, ports, cgroupRoot, node
name (``--hostname-override``) and kubelet client certificate (CN=system:node:<name>, O=system:nodes, which the
Node authorizer and NodeRestriction need), registered with the labels given (``--node-labels``).

Invariants:

* Every added node's kubelet gets ``systemReserved`` memory = the machine's memory minus
  ``pods_memory_mib``: its pods cgroup (kubepods under its own cgroupRoot) is limited to about that much, so
  ``allocatableMemory.available`` is per node and one node's hog presses that node alone. ``memory.available``
  (the machine's) is one figure shared by every node: it cannot tell the nodes apart.
* Added nodes run hostNetwork pods only unless ``pod_network``: then each has a bridge and subnet of its own
  (pod_network.py; the third octet the control plane's plus the node's index, so no two collide), all in the
  host's network namespace, so the host (a probe, a Prometheus scrape) reaches every pod. The API server cannot
  reach the added kubelets for ``kubectl logs``/``exec`` (their names do not resolve).
* ``start`` starts the nodes side by side (threads) and, if one fails, stops them all; ``stop`` stops them side
  by side and returns what could not be cleaned: each node's pods, kubelet, containerd, mounts, cgroups, and
  its Node object (the control plane's other tests see their own node only). The control plane is left as found.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from real_cluster import ClusterError, RealCluster, free_ports
from side_by_side import machine_memory_mib

POOL_LABEL = "pool"
# The taint a kubelet registers its Node with; the node lifecycle controller, which does not run here (its
# taints would mix with evictd's), removes it once the Node is Ready. Left, the scheduler places no pod.
NOT_READY_TAINT = "node.kubernetes.io/not-ready"
# Each node's pods cgroup: small enough that a hog of a few hundred MiB presses it, large enough for a few
# busybox pods (the identity pod and a quiet pod take a few MiB each).
POD_MEMORY_MIB = 1024


@dataclass(frozen=True)
class PoolNode:
    """One node to add: its Node name and its pool (the value of its ``pool`` label)."""

    name: str
    pool: str


# One canary node and two general ones: the fleet of the multi-node tests.
FLEET = (PoolNode("evictd-canary-1", "canary"), PoolNode("evictd-general-1", "general"),
         PoolNode("evictd-general-2", "general"))


def reserved_for(pods_memory_mib: int) -> str:
    """The kubelet's systemReserved that leaves ``pods_memory_mib`` MiB of the machine to its pods cgroup."""
    reserved_mib = machine_memory_mib() - pods_memory_mib
    if reserved_mib <= 0:
        raise ClusterError(f"the machine has {machine_memory_mib()} MiB: too little to give a node "
                           f"{pods_memory_mib} MiB for its pods")
    return f"systemReserved: {{memory: {reserved_mib}Mi}}\n"


class MultiNodeCluster:
    """``nodes`` added to the started ``control_plane``, under ``base`` (one folder per node)."""

    def __init__(self, control_plane: RealCluster, base: Path, nodes: Sequence[PoolNode] = FLEET,
                 pods_memory_mib: int = POD_MEMORY_MIB, *, pod_network: bool = False, kubelet_extra: str = "") -> None:
        """``kubelet_extra``: KubeletConfiguration YAML whose top-level keys every added kubelet also gets."""
        if len({node.name for node in nodes}) != len(nodes) or control_plane.node_name in {n.name for n in nodes}:
            raise ClusterError(f"node names must differ from each other and from {control_plane.node_name}")
        self.control_plane = control_plane
        self.base = base
        self.specs = tuple(nodes)
        self.pods_memory_mib = pods_memory_mib
        defaults = reserved_for(pods_memory_mib) + kubelet_extra
        first = control_plane.pod_network.octet if control_plane.pod_network is not None else 0
        # n<i>, not the node's name: containerd's sockets live under the node's folder, and socket paths are short.
        self.nodes: dict[str, RealCluster] = {
            spec.name: RealCluster(base / f"n{index}", control_plane.bin_dir, pod_network=pod_network,
                                   node_name=spec.name, node_labels={POOL_LABEL: spec.pool},
                                   kubelet_defaults=defaults, control_plane=control_plane,
                                   pod_network_octet=(first + 1 + index) % 256)
            for index, spec in enumerate(nodes)}
        self.timings: dict[str, float] = {}

    def node(self, name: str) -> RealCluster:
        return self.nodes[name]

    def pool(self, pool: str) -> list[RealCluster]:
        """The nodes of ``pool``, in the order given."""
        return [self.nodes[spec.name] for spec in self.specs if spec.pool == pool]

    def _each(self, action: Callable[[RealCluster], None]) -> dict[str, BaseException]:
        """Run ``action`` on every node at once (one thread each); return the failures by node name."""
        failures: dict[str, BaseException] = {}

        def run(name: str, node: RealCluster) -> None:
            try:
                action(node)
            except BaseException as exc:  # reported by the caller, whatever it was
                failures[name] = exc

        threads = [threading.Thread(target=run, args=item, name=f"node-{item[0]}") for item in self.nodes.items()]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        return failures

    def start(self) -> None:
        """Start every node side by side and wait until each is Ready; on failure stop them all and raise
        ``ClusterError`` with each failed node's cause and logs."""
        began = time.monotonic()
        # Every kubelet's two ports chosen at once, here: threads choosing their own could be handed the same one.
        ports = iter(free_ports(2 * len(self.nodes)))
        for node in self.nodes.values():
            node.kubelet_port, node.kubelet_healthz_port = next(ports), next(ports)
        def start(node: RealCluster) -> None:
            node.start()
            self._untaint(node)

        failures = self._each(start)
        if failures:
            problems = self.stop()
            causes = "\n".join(f"node {name}: {exc}" for name, exc in failures.items())
            raise ClusterError(f"the pool nodes did not start:\n{causes}\n"
                               f"teardown: {'; '.join(problems) or 'clean'}")
        self.timings["start"] = time.monotonic() - began
        for name, node in self.nodes.items():
            self.timings[f"start-{name}"] = node.timings.get("start", 0.0)

    def _untaint(self, node: RealCluster) -> None:
        """What the node lifecycle controller does once the Node is Ready: remove its not-ready taint."""
        path = f"/api/v1/nodes/{node.node_name}"
        found = node.api.request("GET", path)
        taints = found.get("spec", {}).get("taints") or []
        kept = [taint for taint in taints if taint.get("key") != NOT_READY_TAINT]
        if kept != taints:
            node.api.request("PATCH", path, {"metadata": {"resourceVersion": found["metadata"]["resourceVersion"]},
                                             "spec": {"taints": kept}},
                             content_type="application/merge-patch+json")

    def stop(self) -> list[str]:
        """Stop every node side by side; return what could not be cleaned (empty when clean)."""
        began = time.monotonic()
        problems: dict[str, list[str]] = {}

        def stop(node: RealCluster) -> None:
            problems[node.node_name] = node.stop()

        failures = self._each(stop)
        self.timings["stop"] = time.monotonic() - began
        found = [f"node {name}: {problem}" for name, listed in problems.items() for problem in listed]
        found += [f"node {name}: stop failed: {exc!r}" for name, exc in failures.items()]
        return found
