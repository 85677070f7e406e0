"""evictd across a fleet: three real kubelet nodes in two pools, one evictd per node. Runs only in `make test-cluster`.

The session's cluster (real_cluster.py) gets three more kubelets (multi_node.py): ``evictd-canary-1`` in pool
``canary``, ``evictd-general-1`` and ``evictd-general-2`` in pool ``general``, each with its own containerd,
cgroupRoot and a pods cgroup of POD_MEMORY_MIB, the kubelet's own eviction off (every threshold ``0%``).

* The nodes register Ready with their pool labels and the real kube-scheduler places a pod with a pool's
  nodeSelector (no ``spec.nodeName``) on a node of that pool.
* One `evictd run` per node, as a process on the host with the node's identity (a token bound to a pod on that
  node), its own nodeName, cgroupRoot, stateDir and metrics port, a hard ``allocatableMemory.available``
  threshold: the canary's acting, the general nodes' in dry-run (a staged roll-out). A hog on the canary's pods
  cgroup is evicted by the canary's evictd (the pod the kubelet's ranking names, not the quiet pod beside it);
  the kubelet evicts nothing; the general nodes' evictd neither evict nor see pressure.
* A hog on a general node: its dry-run evictd decides (its log and metric) and evicts nothing; the other nodes'
  evictd stay as they were.
"""

from __future__ import annotations

import contextlib
import shutil
import sys
import tempfile
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from backends import RealNode
from evictd_process import EvictdProcess
from multi_node import FLEET, POD_MEMORY_MIB, POOL_LABEL, MultiNodeCluster
from node_under_test import MiB, PodRef, memory_hog, new_name
from real_cluster import BASE_PREFIX, ClusterError, RealCluster

from evictd.adapters.cgroups import detect_cgroup_layout
from polling import wait_until

pytestmark = pytest.mark.real_cluster

CANARY = "evictd-canary-1"
DRY_RUN_TARGET = "evictd-general-1"
SIGNAL = "allocatableMemory.available"
# Against a pods cgroup of POD_MEMORY_MIB: the hog leaves about 150 MiB, well under the threshold, and stays
# about 150 MiB under the cgroup's limit (no OOM kill), whatever the few MiB of the other pods.
THRESHOLD_MIB = 300
HOG_MIB = 850
QUIET = 'trap "exit 0" TERM; echo ready; while true; do sleep 1; done'
PLACEMENT_NAMESPACE = "pools"
DECISION_TIMEOUT_S = 90.0
# Cycles a dry-run evictd runs with the hog in place after deciding: time in which an eviction would show.
HELD_CYCLES = 5


def thresholds() -> str:
    """Every node's evictd thresholds (the kubelet's are 0%, its eviction off)."""
    return f"evictionHard: {{{SIGNAL}: {THRESHOLD_MIB}Mi}}\nevictionPressureTransitionPeriod: 5s\n"


class FleetNode(RealNode):
    """A pool node as the contract tests' RealNode, with an identity pod of its own name (one per node)."""

    def __init__(self, cluster: RealCluster, folder: Path) -> None:
        super().__init__(cluster, folder)
        self.IDENTITY_POD = f"evictd-identity-{cluster.node_name}"


@dataclass(frozen=True)
class Member:
    """One node of the fleet and the evictd running on it."""

    node: FleetNode
    daemon: EvictdProcess


def metric_sum(daemon: EvictdProcess, name: str) -> float:
    """The sum of every series named ``name`` on the daemon's /metrics page (0 when it has none yet)."""
    status, page = daemon.http("/metrics")
    assert status == 200, page[:300]
    total = 0.0
    for line in page.splitlines():
        if line.startswith("#"):
            continue
        sample = line.partition("{")[0] if "{" in line else line.partition(" ")[0]
        if sample == name:
            total += float(line.rsplit(" ", 1)[1])
    return total


