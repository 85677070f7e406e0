"""The node protection reader (evictd.adapters.node_protection) on this machine's real cgroup v1 memory hierarchy
(run as root), and on a cgroup v2 fixture tree for the v2 paths and file formats.

Each real test makes its own ``<memory>/evictd-test-<random>`` cgroup as the kubelet's cgroupRoot (the layout's
``base``), with a ``kubepods`` (or ``kubepods.slice``) cgroup under it whose ``memory.limit_in_bytes`` is set or
left at the kernel's "no limit"; the tree is removed afterwards. They fail, never skip, without root or a v1 memory
hierarchy. The v2 tests here read a fixture tree of what v2 files hold; the real v2 reading is checked in the
systemd guest (tests/uml/test_systemd_unit.py, `check-config` on a real cgroup v2 kernel).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from evictd.adapters.cgroups import CgroupLayout, CgroupReader, detect_cgroup_layout
from evictd.adapters.node_protection import read_node_cgroups
from evictd.core.node_protection import (
    NOT_FOUND,
    CgroupFile,
    Status,
    daemon_protection_finding,
    pods_limit_finding,
)
from real_cgroups import CGROUP_MOUNT, temporary_cgroup

MiB = 1 << 20
MEMORY = CGROUP_MOUNT / "memory"


@pytest.fixture
def test_root() -> Iterator[Path]:
    """A fresh cgroup in the real v1 memory hierarchy, removed (with all below it) afterwards."""
    with temporary_cgroup(MEMORY) as folder:
        yield folder


def reader(base: Path, driver: str = "cgroupfs") -> CgroupReader:
    layout = detect_cgroup_layout(CGROUP_MOUNT, driver, base=base.name)
    assert layout.version == 1, "this host is cgroup v1 (see REAL_COMPONENTS.md)"
    return CgroupReader(layout)


def test_a_limited_kubepods_cgroup_is_read_and_ok(test_root: Path) -> None:
    kubepods = test_root / "kubepods"
    kubepods.mkdir()
    (kubepods / "memory.limit_in_bytes").write_text(str(256 * MiB))
    facts = read_node_cgroups(reader(test_root))
    path = str(kubepods / "memory.limit_in_bytes")
    assert facts.pods_limit == CgroupFile(path, text=str(256 * MiB))
    assert (facts.version, facts.system_slice, facts.kubelet_unit) == (1, None, None)
    finding = pods_limit_finding(facts.pods_limit)
    assert (finding.status, finding.what, finding.value) == (Status.OK, path, str(256 * MiB))
    assert daemon_protection_finding(facts).value == "cgroup v1: none"


@pytest.mark.parametrize("driver", ["cgroupfs", "systemd"])
def test_a_kubepods_cgroup_without_a_limit_is_a_warning(test_root: Path, driver: str) -> None:
    kubepods = test_root / ("kubepods.slice" if driver == "systemd" else "kubepods")
    kubepods.mkdir()  # the kernel's own "no limit": the page counter's maximum
    facts = read_node_cgroups(reader(test_root, driver))
    path = str(kubepods / "memory.limit_in_bytes")
    assert facts.pods_limit.path == path
    assert facts.pods_limit.text is not None and int(facts.pods_limit.text) > 1 << 62, facts
    finding = pods_limit_finding(facts.pods_limit)
    assert (finding.status, finding.what) == (Status.WARNING, path)
    assert "pods are not held under allocatable" in finding.detail


def test_no_kubepods_cgroup_is_not_found(test_root: Path) -> None:
    facts = read_node_cgroups(reader(test_root))
    assert facts.pods_limit == CgroupFile(str(test_root / "kubepods" / "memory.limit_in_bytes"), problem=NOT_FOUND)
    assert pods_limit_finding(facts.pods_limit).status is Status.WARNING


def v2_tree(root: Path, files: dict[str, str]) -> CgroupLayout:
    """A cgroup v2 fixture tree at `root`: the root's cgroup.controllers (with memory) and `files`."""
    (root / "cgroup.controllers").write_text("cpuset cpu io memory pids\n")
    for relative, content in files.items():
        (root / relative).parent.mkdir(parents=True, exist_ok=True)
        (root / relative).write_text(content)
    layout = detect_cgroup_layout(root)
    assert layout.version == 2
    return layout


def test_v2_reads_memory_max_and_the_daemons_memory_min_and_low(tmp_path: Path) -> None:
    layout = v2_tree(tmp_path, {
        "kubepods/memory.max": "max\n",
        "system.slice/memory.min": "0\n", "system.slice/memory.low": "1073741824\n",
        "system.slice/kubelet.service/memory.min": "0\n", "system.slice/kubelet.service/memory.low": "max\n",
    })
    facts = read_node_cgroups(CgroupReader(layout))
    assert facts.version == 2
    assert facts.pods_limit == CgroupFile(str(tmp_path / "kubepods" / "memory.max"), text="max")
    assert facts.system_slice is not None and facts.kubelet_unit is not None
    assert (facts.system_slice.cgroup, facts.kubelet_unit.cgroup) == ("system.slice", "system.slice/kubelet.service")
    assert (facts.system_slice.min.text, facts.system_slice.low.text) == ("0", "1073741824")
    assert facts.kubelet_unit.low == CgroupFile(str(tmp_path / "system.slice/kubelet.service/memory.low"), text="max")
    assert pods_limit_finding(facts.pods_limit).status is Status.WARNING
    assert daemon_protection_finding(facts).status is Status.OK


def test_v2_under_cgroup_root_with_the_systemd_driver_and_what_cannot_be_read(tmp_path: Path) -> None:
    layout = v2_tree(tmp_path, {"nodes/kubepods.slice/memory.max": "8589934592\n",
                                "system.slice/memory.min": "\x1b[2J\n"})
    (tmp_path / "system.slice" / "memory.low").mkdir()  # a folder where a file belongs: unreadable
    facts = read_node_cgroups(CgroupReader(CgroupLayout(2, layout.root, driver="systemd", base="nodes")))
    assert facts.pods_limit == CgroupFile(str(tmp_path / "nodes/kubepods.slice/memory.max"), text="8589934592")
    assert facts.system_slice is not None and facts.kubelet_unit is not None
    assert facts.system_slice.min.text == "?[2J", "a terminal control is not passed on"
    assert facts.system_slice.low.problem == "unreadable: Is a directory"
    assert facts.kubelet_unit.min.problem == NOT_FOUND
    finding = daemon_protection_finding(facts)
    assert finding.status is Status.WARNING
    assert f"not confirmed, unreadable: {tmp_path}/system.slice/memory.low" in finding.detail
