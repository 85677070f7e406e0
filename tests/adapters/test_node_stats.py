"""The node's own Summary (NodeStatsSource) and the pods found on the node (DiscoveredPods).

Tier 2: the four cgroup fixture trees (tests/fixtures/cgroup/README.md) with a fake /proc folder, real pod
folders in the test's tmp dir or on real small filesystems, and the Summary fed to the engine's own
`signal_observations` (and once to a whole EvictionManager cycle), so the assertions are on what the engine
would see. Tier 3 (last test): a real cgroup v1 pod with a real process allocating memory, an emptyDir on a
loop-mounted ext4 and a real log folder, read back through NodeStatsSource exactly as `evictd run` builds it.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from clocks import ManualClock
from evictd.adapters.cgroups import CgroupLayout, CgroupReader, MemoryReading, PodCgroup
from evictd.adapters.filesystems import FsReading
from evictd.adapters.node_pods import UNKNOWN_NAMESPACE, DiscoveredPods, log_folder_names
from evictd.adapters.node_stats import NodeStatsSource, existing_ancestor, fs_stats, memory_stats
from evictd.adapters.pod_disk_usage import PodDiskStore, PodDiskWalker, PodKey
from evictd.adapters.protection_facts import read_protection_facts
from evictd.commands.simulate import RecordingEvictor
from evictd.core.engine import EngineConfig
from evictd.core.errors import SampleError
from evictd.core.kubelet_config import eviction_settings
from evictd.core.pods import Pod, QOSClass
from evictd.core.quantity import Quantity, QuantityFormat
from evictd.core.signals import EVICTD_SIGNALS, Signal
from evictd.core.summary import (
    SYSTEM_CONTAINER_DAEMONS,
    SYSTEM_CONTAINER_PODS,
    ContainerStats,
    FsStats,
    MemoryStats,
    Observation,
    PodReference,
    PodStats,
    ReclaimCounters,
    Summary,
    signal_observations,
)
from evictd.core.unanswered import OVERDUE_S
from evictd.cri import NO_RUNTIME
from evictd.cycle.manager import EvictionManager, PodSource
from evictd.run.compose_node import PathLayout, ReportOnlyReclaimer
from evictd.run.plausible_stats import PlausibleStats
from real_pod_node import CGROUP_MOUNT, MiB, RealPodNode, du_bytes, du_inodes

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "cgroup"
GiB = 1 << 30
KiB = 1 << 10
AT = datetime(2026, 11, 21, 10, 0, 0, tzinfo=UTC)

# The fake /proc: 16 GiB of memory, pid_max below threads-max, 345 tasks.
MEM_TOTAL_BYTES = 16 * GiB
PID_MAX = 32768
THREADS_MAX = 95000
TASKS = 345

G_UID = "6f1c2a34-5b7d-4e8f-9a01-23456789abcd"
B_UID = "0d9e8f7a-6b5c-4d3e-8f21-0a1b2c3d4e5f"
BE_UID = "a1b2c3d4-e5f6-4a7b-8c9d-0e1f2a3b4c5d"

# The fixture trees' numbers (README table), in MiB: pods cgroup usage 1600, inactive 264, limit 22528.
PODS_USAGE = 1600 * MiB
PODS_WORKING_SET = (1600 - 264) * MiB
PODS_LIMIT = 22528 * MiB
UID_TO_WORKING_SET = {G_UID: 200 * MiB, B_UID: 384 * MiB, BE_UID: 10 * MiB}
UID_TO_PROCESSES = {G_UID: 3, B_UID: 7, BE_UID: 1}
UID_TO_QOS = {G_UID: QOSClass.GUARANTEED, B_UID: QOSClass.BURSTABLE, BE_UID: QOSClass.BEST_EFFORT}
# What the node gives without a stall threshold configured (no PSI read): the kubelet's signals.
ALL_SIGNALS = frozenset(Signal) - EVICTD_SIGNALS


@dataclass(frozen=True)
class Tree:
    """One fixture tree and what its root cgroup reads as."""

    name: str
    version: int
    driver: str
    pods: str  # the pods cgroup
    root_usage: int
    root_working_set: int

    @property
    def root(self) -> Path:
        return FIXTURES / self.name

    def memory_dir(self, root: Path) -> Path:
        return root / "memory" if self.version == 1 else root

    def hierarchies(self, root: Path) -> list[Path]:
        return [root / "memory", root / "pids"] if self.version == 1 else [root]


# v1 root: memory.usage_in_bytes 6144 MiB, total_inactive_file 1024 MiB. v2 root: anon 3072 + file 2048 MiB
# of the root memory.stat (runc's rootStatsFromMeminfo), inactive_file 1024 MiB.
TREES = [
    Tree("v1-cgroupfs", 1, "cgroupfs", "kubepods", 6144 * MiB, 5120 * MiB),
    Tree("v1-systemd", 1, "systemd", "kubepods.slice", 6144 * MiB, 5120 * MiB),
    Tree("v2-cgroupfs", 2, "cgroupfs", "kubepods", 5120 * MiB, 4096 * MiB),
    Tree("v2-systemd", 2, "systemd", "kubepods.slice", 5120 * MiB, 4096 * MiB),
]
V1 = TREES[0]
V2 = TREES[2]


def tree_ids(tree: Tree) -> str:
    return tree.name


def binary(value: int) -> Quantity:
    return Quantity.from_int(value, QuantityFormat.BINARY_SI)


def decimal(value: int) -> Quantity:
    return Quantity.from_int(value, QuantityFormat.DECIMAL_SI)


# A piece of /proc/vmstat as kernel 6.18 writes it: the stall gate sums pgscan_kswapd, pgscan_direct and
# pgscan_khugepaged (700 + 40 + 3), never the proactive or per-type scans (which count cgroup reclaim too).
VMSTAT = ("nr_free_pages 123\npgscan_kswapd 700\npgscan_direct 40\npgscan_khugepaged 3\npgscan_proactive 9000\n"
          "pgscan_direct_throttle 0\npgscan_anon 5\npgscan_file 122916920\noom_kill 0\n")
GLOBAL_SCAN_PAGES = 743


def fake_proc(folder: Path) -> Path:
    """Write the procfs files the source reads (as the kernel formats them) and return the folder."""
    (folder / "sys" / "kernel").mkdir(parents=True)
    (folder / "meminfo").write_text(
        f"MemTotal:       {MEM_TOTAL_BYTES // KiB} kB\nMemFree:         1048576 kB\nMemAvailable:   9437184 kB\n"
    )
    (folder / "sys" / "kernel" / "pid_max").write_text(f"{PID_MAX}\n")
    (folder / "sys" / "kernel" / "threads-max").write_text(f"{THREADS_MAX}\n")
    (folder / "loadavg").write_text(f"0.52 0.58 0.59 3/{TASKS} 12345\n")
    (folder / "vmstat").write_text(VMSTAT)
    return folder


class FixedPods:
    """The manager's pod list, fixed for a test."""

    def __init__(self, pods: Sequence[Pod]) -> None:
        self.pods = list(pods)

    def active_pods(self) -> list[Pod]:
        return self.pods


class ListingStats(NodeStatsSource):
    """The node's stats source as a cycle drives it: the pods are listed (`pods`, the manager's pod source), then
    measured; `summary(pods)` measures the pods given instead, as the manager hands them over."""

    def __init__(self, pods: PodSource, **settings: Any) -> None:
        super().__init__(**settings)
        self.pods = pods

    def summary(self, pods: Sequence[Pod] | None = None, *, reread: bool = False, runtime_wait_s: float | None = None) -> Summary:
        return super().summary(self.pods.active_pods() if pods is None else pods, reread=reread, runtime_wait_s=runtime_wait_s)


@dataclass
class Node:
    """Everything a NodeStatsSource reads, laid out in a test's tmp dir around a cgroup tree."""

    tree: Tree
    cgroup_root: Path
    proc: Path
    kubelet_root: Path
    pod_logs_dir: Path
    image_fs: Path

    @property
    def reader(self) -> CgroupReader:
        layout = CgroupLayout(version=self.tree.version, root=self.cgroup_root, driver=self.tree.driver)
        return CgroupReader(layout)

    def discovered(self) -> DiscoveredPods:
        return DiscoveredPods(self.reader, str(self.pod_logs_dir))

    def source(self, pods: PodSource | None = None,
               pod_cgroups: Callable[[], Mapping[str, PodCgroup]] | None = None,
               runtime: Any = NO_RUNTIME, memory_pressure: bool = False) -> ListingStats:
        return ListingStats(
            pods if pods is not None else self.discovered(),
            memory_pressure=memory_pressure,
            node_name="node-1",
            cgroups=self.reader,
            pod_cgroups=pod_cgroups,
            disk_usage=PodDiskStore(),
            kubelet_root=str(self.kubelet_root),
            image_fs_path=str(self.image_fs),
            container_fs_path=str(self.image_fs),
            proc_root=str(self.proc),
            runtime=runtime,
            clock=ManualClock(0.0, wall_at_zero=AT),
        )

    def walker(self) -> PodDiskWalker:
        """Return a disk walker over this node's pod folders, run in this process by `walked_summary`."""
        return PodDiskWalker(kubelet_root=str(self.kubelet_root), pod_logs_dir=str(self.pod_logs_dir),
                             clock=ManualClock(0.0, wall_at_zero=AT))

    def log_folder(self, namespace: str, name: str, uid: str, container: str = "app") -> Path:
        folder = self.pod_logs_dir / f"{namespace}_{name}_{uid}" / container
        folder.mkdir(parents=True)
        return folder

    def empty_dir(self, uid: str, volume: str) -> Path:
        folder = self.kubelet_root / "pods" / uid / "volumes" / "kubernetes.io~empty-dir" / volume
        folder.mkdir(parents=True)
        return folder


