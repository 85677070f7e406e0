"""The node-survival arena's outcomes: what the kernel and the API server say happened (issue #36, item 2).

Pure functions over what the guest recorded (no I/O here), so that the host side, the guest side and the tests
share one reading:

* `oom_kill_record`: one kernel ``oom-kill:`` line of /dev/kmsg (``...,task_memcg=/kubepods/besteffort/pod<uid>/
  <id>,task=python3,pid=123,uid=0``) as a dict; `victim_class` names the class of the cgroup it killed in:
  Guaranteed / Burstable / BestEffort (the kubelet's cgroup layout, either driver), ``system daemon``,
  ``kubelet``, ``evictd``, ``earlyoom`` (their ``system.slice`` units in the guest), ``other``;
* `heartbeat_max_gap_s`: the system daemon's largest gap between beats;
* `low_memory_seconds`: seconds sampled with MemAvailable below 1 % of MemTotal;
* `cell_rows`: the per-cell table, median and worst of every figure over a cell's runs;
* `below_seconds`, `control_rows`: the non-memory controls' figures (bench/node_survival_controls.py): seconds
  with the disk full, and a second table (daemon failures, lowest pid.available, lowest nodefs available,
  who was evicted) for the runs that have them;
* `own_limit_rows`: the own-limit workloads' figures (bench/node_survival_ownlimit.py): the thrashers' memory.events
  ``max`` count and cgroup stall, the node's stall and global scans, the backup stream's time, who was evicted;
* `deploy_rows`, `false_trigger_rows`: the deploy burst's and the false triggers' figures
  (bench/node_survival_deploy.py, bench/node_survival_falsetriggers.py): who was evicted, OOM kills, the daemon's
  longest gap, peak PSI, global scans, the lowest memory.available, what each workload did.

Nothing here reads evictd's logs: OOM kills come from the kernel's log, evictions from the API server's pod
objects, deaths of processes from their exit status (waitpid) and their cgroups.
"""

from __future__ import annotations

import itertools
import re
import statistics
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

# Victim classes, in the order a table shows them.
GUARANTEED, BURSTABLE, BESTEFFORT = "Guaranteed", "Burstable", "BestEffort"
SYSTEM_DAEMON, KUBELET, EVICTD, EARLYOOM, OTHER = "system daemon", "kubelet", "evictd", "earlyoom", "other"
CLASSES = (GUARANTEED, BURSTABLE, BESTEFFORT, SYSTEM_DAEMON, KUBELET, EVICTD, EARLYOOM, OTHER)
# The units the arena runs its processes in (systemd's names, made by hand in a guest without systemd).
UNIT_TO_CLASS = {
    "heartbeat.service": SYSTEM_DAEMON,
    "kubelet.service": KUBELET,
    "evictd.service": EVICTD,
    "earlyoom.service": EARLYOOM,
}
_POD_UID = re.compile(r"pod([0-9a-f]{8}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{12})")
LOW_MEMORY_SHARE = 0.01
# The shipped hard threshold (config/kubelet-config.yaml, memory.available<200Mi): the latency figure is timed from
# the kubelet's memory.available crossing it (root anon + file - inactive_file, 100 ms samples).
HARD_CROSSING_BYTES = 200 << 20


def oom_kill_record(line: str) -> dict[str, str] | None:
    """The fields of a kernel ``oom-kill:`` record (a /dev/kmsg line: ``PRI,SEQ,USEC,FLAGS;MESSAGE``), with
    ``usec`` (the kernel's monotonic time of the record); None for any other line."""
    prefix, _, message = line.partition(";")
    if not message.startswith("oom-kill:"):
        return None
    fields = dict(part.partition("=")[::2] for part in message[len("oom-kill:"):].strip().split(","))
    head = prefix.split(",")
    fields["usec"] = head[2] if len(head) > 2 else ""
    return fields


# User-mode Linux's own message when its host process could not map a page for a guest process (its mmap of the
# guest's memory failed: the host's vm.max_map_count, 65530 by default, or its memory): the guest process then dies
# of SIGSEGV (exit 139), by the hand of neither a protector nor the guest kernel's OOM killer.
UML_HOST_SHORT = "UML ran out of memory on the host side"


