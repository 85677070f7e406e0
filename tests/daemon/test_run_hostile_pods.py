"""A real `evictd run` in a real memory cgroup at the DaemonSet's limit, beside 110 hostile pods of each shape
(issue #64 item 1: tenant pods once OOM-killed evictd at every restart, and nothing was evicted meanwhile).

evictd is started inside a fresh memory cgroup limited to the shipped DaemonSet's memory limit (read from
deploy/kubernetes/daemonset.yaml). A tenant then creates 110 Pending pods of each shape of bench/hostile_pods.py
(tolerations, volumes, containers, init containers, environment, labels: 660 pods, six times the kubelet's
maxPods) in the test API server; evictd receives them through its shipped list and watch. Each pod carries
ENTRIES entries of its shape: far past every cap, and a list page of them is as large as one of the 1.3 MB
pods (the pod watch pages lists by bytes), so what is decoded at once is the same; the 1.3 MB pods themselves
are in the benchmark. While they arrive the stand-in kubelet's Summary crosses a hard memory threshold: the
first pod of the kubelet's ranking must be deleted at once. Then the cgroup must show no OOM kill, the process must
be alive, and its peak RSS must stay under the limit less the margin the docs state (bench/hostile_pods.py).
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from apiserver import ApiServer
from evictd_process import EvictdProcess, summary_api_settings
from kube_objects import node_manifest

from builders import Gi, Mi, pod
from evictd.core.pod_parser import pod_from_dict
from hostile_kubelet import ScriptedKubelet
from polling import wait_until
from real_cgroups import CGROUP_MOUNT, temporary_cgroup

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
from hostile_pods import MARGIN, SHAPES, daemonset_memory_limit_mib, hostile_pod

NODE = "node-1"  # the builders' pods and Summary name this node
PODS_PER_SHAPE = 110  # the kubelet's default maxPods
# Entries of each hostile pod's list: 1,000 is 8 to 31 times each cap and makes pods of 80-100 KB (more as stored), listed
# 20-30 a page (the same bytes decoded at once as one 1.3 MB pod a page); the 1.3 MB pods would take
# minutes of seeding here.
ENTRIES = 1_000
MIB = 1 << 20
LIMIT_BYTES = daemonset_memory_limit_mib() * MIB
BUDGET_BYTES = int(LIMIT_BYTES * (1 - MARGIN))
HOG = pod("hog", grace=60)
KUBELET = "evictionHard: {memory.available: 500Mi}\nenforceNodeAllocatable: []\n"
# A hard threshold has no grace period: the next 1 s cycle deletes; more is a loop held by the tenant's pods.
HARD_LATENCY_S = 5.0
# The pods that drop something past a cap (env and labels are not kept at all: nothing to drop).
DROPPING_SHAPES = ("tolerations", "volumes", "containers", "initContainers")
DROPPED_LINE = "pod fields dropped past evictd's caps (sums of requests and limits kept)"


@pytest.fixture
def kubelet() -> Iterator[ScriptedKubelet]:
    scripted = ScriptedKubelet([(HOG, 2 * Gi)])
    yield scripted
    scripted.server.close()


class MemoryCgroup:
    """A fresh memory cgroup (v1 `memory` hierarchy, else the v2 one) limited to `limit_bytes`."""

    def __init__(self, path: Path, limit_bytes: int) -> None:
        self.path = path
        self.v1 = (path / "memory.limit_in_bytes").exists()
        (path / ("memory.limit_in_bytes" if self.v1 else "memory.max")).write_text(str(limit_bytes))
        if self.v1:
            (path / "memory.swappiness").write_text("0")

    def wrapper(self) -> tuple[str, ...]:
        """A command that moves itself into the cgroup and then execs the rest of its arguments."""
        return ("sh", "-c", f'echo $$ > {self.path}/cgroup.procs && exec "$@"', "in-memory-cgroup")

    def oom_kills(self) -> int:
        text = (self.path / ("memory.oom_control" if self.v1 else "memory.events")).read_text()
        counts = dict(line.split() for line in text.splitlines())
        return int(counts["oom_kill"])

    def peak_bytes(self) -> int:
        """The most the cgroup was charged (page cache included)."""
        return int((self.path / ("memory.max_usage_in_bytes" if self.v1 else "memory.peak")).read_text())


@pytest.fixture
def memory_cgroup() -> Iterator[MemoryCgroup]:
    v1 = CGROUP_MOUNT / "memory"
    with temporary_cgroup(v1 if v1.is_dir() else CGROUP_MOUNT) as path:
        yield MemoryCgroup(path, LIMIT_BYTES)


def peak_rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text(encoding="ascii").splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise AssertionError(f"no VmHWM for {pid}")


def test_hostile_pods_of_every_shape_neither_oom_kill_evictd_nor_stop_its_evictions(
        tmp_path: Path, apiserver: ApiServer, kubelet: ScriptedKubelet, memory_cgroup: MemoryCgroup,
        evictd_processes: list[EvictdProcess]) -> None:
    started = time.monotonic()
    apiserver.store.create_node(node_manifest(NODE))
    apiserver.store.create_pod(HOG)
    daemon = EvictdProcess(tmp_path, kubelet=KUBELET, wrapper=memory_cgroup.wrapper(),
                           evictd=summary_api_settings(tmp_path, apiserver.kubeconfig_path, NODE, kubelet.server.url()))
    evictd_processes.append(daemon)
    daemon.wait_event("evictd started", timeout=30)
    assert (memory_cgroup.path / "cgroup.procs").read_text().split() == [str(daemon.process.pid)]

    created: list[str] = []

    def tenant() -> None:  # creates the pods as fast as the API server takes them, shape after shape
        for shape in SHAPES:
            for index in range(PODS_PER_SHAPE):
                document = hostile_pod(shape, index, ENTRIES, NODE)
                apiserver.store.create_pod(document)
                created.append(document["metadata"]["name"])

    flooding = threading.Thread(target=tenant, daemon=True)
    flooding.start()
    # Hard pressure while the tenant's pods pour in (some held, more arriving): the hog goes at once.
    wait_until(lambda: len(created) >= 2 * PODS_PER_SHAPE, 60.0, "the tenant's first shapes created")
    crossed = time.monotonic()
    kubelet.available = 300 * Mi
    deleted = wait_until(lambda: apiserver.request_log.matching("DELETE", r".*/pods/[^/]+"), HARD_LATENCY_S)
    latency_s = time.monotonic() - crossed
    assert deleted, f"no DELETE within {HARD_LATENCY_S} s of the hard threshold's crossing; {daemon.loop_counts()}"
    # The first in the kubelet's ranking: a pod without stats comes first (a tenant's Pending pod), else the hog.
    [delete] = deleted
    namespace, name = delete.path.split("/")[-3], delete.path.split("/")[-1]
    assert daemon.wait_event("evicting pod", timeout=5)["pod"] == f"{namespace}/{name}"
    apiserver.finish_deletion(namespace, name)  # the kubelet stopped its containers
    kubelet.available = 8 * Gi

    flooding.join(timeout=120)
    created_s = time.monotonic() - started
    assert len(created) == len(SHAPES) * PODS_PER_SHAPE
    # Every pod of a capped shape is held once it has been logged; by then every pod created before it too.
    expected = len(DROPPING_SHAPES) * PODS_PER_SHAPE
    daemon.wait_for(lambda _: sum(e.get("event") == DROPPED_LINE for e in daemon.events) >= expected, timeout=90)
    daemon.wait_for_cycles(int(daemon.metric("evictd_cycles_total")) + 2, timeout=10)

    peak_rss = peak_rss_bytes(daemon.process.pid)
    cgroup_peak = memory_cgroup.peak_bytes()
    figures = (f"peak RSS {peak_rss / MIB:.1f} MiB, cgroup peak {cgroup_peak / MIB:.1f} MiB (page cache included), "
               f"limit {LIMIT_BYTES / MIB:.0f} MiB, hard latency {latency_s:.2f} s at {crossed - started:.1f} s, "
               f"pods created by {created_s:.1f} s, {time.monotonic() - started:.1f} s in all")
    print(figures)
    assert daemon.process.poll() is None, figures
    assert memory_cgroup.oom_kills() == 0, figures
    assert peak_rss <= BUDGET_BYTES, f"over {BUDGET_BYTES / MIB:.0f} MiB ({MARGIN:.0%} of the limit kept free): {figures}"
    for shape in DROPPING_SHAPES:  # each pod counted once: parsed once, though listed or watched again
        stored = apiserver.store.get_pod("tenant", f"{shape.lower()}-{PODS_PER_SHAPE - 1}")  # defaults added
        [(field, per_pod)] = pod_from_dict(stored).fields_dropped.items()
        assert daemon.metric("evictd_pod_fields_dropped_total", field=field) == per_pod * PODS_PER_SHAPE
    assert daemon.metric("evictd_evictions_total", eviction_signal="memory.available") == 1
    assert daemon.stop() == 0
    assert memory_cgroup.oom_kills() == 0
