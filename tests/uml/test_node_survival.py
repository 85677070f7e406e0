"""The node-survival arena's short cell (bench/node_survival.py, issue #36): so that the arena cannot rot.

One guest boot (1 GiB, cgroup v2) runs the ``be-slow`` workload (a BestEffort pod growing 10 MiB/s beside a
Guaranteed pod and a system daemon, from 300 MiB available) twice: with the kernel alone, then with evictd as
shipped. Outcomes come from the guest kernel (``oom-kill:`` records of /dev/kmsg, exit statuses) and the API
server (the pods' objects), as the arena reads them:

* the kernel alone: the kernel OOM-kills, and only the BestEffort grower; no pod is evicted;
* evictd: no kernel OOM kill; the grower is evicted, and it is the pod the kubelet's ranking names;
* both: the Guaranteed pod and the system daemon are alive at the end; evictd is too.

The stand-in backend runs in `make test` (about 100 s); the real one (the real kubelet, containerd and API
server in a 2 GiB guest) is marked ``real_cluster`` and runs in `make test-cluster`, with the same assertions. A missing
component (the kernel, earlyoom, evictd, kube binaries) fails the test; nothing here skips.

Beside it, the arena's readers on fixed inputs (a kernel record as the guest's kernel wrote it).
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
from node_survival import missing_host_programs, run_boot
from node_survival_catalog import WORKLOADS, workload
from node_survival_controls import CONTROL_WORKLOADS
from node_survival_controls_guest import Controls, evictd_settings
from node_survival_falsetriggers import (
    COMPACTION,
    DB_FILE_MIB,
    DB_FITS,
    EARLIER_FALSE_TRIGGERS,
    FALSE_TRIGGER_WORKLOADS,
    JVM_WARMUP,
    LOG_SHIPPER,
    PRIOR_CACHE_UNIT,
    FalseTriggerRun,
    compaction_output,
    disk_short_mib,
    log_path,
    work_figures,
)
from node_survival_guest import (
    AFTER_STOP_WATCH_S,
    EVICTD_NO_MIN_RECLAIM,
    KUBELET_SAME_BESIDE_DRY_RUN,
    SETTLE_S,
    evictd_documents,
    run_over,
    status_pending,
)
from node_survival_nodes import kubelet_pid, kubelet_same
from node_survival_outcomes import (
    BESTEFFORT,
    BURSTABLE,
    EVICTD,
    GUARANTEED,
    HARD_CROSSING_BYTES,
    KUBELET,
    OTHER,
    SYSTEM_DAEMON,
    below_seconds,
    cell_rows,
    control_rows,
    crossing_figures,
    false_trigger_rows,
    heartbeat_max_gap_s,
    host_ran_short,
    lease_renew_max_gap_s,
    longest_gap,
    low_memory_seconds,
    oom_kill_record,
    own_limit_rows,
    ranking_sample,
    victim_class,
)
from node_survival_ownlimit import (
    BACKUP_STREAM,
    OWN_LIMIT_THRASH,
    THRASHER_FILE_MIB,
    THRASHER_LIMIT_MIB,
    counter_delta,
    events_counts,
    node_scan_pages,
)
from node_survival_pagecache import (
    DAEMONS_RECLAIM_PROTECTOR,
    DAEMONS_REFAULT_PROTECTOR,
    DAEMONS_REFAULT_SHARE,
    THRASH_DAEMON_MIB,
    THRASH_KUBELET_MIB,
    FilePodSpec,
    daemon_argv,
    files_of,
    kubelet_argv,
    pod_script,
    psi_totals,
    reclaim_settings,
    refault_file_mib,
    stall_maps,
    value_at,
    vmstat_counters,
)
from node_survival_workloads import BURST_CHUNK_MIB, GROWER, HEARTBEAT

from evictd.core.signals import Signal
from evictd.core.thresholds import STALL_FIELDS

SHORT_CELL = {"protectors": ("kernel", "evictd"), "workloads": ("be-slow",), "runs": 1, "kernel": None,
              "start_available_mib": 300, "run_timeout_s": 90.0, "disk_mib": 0}
# The real backend's cluster (etcd, kube-apiserver, controller-manager, scheduler, containerd) takes ~500 MiB.
MEM_MIB = {"stand-in": 1024, "real": 2048}
MiB = 1 << 20
BACKENDS = ["stand-in", pytest.param("real", marks=pytest.mark.real_cluster)]


@pytest.fixture(scope="module", params=BACKENDS)
def cell(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    backend = str(request.param)
    out = tmp_path_factory.mktemp(f"node-survival-{backend}")
    _, records = run_boot(out, backend=backend, mem_mib=MEM_MIB[backend], **SHORT_CELL)  # type: ignore[arg-type]
    errors = [r for r in records if "error" in r]
    assert not errors, f"runs failed in the guest: {errors[0]['traceback']}"
    yield {r["protector"]: r for r in records}


def test_the_kernel_alone_oom_kills_the_besteffort_grower(cell: dict[str, Any]) -> None:
    kernel = cell["kernel"]
    assert kernel["oomKills"], "the grower reached the end of memory: the kernel's OOM killer fired"
    assert {kill["class"] for kill in kernel["oomKills"]} == {BESTEFFORT}, kernel["oomKills"]
    assert {kill["pod"] for kill in kernel["oomKills"]} == {"grower"}
    assert kernel["stopped"] == {"grower": "OOM-killed"}
    assert kernel["evictions"] == []
    assert kernel["guaranteedAlive"] and kernel["daemonAlive"]


def test_evictd_evicts_the_grower_before_the_kernel_kills(cell: dict[str, Any]) -> None:
    evictd = cell["evictd"]
    assert evictd["oomKills"] == [], "no kernel OOM kill with evictd"
    assert [e["pod"] for e in evictd["evictions"]] == ["grower"]
    assert evictd["evictions"][0]["asRanked"], evictd["evictions"]
    assert evictd["stopped"] == {"grower": "evicted"}
    assert evictd["guaranteedAlive"] and evictd["daemonAlive"]
    assert evictd["evictd"]["aliveAtEnd"]
    assert evictd["reliefS"] is not None and evictd["reliefS"] < cell["kernel"]["reliefS"]


def test_the_run_names_its_kernel(cell: dict[str, Any]) -> None:
    for run in cell.values():
        assert run["kernel"]["release"] and run["kernel"]["label"]
        assert run["memTotalMib"] < MEM_MIB[run["backend"]]


# A record as the guest's 6.1 kernel wrote it (/dev/kmsg: priority, sequence, microseconds, flags; message).
KMSG_OOM = ("6,1073,69080000,-;oom-kill:constraint=CONSTRAINT_NONE,nodemask=(null),cpuset=/,mems_allowed=0,"
            "global_oom,task_memcg=/kubepods/besteffort/pod2e3135f3-5af5-4445-867e-fcbc7869a36c/4bd991a15a5b,"
            "task=python,pid=707,uid=0")


def test_a_protector_whose_program_the_host_lacks_is_named_with_its_install(tmp_path: Path,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    assert missing_host_programs(["kernel", "evictd", "earlyoom"]) == [
        "earlyoom needs earlyoom (apt-get install earlyoom)"]
    (tmp_path / "earlyoom").write_text("#!/bin/sh\n")
    (tmp_path / "earlyoom").chmod(0o755)
    assert missing_host_programs(["kernel", "evictd", "earlyoom"]) == []


def test_the_arena_refuses_a_protector_whose_program_the_host_lacks_before_it_boots(tmp_path: Path) -> None:
    bench = Path(__file__).resolve().parents[2] / "bench" / "node_survival.py"
    out = tmp_path / "arena-out"
    done = subprocess.run([sys.executable, str(bench), "--out", str(out),
                           "--protectors", "kernel,earlyoom", "--runs", "1"],
                          env={"PATH": str(tmp_path)}, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2, done.stderr
    assert "earlyoom needs earlyoom (apt-get install earlyoom)" in done.stderr
    assert "Traceback" not in done.stderr
    assert not out.exists()


def test_an_oom_kill_record_is_read_with_its_cgroup_and_time() -> None:
    record = oom_kill_record(KMSG_OOM)
    assert record is not None
    assert record["task_memcg"].startswith("/kubepods/besteffort/pod2e3135f3")
    assert (record["task"], record["pid"], record["usec"]) == ("python", "707", "69080000")
    assert oom_kill_record("6,1074,69080001,-;Out of memory: Killed process 707 (python)") is None


def test_user_mode_linux_running_short_on_the_host_is_read_from_the_kernel_log() -> None:
    # The message as the 7.2.7 guest's console showed it when its host process reached vm.max_map_count (the grower
    # then died of SIGSEGV: its container's exit code 139, no OOM kill), in a /dev/kmsg record's form.
    line = ("3,2210,52880000,-;UML ran out of memory on the host side! This can happen due to a memory limitation "
            "or vm.max_map_count has been reached.")
    assert host_ran_short(line)
    assert not host_ran_short("6,2211,52880001,-;userspace - Error flushing stub syscalls: 12")
    assert not host_ran_short(KMSG_OOM)


@pytest.mark.parametrize(("cgroup", "expected"), [
    ("/kubepods/besteffort/pod2e3135f3-5af5-4445-867e-fcbc7869a36c/abc", BESTEFFORT),
    ("/kubepods/burstable/pod2e3135f3-5af5-4445-867e-fcbc7869a36c/abc", BURSTABLE),
    ("/kubepods/pod2e3135f3-5af5-4445-867e-fcbc7869a36c/abc", GUARANTEED),
    ("/evictd-rk-1a2b3c4d/kubepods/besteffort/pod2e3135f3-5af5-4445-867e-fcbc7869a36c/abc", BESTEFFORT),
    ("/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod2e3135f3_5af5_4445_867e_fcbc7869a36c.slice/"
     "cri-containerd-abc.scope", BESTEFFORT),
    ("/kubepods.slice/kubepods-pod2e3135f3_5af5_4445_867e_fcbc7869a36c.slice/cri-containerd-abc.scope", GUARANTEED),
    ("/system.slice/heartbeat.service", SYSTEM_DAEMON),
    ("/system.slice/kubelet.service", KUBELET),
    ("/system.slice/evictd.service", EVICTD),
    ("/", OTHER),
    ("/kubepods", OTHER),
], ids=["besteffort", "burstable", "guaranteed", "below-cgroup-root", "systemd-besteffort", "systemd-guaranteed", "daemon", "kubelet",
        "evictd", "root", "pods-cgroup-itself"])
def test_victim_classes(cgroup: str, expected: str) -> None:
    assert victim_class(cgroup) == expected


def test_heartbeat_gap_counts_a_daemon_that_stopped_beating() -> None:
    assert heartbeat_max_gap_s([1.0, 1.1, 1.2, 3.0, 3.1], since=1.0, until=3.2) == pytest.approx(1.8)
    assert heartbeat_max_gap_s([1.0, 1.1], since=1.0, until=5.0) == pytest.approx(3.9)
    assert heartbeat_max_gap_s([], since=1.0, until=5.0) is None
    # Beat before the run and never in it: stalled for all of it; a first beat late in the run counts from its start.
    assert heartbeat_max_gap_s([0.5, 0.9], since=1.0, until=5.0) == pytest.approx(4.0)
    assert heartbeat_max_gap_s([0.9, 3.0, 3.1], since=1.0, until=3.2) == pytest.approx(2.0)


def test_lease_gap_is_the_largest_step_between_distinct_renewals() -> None:
    assert lease_renew_max_gap_s([100.0, 100.0, 110.0, 110.0, 127.5, 137.5]) == pytest.approx(17.5)
    assert lease_renew_max_gap_s([100.0, 100.0]) is None


def test_low_memory_seconds_sum_the_intervals_below_one_percent() -> None:
    total = 1000
    samples = [(0.0, 50), (1.0, 5), (1.5, 9), (2.0, 200), (3.0, 1)]
    assert low_memory_seconds(samples, total) == pytest.approx(1.0)



def test_the_latency_figure_runs_from_the_kubelets_figure_crossing_the_hard_threshold_to_the_first_eviction() -> None:
    above, below = HARD_CROSSING_BYTES, HARD_CROSSING_BYTES - 1
    signal = [(99.0, below), (100.0, above), (100.1, above), (102.3, below), (102.4, below)]  # a dip before start
    assert crossing_figures(signal, 100.0, [2.45, 5.0]) == {"hardCrossedS": pytest.approx(2.3),
                                                            "crossingToEvictionS": pytest.approx(0.15)}
    assert crossing_figures(signal, 100.0, []) == {"hardCrossedS": pytest.approx(2.3), "crossingToEvictionS": None}
    assert crossing_figures(signal[:3], 100.0, [1.0]) == {"hardCrossedS": None, "crossingToEvictionS": None}


# --- the page-cache workloads and the stall protector (bench/node_survival_pagecache.py), no guest ------------

VMSTAT = "nr_free_pages 1000\nworkingset_refault_anon 7\nworkingset_refault_file 100\nworkingset_activate_file 3\n"


def test_file_pages_re_read_are_the_refault_counters_delta_in_mib() -> None:
    before = vmstat_counters(VMSTAT)
    after = vmstat_counters(VMSTAT.replace("refault_file 100", "refault_file 612"))
    assert before["workingset_refault_file"] == 100
    assert refault_file_mib(before, after) == pytest.approx(2.0)  # 512 pages of 4 KiB
    # Kernels before 5.9 have one counter for both kinds.
    assert refault_file_mib({"workingset_refault": 10}, {"workingset_refault": 266}) == pytest.approx(1.0)
    assert refault_file_mib({"nr_free_pages": 1}, {"nr_free_pages": 2}) is None


def test_an_eviction_is_ranked_on_the_last_sample_in_which_the_evicted_pod_still_ran() -> None:
    # (working set, processes) per pod: the grower was stopped through its cgroup at 2.0, and the API recorded its
    # eviction later; ranked on the latest sample, the Guaranteed pod would be named.
    running = {"grower": (900, 2), "guaranteed": (300, 1)}
    stopped = {"grower": (0, 0), "guaranteed": (300, 1)}
    assert ranking_sample([(1.0, running), (2.0, stopped), (3.0, stopped)], "grower") is running
    # Never seen running: the sample before the last.
    assert ranking_sample([(1.0, stopped), (2.0, {"guaranteed": (310, 1)})], "grower") is stopped
    assert ranking_sample([(1.0, stopped)], "grower") is stopped


def test_psi_totals_are_seconds_stalled() -> None:
    text = ("some avg10=1.00 avg60=0.50 avg300=0.10 total=2500000\n"
            "full avg10=0.50 avg60=0.20 avg300=0.05 total=1000000\n")
    assert psi_totals(text) == {"some": pytest.approx(2.5), "full": pytest.approx(1.0)}


def test_memory_available_at_the_daemons_longest_gap() -> None:
    beats = [1.0, 1.1, 1.2, 4.2, 4.3]
    assert longest_gap(beats, since=1.0, until=4.4) == (1.2, pytest.approx(3.0))
    assert longest_gap(beats, since=5.0, until=6.0) == (5.0, pytest.approx(1.0))  # beat before, never in it
    assert longest_gap([], since=5.0, until=6.0) is None
    samples = [(1.0, 500), (1.15, 450), (1.3, 300)]
    assert value_at(samples, 1.2) == 450
    assert value_at(samples, 0.5) is None


def test_many_small_slow_is_many_small_at_a_rate_the_kubelets_housekeeping_can_follow() -> None:
    fast, slow = workload("many-small", 3072, 2872), workload("many-small-slow", 3072, 2872)
    assert "many-small-slow" in WORKLOADS and fast.hold_s == 20.0
    assert slow.hold_s > 90.0 + 10.0, "past the shipped soft grace period and a kubelet tick"
    assert [(p.name, p.qos, p.request_mib, p.cap_mib, p.pressure) for p in slow.pods] == \
        [(p.name, p.qos, p.request_mib, p.cap_mib, p.pressure) for p in fast.pods]
    assert [p.request_mib for p in slow.pods] == [287] * 10  # the admitted requests, shared
    assert sum(p.rate_mib_s for p in fast.pods) == pytest.approx(20.0)
    # 200 MiB of margin (the hard threshold) lasts 25 s: two of the kubelet's 10 s housekeeping passes at least.
    assert sum(p.rate_mib_s for p in slow.pods) == pytest.approx(8.0)


def test_the_page_cache_workloads() -> None:
    assert {"thrash", "active-file"} <= set(WORKLOADS)
    thrash = workload("thrash", 2495)
    pods = {p.name: p for p in thrash.pods}
    assert isinstance(pods["reader"], FilePodSpec) and pods["reader"].qos == "burstable"
    assert pods["reader"].mode == "mmap-loop" and not pods["reader"].pressure
    assert (pods["grower"].qos, pods["grower"].rate_mib_s, pods["grower"].pressure) == ("besteffort", 10.0, True)
    assert [mib for _, mib in files_of(thrash)] == [pods["reader"].file_mib, THRASH_DAEMON_MIB, THRASH_KUBELET_MIB]
    script, beats = daemon_argv(thrash, Path("/w/heartbeat"))
    assert beats == "/w/heartbeat" and "daemon-150MiB.dat" in script
    kubelet = kubelet_argv(thrash, Path("/w/kubelet-heartbeat"))
    assert kubelet is not None and kubelet[1] == "/w/kubelet-heartbeat" and "kubelet-100MiB.dat" in kubelet[0]
    compile(kubelet[0], "kubelet", "exec")
    assert kubelet_argv(workload("active-file", 2495), Path("/w/k")) is None, "the thrash's alone"
    active = {p.name: p for p in workload("active-file", 2495).pods}
    assert isinstance(active["reader"], FilePodSpec) and active["reader"].mode == "read-twice"
    assert active["reader"].qos == "besteffort"
    # The filler holds the head start (what is available beyond 600 MiB) within its request.
    assert active["filler"].qos == "burstable" and (active["filler"].request_mib or 0) > 2495 - 600
    assert active["filler"].rate_mib_s == 0.0 and active["filler"].pressure
    for spec in (*thrash.pods, *active.values()):
        compile(pod_script(spec), spec.name, "exec")
    assert pod_script(pods["grower"]) == GROWER
    assert daemon_argv(workload("be-slow", 2495), Path("/w/heartbeat")) == (HEARTBEAT, "/w/heartbeat")
    assert files_of(workload("be-slow", 2495)) == []


def test_the_backup_pod_workloads_stream_beside_the_file_backed_daemons() -> None:
    """Issue 74's node: a BestEffort pod streaming one file (twice, or ten times) beside thrash's daemons."""
    for name, passes in (("backup-pod", 2), ("backup-pod-long", 10)):
        spec = workload(name, 1536)
        pods = {p.name: p for p in spec.pods}
        assert (pods["backup"].qos, pods["backup"].pressure) == ("besteffort", True)
        assert pods["backup"].script.startswith("FILE, PASSES = '") and f", {passes}\n" in pods["backup"].script
        compile(pod_script(pods["backup"]), name, "exec")
        assert [mib for _, mib in files_of(spec)] == [1000, THRASH_DAEMON_MIB, THRASH_KUBELET_MIB]
        assert kubelet_argv(spec, Path("/w/k")) is not None
    assert reclaim_settings(DAEMONS_RECLAIM_PROTECTOR) == {"daemonsReclaim": True}
    assert "daemonsReclaim" not in reclaim_settings("evictd")


def _grow(tmp_path: Path, name: str, cap_mib: int) -> tuple[float, int]:
    """Run the GROWER of workload `name`'s grower here to `cap_mib` (no head start); return the seconds from its
    `grow` file until its resident anonymous memory holds the cap, and how many times it slept meanwhile (its
    voluntary context switches: a pause between chunks is one; a page fault taken while the machine is busy is an
    involuntary one)."""
    grower = next(p for p in workload(name, 2495).pods if p.name == "grower")
    control = tmp_path / name
    control.mkdir()
    proc = subprocess.Popen([sys.executable, "-c", GROWER, "0", str(grower.rate_mib_s), str(cap_mib), str(control),
                             "grower"])

    def status() -> dict[str, str]:
        lines = Path(f"/proc/{proc.pid}/status").read_text().splitlines()
        return dict(line.split(":\t", 1) for line in lines if ":\t" in line)

    try:
        (control / "go.grower").touch()
        deadline = time.monotonic() + 30
        while not (control / "ready.grower").exists():
            assert time.monotonic() < deadline and proc.poll() is None, "the grower never became ready"
            time.sleep(0.01)
        slept_before = int(status()["voluntary_ctxt_switches"])
        start = time.monotonic()
        (control / "grow").touch()
        while True:
            now = status()
            anon_kib = int(now["RssAnon"].split()[0])
            if anon_kib >= cap_mib * 1024:
                return time.monotonic() - start, int(now["voluntary_ctxt_switches"]) - slept_before
            assert time.monotonic() - start < 30 and proc.poll() is None, f"{name}: {anon_kib} KiB after 30 s"
            time.sleep(0.005)
    finally:
        proc.kill()
        proc.wait()


def test_the_burst_grower_is_not_paced_and_the_fast_one_is(tmp_path: Path) -> None:
    """be-burst's grower maps chunk after chunk with no pause (as fast as the kernel faults pages in); be-fast's
    keeps to its 200 MiB/s: 512 MiB take it at least 2.5 s. be-burst's pauses are counted, not timed: its time is the
    kernel's page faulting, which a busy machine stretches (0.5-0.6 s at load 5, where the bound was 1.3 s)."""
    assert {"be-slow", "be-fast", "be-burst"} <= set(WORKLOADS)
    chunks = 8
    cap = chunks * BURST_CHUNK_MIB
    fast, fast_pauses = _grow(tmp_path, "be-fast", cap)
    burst, burst_pauses = _grow(tmp_path, "be-burst", cap)
    assert fast >= (cap - 10) / 200.0, f"be-fast took {cap} MiB in {fast:.2f} s: faster than its 200 MiB/s"
    # A pause between chunks is a sleep a chunk: be-burst slept once or twice in all (its wait for the grow file ends
    # in one), be-fast about 40 times between its 10 MiB chunks (measured; fewer when a busy machine keeps it behind).
    assert burst_pauses < chunks - 1, (
        f"be-burst slept {burst_pauses} times taking {cap} MiB in {burst:.2f} s, be-fast {fast_pauses} times in "
        f"{fast:.2f} s")