def walked_summary(source: ListingStats, walker: PodDiskWalker) -> Summary:
    """Return the source's Summary after a disk walker pass over the pods it measures (the daemon's walker
    process does the same pass on its own schedule): one summary names the pods, the walker measures them,
    the next summary carries their figures."""
    source.summary()
    for figures in walker.run_pass(source.disk_usage.wanted()[1]):
        source.disk_usage.record(figures)
    return source.summary()


def make_node(tmp_path: Path, tree: Tree, *, copy: bool = False) -> Node:
    """Return a Node on the fixture tree (a writable copy of it when `copy`, for tests that damage files)."""
    cgroup_root = tree.root
    if copy:
        cgroup_root = tmp_path / "cgroup"
        shutil.copytree(tree.root, cgroup_root)
    kubelet_root = tmp_path / "kubelet"
    kubelet_root.mkdir()
    return Node(
        tree=tree,
        cgroup_root=cgroup_root,
        proc=fake_proc(tmp_path / "proc"),
        kubelet_root=kubelet_root,
        pod_logs_dir=tmp_path / "pods-logs",
        image_fs=tmp_path / "containerd",
    )


@pytest.fixture
def v1_node(tmp_path: Path) -> Node:
    return make_node(tmp_path, V1, copy=True)


# --------------------------------------------------------------------------------------------------
# Tier 1: the small pure helpers


@pytest.mark.parametrize(
    ("reading", "capacity", "available"),
    [
        pytest.param(MemoryReading(600, 100, 500, None), 2000, 1500, id="capacity-minus-working-set"),
        pytest.param(MemoryReading(600, 100, 500, 400), None, None, id="no-capacity-no-available"),
        pytest.param(MemoryReading(3000, 0, 3000, None), 2000, 0, id="floored-at-zero"),
        pytest.param(MemoryReading(2000, 0, 2000, None), 2000, 0, id="exactly-full"),
    ],
)
def test_memory_stats(reading: MemoryReading, capacity: int | None, available: int | None) -> None:
    assert memory_stats(reading, capacity, AT) == MemoryStats(
        time=AT, available_bytes=available, usage_bytes=reading.usage_bytes, working_set_bytes=reading.working_set_bytes
    )


def test_fs_stats_copies_every_statvfs_figure() -> None:
    reading = FsReading(capacity_bytes=1000, available_bytes=300, used_bytes=650, inodes=50,
                        inodes_free=20, inodes_used=30)
    assert fs_stats(reading, AT) == FsStats(time=AT, available_bytes=300, capacity_bytes=1000, used_bytes=650,
                                            inodes_free=20, inodes=50, inodes_used=30)


def test_existing_ancestor(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "file").write_text("x")
    assert existing_ancestor(str(tmp_path / "a")) == str(tmp_path / "a")
    assert existing_ancestor(str(tmp_path / "a" / "b" / "c")) == str(tmp_path / "a")
    assert existing_ancestor(str(tmp_path / "a" / ".." / "gone")) == str(tmp_path)
    assert existing_ancestor(str(tmp_path / "file")) == str(tmp_path / "file")
    assert existing_ancestor("/") == "/"
    monkeypatch.chdir(tmp_path)
    assert existing_ancestor("a/not/yet") == str(tmp_path / "a"), "relative paths are made absolute"


@pytest.mark.parametrize(
    ("entries", "expected"),
    [
        pytest.param(["shop_cart-7d9f_u1"], {"u1": ("shop", "cart-7d9f")}, id="one-pod"),
        pytest.param(["kube-system_coredns-abc_u2", "default_web_u3"],
                     {"u2": ("kube-system", "coredns-abc"), "u3": ("default", "web")}, id="two-pods"),
        pytest.param(["no-underscores", "a_b", "a_b_c_d", "_name_uid", "ns__uid", "ns_name_"], {},
                     id="malformed-names-skipped"),
    ],
)
def test_log_folder_names(tmp_path: Path, entries: list[str], expected: dict[str, tuple[str, str]]) -> None:
    for entry in entries:
        (tmp_path / entry).mkdir()
    assert log_folder_names(str(tmp_path)) == expected


def test_log_folder_names_missing_folder_is_empty(tmp_path: Path) -> None:
    assert log_folder_names(str(tmp_path / "nothing-here")) == {}


def test_log_folder_names_unreadable_folder_is_a_sample_error(tmp_path: Path) -> None:
    not_a_folder = tmp_path / "logs"
    not_a_folder.write_text("a file where the log folder should be")
    with pytest.raises(SampleError) as info:
        log_folder_names(str(not_a_folder))
    assert info.value.source == str(not_a_folder)


# --------------------------------------------------------------------------------------------------
# Tier 2: DiscoveredPods on the fixture trees


@pytest.mark.parametrize("tree", TREES, ids=tree_ids)
def test_discovered_pods_are_named_from_their_log_folders(tmp_path: Path, tree: Tree) -> None:
    node = make_node(tmp_path, tree)
    node.log_folder("shop", "cart-7d9f", B_UID)
    node.log_folder("kube-system", "etcd-node-1", G_UID)
    node.log_folder("shop", "gone-pod", "11111111-2222-4333-8444-555555555555")  # no cgroup: not running
    pods = node.discovered().active_pods()
    assert [(p.namespace, p.name, p.uid, p.status_qos_class, p.status_phase) for p in pods] == [
        ("shop", "cart-7d9f", B_UID, QOSClass.BURSTABLE, "Running"),
        ("kube-system", "etcd-node-1", G_UID, QOSClass.GUARANTEED, "Running"),
        (UNKNOWN_NAMESPACE, BE_UID, BE_UID, QOSClass.BEST_EFFORT, "Running"),
    ]
    assert all(p.containers == () and p.priority is None for p in pods), "only the API knows specs"


@pytest.mark.parametrize("tree", TREES, ids=tree_ids)
def test_no_pods_cgroup_means_no_discovered_pods(tmp_path: Path, tree: Tree) -> None:
    node = make_node(tmp_path, tree, copy=True)
    for hierarchy in tree.hierarchies(node.cgroup_root):
        shutil.rmtree(hierarchy / tree.pods)
    assert node.discovered().active_pods() == []


def test_stats_of_discovered_pods_describe_the_listing_the_manager_got(v1_node: Node) -> None:
    discovered = v1_node.discovered()
    source = v1_node.source(pod_cgroups=discovered.listed_cgroups)
    listed = discovered.active_pods()  # the manager's call at the start of a cycle
    v1_node.log_folder("shop", "cart-7d9f", B_UID)  # appears between the manager's call and the stats
    summary = source.summary(listed)  # the pods the manager hands over
    assert [s.pod_ref for s in summary.pods] == [
        PodReference(name=p.name, namespace=p.namespace, uid=p.uid) for p in listed
    ], "the stats must cover exactly the pods of this cycle's listing, not a second listing"
    assert PodReference(name=B_UID, namespace=UNKNOWN_NAMESPACE, uid=B_UID) in [s.pod_ref for s in summary.pods]
    assert all(s.memory is not None for s in summary.pods), "cgroups of the listing are read"
    listed = discovered.active_pods()  # next cycle: listed again
    assert PodReference(name="cart-7d9f", namespace="shop", uid=B_UID) in [s.pod_ref for s in
                                                                           source.summary(listed).pods]


def test_an_unchanged_discovered_pod_is_the_same_object_next_cycle(v1_node: Node) -> None:
    discovered = v1_node.discovered()
    first = {p.uid: p for p in discovered.active_pods()}
    v1_node.log_folder("shop", "cart-7d9f", B_UID)  # B is named now: a different pod description
    second = {p.uid: p for p in discovered.active_pods()}
    assert second[G_UID] is first[G_UID] and second[BE_UID] is first[BE_UID]
    assert second[B_UID] is not first[B_UID]
    assert (second[B_UID].namespace, second[B_UID].name) == ("shop", "cart-7d9f")


def test_stats_source_lists_once_when_nobody_listed_yet(v1_node: Node) -> None:
    discovered = v1_node.discovered()
    pods = v1_node.discovered().active_pods()  # listed by another source: `discovered` has not listed yet
    summary = v1_node.source(pod_cgroups=discovered.listed_cgroups).summary(pods)
    assert {s.pod_ref.uid for s in summary.pods} == set(UID_TO_QOS)


def test_discovered_pods_survive_an_unreadable_log_folder(v1_node: Node) -> None:
    v1_node.pod_logs_dir.write_text("not a folder")
    pods = v1_node.discovered().active_pods()
    assert {(p.namespace, p.name) for p in pods} == {(UNKNOWN_NAMESPACE, uid) for uid in UID_TO_QOS}


# --------------------------------------------------------------------------------------------------
# Tier 2: node memory and the pods system container


