"""Which protections against thrash act (evictd.core.protections): one row per rule, on plain facts."""

from __future__ import annotations

import pytest

from evictd.core.protections import (
    DAEMONS_NODE_HOW,
    PSI_HOW,
    RECLAIM_NODE_HOW,
    Protection,
    ProtectionFacts,
    ProtectionWanted,
    State,
    Verdict,
    protections,
)
from evictd.core.thresholds import parse_stall_thresholds, parse_without_psi_thresholds

NODE_STALL = {"evictd.io/memory.stall.full": "20%"}
PODS_STALL = {"evictd.io/allocatableMemory.stall.some": "40%"}
REFAULT = {"evictd.io/memory.refault": "20%"}
DAEMONS = {"evictd.io/daemons.refault": "50%"}
ALL_THERE = ProtectionFacts(node_psi_missing=None, pods_psi_missing=None, memory_reclaim_missing=None,
                            refault_missing=None)
NO_PSI = ProtectionFacts(node_psi_missing="/proc/pressure/memory: absent", pods_psi_missing="cgroup v1",
                         memory_reclaim_missing="cgroup v1 has no memory.reclaim",
                         refault_missing=None)


def wanted(hard: dict[str, str] | None = None, *, gate: bool = True, reclaim: bool = False,
           reported_only: str | None = None, daemons_reclaim: bool = False,
           daemons_unread: str | None = None, without_psi: dict[str, str] | None = None) -> ProtectionWanted:
    """What a configuration asks; `without_psi`: its stallEvictionHardWithoutPSI, not resolved for a kernel (as
    `check-config --config-only` asks)."""
    return ProtectionWanted.of(parse_stall_thresholds(hard or {}, {}, {}, {}), stall_gate=gate,
                               memory_reclaim=reclaim, reported_only=reported_only, daemons_reclaim=daemons_reclaim,
                               daemons_unread=daemons_unread,
                               standing_by=parse_without_psi_thresholds(without_psi or {}, hard or {}))


def on_kernel(without_psi: dict[str, str], psi_missing: str | None) -> ProtectionWanted:
    """What the shipped kind of configuration (a stall threshold and `without_psi`) asks on a kernel with PSI
    (`psi_missing` None: they stand by) or without (they joined stallEvictionHard), as
    `evictd.config.Configuration.for_kernel` resolves it (tests/test_config.py checks that)."""
    if psi_missing is None:
        return ProtectionWanted.of(parse_stall_thresholds(NODE_STALL, {}, {}, {}), stall_gate=True,
                                   memory_reclaim=False,
                                   standing_by=parse_without_psi_thresholds(without_psi, NODE_STALL))
    return ProtectionWanted.of(parse_stall_thresholds({**NODE_STALL, **without_psi}, {}, {}, {}), stall_gate=True,
                               memory_reclaim=False, stand_ins=tuple(without_psi))


def verdict(protection: Protection, want: ProtectionWanted, facts: ProtectionFacts | None) -> Verdict:
    found = {v.protection: v for v in protections(want, facts)}
    assert list(found) == list(Protection)
    return found[protection]