def test_evictd_stall_needs_psi(tmp_path: Path) -> None:
    psi = tmp_path / "memory"
    assert stall_maps("evictd", psi) == {}
    for protector in ("evictd-stall", "evictd-stall-nogate"):
        with pytest.raises(RuntimeError, match="--kernel psi"):
            stall_maps(protector, psi)
    psi.write_text("some avg10=0.00 avg60=0.00 avg300=0.00 total=0\n")
    maps = stall_maps("evictd-stall", psi)
    assert maps["stallEvictionHard"] == {"evictd.io/memory.stall.full": "20%"}
    assert set(maps) <= set(STALL_FIELDS)
    # The same thresholds with the stall gate off.
    assert stall_maps("evictd-stall-nogate", psi) == {**maps, "stallRequiresNodeReclaim": False}


def test_the_own_limit_workloads() -> None:
    thrash = {p.name: p for p in workload(OWN_LIMIT_THRASH, 2495).pods}
    thrasher = thrash["thrasher"]
    assert isinstance(thrasher, FilePodSpec) and thrasher.qos == "burstable" and thrasher.pressure
    assert (thrasher.limit_mib, thrasher.period_s) == (THRASHER_LIMIT_MIB, 0.0)
    assert thrasher.file_mib == THRASHER_FILE_MIB > 3 * THRASHER_LIMIT_MIB  # its working set: three times its limit
    assert (thrash["bystander"].qos, thrash["bystander"].hold_mib, thrash["bystander"].pressure) == \
        ("besteffort", 150, False)
    assert thrash["guaranteed"].qos == "guaranteed"
    assert f"thrasher-{THRASHER_FILE_MIB}MiB.dat" in thrasher.script  # its own script (ready at once), its file
    compile(thrasher.script, "thrasher", "exec")
    backup = workload(BACKUP_STREAM, 2495)
    assert [p.name for p in backup.pods] == ["guaranteed"] and backup.hold_s == 60.0
    assert backup.backup_mib == int(2495 * 1.5)  # type: ignore[attr-defined]
    assert {OWN_LIMIT_THRASH, BACKUP_STREAM} <= set(WORKLOADS)