@pytest.mark.parametrize("tree", TREES, ids=tree_ids)
def test_node_memory_available_is_memtotal_minus_root_working_set(tmp_path: Path, tree: Tree) -> None:
    source = make_node(tmp_path, tree).source()
    summary = source.summary()
    assert source.problems == ()
    assert summary.node.node_name == "node-1"
    assert summary.node.memory == MemoryStats(
        time=AT,
        available_bytes=MEM_TOTAL_BYTES - tree.root_working_set,
        usage_bytes=tree.root_usage,
        working_set_bytes=tree.root_working_set,
    )
    assert signal_observations(summary)[Signal.MEMORY_AVAILABLE] == Observation(
        available=binary(MEM_TOTAL_BYTES - tree.root_working_set), capacity=binary(MEM_TOTAL_BYTES), time=AT
    )


@pytest.mark.parametrize("tree", TREES, ids=tree_ids)
def test_pods_system_container_is_its_limit_minus_its_working_set(tmp_path: Path, tree: Tree) -> None:
    summary = make_node(tmp_path, tree).source().summary()
    pods = summary.node.system_containers[SYSTEM_CONTAINER_PODS]
    assert pods.name == SYSTEM_CONTAINER_PODS
    assert pods.memory == MemoryStats(
        time=AT, available_bytes=PODS_LIMIT - PODS_WORKING_SET, usage_bytes=PODS_USAGE,
        working_set_bytes=PODS_WORKING_SET,
    )
    observation = signal_observations(summary)[Signal.ALLOCATABLE_MEMORY_AVAILABLE]
    assert observation == Observation(available=binary(21192 * MiB), capacity=binary(PODS_LIMIT), time=AT)
    assert str(observation.available) == "21192Mi" and str(observation.capacity) == "22Gi"


@pytest.mark.parametrize("tree", TREES, ids=tree_ids)
def test_a_reading_of_the_memory_alone_has_the_node_and_pods_memory_of_a_full_one_and_nothing_else(
        tmp_path: Path, tree: Tree) -> None:
    """`memory_summary`: what a crossing's confirming readings read (issue 37): the node's and the pods cgroup's
    memory as `summary` reads them, no pods, no disks, no pids; through PlausibleStats too, and a source without it
    (the kubelet's Summary API) offers none."""
    source = make_node(tmp_path, tree).source()
    full, alone = source.summary(), source.memory_summary()
    assert alone.node.memory == full.node.memory
    assert alone.node.system_containers == full.node.system_containers
    assert alone.pods == () and alone.node.fs is None and alone.node.rlimit is None
    assert {s: o for s, o in signal_observations(alone).items()} == {
        s: o for s, o in signal_observations(full).items()
        if s in (Signal.MEMORY_AVAILABLE, Signal.ALLOCATABLE_MEMORY_AVAILABLE)}
    plausible = PlausibleStats(source, lambda: 64 * GiB)  # the fixtures' pods limit (22 GiB) is over their MemTotal
    read = plausible.memory_reading()
    assert read is not None and read() == alone
    kubelet_like = SimpleNamespace(summary=source.summary, memory_reading=lambda: None)  # one piece: no such reading
    assert PlausibleStats(kubelet_like, lambda: None).memory_reading() is None  # type: ignore[arg-type]


@pytest.mark.parametrize("tree", TREES, ids=tree_ids)
def test_unlimited_pods_cgroup_has_no_available_figure(tmp_path: Path, tree: Tree) -> None:
    node = make_node(tmp_path, tree, copy=True)
    pods_dir = tree.memory_dir(node.cgroup_root) / tree.pods
    if tree.version == 1:
        (pods_dir / "memory.limit_in_bytes").write_text("9223372036854771712\n")
    else:
        (pods_dir / "memory.max").write_text("max\n")
    source = node.source()
    summary = source.summary()
    assert source.problems == ()
    memory = summary.node.system_containers[SYSTEM_CONTAINER_PODS].memory
    assert memory == MemoryStats(time=AT, available_bytes=None, usage_bytes=PODS_USAGE,
                                 working_set_bytes=PODS_WORKING_SET)
    observations = signal_observations(summary)
    assert Signal.ALLOCATABLE_MEMORY_AVAILABLE not in observations
    assert Signal.MEMORY_AVAILABLE in observations
    assert len(summary.pods) == 3, "pods are still read without a pods limit"


@pytest.mark.parametrize("tree", TREES, ids=tree_ids)
def test_without_a_pods_cgroup_pods_and_allocatable_are_absent_without_problems(tmp_path: Path, tree: Tree) -> None:
    node = make_node(tmp_path, tree, copy=True)
    for hierarchy in tree.hierarchies(node.cgroup_root):
        shutil.rmtree(hierarchy / tree.pods)
    # Even a pod the API lists gets no stats: no kubelet manages pods on this machine.
    source = node.source(FixedPods([Pod(name="web", namespace="default", uid=B_UID)]))
    summary = source.summary()
    assert source.problems == ()
    assert summary.pods == ()
    assert SYSTEM_CONTAINER_PODS not in summary.node.system_containers
    assert set(signal_observations(summary)) == ALL_SIGNALS - {Signal.ALLOCATABLE_MEMORY_AVAILABLE}


# --------------------------------------------------------------------------------------------------
# Tier 2: per-pod stats


@pytest.mark.parametrize("tree", TREES, ids=tree_ids)
def test_per_pod_working_set_and_process_count(tmp_path: Path, tree: Tree) -> None:
    node = make_node(tmp_path, tree)
    node.log_folder("shop", "cart-7d9f", B_UID)
    node.log_folder("kube-system", "etcd-node-1", G_UID)
    source = node.source()
    summary = source.summary()
    assert source.problems == ()
    assert [p.pod_ref for p in summary.pods] == [
        PodReference(name="cart-7d9f", namespace="shop", uid=B_UID),
        PodReference(name="etcd-node-1", namespace="kube-system", uid=G_UID),
        PodReference(name=BE_UID, namespace=UNKNOWN_NAMESPACE, uid=BE_UID),
    ]
    for stats in summary.pods:
        uid = stats.pod_ref.uid
        assert stats.memory is not None
        assert stats.memory.working_set_bytes == UID_TO_WORKING_SET[uid]
        assert stats.memory.available_bytes is None, "a pod has no available figure of its own"
        assert stats.memory.time == AT
        assert stats.process_count == UID_TO_PROCESSES[uid]


def test_a_listed_pod_without_a_cgroup_has_disk_stats_but_no_memory(v1_node: Node) -> None:
    uid = "99999999-8888-4777-8666-555555555555"
    v1_node.log_folder("shop", "pending", uid)
    source = v1_node.source(FixedPods([Pod(name="pending", namespace="shop", uid=uid)]))
    (stats,) = walked_summary(source, v1_node.walker()).pods
    assert source.problems == ()
    assert stats.memory is None and stats.process_count is None
    assert [c.name for c in stats.containers] == ["app"]
    assert stats.ephemeral_storage is not None and stats.ephemeral_storage.used_bytes == du_bytes(
        v1_node.pod_logs_dir / f"shop_pending_{uid}" / "app")


def test_empty_dir_volumes_and_container_logs_make_ephemeral_storage(
    tmp_path: Path, ext4_mount: Path, mount_tmpfs_at: Callable[[Path], Path]
) -> None:
    node = make_node(tmp_path, V1)
    # The pod folders on a real ext4, so block counts are a real filesystem's.
    node.kubelet_root = ext4_mount / "kubelet"
    node.pod_logs_dir = ext4_mount / "pods-logs"
    cache = node.empty_dir(B_UID, "cache")
    (cache / "a.bin").write_bytes(os.urandom(300 * KiB))
    (cache / "nested" / "deeper").mkdir(parents=True)
    (cache / "nested" / "deeper" / "b.bin").write_bytes(os.urandom(1 * MiB))
    os.link(cache / "a.bin", cache / "nested" / "a-again.bin")  # a hard link counts once
    scratch = node.empty_dir(B_UID, "scratch")
    with (scratch / "sparse.img").open("wb") as sparse:
        sparse.truncate(8 * MiB)  # allocated blocks count, not apparent size
    (scratch / "small.txt").write_text("x")
    memory_backed = mount_tmpfs_at(node.empty_dir(B_UID, "shm"))
    (memory_backed / "in-ram.bin").write_bytes(os.urandom(512 * KiB))  # medium: Memory, not node disk
    app_logs = node.log_folder("shop", "cart-7d9f", B_UID, "app")
    (app_logs / "0.log").write_bytes(b"line\n" * 50_000)
    (app_logs / "1.log.20261121-100000.gz").write_bytes(os.urandom(64 * KiB))
    sidecar_logs = node.log_folder("shop", "cart-7d9f", B_UID, "istio-proxy")
    (sidecar_logs / "0.log").write_bytes(b"proxy\n" * 1000)
    (app_logs.parent / "stray-file").write_text("not a container folder")

    source = node.source()
    summary = walked_summary(source, node.walker())
    assert source.problems == ()
    stats = next(p for p in summary.pods if p.pod_ref.uid == B_UID)
    volumes = {v.name: (v.used_bytes, v.inodes_used, v.time) for v in stats.volume_stats}
    assert volumes == {
        "cache": (du_bytes(cache), du_inodes(cache), AT),
        "scratch": (du_bytes(scratch), du_inodes(scratch), AT),
    }
    assert volumes["scratch"][0] < 1 * MiB, "a sparse file counts what it occupies"
    logs = {c.name: c.logs for c in stats.containers}
    assert logs == {
        "app": FsStats(time=AT, used_bytes=du_bytes(app_logs), inodes_used=du_inodes(app_logs)),
        "istio-proxy": FsStats(time=AT, used_bytes=du_bytes(sidecar_logs), inodes_used=du_inodes(sidecar_logs)),
    }
    assert all(c.memory is None and c.rootfs is None for c in stats.containers)
    assert stats.ephemeral_storage == FsStats(
        time=AT,
        used_bytes=du_bytes(cache) + du_bytes(scratch) + du_bytes(app_logs) + du_bytes(sidecar_logs),
        inodes_used=du_inodes(cache) + du_inodes(scratch) + du_inodes(app_logs) + du_inodes(sidecar_logs),
    )
    others = [p for p in summary.pods if p.pod_ref.uid != B_UID]
    assert [p.ephemeral_storage for p in others] == [FsStats(time=AT, used_bytes=0, inodes_used=0)] * 2
    assert all(p.volume_stats == () and p.containers == () for p in others)


