"""`evictd check-config`: the effective thresholds, who evicts on each signal beside the node's kubelet, evictd's own
protection settings, how the node protects its daemons' memory, and the configuration's lints
(`evictd.core.config_lints`) with the kubelet's allocatable memory at the node's memory capacity (`--node-memory`,
else this machine's MemTotal, the kubelet's capacity; unknown with --config-only).

Warnings go to stderr: what the kubelet's lenient decoding lets pass, a configuration without any threshold (evictd
would evict nothing), and each signal where the hand-over leaves nobody evicting or the kubelet acting before evictd
(`evictd.core.handover`), and each lint of severity warning (a note is in the report only). None of them changes the
exit status: the configuration is valid. With `--strict`, a hand-over that is not a backstop (STRICT_FAILS: a race
with the kubelet, an order that cannot be checked, nobody evicting at all) exits EXIT_HANDOVER after the report, so
that a fleet's pre-flight can gate on it.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from evictd.config import Configuration
from evictd.core.config_lints import (
    CONFIGURATION,
    KUBELET,
    WARNING,
    Allocatable,
    Lint,
    allocatable_memory,
    config_lints,
    hugepage_padding_lints,
)
from evictd.core.engine import EngineConfig
from evictd.core.errors import SampleError
from evictd.core.fs_layout import FsLayout
from evictd.core.handover import NO_THRESHOLDS, RACING, Handover, Mode, judge_handover
from evictd.core.kubelet_config import EvictionSettings
from evictd.core.limits_enforcer import Enforcer
from evictd.core.thresholds import derive_containerfs_thresholds
from evictd.kubelet_file import KubeletFile

if TYPE_CHECKING:
    from evictd.core.node_protection import Finding
    from evictd.core.protections import Verdict

EXIT_OK = 0
# Where a node's memory capacity is given when the configuration is checked off its node.
NODE_MEMORY_OPTION = "--node-memory"
# `--strict` and a hand-over that is not a backstop: the configuration is valid (not 2), the check failed.
EXIT_HANDOVER = 1
# The hand-over modes `--strict` fails on: judged as if evictd acted, as the verdict is.
STRICT_FAILS = (Mode.OVERLAP, Mode.NONE)
# Why check-config follows no Node's kubelet version without `kubeletVersion`: it reads no API (it works offline).
NO_NODE = ("check-config reads no Node; `evictd run` with the Kubernetes API takes the version from its Node's "
           "nodeInfo.kubeletVersion at start-up")


def check_config(configuration: Configuration, layout: FsLayout, kubelet: KubeletFile, *, read_cgroups: bool,
                 output: str, strict: bool = False, node_memory: int | None = None) -> int:
    """Print the check of `configuration` (text or json `output`) with the kubelet's `kubelet`; return 0, or with
    `strict` EXIT_HANDOVER when the hand-over is not a backstop (one line on stderr says why)."""
    from evictd.cycle.limits_choice import LIMITS, limits_choice, limits_json, limits_text
    from evictd.cycle.render import handover_json, handover_text, threshold_json, thresholds_text

    engine_config = EngineConfig.from_settings(configuration.eviction)
    thresholds, warnings = derive_containerfs_thresholds(engine_config.thresholds, layout)
    # A derived containerfs threshold whose source is absent has no operator and can never be met.
    shown = [t for t in thresholds if t.operator is not None]
    handover = judge_handover(engine_config.thresholds, kubelet.thresholds(),
                              evictd_dry_run=configuration.evictd.dry_run)
    for warning in (*configuration.warnings, *warnings):
        print(f"warning: {warning}", file=sys.stderr)
    if not shown:
        print(f"warning: {NO_THRESHOLDS}", file=sys.stderr)
    for verdict in handover.problems:
        print(f"warning: {verdict.signal}: {verdict.now}: {verdict.detail}", file=sys.stderr)
    memory = _memory_capacity(node_memory, read_cgroups=read_cgroups)
    semantics = configuration.semantics(no_node=NO_NODE)
    hugepages = _hugepages(read_cgroups=read_cgroups)
    lints = _traps(configuration.eviction, CONFIGURATION, memory, hugepages, semantics.hugepage_aware)
    if kubelet.eviction is not None:  # the traps of the node's kubelet's own configuration, once each
        seen = {(lint.code, lint.key, lint.value) for lint in lints}
        lints += [lint for lint in _traps(kubelet.eviction, KUBELET, memory, hugepages, semantics.hugepage_aware)
                  if (lint.code, lint.key, lint.value) not in seen]
    for lint in lints:
        if lint.severity == WARNING:
            print(f"warning: {lint.code}: {lint}", file=sys.stderr)
    allocatable = (allocatable_memory(configuration.eviction, configuration.reservation, memory.bytes,
                                      hugepages.bytes or 0)
                   if memory.bytes is not None else None)
    limits = limits_choice(configuration, kubelet.eviction)
    if limits.enforcer is Enforcer.NOBODY:
        print(f"warning: nobody enforces {LIMITS}: {limits.reason}", file=sys.stderr)
    protection = _node_protection(configuration, read_cgroups=read_cgroups)
    verdicts = _protections(configuration, read_cgroups=read_cgroups)
    if output == "json":
        print(json.dumps({"thresholds": [threshold_json(t) for t in shown],
                          "handover": handover_json(handover, kubelet.note),
                          "ephemeralStorageLimits": limits_json(configuration, limits),
                          "node_protection": [finding.fields() for finding in protection],
                          "lints": [lint.fields() for lint in lints],
                          "kubelet_semantics": {"version": semantics.version_text,
                                                "version_source": semantics.version_source,
                                                "hugepage_aware_eviction": semantics.hugepage_aware,
                                                "gate_source": semantics.gate_source,
                                                "hugepages_bytes": hugepages.bytes,
                                                "hugepages_source": hugepages.source},
                          "node_memory": {"capacity_bytes": memory.bytes, "source": memory.source,
                                          "allocatable_bytes": allocatable.bytes if allocatable else None},
                          "protections": [verdict.fields() for verdict in verdicts]}, indent=2))
        return _strict_status(handover) if strict else EXIT_OK
    eviction = configuration.eviction
    print(thresholds_text(shown) if shown else f"NO EVICTION THRESHOLDS: {NO_THRESHOLDS}")
    print()
    print(handover_text(handover_json(handover, kubelet.note)))
    print()
    print(semantics.describe())
    print(f"node hugepages: {hugepages.bytes if hugepages.bytes is not None else 'unknown'} bytes "
          f"({hugepages.source}); subtracted from memory.available: "
          f"{'yes' if semantics.hugepage_aware else 'no'}")
    print(_lints_text(lints))
    print(_allocatable_text(memory, allocatable))
    print(f"pressure transition period: {eviction.pressure_transition_period_s:g}s")
    print(f"max pod grace period (soft evictions): {eviction.max_pod_grace_period_s}s")
    print(f"local storage capacity isolation: {str(eviction.local_storage_capacity_isolation).lower()}")
    print(limits_text(limits))
    print(f"enforce node allocatable: {', '.join(eviction.enforce_node_allocatable) or '(none)'}")
    print(f"housekeeping interval: {configuration.evictd.housekeeping_interval_s:g}s")
    own = configuration.evictd
    # What `run` does to protect itself; its start-up log lines say how it went (docs/deployment.md).
    print(f"lock memory: {str(own.lock_memory).lower()}"
          + (" (mlockall at start; needs CAP_IPC_LOCK or an unlimited RLIMIT_MEMLOCK)" if own.lock_memory else ""))
    print("oom_score_adj: " + (f"{own.oom_score_adj} (set at start; lowering needs CAP_SYS_RESOURCE)"
                               if own.oom_score_adj is not None else "as started (OOMScoreAdjust= of the unit, the "
                               "kubelet's for the pod)"))
    print()
    print(_protections_text(verdicts, read_cgroups=read_cgroups))
    print()
    print(_node_protection_text(protection, read_cgroups=read_cgroups))
    return _strict_status(handover) if strict else EXIT_OK


@dataclass(frozen=True, slots=True)
class MemoryCapacity:
    """The node memory capacity the lints resolve percentages at: `bytes` (None: unknown) and where it came from."""

    bytes: int | None
    source: str


def _memory_capacity(given: int | None, *, read_cgroups: bool) -> MemoryCapacity:
    """`--node-memory` if given; else, on the node (not --config-only), this machine's MemTotal, which is the
    kubelet's memory capacity (cAdvisor's MachineInfo.MemoryCapacity); else unknown."""
    from evictd.adapters.procfs import mem_total_bytes

    if given is not None:
        return MemoryCapacity(given, NODE_MEMORY_OPTION)
    if not read_cgroups:
        return MemoryCapacity(None, f"unknown (--config-only: give {NODE_MEMORY_OPTION})")
    try:
        return MemoryCapacity(mem_total_bytes(), "this machine's /proc/meminfo MemTotal")
    except SampleError as exc:
        return MemoryCapacity(None, f"unknown ({exc})")


def _traps(settings: EvictionSettings, source: str, memory: MemoryCapacity, hugepages: MemoryCapacity,
           hugepage_aware: bool) -> list[Lint]:
    """The lints of `settings`, the configuration of `source` (`evictd.core.config_lints`)."""
    padding = hugepage_padding_lints(settings, hugepages.bytes or 0, hugepage_aware, memory.bytes)
    return [*config_lints(settings, memory.bytes, source), *(replace(lint, source=source) for lint in padding)]


def _lints_text(lints: Sequence[Lint]) -> str:
    from evictd.cycle.render import printable

    lines = [f"configuration lints: {len(lints) or 'none'}"]
    for lint in lints:
        lines.append(f"  {lint.severity:<8} {lint.code}: {printable(str(lint))}")
    return "\n".join(lines)


def _hugepages(*, read_cgroups: bool) -> MemoryCapacity:
    """The node's hugepage total from /sys/kernel/mm/hugepages (`evictd.adapters.hugepages`), unless --config-only."""
    from evictd.adapters.hugepages import HUGEPAGES_ROOT, hugepages_bytes

    if not read_cgroups:
        return MemoryCapacity(None, "not read: --config-only")
    try:
        return MemoryCapacity(hugepages_bytes(), HUGEPAGES_ROOT)
    except SampleError as exc:
        return MemoryCapacity(None, f"unreadable: {exc}")