def test_own_limit_readers() -> None:
    assert events_counts("low 0\nhigh 0\nmax 1234\noom 0\noom_kill 0\n")["max"] == 1234
    before = {"pgscan_kswapd": 100, "pgscan_direct": 5, "pgscan_khugepaged": 0}
    assert node_scan_pages(before, {**before, "pgscan_kswapd": 300, "pgscan_direct": 15}) == 210
    assert node_scan_pages({}, before) is None
    readings = [{"max": 10.0, "stallFull": 1.5}, {"max": 25.0, "stallFull": 4.0}]
    assert counter_delta(readings, "max") == 15.0
    assert counter_delta(readings, "stallFull") == pytest.approx(2.5)
    assert counter_delta(readings[:1], "max") is None
    assert counter_delta(readings, "oom_kill") is None


def test_own_limit_rows_show_the_thrashers_and_the_nodes_figures() -> None:
    def run(protector: str, evicted: tuple[str, ...], max_events: float, scans: float) -> dict[str, Any]:
        return {"backend": "stand-in", "workload": OWN_LIMIT_THRASH, "protector": protector, "oomKills": [],
                "evictions": [{"pod": pod} for pod in evicted], "nodeScanMib": scans,
                "memoryStallS": {"some": 30.0, "full": 12.0},
                "ownLimit": {"thrasherMaxEvents": max_events, "thrasherStallS": {"some": 40.0, "full": 20.0},
                             "backup": None}}
    rows = own_limit_rows([run("evictd-stall", (), 9000, 0.0), run("evictd-stall", (), 11000, 0.5),
                           run("evictd-stall-nogate", ("bystander",), 8000, 0.0),
                           {"backend": "stand-in", "workload": "be-slow", "protector": "kernel", "evictions": []}])
    assert [(r["protector"], r["runs"]) for r in rows] == [("evictd-stall", "2"), ("evictd-stall-nogate", "1")]
    assert rows[0]["thrasher max events"] == "10000 / 11000"
    assert rows[0]["node scans MiB"] == "0.2 / 0.5"
    assert rows[0]["thrasher PSI full s"] == "20 / 20" and rows[0]["node PSI some s"] == "30 / 30"
    assert rows[0]["backup streamed s"] == "-" and rows[0]["evicted (all runs)"] == "none"
    assert rows[1]["evicted (all runs)"] == "bystander 1" and rows[1]["OOM kills (all runs)"] == "0"


