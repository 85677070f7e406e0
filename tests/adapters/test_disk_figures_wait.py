"""Disk pressure in the first cycle that lists the pods: no eviction on disk figures nobody has read yet.

Issue 36's node-survival arena, workload ``disk-fill-fast``: a BestEffort pod fills an emptyDir beside a Guaranteed
pod, and the hard ``nodefs.available`` crossing comes in the first cycle that lists them. The disk walker measures a
pod's folders only once a cycle has named it, so in that cycle neither pod had disk figures: both ranked at 0 bytes,
the tie went to listing order, and the Guaranteed pod was evicted first. Now the cycle waits (at most
`disk_figures_wait_s`, once per pod) for the walker's first figures and ranks on them (`evictd.core.disk_figures`).

Tier 3 pieces on a tier 2 node: the v1 cgroup fixture tree with a fake /proc (tests/fixtures/cgroup/README.md), real
pod folders (an emptyDir with real data, real log folders) in the test's tmp dir, the node's own stats source and its
store, the real disk walker child process (`DiskWalkerProcess`), and one real EvictionManager cycle; the eviction is
the one the manager hands its evictor.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from builders import pod
from clocks import ManualClock
from evictd.adapters.cgroups import CgroupLayout, CgroupReader
from evictd.adapters.disk_walker_process import DiskWalkerProcess, WalkerSettings
from evictd.adapters.node_stats import NodeStatsSource
from evictd.adapters.pod_dirs import EMPTY_DIR_PLUGIN_DIR
from evictd.adapters.pod_disk_usage import PodDiskStore, PodKey
from evictd.commands.simulate import RecordingEvictor
from evictd.core.engine import EngineConfig
from evictd.core.kubelet_config import eviction_settings
from evictd.core.pod_parser import pod_from_dict
from evictd.core.pods import Pod
from evictd.cycle.manager import EvictionManager
from evictd.observe.cycle_logging import CycleLogger
from evictd.run.compose_node import PathLayout, ReportOnlyReclaimer
from log_capture import LogCapture

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "cgroup"
MiB = 1 << 20
KiB = 1 << 10
# Pod cgroups of the v1-cgroupfs fixture tree (its README): the Guaranteed and the BestEffort pod.
G_UID = "6f1c2a34-5b7d-4e8f-9a01-23456789abcd"
BE_UID = "a1b2c3d4-e5f6-4a7b-8c9d-0e1f2a3b4c5d"
# A hard nodefs.available threshold above any filesystem's free space: met in every cycle.
ALWAYS_MET = {"nodefs.available": "1000Ti"}
# Long enough for a walker child on a busy shared machine to start and measure two small pods; the wait ends as soon
# as their figures arrive.
GENEROUS_WAIT_S = 30.0
# The bound in the test of a walker that never answers: short, so the test is quick, and long enough to measure.
SHORT_WAIT_S = 0.5


def listed_pods() -> list[Pod]:
    """The arena's two pods in the order the API lists them: the Guaranteed pod (requests equal to limits) first,
    then the BestEffort filler (no requests, an emptyDir)."""
    guaranteed = pod_from_dict(pod("db", namespace="shop", uid=G_UID, requests={"cpu": "1", "memory": "1Gi"},
                                   limits={"cpu": "1", "memory": "1Gi"}))
    filler = pod_from_dict(pod("filler", namespace="shop", uid=BE_UID, volumes=[{"name": "scratch", "emptyDir": {}}]))
    return [guaranteed, filler]


class FixedPods:
    def __init__(self, pods: Sequence[Pod]) -> None:
        self.pods = list(pods)

    def active_pods(self) -> list[Pod]:
        return self.pods


class Node:
    """The pods' folders and a stats source reading them, the fixture cgroup tree and a fake /proc around them."""

    def __init__(self, tmp_path: Path) -> None:
        self.kubelet_root = tmp_path / "kubelet"
        self.pod_logs_dir = tmp_path / "pods-logs"
        self.image_fs = tmp_path / "containerd"
        proc = tmp_path / "proc"
        (proc / "sys" / "kernel").mkdir(parents=True)
        (proc / "meminfo").write_text("MemTotal:       16777216 kB\nMemFree:         1048576 kB\n")
        (proc / "sys" / "kernel" / "pid_max").write_text("32768\n")
        (proc / "sys" / "kernel" / "threads-max").write_text("95000\n")
        (proc / "loadavg").write_text("0.52 0.58 0.59 3/345 12345\n")
        for listed in listed_pods():
            logs = self.pod_logs_dir / f"{listed.namespace}_{listed.name}_{listed.uid}" / "app"
            logs.mkdir(parents=True)
            (logs / "0.log").write_bytes(b"line\n" * 100)
        scratch = self.kubelet_root / "pods" / BE_UID / "volumes" / EMPTY_DIR_PLUGIN_DIR / "scratch"
        scratch.mkdir(parents=True)
        (scratch / "fill.bin").write_bytes(os.urandom(4 * MiB))  # what the filler wrote
        self.source = NodeStatsSource(
            node_name="node-1", cgroups=CgroupReader(CgroupLayout(version=1, root=FIXTURES / "v1-cgroupfs",
                                                                  driver="cgroupfs")),
            disk_usage=PodDiskStore(), kubelet_root=str(self.kubelet_root), image_fs_path=str(self.image_fs),
            container_fs_path=str(self.image_fs), proc_root=str(proc))

    def manager(self, evictor: RecordingEvictor, **disk_figures_wait: float) -> EvictionManager:
        """A manager as `evictd run` builds it over the node's own stats, waiting for disk figures through them."""
        return EvictionManager(
            EngineConfig.from_settings(eviction_settings({"evictionHard": ALWAYS_MET})),
            stats=self.source, layout=PathLayout(str(self.kubelet_root), str(self.image_fs), str(self.image_fs)),
            pods=FixedPods(listed_pods()), reclaimer=ReportOnlyReclaimer(), evictor=evictor, clock=ManualClock(0.0),
            disk_figures=self.source, **disk_figures_wait)


