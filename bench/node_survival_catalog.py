"""The node-survival arena's workloads by name (`workload`, `WORKLOADS`) and one run's guest-side figures over
all of them (`PageCacheRun`).

The top of the workload modules: node_survival_workloads holds the pods' shapes and the growers, and each family
(page cache, own limit, deploy, false triggers, controls) builds on it in a module of its own; this one names
them all and is the only one that imports every family.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from node_survival_controls import CONTROL_WORKLOADS, control_workload
from node_survival_deploy import DEPLOY_WORKLOADS, DeployBurstRun, deploy_workload
from node_survival_falsetriggers import FALSE_TRIGGER_WORKLOADS, FalseTriggerRun, false_trigger_workload
from node_survival_outcomes import longest_gap
from node_survival_ownlimit import OWN_LIMIT_WORKLOADS, OwnLimitRun, node_scan_pages, own_limit_workload
from node_survival_pagecache import (
    MEMINFO_AT_LOWEST,
    PAGE,
    PAGECACHE_WORKLOADS,
    daemon_argv,
    disk,
    files_of,
    meminfo_kib,
    pagecache_workload,
    psi_totals,
    refault_file_mib,
    value_at,
    vmstat_counters,
    write_file,
)
from node_survival_workloads import (
    GROWER_RATES_MIB_S,
    MANY_SMALL_FILL,
    MANY_SMALL_PODS,
    MANY_SMALL_VARIANTS,
    PodSpec,
    Workload,
    guaranteed_pod,
)

MiB = 1 << 20
WORKLOADS = (*GROWER_RATES_MIB_S, *MANY_SMALL_VARIANTS, *PAGECACHE_WORKLOADS, *OWN_LIMIT_WORKLOADS,
             *DEPLOY_WORKLOADS, *FALSE_TRIGGER_WORKLOADS, *CONTROL_WORKLOADS)


def workload(name: str, mem_total_mib: int, requests_fit_mib: int | None = None) -> Workload:
    """The workload `name` for a node of `mem_total_mib` (MemTotal) whose kubelet admits pods whose requests add up
    to `requests_fit_mib` (None: MemTotal); KeyError for an unknown name."""
    if name in GROWER_RATES_MIB_S:
        return Workload(name, (guaranteed_pod(), PodSpec("grower", "besteffort", None, None, GROWER_RATES_MIB_S[name],
                                                         0.0, True)))
    if name in MANY_SMALL_VARIANTS:
        rate_mib_s, hold_s = MANY_SMALL_VARIANTS[name]
        request = (requests_fit_mib or mem_total_mib) // MANY_SMALL_PODS
        pods = tuple(PodSpec(f"small-{i}", "burstable", request, None, rate_mib_s / MANY_SMALL_PODS,
                             request * MANY_SMALL_FILL, True) for i in range(MANY_SMALL_PODS))
        return Workload(name, pods, hold_s=hold_s)
    if name in PAGECACHE_WORKLOADS:
        return pagecache_workload(name, mem_total_mib)
    if name in OWN_LIMIT_WORKLOADS:
        return own_limit_workload(name, mem_total_mib)
    if name in DEPLOY_WORKLOADS:
        return deploy_workload(name, mem_total_mib)
    if name in FALSE_TRIGGER_WORKLOADS:
        return false_trigger_workload(name, mem_total_mib)
    if name in CONTROL_WORKLOADS:
        return control_workload(name, guaranteed_pod())
    raise KeyError(f"unknown workload {name!r}: one of {', '.join(WORKLOADS)}")


class PageCacheRun:
    """One run's page-cache side (bench/node_survival_guest.py's one_run): the workload's files written and the
    caches dropped at its making; `start` when the workload starts; `figures` at its end."""

    def __init__(self, spec: Workload, work: Path) -> None:
        self.spec, self.work = spec, work
        files = files_of(spec)
        if files and not os.path.ismount(disk()):
            raise RuntimeError(f"workload {spec.name} needs the guest's own disk at {disk()} (--disk-mib > 0)")
        for path, mib in files:
            write_file(path, mib)
        self.own_limit = OwnLimitRun(spec)  # writes the backup stream's file, before the caches are dropped
        self.deploy = DeployBurstRun(spec)
        self.false_trigger = FalseTriggerRun(spec)  # writes its files too (the prior cache, the compaction's input)
        os.sync()
        Path("/proc/sys/vm/drop_caches").write_text("3\n")
        self.available: list[tuple[float, int]] = []  # (monotonic, MemFree + Inactive(file) bytes)
        self.lowest = 0  # the lowest of `available` (bytes; 0 before the first sample)
        self.at_lowest: dict[str, int] = {}  # /proc/meminfo's figures (KiB) then
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._sample, daemon=True)
        self.before: tuple[dict[str, int], dict[str, float]] = ({}, {})
        self.started = 0.0

    def daemon_argv(self, beats: Path) -> tuple[str, ...]:
        return daemon_argv(self.spec, beats)

    def before_pressure(self, backend: Any, control: Path, mem_total: int, pods: Mapping[str, Any]) -> None:
        """Once the pods that only hold memory hold it, before the pressure pods start: a deploy's old pods rolled
        out (bench/node_survival_deploy.py), the page cache from before a JVM's warm-up read in
        (bench/node_survival_falsetriggers.py); nothing for other workloads."""
        self.deploy.before_pressure(backend, control, mem_total, pods)
        self.false_trigger.before_pressure(control)

    def _counters(self) -> tuple[dict[str, int], dict[str, float]]:
        psi = Path("/proc/pressure/memory")
        return (vmstat_counters(Path("/proc/vmstat").read_text()),
                psi_totals(psi.read_text()) if psi.exists() else {})

    def _sample(self) -> None:
        while not self.stopping.is_set():
            with contextlib.suppress(OSError, ValueError, KeyError):
                info = meminfo_kib(Path("/proc/meminfo").read_text())
                figure = (info["MemFree"] + info["Inactive(file)"]) * 1024
                if not self.at_lowest or figure < self.lowest:
                    self.lowest = figure
                    self.at_lowest = {k: info[k] for k in MEMINFO_AT_LOWEST if k in info}
                self.available.append((time.monotonic(), figure))
            time.sleep(0.1)

    def start(self, pods: Mapping[str, Any]) -> None:
        self.before, self.started = self._counters(), time.monotonic()
        self.thread.start()
        self.own_limit.start(pods)
        self.deploy.start()
        self.false_trigger.start()

    def figures(self, beats_path: Path) -> dict[str, Any]:
        ended = time.monotonic()
        vmstat, psi = self._counters()
        own_limit = self.own_limit.figures()
        deploy = self.deploy.figures(meminfo_kib(Path("/proc/meminfo").read_text())["MemTotal"] * 1024)
        false_trigger = self.false_trigger.figures()
        scans = node_scan_pages(self.before[0], vmstat)
        self.stopping.set()
        self.thread.join(timeout=2)
        beats = [float(x) for x in beats_path.read_text().split()] if beats_path.exists() else []
        gap = longest_gap(beats, self.started, ended)
        at_gap = value_at(self.available, gap[0]) if gap else None
        return {
            "refaultFileMib": refault_file_mib(self.before[0], vmstat),
            "memoryStallS": {kind: psi[kind] - self.before[1].get(kind, 0.0) for kind in psi} or None,
            "kubeletAvailableAtLongestGapMib": None if at_gap is None else at_gap / MiB,
            "kubeletAvailableMinMib": self.lowest / MiB if self.at_lowest else None,
            "meminfoAtLowestMib": {k: round(v / 1024, 1) for k, v in self.at_lowest.items()} or None,
            "nodeScanMib": None if scans is None else scans * PAGE / MiB,  # node-wide reclaim (kswapd, direct)
            **own_limit,
            **deploy,
            **false_trigger,
        }
