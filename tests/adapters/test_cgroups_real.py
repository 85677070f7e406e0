"""The cgroupfs adapter against the real cgroup v1 hierarchies of this machine (run as root).

Each test builds ``<memory|pids>/evictd-test-<random>/kubepods/burstable/pod<uid>/<container id>`` in the
real hierarchies, moves real child processes in through ``cgroup.procs``, makes them allocate memory,
write page cache and fork, and checks what the reader sees. The test cgroup is the layout's ``base``
(the kubelet's cgroupRoot), so discovery runs exactly as on a node. Everything is torn down bottom-up
(processes killed, cgroups removed, files deleted) even when a test fails.

These tests fail, never skip, when the machine lacks what they need (a v1 memory hierarchy, root).
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from evictd.adapters.cgroups import CgroupLayout, CgroupReader, PodCgroup, detect_cgroup_layout, v1_hierarchy_root
from evictd.adapters.procfs import mem_total_bytes
from real_cgroups import CGROUP_MOUNT, HIERARCHIES, CgroupTree, ScriptedChild, new_test_cgroup_name

MiB = 1024 * 1024
ANON_BYTES = 64 * MiB
PAGE_CACHE_BYTES = 32 * MiB
# Python's own allocations, page tables and stack pages also get charged; allow this much noise.
SLACK_BYTES = 8 * MiB


@dataclass
class RealNode:
    """A private kubelet-like cgroup tree inside the real v1 hierarchies, and what lives in it."""

    base: str
    pod_uid: str
    container_id: str
    layout: CgroupLayout
    reader: CgroupReader
    tree: CgroupTree = field(default_factory=CgroupTree)
    files: list[Path] = field(default_factory=list)

    @property
    def pod(self) -> str:
        return f"{self.base}/kubepods/burstable/pod{self.pod_uid}"

    @property
    def container(self) -> str:
        return f"{self.pod}/{self.container_id}"

    def make_cgroup(self, cgroup: str, hierarchies: tuple[str, ...] = HIERARCHIES) -> None:
        """Create ``cgroup`` (and its parents) in each of ``hierarchies``."""
        self.tree.make(cgroup, hierarchies)

    def start_child(self, cgroup: str, hierarchies: tuple[str, ...] = HIERARCHIES) -> ScriptedChild:
        """Start a child and move it into ``cgroup`` of each hierarchy by writing its PID to cgroup.procs."""
        return self.tree.start_child(cgroup, hierarchies)

    def teardown(self) -> None:
        """Kill every process in the test cgroups, then remove the cgroups bottom-up and the files."""
        self.tree.remove()
        for path in self.files:
            path.unlink(missing_ok=True)


@pytest.fixture
def node() -> Iterator[RealNode]:
    assert os.geteuid() == 0, "real cgroup tests need root to create cgroups"
    layout = detect_cgroup_layout(CGROUP_MOUNT, base=new_test_cgroup_name())
    assert layout.version == 1, "these tests use the machine's cgroup v1 memory and pids hierarchies"
    real = RealNode(
        base=layout.base,
        pod_uid=str(uuid.uuid4()),
        container_id=uuid.uuid4().hex + uuid.uuid4().hex,
        layout=layout,
        reader=CgroupReader(layout),
    )
    try:
        real.make_cgroup(real.container)
        yield real
    finally:
        real.teardown()
    assert not (CGROUP_MOUNT / "memory" / real.base).exists()
    assert not (CGROUP_MOUNT / "pids" / real.base).exists()


def test_machine_is_v1_hybrid_with_unlimited_root() -> None:
    layout = detect_cgroup_layout(CGROUP_MOUNT)
    assert (layout.version, layout.root) == (1, CGROUP_MOUNT)
    root = CgroupReader(layout).memory("")
    assert root.limit_bytes is None
    assert 0 < root.working_set_bytes <= root.usage_bytes < mem_total_bytes()


def test_only_the_root_of_the_memory_hierarchy_is_its_root(node: RealNode) -> None:
    # Where the machine's /proc/meminfo speaks for the memory cgroup (evictd.core.memcg.armed_inactive_file).
    assert v1_hierarchy_root(str(CGROUP_MOUNT / "memory"))
    assert not v1_hierarchy_root(str(CGROUP_MOUNT / "memory" / node.base))


@pytest.mark.quiet_machine  # the machine's task count: beside a user-mode guest's fork bomb it was off by 465
def test_root_process_count_counts_every_process(tmp_path: Path) -> None:
    # The v1 pids root has no pids.current: the reader counts cgroup.procs across the whole memory
    # hierarchy, which must match the processes in /proc (give or take those starting or exiting).
    counted = CgroupReader(detect_cgroup_layout(CGROUP_MOUNT)).process_count("")
    in_proc = sum(1 for name in os.listdir("/proc") if name.isdigit())
    assert abs(counted - in_proc) <= 10, (counted, in_proc)


def test_working_set_grows_with_anonymous_memory(node: RealNode) -> None:
    child = node.start_child(node.container)
    before = node.reader.memory(node.container)
    pod_before = node.reader.memory(node.pod)
    child.do(f"alloc {ANON_BYTES}")
    after = node.reader.memory(node.container)
    pod_after = node.reader.memory(node.pod)

    grown = after.working_set_bytes - before.working_set_bytes
    assert ANON_BYTES - MiB <= grown <= ANON_BYTES + SLACK_BYTES, grown
    assert after.usage_bytes - before.usage_bytes >= ANON_BYTES - MiB
    # v1 memory cgroups are hierarchical: the pod sees its container's memory.
    assert pod_after.working_set_bytes - pod_before.working_set_bytes >= ANON_BYTES - MiB
    assert after.limit_bytes is None


def test_limit_is_read_back_as_the_kernel_rounds_it(node: RealNode) -> None:
    (CGROUP_MOUNT / "memory" / node.pod / "memory.limit_in_bytes").write_text("100000000\n")
    page = os.sysconf("SC_PAGE_SIZE")
    assert node.reader.memory(node.pod).limit_bytes == 100000000 // page * page
    assert node.reader.memory(node.container).limit_bytes is None  # the child's own limit is unset


def test_page_cache_is_inactive_file_not_working_set(node: RealNode) -> None:
    child = node.start_child(node.container)
    # Disk-backed (ext4), not tmpfs: tmpfs pages are shmem, which counts as used memory.
    cache_file = Path("/var/tmp") / f"{node.base}.bin"
    node.files.append(cache_file)
    before = node.reader.memory(node.container)
    child.do(f"write {cache_file} {PAGE_CACHE_BYTES}")
    after = node.reader.memory(node.container)

    inactive_grown = after.inactive_file_bytes - before.inactive_file_bytes
    usage_grown = after.usage_bytes - before.usage_bytes
    working_set_grown = after.working_set_bytes - before.working_set_bytes
    # Pages written once start on the inactive list; allow a quarter of them to have been activated.
    assert inactive_grown >= PAGE_CACHE_BYTES * 3 // 4, inactive_grown
    assert usage_grown >= PAGE_CACHE_BYTES - MiB, usage_grown
    assert working_set_grown <= PAGE_CACHE_BYTES // 4 + SLACK_BYTES, working_set_grown


def test_process_count_follows_forked_children(node: RealNode) -> None:
    child = node.start_child(node.container)
    assert node.reader.process_count(node.container) == 1
    child.do("fork 5")
    assert node.reader.process_count(node.container) == 6
    assert node.reader.process_count(node.pod) == 6  # pids.current is hierarchical
    child.do("reap")
    assert node.reader.process_count(node.container) == 1


def test_process_count_without_pids_cgroup_counts_cgroup_procs_below(node: RealNode) -> None:
    # A second container that exists only in the memory hierarchy: no pids.current to read.
    other = f"{node.pod}/{'e' * 64}"
    node.make_cgroup(other, hierarchies=("memory",))
    child = node.start_child(other, hierarchies=("memory",))
    assert not (CGROUP_MOUNT / "pids" / other).exists()
    assert node.reader.process_count(other) == 1
    child.do("fork 3")
    assert node.reader.process_count(other) == 4


def test_pod_and_container_discovery(node: RealNode) -> None:
    guaranteed_uid, besteffort_uid = str(uuid.uuid4()), str(uuid.uuid4())
    guaranteed = f"{node.base}/kubepods/pod{guaranteed_uid}"
    besteffort = f"{node.base}/kubepods/besteffort/pod{besteffort_uid}"
    node.make_cgroup(guaranteed)
    node.make_cgroup(besteffort)
    node.make_cgroup(f"{node.base}/kubepods/burstable/not-a-pod")

    assert node.reader.pods_cgroup() == f"{node.base}/kubepods"
    assert node.reader.pod_cgroups() == {
        node.pod_uid: PodCgroup(path=node.pod, qos="burstable"),
        guaranteed_uid: PodCgroup(path=guaranteed, qos="guaranteed"),
        besteffort_uid: PodCgroup(path=besteffort, qos="besteffort"),
    }
    assert node.reader.container_cgroups(node.pod) == {node.container_id: node.container}
    assert node.reader.container_cgroups(guaranteed) == {}