def test_disk_usage_follows_the_pod_folders_between_cycles(v1_node: Node) -> None:
    source = v1_node.source()
    walker = v1_node.walker()
    cache = v1_node.empty_dir(B_UID, "cache")
    first = next(p for p in walked_summary(source, walker).pods if p.pod_ref.uid == B_UID)
    (cache / "grown.bin").write_bytes(os.urandom(2 * MiB))
    second = next(p for p in walked_summary(source, walker).pods if p.pod_ref.uid == B_UID)
    assert first.ephemeral_storage is not None and second.ephemeral_storage is not None
    assert second.ephemeral_storage.used_bytes == du_bytes(cache)
    assert second.ephemeral_storage.used_bytes - (first.ephemeral_storage.used_bytes or 0) >= 2 * MiB


# --------------------------------------------------------------------------------------------------
# Tier 2: filesystems, PIDs, and the whole observation set


def test_signal_observations_of_the_whole_node(tmp_path: Path, tmpfs_mount: Path, ext4_mount: Path) -> None:
    node = make_node(tmp_path, V1)
    node.kubelet_root = tmpfs_mount / "var-lib-kubelet"  # does not exist yet: its filesystem is measured
    node.image_fs = ext4_mount / "containerd"
    source = node.source()
    summary = source.summary()
    assert source.problems == ()
    nodefs, imagefs = os.statvfs(tmpfs_mount), os.statvfs(ext4_mount)

    def fs_observations(vfs: os.statvfs_result, available: Signal, inodes: Signal) -> dict[Signal, Observation]:
        return {
            available: Observation(binary(vfs.f_bavail * vfs.f_frsize), binary(vfs.f_blocks * vfs.f_frsize), AT),
            inodes: Observation(decimal(vfs.f_ffree), decimal(vfs.f_files), AT),
        }

    assert signal_observations(summary) == {
        Signal.MEMORY_AVAILABLE: Observation(binary(MEM_TOTAL_BYTES - 5120 * MiB), binary(MEM_TOTAL_BYTES), AT),
        Signal.ALLOCATABLE_MEMORY_AVAILABLE: Observation(binary(21192 * MiB), binary(PODS_LIMIT), AT),
        **fs_observations(nodefs, Signal.NODEFS_AVAILABLE, Signal.NODEFS_INODES_FREE),
        **fs_observations(imagefs, Signal.IMAGEFS_AVAILABLE, Signal.IMAGEFS_INODES_FREE),
        **fs_observations(imagefs, Signal.CONTAINERFS_AVAILABLE, Signal.CONTAINERFS_INODES_FREE),
        Signal.PID_AVAILABLE: Observation(decimal(PID_MAX - TASKS), decimal(PID_MAX), AT),
    }
    assert signal_observations(summary)[Signal.NODEFS_AVAILABLE].capacity == binary(64 * MiB)
    assert signal_observations(summary)[Signal.NODEFS_INODES_FREE].capacity == decimal(2000)
    assert summary.node.fs is not None and summary.node.fs.used_bytes == (nodefs.f_blocks - nodefs.f_bfree) * nodefs.f_frsize


def test_pid_limit_is_the_smaller_of_pid_max_and_threads_max(v1_node: Node) -> None:
    (v1_node.proc / "sys" / "kernel" / "threads-max").write_text("20000\n")
    observation = signal_observations(v1_node.source().summary())[Signal.PID_AVAILABLE]
    assert observation == Observation(decimal(20000 - TASKS), decimal(20000), AT)


# --------------------------------------------------------------------------------------------------
# Tier 2: unreadable sources: the signal is absent, the problem names the path, the rest is there


def _write(path: str, content: str) -> Callable[[Node], Path]:
    def damage(node: Node) -> Path:
        target = node.cgroup_root / path if not path.startswith("proc/") else node.proc / path[len("proc/"):]
        target.write_text(content)
        return target

    return damage


def _remove(path: str) -> Callable[[Node], Path]:
    def damage(node: Node) -> Path:
        target = node.proc / path[len("proc/"):]
        target.unlink()
        return target

    return damage


@pytest.mark.parametrize(
    ("tree", "damage", "absent", "reason"),
    [
        pytest.param(V1, _write("memory/memory.usage_in_bytes", "garbage\n"), Signal.MEMORY_AVAILABLE,
                     "not an unsigned integer", id="root-usage-garbage"),
        pytest.param(V1, _write("memory/memory.stat", "cache 0\nrss 0\n"), Signal.MEMORY_AVAILABLE,
                     "no total_inactive_file line", id="root-stat-without-inactive-file"),
        pytest.param(V2, _write("memory.stat", "kernel 1\n"), Signal.MEMORY_AVAILABLE, "no anon line",
                     id="v2-root-stat-without-anon"),
        pytest.param(V1, _remove("proc/meminfo"), Signal.MEMORY_AVAILABLE, "No such file", id="meminfo-missing"),
        pytest.param(V1, _write("proc/meminfo", "MemFree: 1 kB\n"), Signal.MEMORY_AVAILABLE, "no MemTotal line",
                     id="meminfo-without-memtotal"),
        pytest.param(V1, _write("memory/kubepods/memory.limit_in_bytes", "lots\n"),
                     Signal.ALLOCATABLE_MEMORY_AVAILABLE, "not an unsigned integer", id="pods-limit-garbage"),
        pytest.param(V2, _write("kubepods/memory.current", "12 MiB\n"), Signal.ALLOCATABLE_MEMORY_AVAILABLE,
                     "not an unsigned integer", id="v2-pods-current-garbage"),
        pytest.param(V1, _write("proc/loadavg", "0.1 0.2 0.3\n"), Signal.PID_AVAILABLE, "expected 5 fields",
                     id="loadavg-short"),
        pytest.param(V1, _remove("proc/sys/kernel/threads-max"), Signal.PID_AVAILABLE, "No such file",
                     id="threads-max-missing"),
    ],
)
def test_an_unreadable_source_leaves_its_signal_absent_and_names_its_path(
    tmp_path: Path, tree: Tree, damage: Callable[[Node], Path], absent: Signal, reason: str
) -> None:
    node = make_node(tmp_path, tree, copy=True)
    path = damage(node)
    source = node.source()
    summary = source.summary()
    assert [(p.source, reason in p.reason) for p in source.problems] == [(str(path), True)]
    assert set(signal_observations(summary)) == ALL_SIGNALS - {absent}
    assert {p.pod_ref.uid for p in summary.pods} == {G_UID, B_UID, BE_UID}, "pods are still read"


def test_an_unreadable_pod_cgroup_is_a_problem_and_the_other_pods_stay(v1_node: Node) -> None:
    broken = v1_node.cgroup_root / "memory" / "kubepods" / "burstable" / f"pod{B_UID}" / "memory.usage_in_bytes"
    broken.write_text("-1\n")
    source = v1_node.source()
    summary = source.summary()
    assert [p.source for p in source.problems] == [str(broken)]
    # Kept without the frames it was raised through (they would hold the cycle's readings: core/errors.py).
    assert [p.__traceback__ for p in source.problems] == [None]
    # The pod keeps its stats entry with its memory unknown: without an entry it would be ranked first,
    # evicted on data that could not be read.
    assert {p.pod_ref.uid for p in summary.pods} == {G_UID, B_UID, BE_UID}
    unreadable = next(p for p in summary.pods if p.pod_ref.uid == B_UID)
    assert unreadable.memory is None and unreadable.process_count is None
    assert set(signal_observations(summary)) == ALL_SIGNALS


def test_problems_are_those_of_the_last_cycle(v1_node: Node) -> None:
    usage = v1_node.cgroup_root / "memory" / "memory.usage_in_bytes"
    good = usage.read_text()
    source = v1_node.source()
    usage.write_text("garbage\n")
    assert Signal.MEMORY_AVAILABLE not in signal_observations(source.summary())
    assert [p.source for p in source.problems] == [str(usage)]
    assert [p.__traceback__ for p in source.problems] == [None]
    usage.write_text(good)
    assert Signal.MEMORY_AVAILABLE in signal_observations(source.summary())
    assert source.problems == ()


# --------------------------------------------------------------------------------------------------
# Tier 2: the engine's view of it, through one real manager cycle