def _allocatable_text(memory: MemoryCapacity, allocatable: Allocatable | None) -> str:
    if allocatable is None:
        return f"allocatable memory: {memory.source}"
    return (f"allocatable memory: {allocatable.bytes} bytes = capacity {allocatable.capacity_bytes} ({memory.source})"
            f" - systemReserved {allocatable.system_reserved_bytes} - kubeReserved {allocatable.kube_reserved_bytes}"
            f" - evictionHard memory.available {allocatable.hard_eviction_bytes}"
            + (f" - hugepages {allocatable.hugepages_bytes}" if allocatable.hugepages_bytes else ""))


def _strict_status(handover: Handover) -> int:
    """EXIT_HANDOVER with one line on stderr when the hand-over is not a backstop (STRICT_FAILS), else EXIT_OK."""
    if handover.mode not in STRICT_FAILS:
        return EXIT_OK
    # A race a dry-run evictd does not run yet (no problem today) is one as soon as it acts.
    problems = [str(v.signal) for v in handover.verdicts if v.problem or v.evicts in RACING]
    print(f"evictd: --strict: {handover.summary}" + (f" ({', '.join(problems)})" if problems else ""),
          file=sys.stderr)
    return EXIT_HANDOVER


def _protections(configuration: Configuration, *, read_cgroups: bool) -> list[Verdict]:
    """Which protections against thrash act (`evictd.core.protections`), with this node's facts if `read_cgroups`."""
    from evictd.adapters.cgroups import CgroupReader, detect_cgroup_layout
    from evictd.adapters.protection_facts import read_protection_facts
    from evictd.core.protections import protections

    own = configuration.evictd
    if not read_cgroups:
        return list(protections(configuration.protections_wanted(), None))
    try:
        layout = detect_cgroup_layout(own.cgroupfs_path, own.cgroup_driver, base=own.cgroup_root.strip("/"))
    except SampleError as exc:
        facts = None
        print(f"warning: protections: cgroups not read: {exc}", file=sys.stderr)
    else:
        cgroups = CgroupReader(layout)
        try:
            facts = read_protection_facts(cgroups)
        finally:
            cgroups.close()
    # The without-PSI thresholds count as `run` counts them on this kernel (`Configuration.for_kernel`).
    on_kernel = configuration if facts is None else configuration.for_kernel(facts.node_psi_missing)
    return list(protections(on_kernel.protections_wanted(), facts))