def counts(member: Member) -> tuple[float, float]:
    """(evictions, dry-run evictions) so far."""
    return (metric_sum(member.daemon, "evictd_evictions_total"),
            metric_sum(member.daemon, "evictd_dry_run_evictions_total"))


def decisions(daemon: EvictdProcess) -> list[dict[str, Any]]:
    """The eviction decisions in the daemon's log so far (read up to now)."""
    with contextlib.suppress(AssertionError):
        daemon.wait_for(lambda _: False, timeout=0.5)  # takes in every line logged so far
    return [e for e in daemon.events if e.get("event") in ("evicting pod", "would evict pod")]


def pods_cgroup(node: RealCluster) -> Path:
    """The node's v1 memory cgroup of pods (kubepods under its own cgroupRoot), as RealNode.pods_cgroup."""
    return detect_cgroup_layout().memory_hierarchy / node.cgroup_root.strip("/") / "kubepods"


def condition_status(node: FleetNode, kind: str) -> str | None:
    found = node.condition(kind)
    return None if found is None else str(found["status"])


@pytest.fixture(scope="module")
def pools(real_cluster: RealCluster) -> Iterator[MultiNodeCluster]:
    """The session's cluster with the three pool nodes of FLEET added (removed again after the module)."""
    base = Path(tempfile.mkdtemp(prefix=BASE_PREFIX))
    failure = ""
    try:
        cluster = MultiNodeCluster(real_cluster, base)
        cluster.start()
    except ClusterError as exc:
        failure = str(exc)
    if failure:
        pytest.fail(failure, pytrace=False)
    steps = ", ".join(f"{step} {seconds:.1f} s" for step, seconds in cluster.timings.items())
    print(f"\npool nodes up in {base} ({steps})", file=sys.stderr)
    try:
        yield cluster
    finally:
        problems = cluster.stop()
        print(f"\npool nodes stopped in {cluster.timings['stop']:.1f} s", file=sys.stderr)
        if problems:
            pytest.fail("pool nodes teardown incomplete: " + "; ".join(problems), pytrace=False)
        shutil.rmtree(base, ignore_errors=True)


@pytest.fixture(scope="module")
def fleet(pools: MultiNodeCluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Member]]:
    """One evictd per pool node: the canary's acting, the others in dry-run; all with the same thresholds."""
    members: dict[str, Member] = {}
    try:
        for spec in FLEET:
            node = FleetNode(pools.node(spec.name), tmp_path_factory.mktemp(spec.name))
            daemon = node.start_evictd(thresholds(), "" if spec.name == CANARY else "dryRun: true\n")
            members[spec.name] = Member(node, daemon)
        for member in members.values():
            member.daemon.wait_event("evictd started", timeout=60)
            member.daemon.wait_for_cycles(2, timeout=30)
        yield members
    finally:
        for member in members.values():
            member.node.close()