def test_an_eviction_cycle_on_the_fixture_node(v1_node: Node) -> None:
    v1_node.log_folder("shop", "cart-7d9f", B_UID)
    v1_node.log_folder("kube-system", "etcd-node-1", G_UID)
    pods = v1_node.discovered()
    # Allocatable memory is 21192Mi: a hard threshold just above it is met.
    config = EngineConfig.from_settings(eviction_settings({"evictionHard": {"allocatableMemory.available": "21200Mi"}}))
    evictor = RecordingEvictor()
    manager = EvictionManager(
        config,
        stats=v1_node.source(pods),
        layout=PathLayout(str(v1_node.kubelet_root), str(v1_node.image_fs), str(v1_node.image_fs)),
        pods=pods,
        reclaimer=ReportOnlyReclaimer(),
        evictor=evictor,
        clock=ManualClock(0.0),
    )
    report = manager.synchronize()
    assert report.errors == ()
    assert [str(s.threshold.signal) for s in report.decided.assessment.thresholds] == ["allocatableMemory.available"]
    # No requests are known without the API: ranked by usage alone.
    assert [p.key for p in report.decided.ranked_pods] == ["shop/cart-7d9f", "kube-system/etcd-node-1", f"unknown/{BE_UID}"]
    (eviction,) = evictor.evictions
    assert eviction.pod.key == "shop/cart-7d9f"
    assert eviction.message == "The node was low on resource: memory. Threshold quantity: 21200Mi, available: 21192Mi. "


def cycle_under(node: Node, thresholds: dict[str, str], source: Any, pods: PodSource) -> RecordingEvictor:
    """One manager cycle with `thresholds` hard, on `source` behind the daemon's plausibility check."""
    evictor = RecordingEvictor()
    # The fixture's cgroup tree comes from a machine larger than its fake MemTotal (16 GiB): 32 GiB bounds it.
    stats = PlausibleStats(source, lambda: 32 * GiB)
    manager = EvictionManager(
        EngineConfig.from_settings(eviction_settings({"evictionHard": thresholds})),
        stats=stats,
        layout=PathLayout(str(node.kubelet_root), str(node.image_fs), str(node.image_fs)),
        pods=pods, reclaimer=ReportOnlyReclaimer(), evictor=evictor, clock=ManualClock(0.0))
    report = manager.synchronize()
    assert report.errors == ()
    return evictor


def test_one_pods_unreadable_cgroup_leaves_the_eviction_as_it_is_with_sound_figures(v1_node: Node) -> None:
    """Issue 43, the cgroupfs source: under hard pressure, the pod whose cgroup cannot be read costs only its own
    figure; the pod evicted is the one evicted with sound figures."""
    for namespace, name, uid in (("shop", "cart-7d9f", B_UID), ("kube-system", "etcd-node-1", G_UID)):
        v1_node.log_folder(namespace, name, uid)
    threshold = {"allocatableMemory.available": "21200Mi"}  # allocatable is 21192Mi: met
    pods = v1_node.discovered()
    [sound] = cycle_under(v1_node, threshold, v1_node.source(pods), pods).evictions
    broken = v1_node.cgroup_root / "memory" / "kubepods" / "besteffort" / f"pod{BE_UID}" / "memory.stat"
    broken.write_text("total_inactive_file garbage\n")
    pods = v1_node.discovered()
    [bad] = cycle_under(v1_node, threshold, v1_node.source(pods), pods).evictions
    assert bad.pod.key == sound.pod.key == "shop/cart-7d9f"


def test_one_impossible_writable_layer_from_the_runtime_leaves_the_eviction_as_it_is_with_sound_figures(
        v1_node: Node) -> None:
    """Issue 43, the CRI source: under disk pressure a runtime's uint64 wrap of one container's writable layer
    (2^64 - 1 bytes, above any filesystem of the node) is refused; the pod evicted is the one evicted with sound
    figures, not the liar ranked first for 16 EiB."""
    from evictd.cri import ContainerUsage

    for namespace, name, uid in (("shop", "cart-7d9f", B_UID), ("kube-system", "etcd-node-1", G_UID)):
        v1_node.log_folder(namespace, name, uid)

    def usage(uid: str, name: str, layer: int) -> ContainerUsage:
        return ContainerUsage(container_id=uid[:8], pod_sandbox_id="s-" + uid[:8], name="app", pod_uid=uid,
                              pod_name=name, pod_namespace="shop", writable_layer_bytes=layer,
                              writable_layer_inodes=10, working_set_bytes=None, timestamp_ns=1)

    def evicted(cart_layer: int) -> str:
        answer = {B_UID: [usage(B_UID, "cart-7d9f", cart_layer)], G_UID: [usage(G_UID, "etcd-node-1", 64 * MiB)]}
        pods = v1_node.discovered()
        source = v1_node.source(pods, runtime=answering_runtime(container_stats=lambda: answer))
        walked_summary(source, v1_node.walker())
        [eviction] = cycle_under(v1_node, {"imagefs.available": "1000Ti"}, source, pods).evictions
        return eviction.pod.key

    assert evicted(cart_layer=1 * MiB) == evicted(cart_layer=2**64 - 1) == "kube-system/etcd-node-1"


# --------------------------------------------------------------------------------------------------
# Memory pressure (PSI) for evictd's stall signals

NODE_PSI = ("some avg10=12.44 avg60=3.10 avg300=0.81 total=58761459\n"
            "full avg10=4.01 avg60=1.00 avg300=0.26 total=20123456\n")
PODS_PSI = ("some avg10=30.00 avg60=9.50 avg300=2.00 total=7000000\n"
            "full avg10=0.00 avg60=0.00 avg300=0.00 total=0\n")
STALL_SIGNALS = (Signal.MEMORY_STALL_SOME, Signal.MEMORY_STALL_FULL, Signal.ALLOCATABLE_MEMORY_STALL_SOME,
                 Signal.ALLOCATABLE_MEMORY_STALL_FULL)


def headroom(stalled_points: int) -> tuple[Quantity, Quantity]:
    return decimal(10_000 - stalled_points), decimal(10_000)


def observed(summary: Summary, signal: Signal) -> tuple[Quantity, Quantity] | None:
    observation = signal_observations(summary).get(signal)
    return None if observation is None else (observation.available, observation.capacity)


@pytest.mark.parametrize("tree", TREES, ids=tree_ids)
def test_stall_signals_read_the_kernels_pressure_files(tmp_path: Path, tree: Tree) -> None:
    node = make_node(tmp_path, tree, copy=True)
    (node.proc / "pressure").mkdir()
    (node.proc / "pressure" / "memory").write_text(NODE_PSI)
    pods_pressure = node.cgroup_root / tree.pods / "memory.pressure"
    if tree.version == 2:
        pods_pressure.write_text(PODS_PSI)
    source = node.source(memory_pressure=True)
    summary = source.summary()
    assert source.problems == ()
    assert node.source().summary().node.memory.psi is None  # not asked: not read  # type: ignore[union-attr]
    psi = summary.node.memory.psi  # type: ignore[union-attr]
    assert psi is not None and (psi.some.total, psi.some.avg10, psi.full.avg60) == (58761459, 12.44, 1.00)
    assert observed(summary, Signal.MEMORY_STALL_SOME) == headroom(1244)
    assert observed(summary, Signal.MEMORY_STALL_FULL) == headroom(401)
    if tree.version == 2:
        assert observed(summary, Signal.ALLOCATABLE_MEMORY_STALL_SOME) == headroom(3000)
        assert observed(summary, Signal.ALLOCATABLE_MEMORY_STALL_FULL) == headroom(0)
    # What the start's "protection" lines say of the same files: cgroup v1 has no per-cgroup pressure.
    facts = read_protection_facts(node.reader, str(node.proc))
    assert facts.node_psi_missing is None
    if tree.version == 2:
        assert facts.pods_psi_missing is None
    else:
        assert observed(summary, Signal.ALLOCATABLE_MEMORY_STALL_SOME) is None
        assert facts.pods_psi_missing == "no pods cgroup memory.pressure (cgroup v1)"
    # Everything else reads as it does without PSI.
    assert set(signal_observations(summary)) - EVICTD_SIGNALS == ALL_SIGNALS
    # The stall gate's counters: the node's global reclaim scans, and the pods cgroup's own `max` events on v2.
    assert summary.node.memory.reclaim == ReclaimCounters(global_scan_pages=GLOBAL_SCAN_PAGES)  # type: ignore[union-attr]
    pods_memory = summary.node.system_containers["pods"].memory
    assert pods_memory is not None and pods_memory.reclaim is None  # no memory.events.local in the tree: not read
    if tree.version == 2:
        (node.cgroup_root / tree.pods / "memory.events.local").write_text("low 0\nhigh 0\nmax 17\noom 0\n")
        pods_memory = source.summary().node.system_containers["pods"].memory
        assert pods_memory is not None and pods_memory.reclaim == ReclaimCounters(limit_events=17)
    (node.proc / "vmstat").unlink()
    unread = source.summary()
    assert unread.node.memory.reclaim is None  # type: ignore[union-attr]
    assert [problem.source for problem in source.problems] == [str(node.proc / "vmstat")]


