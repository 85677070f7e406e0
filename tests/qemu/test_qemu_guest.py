"""The arena's multi-CPU node (bench/node_survival.py --vm qemu): what its figures stand on.

A guest on qemu has two CPUs and a preemptible kernel (user-mode Linux has one CPU and none), PSI node-wide and per
cgroup, cgroup v2 with a real memcg OOM kill, a disk of its own whose files leave page cache, the checkout's
interpreter with evictd, and a host root it cannot write: qemu's share is read-only, whatever the guest does.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from qemu_guest import boot_guest
from uml_guest import REPO

pytestmark = pytest.mark.arena  # `make test-arena`, not `make test` (Makefile)

GUEST = """
guest_log "start"
nproc > "$UML_OUT/nproc"
uname -v > "$UML_OUT/uname-v"
cat /proc/pressure/memory > "$UML_OUT/node-pressure"
stat -f -c %T /sys/fs/cgroup > "$UML_OUT/cgroup-fs"
mkdir /sys/fs/cgroup/probe
echo 32M > /sys/fs/cgroup/probe/memory.max
sh -c 'echo $$ > /sys/fs/cgroup/probe/cgroup.procs; exec "$EVICTD_PYTHON" -c "b=[bytearray(1 << 20) for _ in range(128)]"'
echo "$?" > "$UML_OUT/hog-exit"
cp /sys/fs/cgroup/probe/memory.events "$UML_OUT/memory.events"
cp /sys/fs/cgroup/probe/memory.pressure "$UML_OUT/cgroup-pressure"
touch "$EVICTD_REPO/guest-was-here" 2> "$UML_OUT/repo-write-error"
mount -o remount,rw / 2>/dev/null; touch "$EVICTD_REPO/guest-was-here" 2> "$UML_OUT/repo-write-error-remounted"
"$EVICTD_PYTHON" -c "import evictd, sys; print(evictd.__file__)" > "$UML_OUT/evictd-import" 2>&1
mkdir /sys/fs/cgroup/reader
sh -c 'echo $$ > /sys/fs/cgroup/reader/cgroup.procs
  dd if=/dev/zero of="$UML_DISK_MOUNT/file" bs=1M count=24 status=none; sync; echo 1 > /proc/sys/vm/drop_caches
  cat "$UML_DISK_MOUNT/file" > /dev/null; cat "$UML_DISK_MOUNT/file" > /dev/null'
cp /sys/fs/cgroup/reader/memory.stat "$UML_OUT/reader-memory.stat"
"""


def test_qemu_guest_is_a_two_cpu_preemptible_psi_node_with_a_read_only_host(tmp_path: Path) -> None:
    run = boot_guest(GUEST, tmp_path / "out", mem_mib=512, timeout_s=240, disk_mib=64)

    assert run.text("nproc").strip() == "2"
    assert "PREEMPT" in run.text("uname-v"), run.text("uname-v")
    assert run.text("node-pressure").startswith("some avg10=")
    assert run.text("cgroup-fs").strip() == "cgroup2fs"
    assert run.text("hog-exit").strip() == "137"  # SIGKILL from the memcg OOM killer
    events = dict(line.split() for line in run.text("memory.events").splitlines())
    assert int(events["oom_kill"]) >= 1
    assert run.text("cgroup-pressure").startswith("some avg10=")
    assert "Read-only file system" in run.text("repo-write-error")
    assert "Read-only file system" in run.text("repo-write-error-remounted")
    assert not (REPO / "guest-was-here").exists()
    assert run.text("evictd-import").strip() == str(REPO / "src" / "evictd" / "__init__.py")
    # The guest's own disk keeps page cache in the reader's cgroup, active once read twice: what the arena's
    # page-cache workloads stand on.
    stat = dict(line.split() for line in run.text("reader-memory.stat").splitlines())
    assert int(stat["active_file"]) >= 20 << 20, stat
    assert not (tmp_path / "out" / "disk.img").exists()


NO_PSI_GUEST = """
ls /proc/pressure > "$UML_OUT/pressure-listing" 2>&1
mkdir /sys/fs/cgroup/kubepods.slice
cd "$EVICTD_REPO" && "$EVICTD_PYTHON" -m evictd check-config --config deploy/systemd/config.yaml -o json \\
  > "$UML_OUT/check-config.json" 2> "$UML_OUT/check-config.err"
"""


def test_booted_psi_0_it_is_a_node_without_psi_and_evictd_says_how_to_get_the_stall_signal(tmp_path: Path) -> None:
    # The arena's multi-CPU node without PSI (bench/node_survival.py --vm qemu --psi-off), checked with the shipped
    # configuration as an operator would: the stall signal is asked for but unavailable, and reclaim before evict,
    # on cgroup v2 with a pods cgroup, is active.
    run = boot_guest(NO_PSI_GUEST, tmp_path / "out", mem_mib=512, timeout_s=240, psi=False)
    assert "No such file or directory" in run.text("pressure-listing"), run.text("pressure-listing")
    verdicts = {v["protection"]: v for v in json.loads(run.text("check-config.json"))["protections"]}
    assert verdicts["memory_stall"]["state"] == "unavailable", verdicts
    assert "/proc/pressure/memory" in verdicts["memory_stall"]["detail"]
    assert "psi=1" in verdicts["memory_stall"]["how"]
    assert verdicts["reclaim_before_evict"]["state"] == "active", verdicts