def test_the_pool_nodes_are_ready_and_the_scheduler_places_pods_by_pool(pools: MultiNodeCluster) -> None:
    cluster = pools.control_plane
    listed = cluster.api.request("GET", f"/api/v1/nodes?labelSelector={POOL_LABEL}")["items"]
    by_name = {node["metadata"]["name"]: node for node in listed}
    assert {name: node["metadata"]["labels"][POOL_LABEL] for name, node in by_name.items()} == {
        spec.name: spec.pool for spec in FLEET}
    cgroups = set()
    for spec in FLEET:
        node = by_name[spec.name]
        ready = [c for c in node["status"]["conditions"] if c["type"] == "Ready"]
        assert ready and ready[0]["status"] == "True", ready
        # The kubelet's own eviction is off (every hard threshold 0%), as evictd's hand-over leaves it.
        configz = pools.node(spec.name).kubelet_configz()
        assert set(configz["evictionHard"].values()) == {"0%"}, configz["evictionHard"]
        # Each node's own pods cgroup, limited to its allocatable memory (capacity minus systemReserved).
        kubepods = pods_cgroup(pools.node(spec.name))
        cgroups.add(kubepods)
        limit_bytes = int((kubepods / "memory.limit_in_bytes").read_text())
        assert abs(limit_bytes - POD_MEMORY_MIB * MiB) < MiB, (spec.name, limit_bytes)
    assert len(cgroups) == len(FLEET)

    cluster.ensure_namespace(PLACEMENT_NAMESPACE)
    placed: dict[str, str] = {}
    try:
        for pool in ("canary", "general", "general"):
            name = f"{pool}-{uuid.uuid4().hex[:5]}"
            cluster.api.request("POST", f"/api/v1/namespaces/{PLACEMENT_NAMESPACE}/pods", {
                "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
                "spec": {"nodeSelector": {POOL_LABEL: pool}, "hostNetwork": True,
                         "terminationGracePeriodSeconds": 1, "automountServiceAccountToken": False,
                         "containers": [{"name": "app", "image": cluster.busybox_image, "imagePullPolicy": "Never",
                                         "command": ["sh", "-c", QUIET]}]},
            })
            placed[name] = pool
        for name, pool in placed.items():
            pod = cluster.wait_pod_running(name, PLACEMENT_NAMESPACE)
            scheduled = [c for c in pod["status"]["conditions"] if c["type"] == "PodScheduled"]
            assert scheduled and scheduled[0]["status"] == "True"
            assert pod["spec"]["nodeName"] in {node.node_name for node in pools.pool(pool)}, (name, pool)
    finally:
        for name in placed:
            with contextlib.suppress(ClusterError):
                cluster.api.request("DELETE", f"/api/v1/namespaces/{PLACEMENT_NAMESPACE}/pods/{name}",
                                    {"gracePeriodSeconds": 0})
        wait_until(lambda: not cluster.api.request("GET", f"/api/v1/namespaces/{PLACEMENT_NAMESPACE}/pods")["items"], 60,
                   "the placed pods to go")


def test_the_canary_evicts_the_ranked_pod_and_the_other_nodes_stay_calm(fleet: dict[str, Member]) -> None:
    canary = fleet[CANARY]
    others = {name: member for name, member in fleet.items() if name != CANARY}
    before = {name: counts(member) for name, member in fleet.items()}
    cycles_before = {name: metric_sum(member.daemon, "evictd_cycles_total") for name, member in others.items()}
    pressure_before = canary.node.condition("MemoryPressure")
    assert pressure_before is not None and pressure_before["status"] == "False"

    node = canary.node
    quiet = node.run_pod(new_name("quiet"), QUIET, requests={"memory": "64Mi"})
    # restartPolicy Always (the default): the kubelet, not yet aware of the deletion, may start the hog's container
    # again after evictd stopped it on the node; evictd then stops it again, a follow-up of its one eviction, never
    # the quiet pod (4 of 32 runs of this module evicted the quiet pod before TerminatingEvictions ranked such a pod
    # again) and never a second Evicted event (issue #73).
    hog = node.run_pod(new_name("hog"), memory_hog(HOG_MIB), requests={"memory": "32Mi"})
    evicting = canary.daemon.wait_event("evicting pod", timeout=DECISION_TIMEOUT_S, pod=f"{hog.namespace}/{hog.name}")
    assert (evicting["signal"], evicting["grace_period_seconds"]) == (SIGNAL, 1)
    # Meanwhile, the other nodes' allocatable memory, each its own pods cgroup of POD_MEMORY_MIB, is untouched by
    # the canary's hog (the machine's memory.available, shared, fell by the hog as much on every node).
    for name, member in others.items():
        capacity = member.daemon.metric("evictd_signal_capacity_bytes", signal=SIGNAL)
        available = member.daemon.metric("evictd_signal_available_bytes", signal=SIGNAL)
        assert abs(capacity - POD_MEMORY_MIB * MiB) < MiB, (name, capacity)
        assert available > (POD_MEMORY_MIB - 200) * MiB, (name, available / MiB)
    assert evicting["message"].startswith(
        f"The node was low on resource: memory. Threshold quantity: {THRESHOLD_MIB}Mi, available: ")
    # Written with the canary's own identity (a token bound to its pod on that node; the node restriction
    # policy lets it write that Node only).
    wait_until(lambda: condition_status(node, "EvictdMemoryPressure") == "True", 20, "the canary's pressure condition")
    node.wait_gone(hog)
    events = node.events(hog, "Evicted")
    assert len(events) == 1 and events[0]["source"]["component"] == "evictd", events  # one pod, one eviction
    assert events[0]["message"] == evicting["message"]
    # The kubelet evicted nothing: no status of its own eviction, no MemoryPressure of its own.
    assert all(v.status.get("reason") != "Evicted" for v in node.versions(hog))
    pressure_after = node.condition("MemoryPressure")
    assert pressure_after is not None
    assert (pressure_after["status"], pressure_after["lastTransitionTime"]) == (
        "False", pressure_before["lastTransitionTime"])
    # The quiet pod beside it, below its request, was not the one ranked first, and stays.
    decided = decisions(canary.daemon)
    assert [e["pod"] for e in decided] == [f"{hog.namespace}/{hog.name}"], [(e["cycle"], e["pod"]) for e in decided]
    still = node.pod(quiet)
    assert still is not None and "deletionTimestamp" not in still["metadata"]
    assert not node.events(quiet, "Evicted")
    assert counts(canary) == (before[CANARY][0] + len(decided), 0)

    # The other nodes ran their cycles meanwhile, on their own pods cgroups, and saw no pressure.
    for name, member in others.items():
        assert metric_sum(member.daemon, "evictd_cycles_total") > cycles_before[name]
        assert counts(member) == before[name] == (0, 0), name
        assert metric_sum(member.daemon, "evictd_threshold_met") == 0, name
        assert not decisions(member.daemon), name
        assert condition_status(member.node, "EvictdMemoryPressure") != "True", name
    node.core.delete_namespaced_pod(quiet.name, quiet.namespace, grace_period_seconds=0)
    node.wait_gone(quiet)


