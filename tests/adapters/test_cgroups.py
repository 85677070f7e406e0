"""The cgroupfs adapter against fixture copies of real cgroup trees (tests/fixtures/cgroup/README.md).

Every reader runs on both cgroup versions and both kubelet drivers; every QoS tier is discovered; every
malformed file becomes a SampleError that names the file.
"""

from __future__ import annotations

import os
import pickle
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass, replace
from pathlib import Path

import pytest

from evictd.adapters.cgroups import (
    UNLIMITED_ABOVE_BYTES,
    CgroupLayout,
    CgroupReader,
    MemoryReading,
    PodCgroup,
    detect_cgroup_layout,
)
from evictd.core.errors import ConfigError, SampleError

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "cgroup"
MiB = 1024 * 1024

G_UID = "6f1c2a34-5b7d-4e8f-9a01-23456789abcd"
B_UID = "0d9e8f7a-6b5c-4d3e-8f21-0a1b2c3d4e5f"
BE_UID = "a1b2c3d4-e5f6-4a7b-8c9d-0e1f2a3b4c5d"
G_APP, G_PAUSE, B_APP, BE_APP = "1f" * 32, "ab" * 32, "2e" * 32, "3d" * 32


@dataclass(frozen=True)
class Tree:
    """One fixture tree and the cgroup paths the kubelet would have made in it."""

    name: str
    version: int
    driver: str
    pods: str
    pod_paths: dict[str, str]  # uid -> pod cgroup
    qos: dict[str, str]  # uid -> QoS tier
    containers: dict[str, dict[str, str]]  # uid -> container id -> cgroup

    @property
    def root(self) -> Path:
        return FIXTURES / self.name

    def layout(self, root: Path | None = None, base: str = "") -> CgroupLayout:
        return CgroupLayout(version=self.version, root=root or self.root, driver=self.driver, base=base)


def cgroupfs_tree(version: int) -> Tree:
    pods = {
        G_UID: f"kubepods/pod{G_UID}",
        B_UID: f"kubepods/burstable/pod{B_UID}",
        BE_UID: f"kubepods/besteffort/pod{BE_UID}",
    }
    return Tree(
        name=f"v{version}-cgroupfs",
        version=version,
        driver="cgroupfs",
        pods="kubepods",
        pod_paths=pods,
        qos={G_UID: "guaranteed", B_UID: "burstable", BE_UID: "besteffort"},
        containers={
            G_UID: {G_APP: f"{pods[G_UID]}/{G_APP}", G_PAUSE: f"{pods[G_UID]}/{G_PAUSE}"},
            B_UID: {B_APP: f"{pods[B_UID]}/{B_APP}"},
            BE_UID: {BE_APP: f"{pods[BE_UID]}/{BE_APP}"},
        },
    )


def systemd_tree(version: int, runtime: str) -> Tree:
    g, b, be = (uid.replace("-", "_") for uid in (G_UID, B_UID, BE_UID))
    pods = {
        G_UID: f"kubepods.slice/kubepods-pod{g}.slice",
        B_UID: f"kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{b}.slice",
        BE_UID: f"kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod{be}.slice",
    }
    return Tree(
        name=f"v{version}-systemd",
        version=version,
        driver="systemd",
        pods="kubepods.slice",
        pod_paths=pods,
        qos={G_UID: "guaranteed", B_UID: "burstable", BE_UID: "besteffort"},
        containers={
            G_UID: {
                G_APP: f"{pods[G_UID]}/{runtime}-{G_APP}.scope",
                G_PAUSE: f"{pods[G_UID]}/{runtime}-{G_PAUSE}.scope",
            },
            B_UID: {B_APP: f"{pods[B_UID]}/crio-{B_APP}.scope"},
            BE_UID: {BE_APP: f"{pods[BE_UID]}/{runtime}-{BE_APP}.scope"},
        },
    )


TREES = [cgroupfs_tree(1), systemd_tree(1, "docker"), cgroupfs_tree(2), systemd_tree(2, "cri-containerd")]
TREE_IDS = [tree.name for tree in TREES]