@pytest.mark.parametrize(
    ("protection", "want", "facts", "state", "in_detail", "how"),
    [
        # the stall signal
        (Protection.MEMORY_STALL, wanted(), ALL_THERE, State.OFF, "no memory stall threshold", "stallEvictionHard"),
        (Protection.MEMORY_STALL, wanted(NODE_STALL), ALL_THERE, State.ACTIVE, "memory.stall.full (hard)", ""),
        (Protection.MEMORY_STALL, wanted(NODE_STALL), NO_PSI, State.UNAVAILABLE, "/proc/pressure/memory", PSI_HOW),
        (Protection.MEMORY_STALL, wanted(NODE_STALL), None, State.UNREAD, "not read", ""),
        # a pods-cgroup stall threshold on v1 is unavailable even with the node's PSI there
        (Protection.MEMORY_STALL, wanted(PODS_STALL),
         ProtectionFacts(None, "no pods cgroup memory.pressure (cgroup v1)", None, None),
         State.UNAVAILABLE, "cgroup v1", "evictd.io/memory.stall"),
        # the node's and the pods cgroup's: active on the node's, the absent one named
        (Protection.MEMORY_STALL, wanted({**NODE_STALL, **PODS_STALL}),
         ProtectionFacts(None, "no pods cgroup memory.pressure (cgroup v1)", None, None),
         State.ACTIVE, "absent: no pods cgroup memory.pressure", ""),
        # the gate
        (Protection.STALL_GATE, wanted(), ALL_THERE, State.OFF, "no stall or refault", ""),
        (Protection.STALL_GATE, wanted(NODE_STALL), ALL_THERE, State.ACTIVE, "node-wide", ""),
        (Protection.STALL_GATE, wanted(REFAULT), NO_PSI, State.ACTIVE, "node-wide", ""),
        (Protection.STALL_GATE, wanted(NODE_STALL, gate=False), ALL_THERE, State.OFF, "its neighbours",
         "stallRequiresNodeReclaim"),
        # reclaim before evict
        (Protection.RECLAIM_BEFORE_EVICT, wanted(), ALL_THERE, State.OFF, "false", "memoryReclaimBeforeEviction"),
        (Protection.RECLAIM_BEFORE_EVICT, wanted(reclaim=True), ALL_THERE, State.ACTIVE, "active page cache", ""),
        (Protection.RECLAIM_BEFORE_EVICT, wanted(reclaim=True), NO_PSI, State.UNAVAILABLE, "cgroup v1",
         RECLAIM_NODE_HOW),
        (Protection.RECLAIM_BEFORE_EVICT, wanted(reclaim=True, reported_only="no Kubernetes API"), ALL_THERE,
         State.UNAVAILABLE, "no Kubernetes API", "dryRun: false"),
        (Protection.RECLAIM_BEFORE_EVICT, wanted(reclaim=True), None, State.UNREAD, "not read", ""),
        # the refault signal
        (Protection.PAGE_CACHE_REFAULT, wanted(NODE_STALL), ALL_THERE, State.OFF, "no refault threshold",
         "evictd.io/memory.refault"),
        (Protection.PAGE_CACHE_REFAULT, wanted(REFAULT), NO_PSI, State.ACTIVE, "memory.refault (hard)", ""),
        (Protection.PAGE_CACHE_REFAULT, wanted(REFAULT), ProtectionFacts(None, None, None, "/proc/vmstat has no x"),
         State.UNAVAILABLE, "/proc/vmstat has no x", "Linux 4.15+"),
        # the daemons refault signal: with or without PSI, unavailable without system.slice
        (Protection.DAEMONS_REFAULT, wanted(NODE_STALL), ALL_THERE, State.OFF, "no daemons refault threshold",
         "evictd.io/daemons.refault"),
        (Protection.DAEMONS_REFAULT, wanted(DAEMONS), NO_PSI, State.ACTIVE, "daemons.refault (hard)", ""),
        (Protection.DAEMONS_REFAULT, wanted(DAEMONS),
         ProtectionFacts(None, None, None, None, daemons_missing="/sys/fs/cgroup/memory/system.slice: no such cgroup"),
         State.UNAVAILABLE, "system.slice: no such cgroup", DAEMONS_NODE_HOW),
        (Protection.DAEMONS_REFAULT, wanted(DAEMONS), None, State.UNREAD, "system.slice not read", ""),
        # stallEvictionHardWithoutPSI: standing by where the kernel gives PSI, active where it does not
        (Protection.DAEMONS_REFAULT, on_kernel(DAEMONS, None), ALL_THERE, State.OFF,
         "evictd.io/daemons.refault>=50% (stallEvictionHardWithoutPSI) standing by", "stallEvictionHard"),
        (Protection.DAEMONS_REFAULT, on_kernel(DAEMONS, "/proc/pressure/memory: absent"), NO_PSI, State.ACTIVE,
         "daemons.refault (hard): system.slice's re-reads within 2 s, or its memory reclaimed below memory.low, or "
         "its page cache under memory.low that MemAvailable no longer covers, of its memory that is neither "
         "anonymous nor protected by memory.low (stallEvictionHardWithoutPSI: the kernel gives no PSI)", ""),
        (Protection.DAEMONS_REFAULT, wanted(NODE_STALL, without_psi=DAEMONS), None, State.UNREAD,
         "whether the kernel gives PSI not read", ""),
        (Protection.STALL_GATE, wanted(DAEMONS), NO_PSI, State.ACTIVE, "node-wide", ""),
        # reclaim for the daemons: no threshold needed, no PSI needed; memory.reclaim and system.slice are
        (Protection.DAEMONS_RECLAIM, wanted(), ALL_THERE, State.OFF, "daemonsReclaim: false", "daemonsReclaim: true"),
        (Protection.DAEMONS_RECLAIM, wanted(daemons_reclaim=True), ProtectionFacts(
            "/proc/pressure/memory: absent", "no PSI", None, None), State.ACTIVE, "10% of their memory within 2 s", ""),
        (Protection.DAEMONS_RECLAIM, wanted(daemons_reclaim=True), NO_PSI, State.UNAVAILABLE,
         "cgroup v1 has no memory.reclaim", RECLAIM_NODE_HOW),
        (Protection.DAEMONS_RECLAIM, wanted(daemons_reclaim=True),
         ProtectionFacts(None, None, None, None, daemons_missing="/sys/fs/cgroup/system.slice: no such cgroup"),
         State.UNAVAILABLE, "system.slice: no such cgroup", DAEMONS_NODE_HOW),
        (Protection.DAEMONS_RECLAIM, wanted(daemons_reclaim=True, reported_only="dry run"), ALL_THERE,
         State.UNAVAILABLE, "acts as off: dry run", "dryRun: false"),
        (Protection.DAEMONS_RECLAIM, wanted(daemons_reclaim=True), None, State.UNREAD, "not read", ""),
        (Protection.DAEMONS_RECLAIM, wanted(daemons_reclaim=True, daemons_unread="statsSource: kubelet (why)"),
         ALL_THERE, State.UNAVAILABLE, "acts as off: statsSource: kubelet", "statsSource: node"),
    ],
)
def test_each_protection_says_whether_it_acts_why_not_and_how(protection: Protection, want: ProtectionWanted,
                                                             facts: ProtectionFacts | None, state: State,
                                                             in_detail: str, how: str) -> None:
    found = verdict(protection, want, facts)
    assert found.state is state
    assert in_detail in found.detail
    assert how in found.how
    assert (found.how == "") == (state in (State.ACTIVE, State.UNREAD))
    assert found.partial == ("absent:" in found.detail)  # the start warns of a part asked for and absent