@pytest.mark.parametrize("tree", [V1, V2], ids=tree_ids)
def test_with_stall_signals_each_pods_own_pressure_is_read_on_cgroup_v2(tmp_path: Path, tree: Tree) -> None:
    """A stall eviction takes only a pod that stalls itself where that is read (evictd.core.pod_growth): with stall
    thresholds, each pod's ``memory.pressure`` (v2) comes in its memory block; v1 has none, and without stall
    thresholds nothing is read."""
    node = make_node(tmp_path, tree, copy=True)
    uid = "0d9e8f7a-6b5c-4d3e-8f21-0a1b2c3d4e5f"
    folder = next(path for path in node.cgroup_root.rglob("*") if path.is_dir() and path.name.replace("_", "-")
                  .endswith(uid + (".slice" if tree.driver == "systemd" else "")) and path.name != uid)
    (folder / "memory.pressure").write_text(PODS_PSI)
    with_stall = node.source(memory_pressure=True).summary()
    without = node.source().summary()
    pressure = {stats.pod_ref.uid: stats.memory.psi for stats in with_stall.pods if stats.memory is not None}
    assert uid in pressure
    if tree.version == 2:
        psi = pressure[uid]
        assert psi is not None and psi.some.avg10 == 30.0
        assert all(psi is None for other, psi in pressure.items() if other != uid)  # no file: none, no problem
    else:
        assert all(psi is None for psi in pressure.values())
    assert all(stats.memory is None or stats.memory.psi is None for stats in without.pods)
    (folder / "memory.pressure").write_text("some avg10=garbage\n")
    source = node.source(memory_pressure=True)
    garbled = source.summary()
    if tree.version == 2:  # unreadable: a problem naming the file, the pod's memory kept without it
        assert [problem.source for problem in source.problems] == [str(folder / "memory.pressure")]
        (stats,) = [stats for stats in garbled.pods if stats.pod_ref.uid == uid]
        assert stats.memory is not None and stats.memory.psi is None and stats.memory.working_set_bytes


def test_a_stall_is_observed_from_evictds_own_window_before_avg10_shows_it(tmp_path: Path) -> None:
    """Each PSI line carries `recent`, the share stalled since the reading a second or more before (from `total`,
    evictd.core.psi_window), and the stall observation is the larger of it and avg10."""
    node = make_node(tmp_path, V2, copy=True)
    (node.proc / "pressure").mkdir()
    (node.proc / "pressure" / "memory").write_text(NODE_PSI)
    clock = ManualClock(0.0, wall_at_zero=AT)
    source = ListingStats(node.discovered(), memory_pressure=True, node_name="node-1", cgroups=node.reader,
                          disk_usage=PodDiskStore(), kubelet_root=str(node.kubelet_root),
                          image_fs_path=str(node.image_fs), container_fs_path=str(node.image_fs),
                          proc_root=str(node.proc), clock=clock)
    first = source.summary().node.memory
    assert first is not None and first.psi is not None and first.psi.some.recent is None  # no earlier reading
    clock.advance(2.0)  # 1.6 s of `some` and 0.1 s of `full` stall in 2 s, avg10 not updated yet
    (node.proc / "pressure" / "memory").write_text(
        "some avg10=12.44 avg60=3.10 avg300=0.81 total=60361459\n"
        "full avg10=4.01 avg60=1.00 avg300=0.26 total=20223456\n")
    summary = source.summary()
    psi = summary.node.memory.psi  # type: ignore[union-attr]
    assert psi is not None and (psi.some.recent, psi.full.recent, psi.some.avg10) == (80.0, 5.0, 12.44)
    assert observed(summary, Signal.MEMORY_STALL_SOME) == headroom(8000)  # recent, the larger
    assert observed(summary, Signal.MEMORY_STALL_FULL) == headroom(500)  # recent 5.00 over avg10 4.01
    assert source.problems == ()


def test_a_reading_between_cycles_starts_the_window_of_the_next_cycles_share(tmp_path: Path) -> None:
    """`note_pressure` (a PSI firing the stall gate held back) reads the pressure files between cycles: the next
    cycle's `recent` is the share since that reading, not diluted over the time back to the last cycle."""
    node = make_node(tmp_path, V2, copy=True)
    (node.proc / "pressure").mkdir()
    pressure = node.proc / "pressure" / "memory"

    def stalled(some_us: int) -> None:
        pressure.write_text(f"some avg10=0.00 avg60=0.00 avg300=0.00 total={some_us}\n"
                            "full avg10=0.00 avg60=0.00 avg300=0.00 total=0\n")

    stalled(0)
    clock = ManualClock(0.0, wall_at_zero=AT)
    source = ListingStats(node.discovered(), memory_pressure=True, node_name="node-1", cgroups=node.reader,
                          disk_usage=PodDiskStore(), kubelet_root=str(node.kubelet_root),
                          image_fs_path=str(node.image_fs), container_fs_path=str(node.image_fs),
                          proc_root=str(node.proc), clock=clock)
    source.summary()  # the last cycle, at 0 s
    clock.advance(8.0)  # quiet until 8 s: a firing held back reads the files then
    source.note_pressure()
    clock.advance(2.0)  # 1.8 s of `some` stall in the last 2 s
    stalled(1_800_000)
    psi = source.summary().node.memory.psi  # type: ignore[union-attr]
    assert psi is not None and psi.some.recent == 90.0, "the share since the reading at 8 s (18.0 since 0 s)"
    assert source.problems == ()
    pressure.unlink()
    source.note_pressure()  # unreadable between cycles: nothing raised, nothing reported by the next cycle for it
    assert source.problems == ()


def test_without_psi_the_stall_signals_are_absent_and_named_at_start(tmp_path: Path) -> None:
    node = make_node(tmp_path, V2, copy=True)
    (node.cgroup_root / V2.pods / "memory.pressure").unlink()
    source = node.source(memory_pressure=True)
    summary = source.summary()
    assert source.problems == ()  # no PSI is not a problem of each cycle: the start says so once
    assert not set(signal_observations(summary)) & EVICTD_SIGNALS
    facts = read_protection_facts(node.reader, str(node.proc))
    assert (facts.node_psi_missing, facts.pods_psi_missing) == (
        f"{node.proc / 'pressure' / 'memory'}: absent or not supported (no PSI)",
        f"{node.cgroup_root / V2.pods / 'memory.pressure'}: absent or not supported (no PSI)")


def test_an_unreadable_pressure_file_is_a_problem_naming_it(tmp_path: Path) -> None:
    node = make_node(tmp_path, V1, copy=True)
    (node.proc / "pressure").mkdir()
    (node.proc / "pressure" / "memory").write_text("some avg10=garbage\n")
    source = node.source(memory_pressure=True)
    summary = source.summary()
    assert [(problem.source, problem.reason) for problem in source.problems] == [
        (str(node.proc / "pressure" / "memory"), "not a PSI line: 'some avg10=garbage'")]
    assert observed(summary, Signal.MEMORY_STALL_SOME) is None
    assert observed(summary, Signal.MEMORY_AVAILABLE) is not None


# --------------------------------------------------------------------------------------------------
# Tier 3: a real pod on this machine


POD_LIMIT_BYTES = 512 * MiB
ALLOCATED_BYTES = 300 * MiB
# The interpreter's own allocations after the move, page tables and stack pages are charged too.
SLACK_BYTES = 12 * MiB


def real_pod_walker(node: RealPodNode) -> PodDiskWalker:
    return PodDiskWalker(kubelet_root=str(node.kubelet_root), pod_logs_dir=str(node.pod_logs_dir))


@pytest.fixture
def real_pod(tmp_path: Path, ext4_mount: Path) -> Iterator[RealPodNode]:
    node = RealPodNode(kubelet_root=ext4_mount / "kubelet", pod_logs_dir=ext4_mount / "pods-logs",
                       pods_limit_bytes=POD_LIMIT_BYTES)
    try:
        node.create(volume_files={"a.bin": 3 * MiB, "b.bin": 1 * MiB}, log_bytes=256 * KiB)
        yield node
    finally:
        node.teardown()