def figures(read: MemoryReading) -> MemoryReading:
    """`read` without its anonymous memory, which `test_memory_of_every_cgroup` checks apart."""
    return replace(read, anon_bytes=None)


def reading(usage_mib: int, inactive_mib: int, limit_mib: int | None) -> MemoryReading:
    return MemoryReading(
        usage_bytes=usage_mib * MiB,
        inactive_file_bytes=inactive_mib * MiB,
        working_set_bytes=max(0, usage_mib - inactive_mib) * MiB,
        limit_bytes=None if limit_mib is None else limit_mib * MiB,
    )


# Expected readings per cgroup role (README table); the root differs by version.
ROLE_TO_READING = {
    "pods": reading(1600, 264, 22528),
    "g_pod": reading(250, 50, 256),
    "g_app": reading(249, 50, 256),
    "g_pause": reading(1, 0, None),
    "b_pod": reading(512, 128, 1024),
    "b_app": reading(511, 128, 1024),
    "be_pod": reading(100, 90, None),
    "be_app": reading(99, 90, None),
}
ROLE_TO_PIDS = {"pods": 11, "g_pod": 3, "g_app": 2, "g_pause": 1, "b_pod": 7, "b_app": 7, "be_pod": 1, "be_app": 1}
# Processes in every cgroup.procs of the fixture's memory hierarchy: root 5 + 2 + 1 + 3 + 1.
ALL_FIXTURE_PROCS = 12


def role_paths(tree: Tree) -> dict[str, str]:
    return {
        "pods": tree.pods,
        "g_pod": tree.pod_paths[G_UID],
        "g_app": tree.containers[G_UID][G_APP],
        "g_pause": tree.containers[G_UID][G_PAUSE],
        "b_pod": tree.pod_paths[B_UID],
        "b_app": tree.containers[B_UID][B_APP],
        "be_pod": tree.pod_paths[BE_UID],
        "be_app": tree.containers[BE_UID][BE_APP],
    }


ROLE_CASES = [pytest.param(tree, role, id=f"{tree.name}-{role}") for tree in TREES for role in ROLE_TO_READING]


def copy_tree(tree: Tree, tmp_path: Path) -> Path:
    """Return a writable copy of a fixture tree, for tests that damage files."""
    target = tmp_path / tree.name
    shutil.copytree(tree.root, target)
    return target


# --------------------------------------------------------------------------------------------------
# Layout detection


@pytest.mark.parametrize("tree", TREES, ids=TREE_IDS)
def test_detect_layout_finds_the_version(tree: Tree) -> None:
    layout = detect_cgroup_layout(tree.root, tree.driver)
    assert layout == CgroupLayout(version=tree.version, root=tree.root, driver=tree.driver)


def test_hybrid_unified_mount_without_memory_is_not_v2() -> None:
    unified = FIXTURES / "v1-cgroupfs" / "unified" / "cgroup.controllers"
    assert unified.read_text() == "hugetlb\n"
    assert detect_cgroup_layout(FIXTURES / "v1-cgroupfs").version == 1


def test_v2_root_without_memory_controller_and_no_v1_hierarchy_is_an_error(tmp_path: Path) -> None:
    (tmp_path / "cgroup.controllers").write_text("cpu io pids\n")
    with pytest.raises(SampleError) as info:
        detect_cgroup_layout(tmp_path)
    assert info.value.source == str(tmp_path / "memory")


def test_unreadable_cgroup_controllers_is_an_error(tmp_path: Path) -> None:
    (tmp_path / "cgroup.controllers").mkdir()
    with pytest.raises(SampleError) as info:
        detect_cgroup_layout(tmp_path)
    assert info.value.source == str(tmp_path / "cgroup.controllers")


def test_detect_passes_base_through_normalised() -> None:
    layout = detect_cgroup_layout(FIXTURES / "v2-systemd", "systemd", base="/node.slice/")
    assert (layout.version, layout.driver, layout.base) == (2, "systemd", "node.slice")