def test_the_false_trigger_workloads() -> None:
    assert set(FALSE_TRIGGER_WORKLOADS) <= set(WORKLOADS)
    for name in FALSE_TRIGGER_WORKLOADS:
        spec = workload(name, 2465)
        pods = {p.name: p for p in spec.pods}
        assert pods["guaranteed"].qos == "guaranteed", f"{name}: the Guaranteed bystander"
        assert spec.daemon == "", f"{name}: the system daemon is the plain heartbeat"
        assert all(p.qos == "burstable" and p.pressure and p.script for n, p in pods.items() if n != "guaranteed")
        for pod in pods.values():
            if pod.script:
                compile(pod.script, f"{name}/{pod.name}", "exec")
    jvm = workload(JVM_WARMUP, 2465)
    heap = int(2465 * 0.40)
    assert [p.name for p in jvm.pods] == ["guaranteed", "jvm"] and jvm.hold_s == 60.0
    assert jvm.pods[1].request_mib == heap + 64 and jvm.pods[1].limit_mib is None  # Burstable: request, no limit
    assert f"HEAP_MIB = {heap}\n" in jvm.pods[1].script and "MAP_POPULATE" in jvm.pods[1].script
    # The node's free memory is page cache from before: 3/4 MemTotal of the node's large file read once by a node job.
    assert jvm.prior_cache_mib == int(2465 * 0.75) and PRIOR_CACHE_UNIT.startswith("system.slice/")  # type: ignore[attr-defined]
    assert jvm.stream_file_mib == int(2465 * 1.5) > jvm.prior_cache_mib  # type: ignore[attr-defined]
    db = workload(DB_FITS, 2465)
    server = db.pods[1]
    assert isinstance(server, FilePodSpec) and server.file_mib == DB_FILE_MIB == 400
    assert (server.request_mib or 0) > DB_FILE_MIB + 128, "its file and buffer within its request"
    assert files_of(db) == [(Path(str(server.script).split("FILE = '")[1].split("'")[0]), 400)]
    log = {p.name: p for p in workload(LOG_SHIPPER, 2465).pods}
    assert set(log) == {"guaranteed", "logger", "shipper"}
    assert (log["shipper"].request_mib, log["shipper"].limit_mib) == (64, 128)
    assert all(repr(str(log_path())) in log[n].script for n in ("logger", "shipper"))
    assert "RATE_BYTES_S = 4194304\n" in log["logger"].script
    compaction = workload(COMPACTION, 2465)
    assert compaction.compaction_input_mib == compaction.stream_file_mib == int(2465 * 1.5)  # type: ignore[attr-defined]
    assert compaction.hold_s > 60.0, "a bound only: the run ends when the job completes"
    script = compaction.pods[1].script
    assert f"backup-{int(2465 * 1.5)}MiB.dat" in script, "the backup stream's file: one file a boot for all"
    assert workload(BACKUP_STREAM, 2465).backup_mib == compaction.stream_file_mib  # type: ignore[attr-defined]
    assert repr(str(compaction_output())) in script and "os.fsync" in script
    assert files_of(compaction) == [] and files_of(jvm) == []  # their files: FalseTriggerRun's