def host_ran_short(line: str) -> bool:
    """Whether a /dev/kmsg line is user-mode Linux saying its host process ran out of memory or of mappings."""
    return line.partition(";")[2].startswith(UML_HOST_SHORT)


def pod_uid_of(cgroup: str) -> str | None:
    """The pod UID in a kubelet cgroup path (either driver: the systemd one writes it with underscores)."""
    found = _POD_UID.search(cgroup)
    return found.group(1).replace("_", "-") if found else None


def victim_class(cgroup: str) -> str:
    """The class of whatever lives in `cgroup` (a task_memcg path, leading slash or not)."""
    parts = [part for part in cgroup.split("/") if part]
    # The pods cgroup may sit below the kubelet's cgroupRoot (the real backend's /evictd-rk-<id>/kubepods).
    top = next((i for i, part in enumerate(parts) if part in ("kubepods", "kubepods.slice")), None)
    if top is not None and pod_uid_of(cgroup):
        if any("besteffort" in part for part in parts[top + 1:top + 3]):
            return BESTEFFORT
        if any("burstable" in part for part in parts[top + 1:top + 3]):
            return BURSTABLE
        return GUARANTEED
    for part in parts:
        if part in UNIT_TO_CLASS:
            return UNIT_TO_CLASS[part]
    return OTHER


def longest_gap(beats: Sequence[float], since: float, until: float) -> tuple[float, float] | None:
    """(start, length) of the largest gap between consecutive beats within [since, until], counting the gap from the
    last beat to `until` (a daemon that stopped beating) and, for a daemon that beat before `since`, from `since` to
    its first beat in the window (a daemon that never beat in the run stalled for all of it: on the real node's
    thrash its file-backed daemon beat before the run and not once in 70-115 s); None without a beat."""
    window = [beat for beat in beats if since <= beat <= until]
    if any(beat < since for beat in beats):
        window.insert(0, since)
    if not window:
        return None
    gaps = [(later - earlier, earlier) for earlier, later in itertools.pairwise(window)]
    gaps.append((until - window[-1], window[-1]))
    length, start = max(gaps)
    return start, length


def heartbeat_max_gap_s(beats: Sequence[float], since: float, until: float) -> float | None:
    """The length of `longest_gap`; None without a beat."""
    gap = longest_gap(beats, since, until)
    return None if gap is None else gap[1]


def lease_renew_max_gap_s(renewals: Sequence[float]) -> float | None:
    """The largest step between the node Lease's successive renewTimes (epoch seconds, as sampled; a renewal
    repeated by the sampler counts once); None with fewer than two distinct renewals."""
    distinct = sorted(set(renewals))
    if len(distinct) < 2:
        return None
    return max(later - earlier for earlier, later in itertools.pairwise(distinct))


def crossing_figures(signal: Sequence[tuple[float, int]], started: float,
                     evicted_at: Sequence[float]) -> dict[str, float | None]:
    """`hardCrossedS`: when the kubelet's memory.available (`signal`: monotonic time, bytes) first fell below
    HARD_CROSSING_BYTES, in seconds from the workload's start `started` (None: never); `crossingToEvictionS`: from
    then to the first eviction the API showed (`evicted_at`, seconds from the start; None without either). The
    evicter reads more often than the 100 ms sampler: a figure down to -0.1 s is an eviction on a crossing the
    sampler saw late."""
    crossed = next((at - started for at, available in signal if at >= started and available < HARD_CROSSING_BYTES),
                   None)
    first = min(evicted_at) if evicted_at else None
    return {"hardCrossedS": crossed,
            "crossingToEvictionS": None if crossed is None or first is None else first - crossed}


def low_memory_seconds(samples: Iterable[tuple[float, int]], mem_total_bytes: int) -> float:
    """Seconds (sum of the sampling intervals) during which MemAvailable was below 1 % of MemTotal;
    `samples` are (monotonic time, MemAvailable bytes), in time order."""
    seconds, previous = 0.0, None
    for at, available in samples:
        if previous is not None and previous[1] < LOW_MEMORY_SHARE * mem_total_bytes:
            seconds += at - previous[0]
        previous = (at, available)
    return seconds