@pytest.mark.parametrize(
    ("kwargs", "key"),
    [
        pytest.param({"base": "a/../../etc"}, "cgroupRoot", id="base-escapes"),
    ],
)
def test_layout_rejects_bad_settings(kwargs: dict[str, object], key: str) -> None:
    settings: dict[str, object] = {"version": 1, "root": FIXTURES, "driver": "cgroupfs", **kwargs}
    with pytest.raises(ConfigError) as info:
        CgroupLayout(**settings)  # type: ignore[arg-type]
    assert info.value.key == key


def test_layout_hierarchies() -> None:
    v1 = CgroupLayout(version=1, root=Path("/sys/fs/cgroup"))
    v2 = CgroupLayout(version=2, root=Path("/sys/fs/cgroup"))
    assert (v1.memory_hierarchy, v1.pids_hierarchy) == (Path("/sys/fs/cgroup/memory"), Path("/sys/fs/cgroup/pids"))
    assert (v2.memory_hierarchy, v2.pids_hierarchy) == (Path("/sys/fs/cgroup"), Path("/sys/fs/cgroup"))


# --------------------------------------------------------------------------------------------------
# Memory


def fixture_anon(tree: Tree, cgroup: str) -> int:
    """The anonymous memory the fixture's memory.stat of `cgroup` prints (v2 ``anon``, v1 ``total_rss``)."""
    folder = tree.layout().memory_hierarchy / cgroup
    key = "anon" if tree.version == 2 else "total_rss"
    return next(int(line.split()[1]) for line in (folder / "memory.stat").read_text().splitlines()
                if line.split()[0] == key)


@pytest.mark.parametrize(("tree", "role"), ROLE_CASES)
def test_memory_of_every_cgroup(tree: Tree, role: str) -> None:
    reader = CgroupReader(tree.layout())
    read = reader.memory(role_paths(tree)[role])
    assert replace(read, anon_bytes=None) == ROLE_TO_READING[role]
    # Its anonymous memory beside (a stall eviction's growth, `evictd.core.pod_growth`); v1's pods cgroup, read
    # settled for the memory signal, has none.
    settled_v1 = tree.version == 1 and role == "pods"
    assert read.anon_bytes == (None if settled_v1 else fixture_anon(tree, role_paths(tree)[role]))


@pytest.mark.parametrize("tree", TREES, ids=TREE_IDS)
def test_memory_accepts_leading_and_trailing_slashes(tree: Tree) -> None:
    reader = CgroupReader(tree.layout())
    assert figures(reader.memory(f"/{tree.pods}/")) == ROLE_TO_READING["pods"]


@pytest.mark.parametrize("tree", [t for t in TREES if t.version == 1], ids=lambda t: t.name)
def test_v1_root_memory_reads_usage_in_bytes(tree: Tree) -> None:
    assert figures(CgroupReader(tree.layout()).memory("")) == reading(6144, 1024, None)


def write_v1_figures(folder: Path, *, usage_mib: int, rss_mib: int, cache_mib: int, kmem_mib: int | None) -> None:
    """Set a copied v1 cgroup's usage, memory.stat total_rss and total_cache, and kernel memory (None: no file)."""
    (folder / "memory.usage_in_bytes").write_text(f"{usage_mib * MiB}\n")
    stat = [line for line in (folder / "memory.stat").read_text().splitlines()
            if not line.startswith(("total_rss ", "total_cache "))]
    (folder / "memory.stat").write_text("\n".join([*stat, f"total_rss {rss_mib * MiB}", f"total_cache {cache_mib * MiB}"])
                                        + "\n")
    if kmem_mib is not None:
        (folder / "memory.kmem.usage_in_bytes").write_text(f"{kmem_mib * MiB}\n")


# The slack the readers below allow a settled memory.stat on 2 CPUs: a 2 MiB margin and 768 KiB a CPU.
SLACK_MIB = 3.5