def test_the_compaction_keeps_nodefs_above_its_soft_threshold() -> None:
    """The guest disk is nodefs: the compaction's input and output must leave 20 % of it free (the shipped soft
    nodefs.available is 15 %), or its run would end in a disk-pressure eviction."""
    assert disk_short_mib(8000, 7600, 5545) == 0
    short = disk_short_mib(5950, 5636, 5545)  # --disk-mib 6144 on a 2465 MiB node
    assert short > 0
    assert disk_short_mib(5950 + short, 5636 + short, 5545) == 0, "that much more disk is enough"
    assert disk_short_mib(5950 + short - 10, 5636 + short - 10, 5545) > 0, "and not much more than enough"


def test_the_earlier_false_triggers_record_the_nodes_figures_too() -> None:
    """own-limit-thrash, backup-stream and deploy-burst sample the node as the four do (one table for the suite), and
    write nothing of theirs; other workloads sample nothing."""
    assert {BACKUP_STREAM, OWN_LIMIT_THRASH, "deploy-burst"} == set(EARLIER_FALSE_TRIGGERS)
    for name in EARLIER_FALSE_TRIGGERS:
        run = FalseTriggerRun(workload(name, 2465))
        assert run.sampling and not run.active
    assert not FalseTriggerRun(workload("be-slow", 2465)).sampling
    assert FalseTriggerRun(workload("be-slow", 2465)).figures() == {}


