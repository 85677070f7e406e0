"""`evictd run` protecting itself on this machine's real kernel: its memory locked (mlockall with MCL_ONFAULT), and
its oom_score_adj read, reported and, when asked, set (docs/deployment.md "What protects evictd").

Each process is started as an operator would start it; the ones without a privilege are started through
`prlimit` and `setpriv`, which change the limit and the capability sets and then exec evictd.
"""

from __future__ import annotations

from pathlib import Path

from evictd_process import EvictdProcess

from real_cgroups import CGROUP_MOUNT, temporary_cgroup

MiB = 1 << 20
# The DaemonSet's memory limit: a locked evictd must stay well inside it.
DAEMONSET_LIMIT_BYTES = 128 * MiB
# How much more a locked evictd may hold resident than an unlocked one beside it. Locking without MCL_ONFAULT would
# make every reserved page resident: 8 MiB per thread stack (14 threads) and the malloc arenas, over 100 MiB more.
LOCKED_RSS_MARGIN_BYTES = 16 * MiB
# A few KiB: far below evictd's address space (about 1 GiB), which the kernel counts in full against it.
LOW_MEMLOCK_BYTES = 16 * 1024
# Without CAP_IPC_LOCK (it ignores RLIMIT_MEMLOCK) and CAP_SYS_RESOURCE (lowering oom_score_adj), whatever the host
# gives root: this host's root has the first, not the second.
UNPRIVILEGED = ("prlimit", f"--memlock={LOW_MEMLOCK_BYTES}:{LOW_MEMLOCK_BYTES}",
                "setpriv", "--bounding-set", "-ipc_lock,-sys_resource", "--")


def status_kib(pid: int, field: str) -> int:
    """A `<n> kB` field of /proc/<pid>/status (or `smaps_rollup` for `Locked`), in KiB."""
    name = "smaps_rollup" if field == "Locked" else "status"
    for line in Path(f"/proc/{pid}/{name}").read_text().splitlines():
        key, _, value = line.partition(":")
        if key == field:
            return int(value.split()[0])
    raise AssertionError(f"no {field} in /proc/{pid}/{name}")


def own_oom_score_adj() -> int:
    return int(Path("/proc/self/oom_score_adj").read_text())


def test_memory_is_locked_on_fault_without_making_reserved_memory_resident(
    tmp_path: Path, evictd_processes: list[EvictdProcess]
) -> None:
    interval = "housekeepingInterval: 100ms\n"
    for name in ("locked", "unlocked"):
        (tmp_path / name).mkdir()
    locked = EvictdProcess(tmp_path / "locked", evictd=interval)
    unlocked = EvictdProcess(tmp_path / "unlocked", evictd=interval + "lockMemory: false\n")
    evictd_processes += [locked, unlocked]
    said = locked.wait_event("memory locked")
    assert said["level"] == "info" and said["flags"] == "MCL_CURRENT|MCL_FUTURE|MCL_ONFAULT"
    assert 0 < said["locked_kib"] <= said["rss_kib"] <= said["vm_locked_kib"], said
    assert unlocked.wait_event("memory not locked")["reason"] == "lockMemory is false"
    for process in (locked, unlocked):
        process.wait_event("evictd started")
        process.wait_for_cycles(20, timeout=30)
    pid, other = locked.process.pid, unlocked.process.pid
    assert (locked.metric("evictd_memory_locked"), unlocked.metric("evictd_memory_locked")) == (1, 0)
    # VmLck: the address space marked locked (threads' stacks and arenas included, resident or not); Locked: the
    # resident pages among it (proportional shares of the libraries both processes map).
    assert status_kib(pid, "VmLck") > 0 and status_kib(other, "VmLck") == 0
    rss, rss_unlocked = status_kib(pid, "VmRSS") * 1024, status_kib(other, "VmRSS") * 1024
    assert status_kib(pid, "Locked") * 1024 >= rss // 2
    assert rss <= rss_unlocked + LOCKED_RSS_MARGIN_BYTES, (rss, rss_unlocked)
    assert rss < DAEMONSET_LIMIT_BYTES // 2, rss
    # The oom_score_adj it was started with (the test's own), read and reported; above -997 it is a warning.
    inherited = own_oom_score_adj()
    event = "oom_score_adj exposes evictd" if inherited > -997 else "oom_score_adj"
    assert locked.wait_event(event)["oom_score_adj"] == inherited
    assert locked.metric("evictd_oom_score_adj") == inherited == int(Path(f"/proc/{pid}/oom_score_adj").read_text())
    assert locked.stop() == 0 and unlocked.stop() == 0