def test_a_real_pod_read_end_to_end(tmp_path: Path, real_pod: RealPodNode, ext4_mount: Path) -> None:
    process = real_pod.start_process()
    process.do(f"alloc {ALLOCATED_BYTES}")
    cgroups = CgroupReader(real_pod.layout)
    pods = DiscoveredPods(cgroups, str(real_pod.pod_logs_dir))
    source = ListingStats(
        pods,
        node_name="node-1",
        cgroups=cgroups,
        disk_usage=PodDiskStore(),
        kubelet_root=str(real_pod.kubelet_root),
        image_fs_path=str(tmp_path / "containerd"),
        container_fs_path=str(tmp_path / "containerd"),
    )
    summary = walked_summary(source, real_pod_walker(real_pod))
    assert source.problems == ()

    pods_memory = summary.node.system_containers[SYSTEM_CONTAINER_PODS].memory
    assert pods_memory is not None and pods_memory.available_bytes is not None
    expected = POD_LIMIT_BYTES - ALLOCATED_BYTES
    assert expected - SLACK_BYTES <= pods_memory.available_bytes <= expected, pods_memory
    allocatable = signal_observations(summary)[Signal.ALLOCATABLE_MEMORY_AVAILABLE]
    assert allocatable.capacity == binary(POD_LIMIT_BYTES)

    (stats,) = summary.pods
    assert stats.pod_ref == PodReference(name=real_pod.name, namespace=real_pod.namespace, uid=real_pod.uid)
    assert stats.memory is not None and stats.memory.working_set_bytes is not None
    assert ALLOCATED_BYTES - MiB <= stats.memory.working_set_bytes <= ALLOCATED_BYTES + SLACK_BYTES
    assert stats.process_count == 1
    (volume,) = stats.volume_stats
    assert (volume.name, volume.used_bytes, volume.inodes_used) == (
        real_pod.volume, du_bytes(real_pod.volume_dir), du_inodes(real_pod.volume_dir))
    assert volume.used_bytes is not None and volume.used_bytes >= 4 * MiB
    (container,) = stats.containers
    assert container.name == real_pod.container
    assert container.logs is not None and container.logs.used_bytes == du_bytes(real_pod.log_dir)
    assert stats.ephemeral_storage is not None
    assert stats.ephemeral_storage.used_bytes == du_bytes(real_pod.volume_dir) + du_bytes(real_pod.log_dir)

    # The node's own figures are this machine's.
    assert summary.node.memory is not None and summary.node.memory.available_bytes is not None
    root = cgroups.memory("")
    assert summary.node.memory.working_set_bytes is not None
    assert abs(summary.node.memory.working_set_bytes - root.working_set_bytes) < 256 * MiB
    nodefs = os.statvfs(ext4_mount)
    assert summary.node.fs is not None and summary.node.fs.capacity_bytes == nodefs.f_blocks * nodefs.f_frsize
    assert (CGROUP_MOUNT / "memory" / real_pod.container_cgroup).is_dir()

    # The memory goes when the process frees it: the next cycle sees it.
    process.do("free")
    after = source.summary().node.system_containers[SYSTEM_CONTAINER_PODS].memory
    assert after is not None and after.available_bytes is not None
    assert after.available_bytes >= POD_LIMIT_BYTES - SLACK_BYTES


def test_while_the_runtime_is_down_its_containers_are_measured_from_their_cgroups(
        tmp_path: Path, real_pod: RealPodNode) -> None:
    """The runtime answered once (naming the real container cgroup's ID), then stops answering: the container
    keeps a working set, now read from its own cgroup, under the name the runtime gave it."""
    from evictd.core.errors import CRIError
    from evictd.cri import ContainerUsage

    process = real_pod.start_process()
    process.do(f"alloc {ALLOCATED_BYTES}")
    named = ContainerUsage(container_id=real_pod.container_id, pod_sandbox_id="s1", name=real_pod.container,
                           pod_uid=real_pod.uid, pod_name=real_pod.name, pod_namespace=real_pod.namespace,
                           writable_layer_bytes=5 * MiB, writable_layer_inodes=12, working_set_bytes=7 * MiB,
                           timestamp_ns=1)
    restarted = ContainerUsage(container_id="f" * 64, pod_sandbox_id="s1", name="restarted-since",
                               pod_uid=real_pod.uid, pod_name=real_pod.name, pod_namespace=real_pod.namespace,
                               writable_layer_bytes=None, writable_layer_inodes=None, working_set_bytes=1,
                               timestamp_ns=1)
    answers: list[dict[str, list[ContainerUsage]] | None] = [{real_pod.uid: [named, restarted]}, None,
                                                              {real_pod.uid: [named]}]

    def runtime() -> dict[str, list[ContainerUsage]]:
        answer = answers.pop(0)
        if answer is None:
            raise CRIError("ListContainerStats", "UNAVAILABLE", "connection refused")
        return answer

    cgroups = CgroupReader(real_pod.layout)
    source = ListingStats(
        DiscoveredPods(cgroups, str(real_pod.pod_logs_dir)), node_name="node-1", cgroups=cgroups,
        disk_usage=PodDiskStore(), kubelet_root=str(real_pod.kubelet_root),
        image_fs_path=str(tmp_path / "containerd"), container_fs_path=str(tmp_path / "containerd"),
        runtime=SimpleNamespace(attached=True, container_stats=runtime, filesystem_paths=lambda: None,
                                sandbox_stats=dict))
    # The pod's folders measured before the first cycle (which names the pod with the same key).
    pod = PodKey(real_pod.uid, real_pod.namespace, real_pod.name)
    source.disk_usage.want([pod])
    for figures in real_pod_walker(real_pod).run_pass([pod]):
        source.disk_usage.record(figures)

    def container(summary: Summary, names: list[str]) -> ContainerStats:
        (stats,) = summary.pods
        assert sorted(c.name for c in stats.containers) == names
        return next(c for c in stats.containers if c.name == real_pod.container)

    answered = container(source.summary(), [real_pod.container, "restarted-since"])
    assert answered.memory is not None and answered.memory.working_set_bytes == 7 * MiB
    assert answered.rootfs is not None and answered.rootfs.used_bytes == 5 * MiB

    down = source.summary()
    assert [p.source for p in source.problems] == ["CRI ListContainerStats"]
    # "restarted-since" has no cgroup under the ID the runtime gave last: left out, not guessed.
    measured = container(down, [real_pod.container])
    assert measured.memory is not None and measured.memory.working_set_bytes is not None
    assert ALLOCATED_BYTES - MiB <= measured.memory.working_set_bytes <= ALLOCATED_BYTES + SLACK_BYTES
    assert measured.rootfs is None, "the writable layer is known only to the runtime"
    assert measured.logs is not None and measured.logs.used_bytes == du_bytes(real_pod.log_dir)

    back = container(source.summary(), [real_pod.container])
    assert back.memory is not None and back.memory.working_set_bytes == 7 * MiB


def answering_runtime(container_stats: Callable[[], object] = dict, sandbox_stats: Callable[[], object] = dict) -> Any:
    """A container runtime that answered, as the node's own stats source asks it (its folders: the configured ones)."""
    return SimpleNamespace(attached=True, filesystem_paths=lambda: None, container_stats=container_stats,
                           sandbox_stats=sandbox_stats)


def test_runtime_container_stats_are_merged_by_container_name(v1_node: Node) -> None:
    """With a runtime, containers carry their working set and writable layer, and logs join them by name."""
    from dataclasses import replace as _replace

    from evictd.cri import ContainerUsage

    (v1_node.log_folder("shop", "cart-7d9f", B_UID) / "0.log").write_bytes(b"x" * 10000)
    usage = ContainerUsage(container_id="c1", pod_sandbox_id="s1", name="app", pod_uid=B_UID, pod_name="cart-7d9f",
                           pod_namespace="shop", writable_layer_bytes=5 << 20, writable_layer_inodes=12,
                           working_set_bytes=64 << 20, timestamp_ns=1)
    sidecar = _replace(usage, container_id="c2", name="sidecar", writable_layer_bytes=None, working_set_bytes=None)
    source = v1_node.source(runtime=answering_runtime(container_stats=lambda: {B_UID: [usage, sidecar]}))
    pod = next(p for p in walked_summary(source, v1_node.walker()).pods if p.pod_ref.uid == B_UID)
    app = next(c for c in pod.containers if c.name == "app")
    assert app.memory is not None and app.memory.working_set_bytes == 64 << 20
    assert app.rootfs is not None and (app.rootfs.used_bytes, app.rootfs.inodes_used) == (5 << 20, 12)
    assert app.logs is not None and (app.logs.used_bytes or 0) >= 10000
    assert [c.name for c in pod.containers] == ["app", "sidecar"]
    assert pod.ephemeral_storage is not None and pod.ephemeral_storage.used_bytes is not None
    assert pod.ephemeral_storage.used_bytes >= (5 << 20) + 10000


def test_runtime_stats_failure_is_a_problem_not_a_crash(v1_node: Node) -> None:
    from evictd.core.errors import CRIError

    def broken() -> dict[str, list[object]]:
        raise CRIError("ListContainerStats", "UNAVAILABLE", "connection refused")

    source = v1_node.source(runtime=answering_runtime(container_stats=broken))
    summary = source.summary()
    assert any("ListContainerStats" in p.source for p in source.problems)
    assert summary.pods


def test_a_reread_takes_the_cycles_runtime_answer_or_failure_and_reads_the_cgroups_again(v1_node: Node) -> None:
    """A re-read within the cycle (`reread=True`) does not ask the runtime again: it names the containers its last
    answer named (or keeps its failure) while every cgroup figure is read anew; the next cycle's read asks again."""
    from evictd.core.errors import CRIError
    from evictd.cri import ContainerUsage

    usage = ContainerUsage(container_id="c1", pod_sandbox_id="s1", name="app", pod_uid=B_UID, pod_name="cart-7d9f",
                           pod_namespace="shop", writable_layer_bytes=5 << 20, writable_layer_inodes=12,
                           working_set_bytes=64 << 20, timestamp_ns=1)
    answers: list[object] = [{B_UID: [usage]}, CRIError("ListContainerStats", "DEADLINE_EXCEEDED", "slow"),
                             {B_UID: [usage]}]
    asked: list[int] = []

    def runtime() -> object:
        asked.append(1)
        answer = answers.pop(0)
        if isinstance(answer, CRIError):
            raise answer
        return answer

    source = v1_node.source(runtime=answering_runtime(container_stats=runtime))
    usage_file = v1_node.cgroup_root / "memory" / "kubepods" / "burstable" / f"pod{B_UID}" / "memory.usage_in_bytes"

    def pod_of(summary: Summary) -> PodStats:
        return next(p for p in summary.pods if p.pod_ref.uid == B_UID)

    first = pod_of(source.summary())
    assert [c.name for c in first.containers] == ["app"] and len(asked) == 1
    usage_file.write_text(str(300 << 20) + "\n")
    again = pod_of(source.summary(reread=True))
    assert len(asked) == 1, "a re-read does not wait on the runtime again"
    assert [c.name for c in again.containers] == ["app"] and source.problems == ()
    assert again.memory is not None and first.memory is not None
    assert again.memory.usage_bytes == 300 << 20 != first.memory.usage_bytes, "the cgroups are read again"

    source.summary()  # the next cycle asks, and the runtime fails
    assert len(asked) == 2 and [p.source for p in source.problems] == ["CRI ListContainerStats"]
    source.summary(reread=True)
    assert len(asked) == 2 and [p.source for p in source.problems] == ["CRI ListContainerStats"], \
        "a re-read keeps the cycle's failure rather than waiting on the runtime again"
    source.summary()
    assert len(asked) == 3 and source.problems == ()