@pytest.mark.parametrize(
    ("kmem_mib", "rss_mib", "cache_mib", "unfolded_mib"),
    [
        # The pods cgroup's 1600 MiB: kernel memory, anonymous memory and page cache, all accounted for.
        pytest.param(40, 1256, 304, 0, id="settled"),
        # 64 MiB of a file written since memory.stat last folded its per-CPU figures in: usage has it, the stat not.
        pytest.param(40, 1256, 240, 64 - SLACK_MIB, id="a-file-not-folded-in-yet"),
        pytest.param(40, 1256, 304 - 3, 0, id="within-the-kernels-batches"),
        pytest.param(40, 1256, 368, 0, id="still-counting-a-file-gone-is-not-unfolded"),
        pytest.param(None, 1256, 240, None, id="no-kernel-memory-file-no-figure"),
    ],
)
def test_a_v1_signal_cgroups_reading_says_what_usage_its_memory_stat_does_not_account_for(
        tmp_path: Path, kmem_mib: int | None, rss_mib: int, cache_mib: int, unfolded_mib: float | None) -> None:
    tree = TREES[0]
    root = copy_tree(tree, tmp_path)
    write_v1_figures(root / "memory" / tree.pods, usage_mib=1600, rss_mib=rss_mib, cache_mib=cache_mib,
                     kmem_mib=kmem_mib)
    got = CgroupReader(tree.layout(root), cpus=2).memory(tree.pods)
    assert got.unfolded_bytes == (None if unfolded_mib is None else int(unfolded_mib * MiB))
    assert got.working_set_bytes == ROLE_TO_READING["pods"].working_set_bytes, "the working set as read"
    # A pod's cgroup ranks only: read as before, no such figure.
    assert CgroupReader(tree.layout(root), cpus=2).memory(tree.pod_paths[B_UID]).unfolded_bytes is None


@pytest.mark.parametrize("tree", [t for t in TREES if t.version == 2], ids=lambda t: t.name)
def test_v2_root_memory_is_anon_plus_file_of_root_memory_stat(tree: Tree) -> None:
    assert not (tree.root / "memory.current").exists()
    # anon 3072 MiB + file 2048 MiB (runc's rootStatsFromMeminfo), minus inactive_file 1024 MiB.
    assert figures(CgroupReader(tree.layout()).memory("/")) == reading(3072 + 2048, 1024, None)


@pytest.mark.parametrize(("tree", "role"), ROLE_CASES)
def test_the_working_set_alone_reads_no_limit(tree: Tree, role: str, tmp_path: Path) -> None:
    """The memory watch's look (issue 37 item 3): the same working set as the full reading, the limit file unread."""
    root = copy_tree(tree, tmp_path)
    cgroup = role_paths(tree)[role]
    hierarchy = root / "memory" if tree.version == 1 else root
    (hierarchy / cgroup / ("memory.limit_in_bytes" if tree.version == 1 else "memory.max")).unlink(missing_ok=True)
    got = CgroupReader(tree.layout(root)).memory(cgroup, working_set_only=True)
    assert got.working_set_bytes == ROLE_TO_READING[role].working_set_bytes
    assert got.limit_bytes is None
    assert got.anon_bytes is None, "a look needs the working set alone"


def test_working_set_is_floored_at_zero(tmp_path: Path) -> None:
    tree = TREES[0]
    root = copy_tree(tree, tmp_path)
    stat = root / "memory" / tree.pods / "memory.stat"
    stat.write_text(
        stat.read_text().replace(f"total_inactive_file {264 * MiB}\n", f"total_inactive_file {2000 * MiB}\n")
    )
    got = CgroupReader(tree.layout(root)).memory(tree.pods)
    assert (got.usage_bytes, got.inactive_file_bytes, got.working_set_bytes) == (1600 * MiB, 2000 * MiB, 0)


