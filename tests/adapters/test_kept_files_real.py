"""Kept descriptors (``pread`` at offset 0) against the real cgroup v1 hierarchies of this machine (run as root).

`CgroupReader` keeps the descriptors of ``memory.usage_in_bytes``, ``memory.stat``, ``memory.limit_in_bytes`` and
``pids.current`` open across cycles on cgroup v1 mounts. These tests check, on real cgroups in
``<memory|pids>/evictd-test-<random>/...``, that the values read that way are fresh, that a removed cgroup fails as
it does without kept descriptors, that a cgroup re-created under the same path is read anew, that descriptors of
cgroups no longer read are closed, that the cap holds, and that every descriptor is O_CLOEXEC and closed at the end.
What a kept descriptor is open on is read from ``/proc/self/fd``. They fail, never skip, without root or a v1
memory hierarchy.
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from evictd.adapters.cgroups import CgroupLayout, CgroupReader, detect_cgroup_layout
from evictd.adapters.kept_files import V1_KEPT_FILE_NAMES, keeps_files_in
from evictd.core.errors import SampleError
from real_cgroups import CGROUP_MOUNT, CgroupTree, new_test_cgroup_name

MiB = 1 << 20
ANON_BYTES = 32 * MiB
MEMORY_FILES = ("memory.usage_in_bytes", "memory.stat", "memory.limit_in_bytes")


@dataclass
class KeptNode:
    """A test cgroup (the layout's base) in the real memory and pids hierarchies, and readers over it."""

    layout: CgroupLayout
    tree: CgroupTree = field(default_factory=CgroupTree)
    readers: list[CgroupReader] = field(default_factory=list)

    def reader(self, kept_cap: int | None = None) -> CgroupReader:
        reader = CgroupReader(self.layout, kept_cap=kept_cap)
        self.readers.append(reader)
        return reader

    def cgroup(self, name: str) -> str:
        """Create ``<base>/<name>`` in both hierarchies; return it (relative to the hierarchy root)."""
        cgroup = f"{self.layout.base}/{name}"
        self.tree.make(cgroup)
        return cgroup


@pytest.fixture
def node() -> Iterator[KeptNode]:
    assert os.geteuid() == 0, "real cgroup tests need root to create cgroups"
    layout = detect_cgroup_layout(CGROUP_MOUNT, base=new_test_cgroup_name())
    assert layout.version == 1, "these tests use the machine's cgroup v1 memory and pids hierarchies"
    kept = KeptNode(layout)
    kept.tree.make(layout.base)
    try:
        yield kept
    finally:
        for reader in kept.readers:
            reader.close()
        kept.tree.remove()
    assert not (CGROUP_MOUNT / "memory" / layout.base).exists()


def open_files_under(cgroup: str) -> dict[str, int]:
    """Return the files of `cgroup` (in any hierarchy) this process has a descriptor on -> that descriptor."""
    found = {}
    for name in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{name}")
        except OSError:  # the listing's own descriptor, gone by now
            continue
        for hierarchy in ("memory", "pids"):
            folder = f"{CGROUP_MOUNT}/{hierarchy}/{cgroup}"
            if target.startswith(folder + "/") and "/" not in target[len(folder) + 1:]:
                found[target.removesuffix(" (deleted)")] = int(name)
    return found


def kept_names(cgroup: str) -> set[str]:
    return {path.rsplit("/", 1)[1] for path in open_files_under(cgroup)}


def test_descriptors_are_kept_in_cgroup_mounts_only(tmp_path: Path) -> None:
    assert keeps_files_in(str(CGROUP_MOUNT / "memory"))
    assert keeps_files_in(str(CGROUP_MOUNT / "pids"))
    assert not keeps_files_in(str(tmp_path))  # a fixture tree: a file replaced by rename would read stale
    assert not keeps_files_in(str(CGROUP_MOUNT))  # the tmpfs holding the v1 mounts


def test_kept_descriptors_read_fresh_memory_and_process_counts(node: KeptNode) -> None:
    pod = node.cgroup("pod")
    reader = node.reader()
    (CGROUP_MOUNT / "memory" / pod / "memory.limit_in_bytes").write_text(f"{512 * MiB}\n")
    before, tasks_before = reader.memory(pod), reader.process_count(pod)
    held = open_files_under(pod)
    assert {path.rsplit("/", 1)[1] for path in held} == V1_KEPT_FILE_NAMES
    child = node.tree.start_child(pod)
    child.do(f"alloc {ANON_BYTES}")
    child.do("fork 3")
    (CGROUP_MOUNT / "memory" / pod / "memory.limit_in_bytes").write_text(f"{256 * MiB}\n")
    after, tasks_after = reader.memory(pod), reader.process_count(pod)

    assert open_files_under(pod) == held  # the same descriptors, read again
    assert after.usage_bytes - before.usage_bytes >= ANON_BYTES
    assert after.working_set_bytes - before.working_set_bytes >= ANON_BYTES
    assert (before.limit_bytes, after.limit_bytes) == (512 * MiB, 256 * MiB)
    assert (tasks_before, tasks_after) == (0, 4)
    fresh = CgroupReader(node.layout, kept_cap=0)  # what open + read + close sees now
    assert fresh.memory(pod).limit_bytes == after.limit_bytes and fresh.process_count(pod) == tasks_after


def test_kept_descriptors_are_cloexec_and_closed_on_close(node: KeptNode) -> None:
    pod = node.cgroup("pod")
    reader = node.reader()
    reader.memory(pod)
    reader.process_count(pod)
    held = open_files_under(pod)
    assert len(held) == len(V1_KEPT_FILE_NAMES)
    for fd in held.values():
        assert os.get_inheritable(fd) is False  # O_CLOEXEC
    reader.close()
    assert open_files_under(pod) == {}
    assert reader.memory(pod).limit_bytes is None  # still usable: opened again
    assert kept_names(pod) == set(MEMORY_FILES)


def test_removed_cgroup_fails_as_without_kept_descriptors(node: KeptNode) -> None:
    pod = node.cgroup("pod")
    reader = node.reader()
    reader.memory(pod)
    reader.process_count(pod)
    reader.end_cycle()
    for hierarchy in ("memory", "pids"):
        (CGROUP_MOUNT / hierarchy / pod).rmdir()

    with pytest.raises(SampleError) as kept:
        reader.memory(pod)
    with pytest.raises(SampleError) as opened:
        CgroupReader(node.layout, kept_cap=0).memory(pod)
    assert (kept.value.source, kept.value.reason) == (opened.value.source, opened.value.reason)
    assert kept.value.reason == "No such file or directory"
    # pids.current gone: counted from the (missing) cgroup.procs, which fails as it did before.
    with pytest.raises(SampleError) as counted:
        reader.process_count(pod)
    assert counted.value.source == f"{CGROUP_MOUNT}/memory/{pod}/cgroup.procs"
    # memory's three files are read under one taking of the lock (`KeptFiles.read_many`): each fails, so each is
    # closed at once (one not read in a cycle would be closed at its end).
    assert kept_names(pod) == set()
    reader.end_cycle()
    assert open_files_under(pod) == {}


def test_recreated_cgroup_is_read_anew(node: KeptNode) -> None:
    pod = node.cgroup("pod")
    reader = node.reader()
    (CGROUP_MOUNT / "memory" / pod / "memory.limit_in_bytes").write_text(f"{512 * MiB}\n")
    assert reader.memory(pod).limit_bytes == 512 * MiB
    assert reader.process_count(pod) == 0
    old = open_files_under(pod)
    for hierarchy in ("memory", "pids"):
        (CGROUP_MOUNT / hierarchy / pod).rmdir()
        (CGROUP_MOUNT / hierarchy / pod).mkdir()  # a new cgroup under the same path: no limit, nobody in it
    child = node.tree.start_child(pod)
    child.do(f"alloc {ANON_BYTES}")

    again = reader.memory(pod)
    assert again.limit_bytes is None
    assert again.usage_bytes >= ANON_BYTES
    assert reader.process_count(pod) == 1
    assert kept_names(pod) == V1_KEPT_FILE_NAMES  # kept again, on the new cgroup's files
    assert len(old) == len(V1_KEPT_FILE_NAMES)
    assert all(os.stat(fd).st_ino == os.stat(path).st_ino for path, fd in open_files_under(pod).items())


def test_end_cycle_closes_descriptors_of_cgroups_no_longer_read(node: KeptNode) -> None:
    staying, leaving = node.cgroup("pod-a"), node.cgroup("pod-b")
    reader = node.reader()
    for cgroup in (staying, leaving):
        reader.memory(cgroup)
        reader.process_count(cgroup)
    reader.end_cycle()
    assert kept_names(staying) == kept_names(leaving) == V1_KEPT_FILE_NAMES

    reader.memory(staying)
    reader.process_count(staying)
    reader.end_cycle()  # the pod behind `leaving` went away: not read in this cycle
    assert kept_names(staying) == V1_KEPT_FILE_NAMES
    assert kept_names(leaving) == set()
    reader.end_cycle()  # nothing read since: every descriptor closed
    assert kept_names(staying) == set()


def test_cap_bounds_kept_descriptors_and_reads_the_rest_by_opening(node: KeptNode) -> None:
    pods = [node.cgroup(f"pod-{index}") for index in range(3)]
    (CGROUP_MOUNT / "memory" / pods[2] / "memory.limit_in_bytes").write_text(f"{128 * MiB}\n")
    reader = node.reader(kept_cap=5)
    for _ in range(2):
        readings = [reader.memory(pod) for pod in pods]
        counts = [reader.process_count(pod) for pod in pods]
        assert sum(len(open_files_under(pod)) for pod in pods) == 5
        assert [reading.limit_bytes for reading in readings] == [None, None, 128 * MiB]
        assert counts == [0, 0, 0]
    child = node.tree.start_child(pods[2])  # the last pod is read past the cap, by open + read + close
    child.do(f"alloc {ANON_BYTES}")
    assert reader.memory(pods[2]).usage_bytes >= ANON_BYTES
    assert reader.process_count(pods[2]) == 1
    assert not open_files_under(pods[2])


def test_fixture_trees_are_read_by_opening(tmp_path: Path) -> None:
    # A v1 fixture tree (not cgroupfs): files replaced by rename must be read anew, so nothing is kept.
    fixture = Path(__file__).parents[1] / "fixtures" / "cgroup" / "v1-cgroupfs"
    assert fixture.is_dir(), fixture
    root = tmp_path / "cgroup"
    shutil.copytree(fixture, root, symlinks=True)
    reader = CgroupReader(CgroupLayout(version=1, root=root))
    usage = root / "memory" / "memory.usage_in_bytes"
    first = reader.memory("").usage_bytes
    replacement = tmp_path / "usage"
    replacement.write_text(f"{first + 4096}\n")
    replacement.replace(usage)
    assert reader.memory("").usage_bytes == first + 4096
    assert not [fd for fd in os.listdir("/proc/self/fd")
                if os.path.realpath(f"/proc/self/fd/{fd}").startswith(str(root))]


def test_a_signal_cgroups_kernel_memory_is_kept_read_fresh_and_what_its_usage_holds_besides(
        node: KeptNode, tmp_path: Path) -> None:
    """The pods cgroup's reading also keeps ``memory.kmem.usage_in_bytes`` (kernel memory, which its usage counts too):
    usage less it, anonymous memory and page cache is what memory.stat leaves out, about nothing once it is flushed."""
    pods = f"{node.layout.base}/kubepods"
    node.tree.make(pods)
    reader = node.reader()
    kmem = CGROUP_MOUNT / "memory" / pods / "memory.kmem.usage_in_bytes"
    reader.memory(pods)
    assert kept_names(pods) == {*MEMORY_FILES, "memory.kmem.usage_in_bytes"}
    before = int(kmem.read_text())
    child = node.tree.start_child(pods)
    child.do(f"alloc {ANON_BYTES}")
    child.do(f"write {tmp_path / 'cached.bin'} {ANON_BYTES}")
    child.do("fork 40")  # page tables, stacks and task structs: kernel memory, more than a settled reading's slack
    held = open_files_under(pods)
    # memory.stat may not have folded the new pages in yet (the kernel flushes it every 2 s): read until it accounts
    # for the usage, as a settled reading does (a generous bound: a loaded machine's flush worker runs late).
    readings = [reader.memory(pods)]
    for _ in range(100):
        if readings[-1].unfolded_bytes == 0:
            break
        time.sleep(0.1)
        readings.append(reader.memory(pods))
    assert open_files_under(pods) == held, "the same descriptors, read again"
    assert int(kmem.read_text()) > before + 6 * MiB, "the children's kernel memory, read fresh through the kept one"
    assert readings[-1].unfolded_bytes == 0, [r.unfolded_bytes for r in readings]
    assert readings[-1].usage_bytes >= 2 * ANON_BYTES