def test_sandbox_stats_stand_in_for_an_unreadable_pod_cgroup(v1_node: Node) -> None:
    """Where cgroupfs cannot be read, the runtime's ListPodSandboxStats gives the working set and processes."""
    from evictd.cri import SandboxUsage

    broken = v1_node.cgroup_root / "memory" / "kubepods" / "burstable" / f"pod{B_UID}" / "memory.usage_in_bytes"
    broken.write_text("-1\n")
    asked: list[int] = []

    def sandboxes() -> dict[str, SandboxUsage]:
        asked.append(1)
        return {B_UID: SandboxUsage(sandbox_id="s1", uid=B_UID, name="cart-7d9f", namespace="shop",
                                    working_set_bytes=96 << 20, process_count=3, timestamp_ns=1)}

    source = v1_node.source(runtime=answering_runtime(sandbox_stats=sandboxes))
    pod = next(p for p in source.summary().pods if p.pod_ref.uid == B_UID)
    assert pod.memory is not None and pod.memory.working_set_bytes == 96 << 20
    assert pod.process_count == 3 and asked == [1]
    broken.write_text("104857600\n")
    source.summary()
    assert asked == [1], "ListPodSandboxStats is asked only when some pod lacks its cgroup readings"


def test_an_urgent_read_does_not_wait_for_a_slow_runtime_and_takes_its_answer_when_it_comes(v1_node: Node) -> None:
    """A memory threshold met (`runtime_wait_s`, OVERDUE_S): the runtime's container stats are waited for that long at
    most. The pods' memory, what a memory ranking reads, comes from their cgroups as always; the runtime's failure to
    answer in time is the cycle's problem; the call goes on, and the next read waits for it."""
    wait_s = OVERDUE_S
    import threading
    import time

    from evictd.cri import ContainerUsage

    usage = ContainerUsage(container_id="c1", pod_sandbox_id="s1", name="app", pod_uid=B_UID, pod_name="cart-7d9f",
                           pod_namespace="shop", writable_layer_bytes=5 << 20, writable_layer_inodes=12,
                           working_set_bytes=64 << 20, timestamp_ns=1)
    release = threading.Event()
    asked: list[int] = []

    def runtime() -> object:
        asked.append(1)
        if len(asked) > 1:
            release.wait(30)
        return {B_UID: [usage]}

    source = v1_node.source(runtime=answering_runtime(container_stats=runtime))

    def pod_of(summary: Summary) -> PodStats:
        return next(p for p in summary.pods if p.pod_ref.uid == B_UID)

    assert [c.name for c in pod_of(source.summary()).containers] == ["app"]
    started = time.monotonic()
    urgent = pod_of(source.summary(runtime_wait_s=wait_s))
    waited = time.monotonic() - started
    assert wait_s <= waited < wait_s + 1.0
    assert urgent.memory is not None and urgent.memory.working_set_bytes is not None, "read from the pod's cgroup"
    (problem,) = source.problems
    assert problem.source == "CRI ListContainerStats" and f"no answer within {wait_s:g} s" in str(problem)
    threading.Timer(0.2, release.set).start()
    after = pod_of(source.summary())
    assert len(asked) == 2, "the next read took the call under way"
    assert [c.name for c in after.containers] == ["app"] and source.problems == ()


@pytest.mark.parametrize(("threshold", "decides", "waits_the_deadline"), [
    pytest.param("21200Mi", True, False, id="a-hard-memory-threshold-met-decides-without-the-runtime"),
    pytest.param("100Mi", False, True, id="none-met-waits-for-the-runtime-as-before"),
])
def test_against_a_hung_runtime_a_cycle_with_a_hard_memory_threshold_met_does_not_wait_its_deadline(
        v1_node: Node, tmp_path: Path, threshold: str, decides: bool, waits_the_deadline: bool) -> None:
    """The arena's fast leaks on the real node: the hard crossing's cycle waited CYCLE_READ_TIMEOUT_S on a
    ListContainerStats containerd never answered, then decided. A socket that accepts and never speaks HTTP/2,
    through the real CRI client and `CriRuntime`: the cycle whose node memory shows a hard threshold met decides
    after OVERDUE_S at most; one with none met waits the read's deadline, as before."""
    import time

    from evictd.adapters.runtime_node import CYCLE_READ_TIMEOUT_S, RuntimeFilesystems
    from evictd.run.runtime_link import CriRuntime
    from hung_socket import hung_cri_client

    v1_node.log_folder("shop", "cart-7d9f", B_UID)
    with hung_cri_client(tmp_path) as client:
        hung = CriRuntime(client, RuntimeFilesystems(client, str(tmp_path), str(tmp_path)), gc=None)
        pods = v1_node.discovered()
        source = v1_node.source(pods, runtime=answering_runtime(container_stats=hung.container_stats))
        evictor = RecordingEvictor()
        manager = EvictionManager(
            EngineConfig.from_settings(eviction_settings({"evictionHard": {"allocatableMemory.available": threshold}})),
            stats=source, layout=PathLayout(str(v1_node.kubelet_root), str(v1_node.image_fs), str(v1_node.image_fs)),
            pods=pods, reclaimer=ReportOnlyReclaimer(), evictor=evictor, clock=ManualClock(0.0))
        started = time.monotonic()
        manager.synchronize()
        took_s = time.monotonic() - started
    assert [e.pod.key for e in evictor.evictions] == (["shop/cart-7d9f"] if decides else [])
    assert [p.source for p in source.problems] == ["CRI ListContainerStats"]
    if waits_the_deadline:
        assert CYCLE_READ_TIMEOUT_S <= took_s < CYCLE_READ_TIMEOUT_S + 1.0
    else:
        assert OVERDUE_S <= took_s < OVERDUE_S + 1.0


def test_the_daemons_block_carries_their_cache_and_memavailable_only_beside_a_protection(tmp_path: Path) -> None:
    """With a daemons refault threshold on cgroup v2, system.slice's block carries its page cache (memory.stat
    ``file``) and, while it has a memory.low, the node's MemAvailable read with it (the figure's uncovered cache,
    evictd.core.daemon_refault); without a protection /proc/meminfo is not read for it, and an unreadable one is a
    problem naming it, the rest of the block kept."""
    node = make_node(tmp_path, V2, copy=True)
    daemons = node.cgroup_root / "system.slice"
    daemons.mkdir(exist_ok=True)
    (daemons / "memory.stat").write_text("anon 1048576\nfile 268435456\nworkingset_refault_file 10\npgsteal 3\n")
    (daemons / "memory.current").write_text(f"{300 << 20}\n")
    (daemons / "memory.events").write_text("low 0\nhigh 0\nmax 0\noom 0\noom_kill 0\n")
    (daemons / "memory.low").write_text(f"{616 << 20}\n")

    def block() -> tuple[Any, list[str]]:
        source = ListingStats(node.discovered(), memory_pressure=True, daemon_refaults=True, node_name="node-1",
                              cgroups=node.reader, disk_usage=PodDiskStore(), kubelet_root=str(node.kubelet_root),
                              image_fs_path=str(node.image_fs), container_fs_path=str(node.image_fs),
                              proc_root=str(node.proc), clock=ManualClock(0.0, wall_at_zero=AT))
        memory = source.summary().node.system_containers[SYSTEM_CONTAINER_DAEMONS].memory
        assert memory is not None and memory.reclaim is not None
        return memory.reclaim, [problem.source for problem in source.problems]

    reclaim, problems = block()
    assert (reclaim.file_bytes, reclaim.protected_bytes, reclaim.node_available_bytes) == (
        256 << 20, 616 << 20, 9437184 * KiB)
    assert problems == []
    (daemons / "memory.low").write_text("0\n")
    reclaim, problems = block()
    assert (reclaim.file_bytes, reclaim.node_available_bytes) == (256 << 20, None) and problems == []
    (daemons / "memory.low").write_text(f"{616 << 20}\n")
    (node.proc / "meminfo").write_text("MemTotal:       1024 kB\n")
    reclaim, problems = block()
    assert (reclaim.file_bytes, reclaim.node_available_bytes, reclaim.refault_file_bytes) == (
        256 << 20, None, 10 * 4096)
    assert problems == [str(node.proc / "meminfo")]