def test_a_dry_run_node_under_pressure_decides_and_evicts_nothing(fleet: dict[str, Member]) -> None:
    target = fleet[DRY_RUN_TARGET]
    before = {name: counts(member) for name, member in fleet.items()}
    node = target.node
    hog: PodRef | None = None
    try:
        hog = node.run_pod(new_name("hog"), memory_hog(HOG_MIB), requests={"memory": "32Mi"})
        would = target.daemon.wait_event("would evict pod", timeout=DECISION_TIMEOUT_S,
                                         pod=f"{hog.namespace}/{hog.name}")
        assert would["signal"] == SIGNAL
        decided_at = metric_sum(target.daemon, "evictd_cycles_total")
        target.daemon.wait_for_cycles(int(decided_at) + HELD_CYCLES, timeout=60)
        evictions, dry_run = counts(target)
        assert (evictions, dry_run >= 1) == (before[DRY_RUN_TARGET][0], True)
        # Nothing was done to the pod: no condition, no deletion, no event; it still runs.
        pod = node.pod(hog)
        assert pod is not None and "deletionTimestamp" not in pod["metadata"]
        assert pod["status"]["phase"] == "Running"
        assert all(v.condition("DisruptionTarget") is None and not v.metadata.get("deletionTimestamp")
                   for v in node.versions(hog))
        assert not node.events(hog, "Evicted")
        assert condition_status(node, "MemoryPressure") == "False"
        assert not [key for key in node.taint_keys() if key.startswith("evictd.io/")]
        # The other nodes' evictd: nothing new.
        for name, member in fleet.items():
            if name != DRY_RUN_TARGET:
                assert counts(member) == before[name], name
                assert not [e for e in decisions(member.daemon) if e.get("pod") == f"{hog.namespace}/{hog.name}"]
    finally:
        if hog is not None:
            node.core.delete_namespaced_pod(hog.name, hog.namespace, grace_period_seconds=0)
            node.wait_gone(hog)