def test_without_the_privileges_evictd_says_why_and_runs_on(
    tmp_path: Path, evictd_processes: list[EvictdProcess]
) -> None:
    process = EvictdProcess(tmp_path, evictd="housekeepingInterval: 100ms\noomScoreAdj: -999\n",
                            wrapper=UNPRIVILEGED)
    evictd_processes.append(process)
    pid = process.process.pid
    not_locked = process.wait_event("memory not locked")
    assert not_locked["level"] == "warning"
    assert not_locked["reason"].startswith("no CAP_IPC_LOCK and RLIMIT_MEMLOCK is 16 KiB"), not_locked
    # Lowering oom_score_adj below what it was started with needs CAP_SYS_RESOURCE: the kernel answers EACCES.
    inherited = own_oom_score_adj()
    not_set = process.wait_event("oom_score_adj not set")
    assert (not_set["level"], not_set["requested"], not_set["value"], not_set["error"]) == (
        "warning", -999, inherited, "EACCES"), not_set
    assert "CAP_SYS_RESOURCE" in not_set["reason"]
    process.wait_event("evictd started")
    process.wait_for_cycles(5, timeout=30)
    assert process.metric("evictd_memory_locked") == 0 and status_kib(pid, "VmLck") == 0
    assert process.metric("evictd_oom_score_adj") == inherited == int(Path(f"/proc/{pid}/oom_score_adj").read_text())
    assert process.http("/healthz") == (200, "ok")
    assert process.stop() == 0


def test_the_nodes_memory_protection_is_logged_once_at_start(
    tmp_path: Path, evictd_processes: list[EvictdProcess]
) -> None:
    # The kubelet's cgroupRoot: a private cgroup of the real v1 memory hierarchy, its kubepods limited to 512 MiB;
    # no memory reserved for the daemons (a warning).
    with temporary_cgroup(CGROUP_MOUNT / "memory") as root:
        (root / "kubepods").mkdir()
        (root / "kubepods" / "memory.limit_in_bytes").write_text(str(512 * MiB))
        process = EvictdProcess(tmp_path, kubelet=f"cgroupRoot: /{root.name}\n",
                                evictd="housekeepingInterval: 100ms\n")
        evictd_processes.append(process)
        process.wait_event("evictd started")
        process.wait_for_cycles(3, timeout=30)
        assert process.stop() == 0
    said = [event for event in process.events if event["event"] == "node memory protection"]
    assert [(event["level"], event["status"], event["what"]) for event in said] == [
        ("warning", "warning", "systemReserved.memory, kubeReserved.memory"),
        ("info", "ok", "enforceNodeAllocatable"),
        ("info", "ok", "enforceNodeAllocatable system-reserved, systemReservedCgroup"),
        ("info", "ok", "enforceNodeAllocatable kube-reserved, kubeReservedCgroup"),
        ("info", "ok", f"{root}/kubepods/memory.limit_in_bytes"),
        ("info", "ok", "memory.min, memory.low"),
    ], "one line per finding, once"
    assert said[4]["value"] == str(512 * MiB) and said[0]["advice"].startswith("reserve what the daemons use")
    assert all({"value", "detail", "advice"} <= set(event) for event in said)