@pytest.mark.parametrize(
    ("version", "raw", "expected"),
    [
        pytest.param(1, "9223372036854771712\n", None, id="v1-no-limit"),
        pytest.param(1, f"{2**62}\n", 2**62, id="v1-exactly-2^62-is-a-limit"),
        pytest.param(1, f"{2**62 + 4096}\n", None, id="v1-above-2^62-is-unlimited"),
        pytest.param(1, "268435456\n", 268435456, id="v1-limit"),
        pytest.param(2, "max\n", None, id="v2-max"),
        pytest.param(2, "268435456\n", 268435456, id="v2-limit"),
        pytest.param(2, f"{2**62 + 4096}\n", None, id="v2-above-2^62-is-unlimited"),
    ],
)
def test_limit_values(tmp_path: Path, version: int, raw: str, expected: int | None) -> None:
    tree = cgroupfs_tree(version)
    root = copy_tree(tree, tmp_path)
    hierarchy = root / "memory" if version == 1 else root
    (hierarchy / tree.pods / ("memory.limit_in_bytes" if version == 1 else "memory.max")).write_text(raw)
    assert CgroupReader(tree.layout(root)).memory(tree.pods).limit_bytes == expected


def test_unlimited_cut_off_is_the_kubelets() -> None:
    assert UNLIMITED_ABOVE_BYTES == 1 << 62


# --------------------------------------------------------------------------------------------------
# Process counts


@pytest.mark.parametrize(("tree", "role"), ROLE_CASES)
def test_process_count_of_every_cgroup(tree: Tree, role: str) -> None:
    assert CgroupReader(tree.layout()).process_count(role_paths(tree)[role]) == ROLE_TO_PIDS[role]


@pytest.mark.parametrize("tree", [t for t in TREES if t.version == 1], ids=lambda t: t.name)
def test_v1_cgroup_missing_from_pids_hierarchy_counts_procs_below_it(tree: Tree) -> None:
    be_pod = tree.pod_paths[BE_UID]
    assert not (tree.root / "pids" / be_pod).exists()
    assert (tree.root / "memory" / be_pod / "cgroup.procs").read_text() == ""
    assert CgroupReader(tree.layout()).process_count(be_pod) == 1  # the container's single process


@pytest.mark.parametrize("tree", TREES, ids=TREE_IDS)
def test_root_has_no_pids_current_so_every_cgroup_procs_is_counted(tree: Tree) -> None:
    assert CgroupReader(tree.layout()).process_count("") == ALL_FIXTURE_PROCS


def test_process_count_prefers_pids_current_to_cgroup_procs(tmp_path: Path) -> None:
    tree = cgroupfs_tree(2)
    root = copy_tree(tree, tmp_path)
    (root / tree.pods / "pids.current").write_text("99\n")
    assert CgroupReader(tree.layout(root)).process_count(tree.pods) == 99


# --------------------------------------------------------------------------------------------------
# Discovery


@pytest.mark.parametrize("tree", TREES, ids=TREE_IDS)
def test_pods_cgroup(tree: Tree) -> None:
    assert CgroupReader(tree.layout()).pods_cgroup() == tree.pods


@pytest.mark.parametrize("tree", TREES, ids=TREE_IDS)
def test_pod_cgroups_finds_one_pod_per_qos_tier_and_skips_decoys(tree: Tree) -> None:
    expected = {uid: PodCgroup(path=tree.pod_paths[uid], qos=tree.qos[uid]) for uid in (G_UID, B_UID, BE_UID)}
    assert CgroupReader(tree.layout()).pod_cgroups() == expected


@pytest.mark.parametrize("tree", TREES, ids=TREE_IDS)
@pytest.mark.parametrize("uid", [G_UID, B_UID, BE_UID], ids=["guaranteed", "burstable", "besteffort"])
def test_container_cgroups_of_every_pod(tree: Tree, uid: str) -> None:
    reader = CgroupReader(tree.layout())
    found = reader.container_cgroups(tree.pod_paths[uid])
    assert found == tree.containers[uid]
    for path in found.values():
        assert reader.memory(path).usage_bytes > 0