@pytest.fixture
def node(tmp_path: Path) -> Node:
    return Node(tmp_path)


@pytest.fixture
def walker(node: Node) -> Iterator[DiskWalkerProcess]:
    """The real disk walker child over the node's pod folders, feeding the node's store; stopped at the end."""
    process = DiskWalkerProcess(node.source.disk_usage,
                                WalkerSettings(str(node.kubelet_root), str(node.pod_logs_dir), period_s=0.1),
                                log=LogCapture())
    process.start()
    yield process
    process.stop()


def test_the_first_cycle_waits_for_the_walkers_figures_and_evicts_the_filler_not_the_guaranteed_pod(
        node: Node, walker: DiskWalkerProcess) -> None:
    store = node.source.disk_usage
    keys = [PodKey(p.uid, p.namespace, p.name) for p in listed_pods()]
    assert [store.latest(key) for key in keys] == [None, None], "nothing measured before the first cycle"
    evictor = RecordingEvictor()
    manager = node.manager(evictor, disk_figures_wait_s=GENEROUS_WAIT_S)
    report = manager.synchronize()
    assert report.errors == ()
    assert [p.key for p in report.decided.awaited_disk_figures] == ["shop/db", "shop/filler"]
    assert report.decided.unmeasured == (), "ranked on the walker's figures of both pods"
    assert all(store.latest(key) is not None for key in keys)
    assert [p.key for p in report.decided.ranked_pods] == ["shop/filler", "shop/db"]
    [eviction] = evictor.evictions
    assert eviction.pod.key == "shop/filler"
    assert eviction.signal == "nodefs.available"


    # The wait after an eviction looks for a hard threshold met: that reading keeps the pods' figures (it used to
    # measure no pod, and the store forgot every pod's figures), so the next cycle ranks on them without a wait.
    assert manager.hard_threshold_met()
    assert all(store.latest(key) is not None for key in keys)
    again = manager.synchronize()
    assert again.decided.awaited_disk_figures == () and again.decided.unmeasured == ()
    assert [e.pod.key for e in evictor.evictions] == ["shop/filler", "shop/filler"]


def test_a_walker_that_never_answers_delays_the_eviction_by_the_bound_once_and_it_is_logged(node: Node) -> None:
    # No walker runs: the pods are never measured.
    evictor = RecordingEvictor()
    manager = node.manager(evictor, disk_figures_wait_s=SHORT_WAIT_S)
    started = time.monotonic()
    first = manager.synchronize()
    waited_s = time.monotonic() - started
    assert first.errors == ()
    assert waited_s >= SHORT_WAIT_S, "the cycle waited for the figures, up to the bound"
    assert [p.key for p in first.decided.awaited_disk_figures] == ["shop/db", "shop/filler"]
    assert [p.key for p in first.decided.unmeasured] == ["shop/db", "shop/filler"]
    # After the bound evictd acts on what it has: both count as using no disk, the tie goes to listing order, as the
    # kubelet ranks volumes it has not measured.
    assert [e.pod.key for e in evictor.evictions] == ["shop/db"]
    log = LogCapture()
    CycleLogger(log, dry_run=False).log_cycle(1, first)
    assert ("ranked for disk with pods the disk walker has not measured yet (counted as using none)",
            {"cycle": 1, "pods": ["shop/db", "shop/filler"]}) in log.at("warning")
    assert ("waited for pods' disk figures before ranking for disk",
            {"cycle": 1, "pods": ["shop/db", "shop/filler"]}) in log.at("info")

    second = manager.synchronize()  # each pod is waited for once
    assert second.decided.awaited_disk_figures == ()
    assert [p.key for p in second.decided.unmeasured] == ["shop/db", "shop/filler"]
    assert [e.pod.key for e in evictor.evictions] == ["shop/db", "shop/db"]