def test_the_false_trigger_pods_report_what_they_did() -> None:
    assert work_figures(JVM_WARMUP, {"jvm": {"heapMib": 986, "warmS": 7.4}}) == {"heapWarmS": 7.4}
    assert work_figures(DB_FITS, {"db": {"warmS": 6.9, "reads": 26000, "readingS": 52.0}}) == \
        {"dbWarmS": 6.9, "dbReadsPerS": 500.0}
    assert work_figures(DB_FITS, {}) == {"dbWarmS": None, "dbReadsPerS": None}
    log = work_figures(LOG_SHIPPER, {"logger": {"writtenBytes": 240 * MiB, "loggingS": 60.0},
                                     "shipper": {"shippedBytes": 238 * MiB, "shippingS": 59.5}})
    assert log == {"logWrittenMibPerS": 4.0, "logShippedMibPerS": 4.0, "logLagMib": 2.0}
    assert work_figures(LOG_SHIPPER, {"logger": {"writtenBytes": 1, "loggingS": 1.0}})["logLagMib"] is None
    done = {"readBytes": 3697 * MiB, "writtenBytes": 1848 * MiB, "compactionS": 80.0, "done": True}
    assert work_figures(COMPACTION, {"compactor": done}) == {"compactionS": 80.0, "compactionReadMib": 3697.0}
    assert work_figures(COMPACTION, {"compactor": {**done, "done": False}})["compactionS"] is None
    assert work_figures("be-slow", {}) == {}


def test_false_trigger_rows_show_who_was_evicted_and_how_hard_the_node_was_pressed() -> None:
    def run(evicted: tuple[str, ...], gap: float, scans: float, available: float) -> dict[str, Any]:
        return {"backend": "stand-in", "workload": COMPACTION, "protector": "evictd", "oomKills": [],
                "evictions": [{"pod": pod} for pod in evicted], "heartbeatMaxGapS": gap, "nodeScanMib": scans,
                "falseTrigger": {"psiAvg10PeakPercent": {"some": 3.0, "full": 1.0}, "scanPeak10sMib": scans / 4,
                                 "memoryAvailableMinMib": available, "belowSoftThresholdS": 0.0,
                                 "cachedPeakMib": 2000.0, "dirtyPeakMib": 80.0, "compactionS": 70.0}}
    rows = false_trigger_rows([run((), 0.3, 2000.0, 900.0), run(("compactor",), 0.5, 2400.0, 700.0),
                               {"backend": "stand-in", "workload": "be-slow", "protector": "evictd",
                                "evictions": []}])
    assert len(rows) == 1 and rows[0]["runs"] == "2"
    assert rows[0]["evicted (all runs)"] == "compactor 1" and rows[0]["OOM kills (all runs)"] == "0"
    assert rows[0]["daemon max gap s"] == "0.4 / 0.5" and rows[0]["node scans MiB"] == "2200 / 2400"
    assert rows[0]["lowest memory.available MiB"] == "800 / 700", "the lowest is the worst"
    assert rows[0]["peak some avg10 %"] == "3 / 3" and rows[0]["compaction s"] == "70 / 70"
    assert rows[0]["heap taken s"] == "-" and rows[0]["db reads/s"] == "-"


def test_evictd_refault_needs_no_psi(tmp_path: Path) -> None:
    maps = stall_maps("evictd-refault", tmp_path / "no-psi")
    assert maps["stallEvictionHard"] == {"evictd.io/memory.refault": "2%"}
    assert set(maps) <= set(STALL_FIELDS)