@pytest.mark.parametrize("tree", TREES, ids=TREE_IDS)
def test_discovered_paths_feed_the_readers(tree: Tree) -> None:
    reader = CgroupReader(tree.layout())
    pods = reader.pod_cgroups()
    assert {uid: reader.memory(pod.path).working_set_bytes for uid, pod in pods.items()} == {
        G_UID: 200 * MiB,
        B_UID: 384 * MiB,
        BE_UID: 10 * MiB,
    }


@pytest.mark.parametrize("tree", TREES, ids=TREE_IDS)
def test_base_moves_the_pods_cgroup_below_another_cgroup(tree: Tree, tmp_path: Path) -> None:
    root = tmp_path / tree.name
    hierarchies = ["memory", "pids"] if tree.version == 1 else [""]
    for hierarchy in hierarchies:
        shutil.copytree(tree.root / hierarchy / tree.pods, root / hierarchy / "test.slice" / "node" / tree.pods)
    reader = CgroupReader(tree.layout(root, base="test.slice/node"))
    assert reader.pods_cgroup() == f"test.slice/node/{tree.pods}"
    pods = reader.pod_cgroups()
    assert pods[B_UID] == PodCgroup(path=f"test.slice/node/{tree.pod_paths[B_UID]}", qos="burstable")
    assert set(pods) == {G_UID, B_UID, BE_UID}
    assert figures(reader.memory(pods[G_UID].path)) == ROLE_TO_READING["g_pod"]
    assert reader.process_count(pods[B_UID].path) == 7


def test_missing_qos_tier_holds_no_pods(tmp_path: Path) -> None:
    tree = cgroupfs_tree(2)
    root = copy_tree(tree, tmp_path)
    shutil.rmtree(root / "kubepods" / "besteffort")
    assert set(CgroupReader(tree.layout(root)).pod_cgroups()) == {G_UID, B_UID}


def test_static_pod_uid_without_dashes_is_found(tmp_path: Path) -> None:
    tree = systemd_tree(2, "cri-containerd")
    root = copy_tree(tree, tmp_path)
    static_uid = "0123456789abcdef0123456789abcdef"  # md5 hex, as the kubelet names file-sourced pods
    (root / "kubepods.slice" / "kubepods-burstable.slice" / f"kubepods-burstable-pod{static_uid}.slice").mkdir()
    assert CgroupReader(tree.layout(root)).pod_cgroups()[static_uid].qos == "burstable"


# --------------------------------------------------------------------------------------------------
# Malformed and missing files: SampleError naming the file


V1_PODS = "memory/kubepods"


@pytest.mark.parametrize(
    ("version", "file", "content", "reason"),
    [
        pytest.param(1, "memory.usage_in_bytes", "garbage\n", "not an unsigned integer", id="v1-usage-garbage"),
        pytest.param(1, "memory.usage_in_bytes", "", "not an unsigned integer", id="v1-usage-empty"),
        pytest.param(1, "memory.usage_in_bytes", "-4096\n", "not an unsigned integer", id="v1-usage-negative"),
        pytest.param(1, "memory.usage_in_bytes", "1_000\n", "not an unsigned integer", id="v1-usage-underscore"),
        pytest.param(1, "memory.usage_in_bytes", f"{2**64}\n", "out of the uint64 range", id="v1-usage-overflow"),
        pytest.param(1, "memory.limit_in_bytes", "lots\n", "not an unsigned integer", id="v1-limit-garbage"),
        pytest.param(
            1, "memory.stat", "cache 0\nrss 0\ninactive_file 5\n", "no total_inactive_file line", id="v1-stat-no-key"
        ),
        pytest.param(
            1, "memory.stat", "total_inactive_file twelve\n", "not an unsigned integer", id="v1-stat-bad-value"
        ),
        pytest.param(2, "memory.current", "12 MiB\n", "not an unsigned integer", id="v2-current-garbage"),
        pytest.param(2, "memory.max", "maximum\n", "not an unsigned integer", id="v2-max-garbage"),
        pytest.param(2, "memory.stat", "anon 1\nfile 2\n", "no inactive_file line", id="v2-stat-no-key"),
        pytest.param(2, "memory.stat", "inactive_file -1\n", "not an unsigned integer", id="v2-stat-negative"),
    ],
)
def test_malformed_memory_file(tmp_path: Path, version: int, file: str, content: str, reason: str) -> None:
    tree = cgroupfs_tree(version)
    root = copy_tree(tree, tmp_path)
    path = root / (V1_PODS if version == 1 else "kubepods") / file
    path.write_text(content)
    with pytest.raises(SampleError) as info:
        CgroupReader(tree.layout(root)).memory(tree.pods)
    assert info.value.source == str(path)
    assert info.value.reason.startswith(reason)


