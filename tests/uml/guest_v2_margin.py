"""Guest side of the v2 memory watch's cost at the margin (issue 37 item 3): a node held just above a hard threshold.

Run inside a user-mode Linux guest (cgroup v2, no PSI, 1 CPU) as ``python guest_v2_margin.py SCENARIO``; it writes
``$UML_OUT/margin-<scenario>.json``. The node is tests/uml/guest_v2_node.py's (pods cgroup of 320 MiB, the test
API server, the stand-in kubelet, the 5 ms kernel sampler); evictd runs with the kubelet's 10 s interval and only
hard memory thresholds (``allocatableMemory.available<60Mi``, ``memory.available<20Mi``). A holder pod (a large
request: ranked last, never the one evicted) takes the pods cgroup to `MARGIN_MIB` above the hard level.

Scenarios:

* ``cost``: evictd's CPU (utime + stime of its process, in the guest) over `V2_MARGIN_SEGMENT_S` seconds with the
  memory held there, with the memory watch on and off, interleaved (on, off, on, off...: `V2_MARGIN_ROUNDS`
  rounds), each segment a fresh daemon measured from `SETTLE_S` after it started; then what one look's reads cost
  in this process (CPU per call of the cycle's full `CgroupReader.memory` and of the reads a look needs).
* ``check``: what tests/uml/test_memory_watch_margin.py asserts on, within ~60 s of guest time: a segment with the
  watch off, one with it on (CPU, and wake-ups: the voluntary context switches of the daemon's threads), then one
  burst from the steady margin decided by that daemon;
* ``latency``: crossings from that steady margin, decided by the watch (`V2_MARGIN_CROSSINGS` of each kind):
  a burst (a pod gets `BURST_MIB` in one mmap) and a ramp (`RAMP_STEP_MIB` every `RAMP_PERIOD_S`), each after
  the margin was steady for a while; latency = evictd's "threshold met" - the first kernel sample below the level.
  `V2_MARGIN_CROSSING_HOLD` (optional) sets evictd's ``memoryCrossingHold``.
"""

from __future__ import annotations

import json
import os
import random
import sys
import threading
import time
import traceback
from pathlib import Path
from typing import Any

from evictd_process import EvictdProcess
from guest_v2_node import (
    ALLOCATABLE,
    CGROUP,
    HOG_SCRIPT,
    NODE,
    Node,
    Pod,
    cross,
    kernel_figures,
    meminfo,
    remove_cgroup_tree,
    wakeup_counts,
)

from evictd.adapters.cgroups import CgroupLayout, CgroupReader
from evictd.adapters.kept_files import KeptFiles

MiB = 1 << 20
HARD_MIB = 60
# Where the node is held: this much above the hard level (the issue: 10-20 MiB).
MARGIN_MIB = 15
# A daemon's first seconds (imports, first cycles) are not the margin's cost.
SETTLE_S = 4.0
BURST_MIB = 40
RAMP_STEP_MIB, RAMP_PERIOD_S = 1, 0.02  # 50 MiB/s: the 15 MiB margin gone in ~0.3 s
# Before each crossing the margin stays steady this long (the watch has seen it not shrink).
STEADY_BEFORE_CROSSING_S = (1.5, 4.0)

# A pod that ramps: "alloc N" takes N bytes in RAMP_STEP_MIB mmaps, one every RAMP_PERIOD_S.
RAMP_SCRIPT = rf"""
import mmap, sys, time
held = []
for line in iter(sys.stdin.readline, ""):
    size = int(line.split()[1])
    step = {RAMP_STEP_MIB} << 20
    for _ in range(size // step):
        held.append(mmap.mmap(-1, step, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | mmap.MAP_POPULATE))
        time.sleep({RAMP_PERIOD_S})
    print("ok", flush=True)
"""


def config(work: Path, kubeconfig: Path, *, memcg_wakeups: bool) -> dict[str, str]:
    kubelet = ("cgroupDriver: cgroupfs\nmergeDefaultEvictionSettings: false\n"
               f"evictionHard:\n  allocatableMemory.available: {HARD_MIB}Mi\n  memory.available: 20Mi\n"
               "evictionPressureTransitionPeriod: 1s\nevictionMaxPodGracePeriod: 1\n")
    evictd = (f"housekeepingInterval: 10s\nnodeName: {NODE}\nkubeconfig: {kubeconfig}\n"
              f"stateDir: {work / 'state'}\nkubeletRootDir: {work / 'kubelet'}\npodLogsDir: {work / 'pod-logs'}\n"
              f"imageFsPath: {work}\ncontainerFsPath: {work}\n"
              f"memcgWakeups: {'true' if memcg_wakeups else 'false'}\n"
              "containerRuntimeEndpoint: unix:///run/no-runtime.sock\n")
    hold = os.environ.get("V2_MARGIN_CROSSING_HOLD")
    if hold:  # the bench's --crossing-hold: evictd's memoryCrossingHold (its default otherwise)
        evictd += f"memoryCrossingHold: {hold}\n"
    return {"kubelet": kubelet, "evictd": evictd}