def test_the_new_figures_are_in_the_table() -> None:
    run = {"backend": "stand-in", "workload": "thrash", "protector": "kernel", "oomKillsByClass": {BESTEFFORT: 1},
           "evictions": [], "lowMemoryS": 0.0, "reliefS": 60.0, "heartbeatMaxGapS": 12.0, "stopped": {},
           "guaranteedAlive": True, "daemonAlive": True, "refaultFileMib": 812.5,
           "kubeletAvailableAtLongestGapMib": 430.0}
    row = cell_rows([run])[0]
    assert row["file re-read MiB"] == "812.5 / 812.5"
    assert row["mem.available at longest gap MiB"] == "430 / 430"
    assert row["PSI full stall s"] == "-"  # no PSI: no figure
    assert cell_rows([{**run, "memoryStallS": {"some": 55.2, "full": 31.8}}])[0]["PSI full stall s"] == "31.8 / 31.8"
    assert cell_rows([{**run, "refaultFileMib": None}])[0]["file re-read MiB"] == "-"


# The non-memory controls (bench/node_survival_controls.py): their pure parts, without a guest.

def test_below_seconds_sums_the_intervals_below_the_level() -> None:
    samples = [(0.0, 5 * MiB), (1.0, 0), (1.5, MiB // 2), (2.0, 3 * MiB), (3.0, 0)]
    assert below_seconds(samples, MiB) == pytest.approx(1.0)
    assert below_seconds([], MiB) == 0.0


def control_run(protector: str, failures: int, pid_min: int | None, evicted: tuple[str, ...]) -> dict[str, Any]:
    return {"backend": "stand-in", "workload": "fork-bomb", "protector": protector,
            "evictions": [{"pod": pod} for pod in evicted],
            "control": {"pidMax": 2048, "daemonFailures": failures, "daemonFirstFailureS": 3.0 if failures else None,
                        "pidAvailableMin": pid_min, "nodefsAvailableMinMib": 1500.0, "diskFullS": 0.0}}


def test_control_rows_give_median_and_worst_and_who_was_evicted() -> None:
    runs = [control_run("kernel", 40, 0, ()), control_run("kernel", 60, -2, ()),
            control_run("evictd-pid", 0, 150, ("forker",)), {"backend": "stand-in", "workload": "be-slow",
                                                             "protector": "kernel", "evictions": []}]
    rows = control_rows(runs)
    assert [(r["protector"], r["runs"]) for r in rows] == [("kernel", "2"), ("evictd-pid", "1")]
    assert rows[0]["daemon failures"] == "50 / 60"
    assert rows[0]["lowest pid.available"] == "-1 / -2"
    assert rows[0]["s to first daemon failure"] == "3 / 3"
    assert rows[0]["evicted (all runs)"] == "none"
    assert rows[1]["evicted (all runs)"] == "forker 1"
    assert rows[1]["s to first daemon failure"] == "-"
    assert rows[1]["pid_max"] == "2048"


def test_control_workloads_are_a_besteffort_pod_beside_the_guaranteed_pod_and_a_daemon() -> None:
    for name in CONTROL_WORKLOADS:
        spec = workload(name, 2400)
        first = spec.pods[0]
        assert (first.name, first.qos, first.pressure) == ("guaranteed", "guaranteed", False)
        pressure = [p for p in spec.pods if p.pressure]
        assert [p.qos for p in pressure] == ["besteffort"] and pressure[0].script and spec.daemon
        for script in (pressure[0].script, spec.daemon):
            compile(script, name, "exec")
    assert workload("disk-fill", 2400).pods[1].volumes == ("scratch",)
    assert workload("fork-bomb", 2400).pods[1].volumes == ()
    assert set(CONTROL_WORKLOADS) <= set(WORKLOADS)


def test_evictd_pid_adds_a_pid_threshold_to_the_shipped_ones() -> None:
    kubelet: dict[str, Any] = {"evictionHard": {"memory.available": "200Mi"}}
    evictd_settings(kubelet, {}, "evictd-pid")
    assert kubelet["evictionHard"] == {"memory.available": "200Mi", "pid.available": "25%"}
    shipped: dict[str, Any] = {"evictionHard": {"memory.available": "200Mi"}}
    evictd_settings(shipped, {}, "evictd")
    assert shipped["evictionHard"] == {"memory.available": "200Mi"}


def test_a_stopped_pod_is_waited_for_until_the_api_gives_its_last_word() -> None:
    running = {"status": {"phase": "Running"}}
    failed = {"status": {"phase": "Failed", "reason": "Evicted"}}
    assert status_pending({"filler"}, {}, {"filler": running}) == {"filler"}, "stopped, the kubelet's word not in"
    assert status_pending({"filler"}, {}, {"filler": failed}) == set()
    assert status_pending({"filler"}, {"filler": {}}, {"filler": running}) == set(), "seen evicted already"
    assert status_pending({"filler"}, {}, {}) == set(), "gone from the API"
    assert status_pending(set(), {}, {"filler": running}) == set(), "still running: not waited for"


class NoBackend:
    """A backend that adds nothing to the documents (the shipped configuration as it is)."""

    def evictd_documents(self, kubelet: dict[str, Any], evictd: dict[str, Any]) -> None:
        pass


def test_evictd_without_minimum_reclaim_drops_only_the_memory_one(tmp_path: Path) -> None:
    shipped, _ = evictd_documents(tmp_path, NoBackend(), "evictd")
    variant, _ = evictd_documents(tmp_path, NoBackend(), EVICTD_NO_MIN_RECLAIM)
    assert yaml.safe_load(shipped)["evictionMinimumReclaim"] == {"memory.available": "100Mi",
                                                                 "nodefs.available": "1Gi"}
    assert yaml.safe_load(variant)["evictionMinimumReclaim"] == {"nodefs.available": "1Gi"}
    assert {k: v for k, v in yaml.safe_load(variant).items() if k != "evictionMinimumReclaim"} == {
        k: v for k, v in yaml.safe_load(shipped).items() if k != "evictionMinimumReclaim"}


def test_evictd_beside_the_kubelet_in_dry_run_is_the_shipped_evictd_acting_on_nothing(tmp_path: Path) -> None:
    _, shipped = evictd_documents(tmp_path, NoBackend(), "evictd")
    _, beside = evictd_documents(tmp_path, NoBackend(), KUBELET_SAME_BESIDE_DRY_RUN)
    assert yaml.safe_load(beside) == {**yaml.safe_load(shipped), "dryRun": True}


def test_evictd_daemons_refault_is_the_shipped_evictd_with_one_hard_daemons_threshold_added(tmp_path: Path) -> None:
    _, shipped = evictd_documents(tmp_path, NoBackend(), "evictd")
    _, added = evictd_documents(tmp_path, NoBackend(), DAEMONS_REFAULT_PROTECTOR)
    shipped_doc, added_doc = yaml.safe_load(shipped), yaml.safe_load(added)
    assert added_doc["stallEvictionHard"] == {**shipped_doc["stallEvictionHard"],
                                              "evictd.io/daemons.refault": DAEMONS_REFAULT_SHARE}
    assert {k: v for k, v in added_doc.items() if k != "stallEvictionHard"} == {
        k: v for k, v in shipped_doc.items() if k != "stallEvictionHard"}


def test_kubelet_pid_is_kubelet_same_with_evictd_pids_threshold() -> None:
    same, with_pid = kubelet_same(), kubelet_pid()
    assert with_pid["evictionHard"] == {**same["evictionHard"], "pid.available": "25%"}
    assert {k: v for k, v in with_pid.items() if k != "evictionHard"} == {
        k: v for k, v in same.items() if k != "evictionHard"}
    assert kubelet_same()["evictionHard"]["pid.available"] == "5%", "the shipped one"


def manifest(name: str, uid: str, *, volume: bool) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": [{"name": name, "image": "x"}]}
    if volume:
        spec["volumes"] = [{"name": "scratch", "emptyDir": {}}]
    return {"metadata": {"name": name, "namespace": "ns", "uid": uid}, "spec": spec, "status": {"phase": "Running"}}


def test_the_control_ranking_names_the_pod_with_most_processes_or_disk() -> None:
    manifests = {"guaranteed": manifest("guaranteed", "u-1", volume=False),
                 "forker": manifest("forker", "u-2", volume=True)}
    figures = {"guaranteed": {"processes": 1, "volume": 0, "logs": 0},
               "forker": {"processes": 900, "volume": 0, "logs": 0}}
    assert Controls.ranked_first(Signal.PID_AVAILABLE, manifests, figures, set()) == "forker"
    assert Controls.ranked_first(Signal.PID_AVAILABLE, manifests, figures, {"forker"}) == "guaranteed"
    disk = {"guaranteed": {"processes": 1, "volume": 0, "logs": 4096},
            "forker": {"processes": 1, "volume": 1500 * MiB, "logs": 8192}}
    assert Controls.ranked_first(Signal.NODEFS_AVAILABLE, manifests, disk, set()) == "forker"
    # a pod whose processes all ended is not ranked
    assert Controls.ranked_first(Signal.NODEFS_AVAILABLE, manifests, {**disk, "forker": {**disk["forker"],
                                                                                      "processes": 0}}, set()) == "guaranteed"


def test_a_control_eviction_is_ranked_on_the_last_sample_in_which_the_evicted_pod_still_ran() -> None:
    """The kubelet writes Evicted after its kill: the samples just before the API's word are without the filler."""
    def sample(at: float, filler_processes: int) -> dict[str, Any]:
        return {"at": at, "pods": {"filler": {"processes": filler_processes, "volume": 900 * MiB, "logs": 0},
                                   "guaranteed": {"processes": 1, "volume": 0, "logs": 4096}}}
    window = [sample(1.0, 1), sample(1.1, 1), sample(1.2, 0), sample(1.3, 0), sample(1.5, 0)]
    assert Controls.ranking_figures(window, 1.4, "filler") == window[1]["pods"]
    manifests = {"guaranteed": manifest("guaranteed", "u-1", volume=False),
                 "filler": manifest("filler", "u-2", volume=True)}
    figures = Controls.ranking_figures(window, 1.4, "filler")
    assert figures is not None
    assert Controls.ranked_first(Signal.NODEFS_AVAILABLE, manifests, figures, set()) == "filler"
    stopped = Controls.ranking_figures(window[2:], 1.4, "filler")  # never seen running: the last sample before
    assert stopped == window[3]["pods"]
    assert Controls.ranking_figures(window, 0.5, "filler") is None


def test_a_run_ends_after_its_last_stop_and_a_holding_workload_is_watched_after_each_stop() -> None:
    # Every pressure pod stopped: SETTLE_S after the last stop (a late OOM kill), however long they held.
    assert not run_over(10.0, all_stopped=True, last_stop=10.0 - SETTLE_S + 0.1, capped_since=None, hold_s=0.0)
    assert run_over(10.0, all_stopped=True, last_stop=10.0 - SETTLE_S, capped_since=None, hold_s=0.0)
    assert not run_over(100.0, all_stopped=False, last_stop=1.0, capped_since=None, hold_s=0.0)
    # Pods that hold at their caps (many-small): over once those running held for the hold with no stop ...
    assert run_over(50.0, all_stopped=False, last_stop=None, capped_since=30.0, hold_s=20.0)
    assert not run_over(49.0, all_stopped=False, last_stop=None, capped_since=30.0, hold_s=20.0)
    # ... and, after a stop, not before AFTER_STOP_WATCH_S have passed since it (a second eviction counted).
    stop = 40.0
    assert not run_over(stop + AFTER_STOP_WATCH_S - 0.1, all_stopped=False, last_stop=stop, capped_since=0.0,
                        hold_s=20.0)
    assert run_over(stop + AFTER_STOP_WATCH_S, all_stopped=False, last_stop=stop, capped_since=0.0, hold_s=20.0)
    assert not run_over(stop + AFTER_STOP_WATCH_S, all_stopped=False, last_stop=stop, capped_since=None, hold_s=20.0)