@pytest.mark.parametrize("key", ["anon", "file", "inactive_file"])
def test_v2_root_memory_stat_without_a_needed_key(tmp_path: Path, key: str) -> None:
    tree = cgroupfs_tree(2)
    root = copy_tree(tree, tmp_path)
    stat = root / "memory.stat"
    stat.write_text("".join(line + "\n" for line in stat.read_text().splitlines() if line.split()[0] != key))
    with pytest.raises(SampleError) as info:
        CgroupReader(tree.layout(root)).memory("")
    assert (info.value.source, info.value.reason) == (str(stat), f"no {key} line")


@pytest.mark.parametrize(
    ("version", "file"),
    [
        (1, "memory.usage_in_bytes"),
        (1, "memory.stat"),
        (1, "memory.limit_in_bytes"),
        (2, "memory.current"),
        (2, "memory.stat"),
        (2, "memory.max"),
    ],
)
def test_missing_memory_file(tmp_path: Path, version: int, file: str) -> None:
    tree = cgroupfs_tree(version)
    root = copy_tree(tree, tmp_path)
    path = root / (V1_PODS if version == 1 else "kubepods") / file
    path.unlink()
    with pytest.raises(SampleError) as info:
        CgroupReader(tree.layout(root)).memory(tree.pods)
    assert (info.value.source, info.value.reason) == (str(path), "No such file or directory")


def test_unreadable_memory_file(tmp_path: Path) -> None:
    tree = cgroupfs_tree(1)
    root = copy_tree(tree, tmp_path)
    path = root / V1_PODS / "memory.usage_in_bytes"
    path.unlink()
    path.mkdir()  # a folder in place of the file: open succeeds, read fails with EISDIR
    with pytest.raises(SampleError) as info:
        CgroupReader(tree.layout(root)).memory(tree.pods)
    assert (info.value.source, info.value.reason) == (str(path), "Is a directory")


def sample_error_as_nobody(reader: CgroupReader, cgroup: str) -> tuple[str, str]:
    """Return (source, reason) of the SampleError that ``reader.memory(cgroup)`` raises for an unprivileged user.

    Root reads any file whatever its mode, so as root the read runs in a new Python process that drops to
    nobody (65534) itself and prints what it got. Not os.fork(): fork() in this process runs gRPC's atfork
    handlers, which restart its poller thread in the child (tests/test_hostile_input.py says more).
    """
    if os.geteuid() != 0:
        with pytest.raises(SampleError) as info:
            reader.memory(cgroup)
        return info.value.source, info.value.reason
    done = subprocess.run([sys.executable, "-c", AS_NOBODY], input=pickle.dumps((reader.layout, cgroup)),
                          capture_output=True, timeout=60, check=True)
    source, _, reason = done.stdout.decode().partition("\n")
    return source, reason


NOBODY = 65534  # the user the read runs as
AS_NOBODY = f"""
import os, pickle, sys
from evictd.adapters.cgroups import CgroupReader
from evictd.core.errors import SampleError
layout, cgroup = pickle.loads(sys.stdin.buffer.read())
os.setgid({NOBODY})
os.setuid({NOBODY})
try:
    CgroupReader(layout).memory(cgroup)
    print("no error")
except SampleError as exc:
    print(f"{{exc.source}}\\n{{exc.reason}}", end="")
"""