def _protections_text(verdicts: Sequence[Verdict], *, read_cgroups: bool) -> str:
    from evictd.cycle.render import printable

    lines = ["protections against thrash:" + ("" if read_cgroups else " (configuration only: the node not read)")]
    for verdict in verdicts:
        lines.append(f"  {verdict.state:<11} {verdict.protection}: {printable(verdict.detail)}")
        if verdict.how:
            lines.append(f"              how: {printable(verdict.how)}")
    return "\n".join(lines)


def _node_protection(configuration: Configuration, *, read_cgroups: bool) -> list[Finding]:
    """The findings on the node's memory protection: the configuration's and, with `read_cgroups`, the cgroups'."""
    from evictd.adapters.cgroups import CgroupReader, detect_cgroup_layout
    from evictd.adapters.node_protection import read_node_cgroups
    from evictd.core.node_protection import configuration_findings, node_protection_findings, unread_cgroups_finding

    reservation, enforced = configuration.reservation, configuration.eviction.enforce_node_allocatable
    if not read_cgroups:
        return configuration_findings(reservation, enforced)
    own = configuration.evictd
    try:
        layout = detect_cgroup_layout(own.cgroupfs_path, own.cgroup_driver, base=own.cgroup_root.strip("/"))
    except SampleError as exc:
        return [*configuration_findings(reservation, enforced), unread_cgroups_finding(exc.source, exc.reason)]
    cgroups = CgroupReader(layout)
    try:
        return node_protection_findings(reservation, enforced, read_node_cgroups(cgroups))
    finally:
        cgroups.close()


def _node_protection_text(findings: Sequence[Finding], *, read_cgroups: bool) -> str:
    from evictd.cycle.render import printable

    lines = ["node memory protection:" + ("" if read_cgroups else " (configuration only: cgroups not read)")]
    for finding in findings:
        lines.append(f"  {finding.status:<8} {printable(finding.what)}: {printable(finding.value)}")
        lines.append(f"           {printable(finding.detail)}")
        if finding.advice:
            lines.append(f"           advice: {printable(finding.advice)}")
    return "\n".join(lines)