def ranking_sample(samples: Sequence[tuple[float, Mapping[str, tuple[int, int]]]],
                   evicted: str) -> Mapping[str, tuple[int, int]]:
    """The pods' cgroup figures (working set, processes) to rank an eviction by: the last sample in which the evicted
    pod still had processes. The API may record an eviction seconds after the pod was stopped (its processes killed
    through the cgroup while the API server did not answer), when a later sample would rank the pods left without it.
    Without such a sample, the one before the last (the last may follow the stop)."""
    for _, figures in reversed(samples):
        if figures.get(evicted, (0, 0))[1] > 0:
            return figures
    return samples[-2][1] if len(samples) > 1 else samples[-1][1]


def is_evicted(manifest: Mapping[str, Any]) -> bool:
    """Whether a pod's API object shows an eviction: a deletionTimestamp, reason Evicted, a DisruptionTarget."""
    status = manifest.get("status") or {}
    return bool(manifest["metadata"].get("deletionTimestamp") or status.get("reason") == "Evicted"
                or any(c.get("type") == "DisruptionTarget" for c in status.get("conditions") or []))


def container_termination(manifest: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """The first container's terminated state in the pod's last seen object (real backend), or None."""
    for status in ((manifest or {}).get("status") or {}).get("containerStatuses") or []:
        terminated = (status.get("state") or {}).get("terminated")
        if terminated:
            return {"exitCode": terminated.get("exitCode"), "reason": terminated.get("reason")}
    return None


def below_seconds(samples: Iterable[tuple[float, int]], level: int) -> float:
    """Seconds (sum of the sampling intervals) during which a sampled value was below `level`; `samples` are
    (monotonic time, value), in time order. (The disk full: nodefs available below 1 MiB.)"""
    seconds, previous = 0.0, None
    for at, value in samples:
        if previous is not None and previous[1] < level:
            seconds += at - previous[0]
        previous = (at, value)
    return seconds


# The figures of a run that the table shows: (key in a run's JSON, column title, worse is "max" or "min").
FIGURES = (
    ("oomKills", "OOM kills", "max"),
    ("oomKillsProtected", "OOM kills of G/daemon/kubelet/evictd", "max"),
    ("podsEvicted", "pods evicted", "max"),
    ("evictedAsRanked", "evicted as ranked", "min"),
    ("lowMemoryS", "s < 1% avail", "max"),
    ("reliefS", "s to relief", "max"),
    ("heartbeatMaxGapS", "daemon max gap s", "max"),
    ("kubeletHeartbeatMaxGapS", "kubelet stand-in max gap s", "max"),
    ("leaseRenewMaxGapS", "lease renew max gap s", "max"),
    ("notReadySamples", "NotReady samples", "max"),
    ("evictdCpuS", "evictd CPU s", "max"),
    ("evictdMajorFaults", "evictd major faults", "max"),
    ("evictdMemoryStallS", "evictd memory stall s", "max"),
    ("crossingToEvictionS", "s hard crossing to eviction", "max"),
    ("refaultFileMib", "file re-read MiB", "max"),
    ("kubeletAvailableAtLongestGapMib", "mem.available at longest gap MiB", "min"),
    ("memoryStallFullS", "PSI full stall s", "max"),
)
PROTECTED = (GUARANTEED, SYSTEM_DAEMON, KUBELET, EVICTD)


def run_figures(run: Mapping[str, Any]) -> dict[str, float | None]:
    """A run's figures as the table shows them (None: not measured, e.g. evictd's CPU without evictd)."""
    kills = run["oomKillsByClass"]
    evictions = run["evictions"]
    return {
        "oomKills": float(sum(kills.values())),
        "oomKillsProtected": float(sum(kills.get(cls, 0) for cls in PROTECTED)),
        "podsEvicted": float(len(evictions)),
        "evictedAsRanked": (float(sum(1 for e in evictions if e["asRanked"])) if evictions else None),
        "lowMemoryS": run["lowMemoryS"],
        "reliefS": run["reliefS"],
        "heartbeatMaxGapS": run["heartbeatMaxGapS"],
        "kubeletHeartbeatMaxGapS": run.get("kubeletHeartbeatMaxGapS"),  # the page-cache thrash on the stand-in
        "leaseRenewMaxGapS": run.get("leaseRenewMaxGapS"),
        "notReadySamples": run.get("notReadySamples"),
        "evictdCpuS": (run.get("evictd") or {}).get("cpuS"),
        "evictdMajorFaults": (run.get("evictd") or {}).get("majorFaults"),
        # evictd's unit's PSI `some` (a kernel with PSI): how long any of its tasks stalled on memory.
        "evictdMemoryStallS": (run.get("evictd") or {}).get("memoryStallSomeS"),
        "crossingToEvictionS": run.get("crossingToEvictionS"),
        "refaultFileMib": run.get("refaultFileMib"),
        "kubeletAvailableAtLongestGapMib": run.get("kubeletAvailableAtLongestGapMib"),
        "memoryStallFullS": (run.get("memoryStallS") or {}).get("full"),  # a kernel with PSI only
    }


def _median_and_worst(values: Sequence[float | None], worse: str) -> str:
    measured = [v for v in values if v is not None]
    if not measured:
        return "-"
    worst = max(measured) if worse == "max" else min(measured)
    missing = f" ({len(values) - len(measured)} n/a)" if len(measured) < len(values) else ""
    return f"{_number(statistics.median(measured))} / {_number(worst)}{missing}"


def _number(value: float) -> str:
    return f"{value:.0f}" if float(value).is_integer() else f"{value:.1f}"


def cell_rows(runs: Sequence[Mapping[str, Any]]) -> list[dict[str, str]]:
    """One row per cell (backend, workload, protector), in first-seen order: the runs, every figure as
    "median / worst", who the kernel OOM-killed (class: count over all runs), which pods stopped how, and
    whether the Guaranteed pod and the system daemon were alive at every run's end."""
    cells: dict[tuple[str, str, str], list[Mapping[str, Any]]] = {}
    for run in runs:
        cells.setdefault((run["backend"], run["workload"], run["protector"]), []).append(run)
    rows = []
    for (backend, workload_name, protector), members in cells.items():
        figures = [run_figures(run) for run in members]
        row = {"backend": backend, "workload": workload_name, "protector": protector, "runs": str(len(members))}
        for key, title, worse in FIGURES:
            row[title] = _median_and_worst([f[key] for f in figures], worse)
        killed: dict[str, int] = {}
        for run in members:
            for cls, count in run["oomKillsByClass"].items():
                killed[cls] = killed.get(cls, 0) + count
        row["OOM-killed (all runs)"] = ", ".join(f"{cls} {n}" for cls, n in killed.items() if n) or "none"
        stopped: dict[str, int] = {}
        for run in members:
            for how in run["stopped"].values():
                stopped[how] = stopped.get(how, 0) + 1
        row["pods stopped (all runs)"] = ", ".join(f"{how} {n}" for how, n in sorted(stopped.items())) or "none"
        # A workload without a Guaranteed pod has guaranteedAlive None: only its daemon counts.
        alive = sum(1 for r in members if r["guaranteedAlive"] is not False and r["daemonAlive"])
        row["G + daemon alive"] = f"{alive}/{len(members)}"
        rows.append(row)
    return rows


def markdown_table(rows: Sequence[Mapping[str, str]]) -> str:
    if not rows:
        return "(no runs)\n"
    titles = list(rows[0])
    lines = ["| " + " | ".join(titles) + " |", "|" + "---|" * len(titles)]
    lines += ["| " + " | ".join(row[t] for t in titles) + " |" for row in rows]
    return "\n".join(lines) + "\n"


# The control figures (a run's "control"): (key, column title, worse is "max" or "min").
CONTROL_FIGURES = (
    ("daemonFailures", "daemon failures", "max"),
    ("daemonFirstFailureS", "s to first daemon failure", "min"),
    ("pidAvailableMin", "lowest pid.available", "min"),
    ("nodefsAvailableMinMib", "lowest nodefs available MiB", "min"),
    ("diskFullS", "s disk full", "max"),
)


def control_rows(runs: Sequence[Mapping[str, Any]]) -> list[dict[str, str]]:
    """One row per cell of the runs with control figures, in first-seen order: the runs, pid_max, every control
    figure as "median / worst", and the pods evicted (name: count over all runs)."""
    cells: dict[tuple[str, str, str], list[Mapping[str, Any]]] = {}
    for run in runs:
        if run.get("control"):
            cells.setdefault((run["backend"], run["workload"], run["protector"]), []).append(run)
    rows = []
    for (backend, workload_name, protector), members in cells.items():
        row = {"backend": backend, "workload": workload_name, "protector": protector, "runs": str(len(members)),
               "pid_max": "/".join(sorted({str(r["control"]["pidMax"]) for r in members}))}
        for key, title, worse in CONTROL_FIGURES:
            row[title] = _median_and_worst([r["control"].get(key) for r in members], worse)
        row["evicted (all runs)"] = _evicted_counts(members)
        rows.append(row)
    return rows


# The own-limit figures (bench/node_survival_ownlimit.py; a run's "ownLimit", "memoryStallS", "nodeScanMib"):
# (column title, how to read it from a run, worse is "max" or "min").
OWN_LIMIT_FIGURES: tuple[tuple[str, Any, str], ...] = (
    ("thrasher max events", lambda run: run["ownLimit"].get("thrasherMaxEvents"), "max"),
    ("thrasher PSI some s", lambda run: (run["ownLimit"].get("thrasherStallS") or {}).get("some"), "max"),
    ("thrasher PSI full s", lambda run: (run["ownLimit"].get("thrasherStallS") or {}).get("full"), "max"),
    ("node PSI some s", lambda run: (run.get("memoryStallS") or {}).get("some"), "max"),
    ("node PSI full s", lambda run: (run.get("memoryStallS") or {}).get("full"), "max"),
    ("node scans MiB", lambda run: run.get("nodeScanMib"), "max"),
    ("backup streamed s", lambda run: (run["ownLimit"].get("backup") or {}).get("streamedS"), "max"),
)


def own_limit_rows(runs: Sequence[Mapping[str, Any]]) -> list[dict[str, str]]:
    """One row per cell of the runs with own-limit figures, in first-seen order: the runs, every figure as
    "median / worst", the kernel's OOM kills and the pods evicted (name: count over all runs)."""
    cells: dict[tuple[str, str, str], list[Mapping[str, Any]]] = {}
    for run in runs:
        if run.get("ownLimit"):
            cells.setdefault((run["backend"], run["workload"], run["protector"]), []).append(run)
    rows = []
    for (backend, workload_name, protector), members in cells.items():
        row = {"backend": backend, "workload": workload_name, "protector": protector, "runs": str(len(members))}
        for title, read, worse in OWN_LIMIT_FIGURES:
            row[title] = _median_and_worst([read(run) for run in members], worse)
        row["OOM kills (all runs)"] = str(sum(len(run.get("oomKills") or []) for run in members))
        row["evicted (all runs)"] = _evicted_counts(members)
        rows.append(row)
    return rows


def _evicted_counts(runs: Sequence[Mapping[str, Any]]) -> str:
    evicted: dict[str, int] = {}
    for run in runs:
        for eviction in run["evictions"]:
            evicted[eviction["pod"]] = evicted.get(eviction["pod"], 0) + 1
    return ", ".join(f"{pod} {n}" for pod, n in evicted.items()) or "none"


# The deploy burst's figures (bench/node_survival_deploy.py; a run's "deployBurst", "refaultFileMib", "memoryStallS"):
# (column title, how to read it from a run, worse). They show that the burst happened: the "worst" is the weakest.
DEPLOY_FIGURES: tuple[tuple[str, Any, str], ...] = (
    ("pushed out MiB", lambda run: run["deployBurst"].get("pushedOutMib"), "min"),
    ("daemon cache kept MiB", lambda run: run["deployBurst"].get("daemonCacheAfterMib"), "min"),
    ("new pods started", lambda run: run["deployBurst"].get("newPodsStarted"), "min"),
    ("burst s", lambda run: run["deployBurst"].get("burstS"), "min"),
    ("refaulted MiB", lambda run: run.get("refaultFileMib"), "min"),
    ("peak refault in 10 s, % of MemTotal", lambda run: run["deployBurst"].get("refaultPeak10sPercent"), "min"),
    ("node PSI some s", lambda run: (run.get("memoryStallS") or {}).get("some"), "min"),
    ("node PSI full s", lambda run: (run.get("memoryStallS") or {}).get("full"), "min"),
    ("peak some avg10 %", lambda run: (run["deployBurst"].get("psiAvg10PeakPercent") or {}).get("some"), "min"),
    ("peak full avg10 %", lambda run: (run["deployBurst"].get("psiAvg10PeakPercent") or {}).get("full"), "min"),
    ("node scans MiB", lambda run: run.get("nodeScanMib"), "max"),
    ("lowest MemAvailable MiB", lambda run: run.get("minAvailableMib"), "min"),
)


def deploy_rows(runs: Sequence[Mapping[str, Any]]) -> list[dict[str, str]]:
    """One row per cell of the runs with deploy figures, in first-seen order: the runs, every figure as
    "median / worst", the kernel's OOM kills and the pods evicted (name: count over all runs)."""
    cells: dict[tuple[str, str, str], list[Mapping[str, Any]]] = {}
    for run in runs:
        if run.get("deployBurst"):
            cells.setdefault((run["backend"], run["workload"], run["protector"]), []).append(run)
    rows = []
    for (backend, workload_name, protector), members in cells.items():
        row = {"backend": backend, "workload": workload_name, "protector": protector, "runs": str(len(members))}
        for title, read, worse in DEPLOY_FIGURES:
            row[title] = _median_and_worst([read(run) for run in members], worse)
        row["OOM kills (all runs)"] = str(sum(len(run.get("oomKills") or []) for run in members))
        row["evicted (all runs)"] = _evicted_counts(members)
        rows.append(row)
    return rows


# The false triggers' figures (bench/node_survival_falsetriggers.py; a run's "falseTrigger", "heartbeatMaxGapS",
# "nodeScanMib"): (column title, how to read it from a run, worse). The worst is the run that pressed the node hardest.
FALSE_TRIGGER_FIGURES: tuple[tuple[str, Any, str], ...] = (
    ("daemon max gap s", lambda run: run.get("heartbeatMaxGapS"), "max"),
    ("peak some avg10 %", lambda run: (run["falseTrigger"].get("psiAvg10PeakPercent") or {}).get("some"), "max"),
    ("peak full avg10 %", lambda run: (run["falseTrigger"].get("psiAvg10PeakPercent") or {}).get("full"), "max"),
    ("node scans MiB", lambda run: run.get("nodeScanMib"), "max"),
    ("peak scans in 10 s MiB", lambda run: run["falseTrigger"].get("scanPeak10sMib"), "max"),
    ("lowest memory.available MiB", lambda run: run["falseTrigger"].get("memoryAvailableMinMib"), "min"),
    ("s under 500Mi", lambda run: run["falseTrigger"].get("belowSoftThresholdS"), "max"),
    ("peak page cache MiB", lambda run: run["falseTrigger"].get("cachedPeakMib"), "max"),
    ("peak dirty MiB", lambda run: run["falseTrigger"].get("dirtyPeakMib"), "max"),
    ("heap taken s", lambda run: run["falseTrigger"].get("heapWarmS"), "max"),
    ("db reads/s", lambda run: run["falseTrigger"].get("dbReadsPerS"), "min"),
    ("log shipped MiB/s", lambda run: run["falseTrigger"].get("logShippedMibPerS"), "min"),
    ("compaction s", lambda run: run["falseTrigger"].get("compactionS"), "max"),
)


def false_trigger_rows(runs: Sequence[Mapping[str, Any]]) -> list[dict[str, str]]:
    """One row per cell of the runs with false-trigger figures, in first-seen order: the runs, every figure as
    "median / worst", the kernel's OOM kills and the pods evicted (name: count over all runs)."""
    cells: dict[tuple[str, str, str], list[Mapping[str, Any]]] = {}
    for run in runs:
        if run.get("falseTrigger"):
            cells.setdefault((run["backend"], run["workload"], run["protector"]), []).append(run)
    rows = []
    for (backend, workload_name, protector), members in cells.items():
        row = {"backend": backend, "workload": workload_name, "protector": protector, "runs": str(len(members))}
        row["evicted (all runs)"] = _evicted_counts(members)
        row["OOM kills (all runs)"] = str(sum(len(run.get("oomKills") or []) for run in members))
        for title, read, worse in FALSE_TRIGGER_FIGURES:
            row[title] = _median_and_worst([read(run) for run in members], worse)
        rows.append(row)
    return rows