def test_permission_denied() -> None:
    tree = cgroupfs_tree(1)
    # tmp_path is private to its owner (0700); nobody must be able to walk to the file.
    top = Path(tempfile.mkdtemp(prefix="evictd-perm-", dir="/var/tmp"))
    try:
        top.chmod(0o755)
        root = top / tree.name
        shutil.copytree(tree.root, root)
        path = root / V1_PODS / "memory.stat"
        path.chmod(0)
        assert sample_error_as_nobody(CgroupReader(tree.layout(root)), tree.pods) == (str(path), "Permission denied")
    finally:
        shutil.rmtree(top)


def test_vanished_cgroup(tmp_path: Path) -> None:
    tree = cgroupfs_tree(2)
    reader = CgroupReader(tree.layout())
    with pytest.raises(SampleError) as info:
        reader.memory("kubepods/podgone")
    assert info.value.source == str(tree.root / "kubepods/podgone/memory.current")


@pytest.mark.parametrize("cgroup", ["../etc", "kubepods/../../x", ".."])
def test_cgroup_path_may_not_leave_the_hierarchy(cgroup: str) -> None:
    reader = CgroupReader(cgroupfs_tree(2).layout())
    with pytest.raises(SampleError) as info:
        reader.memory(cgroup)
    assert info.value.source == cgroup


def test_dots_inside_a_name_are_fine(tmp_path: Path) -> None:
    tree = cgroupfs_tree(2)
    root = copy_tree(tree, tmp_path)
    shutil.copytree(root / "kubepods", root / "a..b")
    assert figures(CgroupReader(tree.layout(root)).memory("a..b")) == ROLE_TO_READING["pods"]


@pytest.mark.parametrize(
    ("version", "content"),
    [(1, "eleven\n"), (1, "-1\n"), (2, "11 tasks\n"), (2, "")],
    ids=["v1-word", "v1-negative", "v2-suffix", "v2-empty"],
)
def test_malformed_pids_current(tmp_path: Path, version: int, content: str) -> None:
    tree = cgroupfs_tree(version)
    root = copy_tree(tree, tmp_path)
    path = root / ("pids/kubepods" if version == 1 else "kubepods") / "pids.current"
    path.write_text(content)
    with pytest.raises(SampleError) as info:
        CgroupReader(tree.layout(root)).process_count(tree.pods)
    assert info.value.source == str(path)


def test_malformed_cgroup_procs_in_the_fallback(tmp_path: Path) -> None:
    tree = cgroupfs_tree(1)
    root = copy_tree(tree, tmp_path)
    path = root / "memory" / tree.containers[BE_UID][BE_APP] / "cgroup.procs"
    path.write_text("7001\nnot-a-pid\n")
    with pytest.raises(SampleError) as info:
        CgroupReader(tree.layout(root)).process_count(tree.pod_paths[BE_UID])
    assert info.value.source == str(path)
    assert info.value.reason.startswith("not a PID list")


def test_fallback_without_cgroup_procs_is_an_error(tmp_path: Path) -> None:
    tree = cgroupfs_tree(1)
    root = copy_tree(tree, tmp_path)
    path = root / "memory" / tree.pod_paths[BE_UID] / "cgroup.procs"
    path.unlink()
    with pytest.raises(SampleError) as info:
        CgroupReader(tree.layout(root)).process_count(tree.pod_paths[BE_UID])
    assert info.value.source == str(path)


@pytest.mark.parametrize("tree", TREES, ids=TREE_IDS)
def test_missing_pods_cgroup_is_an_error(tree: Tree, tmp_path: Path) -> None:
    reader = CgroupReader(tree.layout(tmp_path))
    with pytest.raises(SampleError) as info:
        reader.pod_cgroups()
    hierarchy = tmp_path / "memory" if tree.version == 1 else tmp_path
    assert info.value.source == str(hierarchy / tree.pods)


def test_missing_pod_cgroup_when_listing_containers_is_an_error() -> None:
    tree = cgroupfs_tree(2)
    with pytest.raises(SampleError) as info:
        CgroupReader(tree.layout()).container_cgroups("kubepods/podgone")
    assert info.value.source == str(tree.root / "kubepods/podgone")