def test_fields_name_the_protection_as_metrics_label_it() -> None:
    fields = verdict(Protection.MEMORY_STALL, wanted(NODE_STALL), NO_PSI).fields()
    assert fields["protection"] == "memory_stall" and fields["state"] == "unavailable"
    assert "psi=1" in fields["how"]


def test_the_daemons_memory_low_is_active_where_cgroup2_carries_a_slices_protection() -> None:
    on = ProtectionWanted.of((), stall_gate=True, memory_reclaim=False, daemons_low="auto")
    assert verdict(Protection.DAEMONS_MEMORY_LOW, on, ALL_THERE).state is State.ACTIVE
    assert "daemonsMemoryLow: auto" in verdict(Protection.DAEMONS_MEMORY_LOW, on, ALL_THERE).detail
    plain = ProtectionFacts(None, None, None, None, daemons_low_missing="cgroup2 ... without memory_recursiveprot")
    found = verdict(Protection.DAEMONS_MEMORY_LOW, on, plain)
    assert (found.state, found.detail) == (State.UNAVAILABLE, "acts as off: cgroup2 ... without memory_recursiveprot")
    assert "memory_recursiveprot" in found.how and "MemoryLow=" in found.how
    v1 = verdict(Protection.DAEMONS_MEMORY_LOW, on, ProtectionFacts(None, None, None, None,
                                                                     daemons_low_missing="cgroup v1 has no memory.low"))
    assert v1.state is State.UNAVAILABLE and "cgroup v2" in v1.how
    assert verdict(Protection.DAEMONS_MEMORY_LOW, on, None).state is State.UNREAD
    dry = ProtectionWanted.of((), stall_gate=True, memory_reclaim=False, daemons_low="auto", reported_only="dry run")
    assert verdict(Protection.DAEMONS_MEMORY_LOW, dry, ALL_THERE).detail == "acts as off: dry run"
    off = ProtectionWanted.of((), stall_gate=True, memory_reclaim=False, daemons_low="off")
    assert verdict(Protection.DAEMONS_MEMORY_LOW, off, ALL_THERE).state is State.OFF


def test_the_daemons_memory_low_without_psi_stands_by_where_the_kernel_gives_psi() -> None:
    standing = ProtectionWanted.of((), stall_gate=True, memory_reclaim=False, daemons_low="off",
                                   daemons_low_standing_by="auto")
    found = verdict(Protection.DAEMONS_MEMORY_LOW, standing, ALL_THERE)
    assert found.state is State.OFF
    assert "standing by: daemonsMemoryLowWithoutPSI: auto" in found.detail and found.how == ""
