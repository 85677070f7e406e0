"""The cgroup v2 tier's ground: the guest kernel is real cgroup v2 and keeps the host's files read-only.

Everything else in tests/uml stands on these facts: a memory controller in the guest's root, a real memcg
OOM kill counted in memory.events, a host root the guest cannot write outside its own folder, and a disk of
the guest's own whose files leave page cache.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import uml_guest
from uml_guest import REPO, boot_guest, boot_systemd_guest, uml_kernel

GUEST = """
guest_log "start"
mkdir /sys/fs/cgroup/probe
echo 32M > /sys/fs/cgroup/probe/memory.max
sh -c 'echo $$ > /sys/fs/cgroup/probe/cgroup.procs; exec "$EVICTD_PYTHON" -c "b=[bytearray(1 << 20) for _ in range(128)]"'
echo "$?" > "$UML_OUT/hog-exit"
cp /sys/fs/cgroup/probe/memory.events "$UML_OUT/memory.events"
cat /sys/fs/cgroup/cgroup.controllers > "$UML_OUT/controllers"
stat -f -c %T /sys/fs/cgroup > "$UML_OUT/cgroup-fs"
touch "$EVICTD_REPO/guest-was-here" 2> "$UML_OUT/repo-write-error"
echo written > "$UML_OUT/out-write"
mkdir /sys/fs/cgroup/reader
sh -c 'echo $$ > /sys/fs/cgroup/reader/cgroup.procs
  dd if=/dev/zero of="$UML_DISK_MOUNT/file" bs=1M count=24 status=none; sync; echo 1 > /proc/sys/vm/drop_caches
  cat "$UML_DISK_MOUNT/file" > /dev/null; cat "$UML_DISK_MOUNT/file" > /dev/null'
cp /sys/fs/cgroup/reader/memory.stat "$UML_OUT/reader-memory.stat"
mkdir -p /sys/fs/cgroup/victim/app
sh -c 'echo $$ > /sys/fs/cgroup/victim/app/cgroup.procs; exec sleep 600' &
victim=$!
sleep 0.5
"$EVICTD_PYTHON" -c "from evictd.adapters.cgroup_kill import kill_cgroup_tree as k; print(k('/sys/fs/cgroup/victim'))" \
  > "$UML_OUT/victim-killed" 2>&1
wait "$victim"; echo "$?" > "$UML_OUT/victim-exit"
"""


def test_guest_is_cgroup_v2_with_real_oom_kills_and_a_read_only_host(tmp_path: Path) -> None:
    run = boot_guest(GUEST, tmp_path / "out", mem_mib=256, timeout_s=120, disk_mib=64)

    assert run.text("cgroup-fs").strip() == "cgroup2fs"
    assert {"memory", "pids"} <= set(run.text("controllers").split())
    assert run.text("hog-exit").strip() == "137"  # SIGKILL from the memcg OOM killer
    events = dict(line.split() for line in run.text("memory.events").splitlines())
    assert int(events["oom_kill"]) >= 1
    assert "Read-only file system" in run.text("repo-write-error")
    assert not (REPO / "guest-was-here").exists()
    assert run.text("out-write").strip() == "written"
    # The guest's own disk keeps page cache in the reader's cgroup (hostfs files leave none), active once read
    # twice: what the arena's page-cache workloads stand on.
    stat = dict(line.split() for line in run.text("reader-memory.stat").splitlines())
    assert int(stat["active_file"]) >= 20 << 20, stat
    assert not (tmp_path / "out" / "disk.img").exists()
    # The hard eviction's last resort on cgroup v2: cgroup.kill of the pod cgroup kills what runs below it.
    assert run.text("victim-killed").strip() == "1"
    assert run.text("victim-exit").strip() == "137"


def test_a_missing_psi_kernel_fails_naming_its_make_target(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The PSI kernel is built by `make uml-kernel-psi` only (not `make test`); a guest that asks for it fails.
    monkeypatch.setattr(uml_guest, "UML_PSI_CACHE", tmp_path / "no-psi-kernel")
    with pytest.raises(AssertionError, match=r"make uml-kernel-psi"):
        uml_kernel("psi")
    monkeypatch.setenv("EVICTD_UML_KERNEL", "psi")
    with pytest.raises(AssertionError, match=r"make uml-kernel-psi"):
        uml_kernel()
    assert uml_kernel("default")[0] == uml_guest.UML_CACHE / "linux.uml"  # named, the environment does not count
    monkeypatch.setenv("EVICTD_UML_KERNEL", "debian")
    with pytest.raises(ValueError, match=r"one of default, psi"):
        uml_kernel()


def test_a_systemd_guest_that_cannot_run_evictd_halts_at_once_naming_it(tmp_path: Path) -> None:
    # What a checkout hidden from the guest looked like (one under /tmp, before it was kept): not a wait for the
    # boot's time-out, but a halt within seconds with the reason in probe.log.
    run = boot_systemd_guest("", "echo never reached\n", tmp_path / "out", mem_mib=256, timeout_s=120,
                             env={"EVICTD_PYTHON": "/nonexistent/bin/python"})
    assert run.text("probe-exit").strip() == "1"
    assert run.text("probe.log").strip() == (
        "the guest cannot run /nonexistent/bin/python with evictd (see guest-python-error)")
    assert "No such file" in run.text("guest-python-error") or "not found" in run.text("guest-python-error")
    assert run.elapsed_s < 60, run.elapsed_s