def start(work: Path, node: Node, *, memcg_wakeups: bool) -> EvictdProcess:
    work.mkdir(parents=True, exist_ok=True)
    files = config(work, node.api.kubeconfig_path, memcg_wakeups=memcg_wakeups)
    daemon = EvictdProcess(work, kubelet=files["kubelet"], evictd=files["evictd"])
    daemon.wait_event("evictd started", timeout=60)
    return daemon


def process_cpu_s(pid: int) -> float:
    """utime + stime of `pid` and of its living children, in seconds (the guest's own accounting)."""
    ticks = os.sysconf("SC_CLK_TCK")
    total = 0
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            fields = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(entry) == pid or int(fields[1]) == pid:  # fields[1]: ppid
            total += int(fields[11]) + int(fields[12])  # utime, stime
    return total / ticks


def hold_margin(node: Node) -> float:
    """Start the holder pod and fill the pods cgroup to MARGIN_MIB above the hard level; return the margin read."""
    holder = node.add_pod("holder", request_mib=300, script=HOG_SCRIPT)
    mem_total = meminfo()["MemTotal"]
    available = kernel_figures(node.layout, mem_total)["allocatableMemory.available"]
    holder.do(f"alloc {max(0, available - (HARD_MIB + MARGIN_MIB) * MiB)}")
    time.sleep(0.5)
    return (kernel_figures(node.layout, mem_total)["allocatableMemory.available"] - HARD_MIB * MiB) / MiB


def look_costs(node: Node, calls: int = 400) -> dict[str, float]:
    """CPU microseconds per call, in this process, of the reads a look can make on the pods cgroup."""
    reader = CgroupReader(CgroupLayout(2, CGROUP, "cgroupfs"))
    kept = KeptFiles(16)
    folder = f"{CGROUP}/{node.layout.pods}"
    cond = threading.Condition()

    def wait() -> None:  # what the watch's thread does between two looks, with a short timeout
        with cond:
            cond.wait(0.001)

    variants = {
        "cgroupReaderMemory": lambda: reader.memory(node.layout.pods),
        "preadCurrentAndStat": lambda: (kept.read(folder + "/memory.current"), kept.read(folder + "/memory.stat")),
        "preadCurrent": lambda: kept.read(folder + "/memory.current"),
        "preadStat": lambda: kept.read(folder + "/memory.stat"),
        "conditionWait1ms": wait,
        "sleep1ms": lambda: time.sleep(0.001),
        "monotonic": time.monotonic,
    }
    costs = {}
    for name, call in variants.items():
        call()
        started = time.process_time()
        for _ in range(calls):
            call()
        costs[name] = (time.process_time() - started) / calls * 1e6
    reader.close()
    kept.close()
    return costs


def thread_figures(pid: int) -> dict[str, tuple[float, int]]:
    """Each thread of `pid`: its CPU seconds (utime + stime) and its voluntary context switches (each time it went to
    sleep: a look of the watch is one, as it wakes from its timed wait, reads, and waits again)."""
    ticks = os.sysconf("SC_CLK_TCK")
    figures = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            stat = Path(f"/proc/{pid}/task/{tid}/stat").read_text().rsplit(")", 1)[1].split()
            status = Path(f"/proc/{pid}/task/{tid}/status").read_text()
        except OSError:
            continue
        switches = int(status.split("voluntary_ctxt_switches:", 1)[1].split()[0])
        figures[tid] = ((int(stat[11]) + int(stat[12])) / ticks, switches)
    return figures


def measure(node: Node, daemon: EvictdProcess, watch: bool, segment_s: float) -> dict[str, Any]:
    """evictd's CPU and wake-ups over `segment_s` seconds from now, with the margin read before and after."""
    pid = daemon.process.pid
    cpu0, threads0, wall0 = process_cpu_s(pid), thread_figures(pid), time.monotonic()
    figures0 = kernel_figures(node.layout, meminfo()["MemTotal"])
    time.sleep(segment_s)
    cpu1, threads1, wall1 = process_cpu_s(pid), thread_figures(pid), time.monotonic()
    figures1 = kernel_figures(node.layout, meminfo()["MemTotal"])
    wall = wall1 - wall0
    # Per thread over the segment (threads that ended or began meanwhile are left out): the one that woke most
    # often is the watch's when it runs.
    threads = sorted(((threads1[t][0] - threads0[t][0], threads1[t][1] - threads0[t][1]) for t in threads1
                      if t in threads0), key=lambda figures: figures[1], reverse=True)
    switches = sum(figures[1] for figures in threads)
    return {"watch": watch, "cpuS": cpu1 - cpu0, "wallS": wall, "cpuSPerMin": (cpu1 - cpu0) / wall * 60,
            "threadWakeupsPerS": switches / wall, "busiestThread": {
                "cpuSPerMin": threads[0][0] / wall * 60, "wakeupsPerS": threads[0][1] / wall} if threads else None,
            "wakeups": wakeup_counts(daemon),
            "cycles": daemon.metric("evictd_cycles_total"),
            "marginMiB": [(f["allocatableMemory.available"] - HARD_MIB * MiB) / MiB for f in (figures0, figures1)],
            "thresholdsMet": sum(1 for e in daemon.events if e.get("event") == "threshold met")}


