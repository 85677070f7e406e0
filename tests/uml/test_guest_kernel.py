"""The cgroup v2 tier's ground: the guest kernel is real cgroup v2 and keeps the host's files read-only.

Everything else in tests/uml stands on these facts: a memory controller in the guest's root, a real memcg
OOM kill counted in memory.events, and a host root the guest cannot write outside its own folder.
"""

from __future__ import annotations

from pathlib import Path

from uml_guest import REPO, boot_guest

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
"""


def test_guest_is_cgroup_v2_with_real_oom_kills_and_a_read_only_host(tmp_path: Path) -> None:
    run = boot_guest(GUEST, tmp_path / "out", mem_mib=256, timeout_s=120)

    assert run.text("cgroup-fs").strip() == "cgroup2fs"
    assert {"memory", "pids"} <= set(run.text("controllers").split())
    assert run.text("hog-exit").strip() == "137"  # SIGKILL from the memcg OOM killer
    events = dict(line.split() for line in run.text("memory.events").splitlines())
    assert int(events["oom_kill"]) >= 1
    assert "Read-only file system" in run.text("repo-write-error")
    assert not (REPO / "guest-was-here").exists()
    assert run.text("out-write").strip() == "written"
