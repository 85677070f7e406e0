"""Where evictd may keep system.slice's memory.low (evictd.adapters.daemons_protection): cgroup v1 never, cgroup v2
only where the hierarchy is mounted memory_recursiveprot (the mountinfo lines of a systemd 252 node and of a plain
`mount -t cgroup2`). The writes themselves run on a real cgroup v2 kernel: tests/uml/test_daemons_reclaim_v2.py."""

from __future__ import annotations

from pathlib import Path

from evictd.adapters.cgroups import CgroupLayout
from evictd.adapters.daemons_protection import protection_unavailable
from evictd.core.daemons_protection import V1_REASON

SYSTEMD = ("25 30 0:23 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:4 - cgroup2 cgroup2 "
           "rw,nsdelegate,memory_recursiveprot\n")
PLAIN = "25 30 0:23 / /sys/fs/cgroup rw,relatime shared:4 - cgroup2 none rw\n"
OTHER = "22 30 0:21 / /proc rw,nosuid,nodev,noexec,relatime shared:12 - proc proc rw\n"


def node(tmp_path: Path, mountinfo: str) -> tuple[CgroupLayout, str]:
    """A cgroup v2 layout whose system.slice has a memory.low, and a /proc whose mountinfo is `mountinfo` with the
    hierarchy's real path in place of /sys/fs/cgroup."""
    hierarchy = tmp_path / "cgroup"
    (hierarchy / "system.slice").mkdir(parents=True)
    (hierarchy / "system.slice" / "memory.low").write_text("0\n")
    proc = tmp_path / "proc"
    (proc / "self").mkdir(parents=True)
    (proc / "self" / "mountinfo").write_text(OTHER + mountinfo.replace("/sys/fs/cgroup", str(hierarchy)))
    return CgroupLayout(version=2, root=hierarchy), str(proc)


def test_systemds_mount_lets_evictd_keep_a_memory_low(tmp_path: Path) -> None:
    layout, proc = node(tmp_path, SYSTEMD)
    assert protection_unavailable(layout, proc) is None


def test_a_plain_mount_does_not_and_says_why(tmp_path: Path) -> None:
    layout, proc = node(tmp_path, PLAIN)
    reason = protection_unavailable(layout, proc)
    assert reason is not None and "without memory_recursiveprot" in reason and "systemd 247+" in reason


def test_the_last_mount_at_the_point_is_the_one_seen(tmp_path: Path) -> None:
    layout, proc = node(tmp_path, SYSTEMD + PLAIN)
    assert "without memory_recursiveprot" in (protection_unavailable(layout, proc) or "")
    layout, proc = node(tmp_path / "again", PLAIN + SYSTEMD)
    assert protection_unavailable(layout, proc) is None


def test_no_cgroup2_mount_there_and_no_system_slice_are_named(tmp_path: Path) -> None:
    layout, proc = node(tmp_path, OTHER)
    assert "no cgroup2 mount at" in (protection_unavailable(layout, proc) or "")
    bare = CgroupLayout(version=2, root=tmp_path / "empty")
    assert "no " in (protection_unavailable(bare, proc) or "") and "system.slice/memory.low" in (
        protection_unavailable(bare, proc) or "")


def test_cgroup_v1_has_no_memory_low(tmp_path: Path) -> None:
    assert protection_unavailable(CgroupLayout(version=1, root=tmp_path)) == V1_REASON