def scenario_cost(work: Path) -> dict[str, Any]:
    segment_s = float(os.environ.get("V2_MARGIN_SEGMENT_S", "30"))
    rounds = int(os.environ.get("V2_MARGIN_ROUNDS", "2"))
    node = Node("cgroupfs", work)
    result: dict[str, Any] = {"segmentS": segment_s, "segments": []}
    try:
        result["marginMiB"] = hold_margin(node)
        for index in range(rounds * 2):
            watch = index % 2 == 0
            daemon = start(work / f"segment-{index}", node, memcg_wakeups=watch)
            try:
                time.sleep(SETTLE_S)
                result["segments"].append(measure(node, daemon, watch, segment_s))
                daemon.stop()
            finally:
                daemon.kill()
        result["lookCostsUs"] = look_costs(node)
    finally:
        node.close()
        remove_cgroup_tree(node.layout.pods)
    return result


def scenario_check(work: Path) -> dict[str, Any]:
    """The tier's test (tests/uml/test_memory_watch_margin.py), within ~40 s of guest time: the margin's wake-ups and
    CPU with the watch on, then one burst from that steady margin decided by the same daemon (the watch off is the
    `cost` scenario's comparison, a benchmark's: bench/v2_wakeup_latency.py --margin-cost)."""
    segment_s = float(os.environ.get("V2_MARGIN_SEGMENT_S", "8"))
    node = Node("cgroupfs", work)
    result: dict[str, Any] = {"segmentS": segment_s, "segments": []}
    daemon = None
    try:
        burst = new_crossing_pod(node, 0)
        result["marginMiB"] = hold_margin(node)
        daemon = start(work / "segment", node, memcg_wakeups=True)
        time.sleep(SETTLE_S)
        result["segments"].append(measure(node, daemon, True, segment_s))
        result["crossing"] = cross(node, daemon, burst, BURST_MIB, "burst", HARD_MIB, grace_s=0).json()
        daemon.stop()
    finally:
        if daemon is not None:
            daemon.kill()
        node.close()
        remove_cgroup_tree(node.layout.pods)
    return result


def new_crossing_pod(node: Node, index: int) -> Pod:
    """The pod of crossing `index`: bursts and ramps in turn."""
    kind = "burst" if index % 2 == 0 else "ramp"
    pod = node.add_pod(f"{kind}-{index}", request_mib=8, script=HOG_SCRIPT if kind == "burst" else RAMP_SCRIPT)
    time.sleep(0.5)  # its interpreter started
    return pod


def scenario_latency(work: Path) -> dict[str, Any]:
    crossings_per_kind = int(os.environ.get("V2_MARGIN_CROSSINGS", "10"))
    node = Node("cgroupfs", work)
    result: dict[str, Any] = {"crossings": []}
    daemon = None
    rng = random.Random(37)
    try:
        # Each crossing's pod is there before it crosses (its interpreter's memory is part of the margin held): the
        # first before the margin is filled, the next ones as the one before is evicted.
        pod = new_crossing_pod(node, 0)
        result["marginMiB"] = hold_margin(node)
        daemon = start(work / "daemon", node, memcg_wakeups=True)
        time.sleep(SETTLE_S)
        result["marginsBeforeMiB"] = []
        for index in range(crossings_per_kind * 2):
            if index:
                pod = new_crossing_pod(node, index)
            time.sleep(rng.uniform(*STEADY_BEFORE_CROSSING_S))
            figures = kernel_figures(node.layout, meminfo()["MemTotal"])
            result["marginsBeforeMiB"].append((figures["allocatableMemory.available"] - HARD_MIB * MiB) / MiB)
            kind = pod.name.split("-")[0]
            crossing = cross(node, daemon, pod, BURST_MIB, kind, HARD_MIB, grace_s=0).json()
            result["crossings"].append(crossing)
            deadline = time.monotonic() + 40
            while pod.uid not in node.deleted and time.monotonic() < deadline:
                time.sleep(0.05)
        result["wakeups"] = wakeup_counts(daemon)
        # evictd's own share of each: from the wake-up to the decision (and of that, the confirmation's wait)
        result["decidedAfterMs"] = [event.get("decided_after_ms") for event in daemon.events
                                    if event.get("event") == "threshold met"]
        daemon.stop()
    finally:
        if daemon is not None:
            daemon.kill()
        node.close()
        remove_cgroup_tree(node.layout.pods)
    return result


SCENARIOS = {"cost": scenario_cost, "latency": scenario_latency, "check": scenario_check}


def main() -> int:
    scenario = sys.argv[1]
    out = Path(os.environ["UML_OUT"]) / f"margin-{scenario}.json"
    work = Path("/run/v2") / f"margin-{scenario}"
    work.mkdir(parents=True)
    try:
        result = SCENARIOS[scenario](work)
    except BaseException as exc:  # the host side shows it: the scenario's traceback and the guest's log
        out.write_text(json.dumps({"error": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc()}))
        return 1
    result["allocatableMiB"] = ALLOCATABLE / MiB
    out.write_text(json.dumps(result, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
