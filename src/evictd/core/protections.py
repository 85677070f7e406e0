"""Which of evictd's protections against thrash act on this node, and for each that does not, why and how to get it.

For `check-config` and the start-up log and metric of `run`. A protection is `active`, `off` (the configuration
does not ask for it) or `unavailable` (asked for, but this node cannot give it: the reason read, never guessed).
Facts are read by `evictd.adapters.protection_facts`; without them (`check-config --config-only`) a protection the
configuration asks for is `unread`. Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum

from evictd.core.daemon_refault import DAEMON_REFAULT_WINDOW_S
from evictd.core.daemons_protection import OFF, SETTING_KEY, V1_REASON, WITHOUT_PSI_KEY
from evictd.core.daemons_reclaim import DAEMONS_RECLAIM_FIELD, TRIGGER_BASIS_POINTS
from evictd.core.signals import Reading, Signal, spec_of
from evictd.core.thresholds import WITHOUT_PSI_FIELD, Threshold, stall_share_text

PSI_HOW = ("a kernel with PSI (CONFIG_PSI, Linux 4.20+); where it is built in but off by default "
           "(CONFIG_PSI_DEFAULT_DISABLED), boot with `psi=1` on the kernel command line")
STALL_HOW = ("set stallEvictionHard/stallEvictionSoft in the EvictdConfiguration (docs/configuration.md, "
             "\"Memory stall thresholds\"); the shipped configuration does")
GATE_HOW = "leave stallRequiresNodeReclaim at true (the default)"
RECLAIM_HOW = "set memoryReclaimBeforeEviction: true in the EvictdConfiguration (the shipped configuration does)"
RECLAIM_NODE_HOW = "cgroup v2 (systemd.unified_cgroup_hierarchy=1) and Linux 5.19+ (memory.reclaim)"
REFAULT_HOW = ("set stallEvictionHard/Soft for evictd.io/memory.refault (docs/configuration.md, \"The refault "
               "signal\"); off as shipped: on a node without PSI it can count relief's re-reads as thrash")
DAEMONS_HOW = ("set stallEvictionHard/Soft for evictd.io/daemons.refault (docs/configuration.md, \"The daemons "
               "refault signal\"); off as shipped until measured")
# Why `statsSource: kubelet` gives no daemons' figure to reclaim for.
KUBELET_STATS_NO_DAEMONS = "statsSource: kubelet (its Summary has no system.slice counts)"
DAEMONS_RECLAIM_HOW = (f"set {DAEMONS_RECLAIM_FIELD}: true in the EvictdConfiguration (docs/configuration.md, "
                       "\"Reclaim for the daemons\"); off as shipped until measured")
DAEMONS_NODE_HOW = ("systemd's system.slice with memory accounting (DefaultMemoryAccounting=yes in "
                    "/etc/systemd/system.conf), so it is in the memory hierarchy")
DAEMONS_LOW_HOW = (f"set {SETTING_KEY}: auto in the EvictdConfiguration (docs/configuration.md, \"Keeping the daemons' "
                   "memory\"); the shipped configuration sets daemonsMemoryLowWithoutPSI: auto, for kernels without "
                   "PSI")
DAEMONS_LOW_NODE_HOW = ("cgroup v2 mounted with memory_recursiveprot (systemd 247+ mounts it so); or the node's own "
                        "`systemctl set-property system.slice MemoryLow=...`")


class Protection(StrEnum):
    """A protection, named as metrics label it."""

    MEMORY_STALL = "memory_stall"
    STALL_GATE = "stall_gate"
    RECLAIM_BEFORE_EVICT = "reclaim_before_evict"
    PAGE_CACHE_REFAULT = "page_cache_refault"
    DAEMONS_REFAULT = "daemons_refault"
    DAEMONS_RECLAIM = "daemons_reclaim"
    DAEMONS_MEMORY_LOW = "daemons_memory_low"


class State(StrEnum):
    ACTIVE = "active"
    OFF = "off"
    UNAVAILABLE = "unavailable"
    UNREAD = "unread"


@dataclass(frozen=True, slots=True)
class ProtectionFacts:
    """What the node gives: for each, None where it is there, else why not (a path and what is missing there)."""

    node_psi_missing: str | None
    pods_psi_missing: str | None
    memory_reclaim_missing: str | None
    refault_missing: str | None
    daemons_missing: str | None = None
    daemons_low_missing: str | None = None


@dataclass(frozen=True, slots=True)
class ProtectionWanted:
    """What the configuration asks for: its thresholds, the stall gate, reclaim before evict, why the daemon would
    only report (None: it acts), reclaim for the daemons, and why its stats cannot give the daemons' figure (None:
    they can)."""

    thresholds: tuple[Threshold, ...]
    stall_gate: bool
    memory_reclaim: bool
    reported_only: str | None = None
    daemons_reclaim: bool = False
    daemons_unread: str | None = None
    standing_by: tuple[Threshold, ...] = ()
    stand_ins: tuple[str, ...] = ()
    daemons_low: str = OFF  # the daemonsMemoryLow setting as written
    daemons_low_standing_by: str = ""  # daemonsMemoryLowWithoutPSI, while the kernel's PSI keeps it standing by

    @classmethod
    def of(cls, thresholds: Iterable[Threshold], *, stall_gate: bool, memory_reclaim: bool,
           reported_only: str | None = None, daemons_reclaim: bool = False,
           daemons_unread: str | None = None, standing_by: Iterable[Threshold] = (),
           stand_ins: Iterable[str] = (), daemons_low: str = OFF,
           daemons_low_standing_by: str = "") -> ProtectionWanted:
        return cls(tuple(thresholds), stall_gate, memory_reclaim, reported_only, daemons_reclaim, daemons_unread,
                   tuple(standing_by), tuple(stand_ins), daemons_low, daemons_low_standing_by)


@dataclass(frozen=True, slots=True)
class Verdict:
    """One protection's state, what it does or why it does not act, how to get it (empty when active), and whether
    part of what was asked for is absent (`partial`: active on the rest)."""

    protection: Protection
    state: State
    detail: str
    how: str = ""
    partial: bool = False

    def fields(self) -> dict[str, str]:
        return {"protection": str(self.protection), "state": str(self.state), "detail": self.detail, "how": self.how}


def protections(wanted: ProtectionWanted, facts: ProtectionFacts | None) -> tuple[Verdict, ...]:
    """The verdict on each protection, in `Protection` order; `facts` None: the node was not read."""
    return (_stall(wanted, facts), _gate(wanted), _reclaim(wanted, facts), _refault(wanted, facts),
            _daemons(wanted, facts), _daemons_reclaim(wanted, facts), _daemons_low(wanted, facts))


def _named(wanted: ProtectionWanted, signals: Iterable[Signal]) -> str:
    chosen = set(signals)
    return ", ".join(f"{t.signal} ({'hard' if t.is_hard else 'soft'})" for t in wanted.thresholds
                     if t.signal in chosen)


def _stall_signals(wanted: ProtectionWanted) -> tuple[set[Signal], set[Signal]]:
    """The node's and the pods cgroup's PSI stall signals the configuration names."""
    node: set[Signal] = set()
    pods: set[Signal] = set()
    for threshold in wanted.thresholds:
        if spec_of(threshold.signal).stall is None:
            continue
        (pods if spec_of(threshold.signal).reading is Reading.PODS_MEMORY_STALL else node).add(threshold.signal)
    return node, pods


def _stall(wanted: ProtectionWanted, facts: ProtectionFacts | None) -> Verdict:
    node, pods = _stall_signals(wanted)
    if not node and not pods:
        return Verdict(Protection.MEMORY_STALL, State.OFF, "no memory stall threshold", STALL_HOW)
    named = _named(wanted, node | pods)
    if facts is None:
        return Verdict(Protection.MEMORY_STALL, State.UNREAD, f"{named}; the node's PSI not read")
    missing = [why for signals, why in ((node, facts.node_psi_missing), (pods, facts.pods_psi_missing))
               if signals and why is not None]
    if node and facts.node_psi_missing is not None and (not pods or facts.pods_psi_missing is not None):
        return Verdict(Protection.MEMORY_STALL, State.UNAVAILABLE, f"{named}: the kernel gives no memory pressure "
                       f"({'; '.join(missing)})", PSI_HOW)
    if not node and facts.pods_psi_missing is not None:
        return Verdict(Protection.MEMORY_STALL, State.UNAVAILABLE, f"{named}: {facts.pods_psi_missing}",
                       f"a node stall threshold (evictd.io/memory.stall.*), or {PSI_HOW}")
    detail = named + (f" (absent: {'; '.join(missing)})" if missing else "")
    return Verdict(Protection.MEMORY_STALL, State.ACTIVE, detail, partial=bool(missing))


def _gate(wanted: ProtectionWanted) -> Verdict:
    gated = [t.signal for t in wanted.thresholds if spec_of(t.signal).stall is not None
             or t.signal in (Signal.MEMORY_REFAULT, Signal.DAEMONS_REFAULT)]
    if not gated:
        return Verdict(Protection.STALL_GATE, State.OFF, "no stall or refault threshold to gate", STALL_HOW)
    if not wanted.stall_gate:
        return Verdict(Protection.STALL_GATE, State.OFF, "stallRequiresNodeReclaim: false: a pod thrashing in its "
                       "own limit can get its neighbours evicted", GATE_HOW)
    return Verdict(Protection.STALL_GATE, State.ACTIVE, "stall and refault thresholds count only while the node "
                   "reclaims node-wide")


def _reclaim(wanted: ProtectionWanted, facts: ProtectionFacts | None) -> Verdict:
    if not wanted.memory_reclaim:
        return Verdict(Protection.RECLAIM_BEFORE_EVICT, State.OFF, "memoryReclaimBeforeEviction: false", RECLAIM_HOW)
    if wanted.reported_only is not None:
        return Verdict(Protection.RECLAIM_BEFORE_EVICT, State.UNAVAILABLE, f"acts as off: {wanted.reported_only}",
                       "let evictd act (dryRun: false, and a Kubernetes API)")
    if facts is None:
        return Verdict(Protection.RECLAIM_BEFORE_EVICT, State.UNREAD, "on; the node's cgroups not read")
    if facts.memory_reclaim_missing is not None:
        return Verdict(Protection.RECLAIM_BEFORE_EVICT, State.UNAVAILABLE,
                       f"acts as off: {facts.memory_reclaim_missing}", RECLAIM_NODE_HOW)
    return Verdict(Protection.RECLAIM_BEFORE_EVICT, State.ACTIVE, "the pods' active page cache is reclaimed before "
                   "a memory eviction (while evictd acts: not in dry-run)")


def _counted(protection: Protection, signal: Signal, wanted: ProtectionWanted, read: bool, missing: str | None,
             off: tuple[str, str], unread: str, node_how: str, active: str) -> Verdict:
    """A refault-family signal's verdict: `off` (detail, how) without a threshold, `unread` where the node was not
    `read`, unavailable for what `missing` names, else active with `active` after the thresholds."""
    named = _named(wanted, [signal])
    if not named:
        waiting = [t for t in wanted.standing_by if t.signal is signal]
        if not waiting:
            return Verdict(protection, State.OFF, *off)
        standing = f"{', '.join(f'{t.signal}>={stall_share_text(t.value)}' for t in waiting)} ({WITHOUT_PSI_FIELD})"
        if not read:
            return Verdict(protection, State.UNREAD, f"{standing}; whether the kernel gives PSI not read")
        return Verdict(protection, State.OFF, f"{standing} standing by: it counts only where the kernel gives no PSI, "
                       "and this one does (the memory stall signal acts)",
                       "nothing to do; to count it on this kernel too, move it to stallEvictionHard")
    if not read:
        return Verdict(protection, State.UNREAD, f"{named}; {unread} not read")
    if missing is not None:
        return Verdict(protection, State.UNAVAILABLE, f"{named}: {missing}", node_how)
    stood_in = f" ({WITHOUT_PSI_FIELD}: the kernel gives no PSI)" if str(signal) in wanted.stand_ins else ""
    return Verdict(protection, State.ACTIVE, named + active + stood_in)


def _refault(wanted: ProtectionWanted, facts: ProtectionFacts | None) -> Verdict:
    return _counted(Protection.PAGE_CACHE_REFAULT, Signal.MEMORY_REFAULT, wanted, facts is not None,
                    None if facts is None else facts.refault_missing, ("no refault threshold", REFAULT_HOW),
                    "/proc/vmstat", "Linux 4.15+ (workingset_refault in /proc/vmstat)", "")


def _daemons(wanted: ProtectionWanted, facts: ProtectionFacts | None) -> Verdict:
    return _counted(Protection.DAEMONS_REFAULT, Signal.DAEMONS_REFAULT, wanted, facts is not None,
                    None if facts is None else facts.daemons_missing, ("no daemons refault threshold", DAEMONS_HOW),
                    "system.slice", DAEMONS_NODE_HOW,
                    f": system.slice's re-reads within {DAEMON_REFAULT_WINDOW_S:g} s, or its memory reclaimed below "
                    "memory.low, or its page cache under memory.low that MemAvailable no longer covers, of its memory "
                    "that is neither anonymous nor protected by memory.low")


def _daemons_reclaim(wanted: ProtectionWanted, facts: ProtectionFacts | None) -> Verdict:
    """Reclaim for the daemons: needs memory.reclaim on the pods cgroup (as reclaim before evict), system.slice's
    re-reads (as the daemons refault signal) and evictd acting."""
    if not wanted.daemons_reclaim:
        return Verdict(Protection.DAEMONS_RECLAIM, State.OFF, f"{DAEMONS_RECLAIM_FIELD}: false", DAEMONS_RECLAIM_HOW)
    if wanted.reported_only is not None:
        return Verdict(Protection.DAEMONS_RECLAIM, State.UNAVAILABLE, f"acts as off: {wanted.reported_only}",
                       "let evictd act (dryRun: false, and a Kubernetes API)")
    if wanted.daemons_unread is not None:
        return Verdict(Protection.DAEMONS_RECLAIM, State.UNAVAILABLE, f"acts as off: {wanted.daemons_unread}",
                       "statsSource: node (the default)")
    if facts is None:
        return Verdict(Protection.DAEMONS_RECLAIM, State.UNREAD, "on; the node's cgroups and system.slice not read")
    if facts.memory_reclaim_missing is not None:
        return Verdict(Protection.DAEMONS_RECLAIM, State.UNAVAILABLE, f"acts as off: {facts.memory_reclaim_missing}",
                       RECLAIM_NODE_HOW)
    if facts.daemons_missing is not None:
        return Verdict(Protection.DAEMONS_RECLAIM, State.UNAVAILABLE, f"acts as off: {facts.daemons_missing}",
                       DAEMONS_NODE_HOW)
    return Verdict(Protection.DAEMONS_RECLAIM, State.ACTIVE, "the pods' page cache is reclaimed while the daemons "
                   f"re-read {TRIGGER_BASIS_POINTS / 100:g}% of their memory within {DAEMON_REFAULT_WINDOW_S:g} s, "
                   "with or without a threshold (while evictd acts: not in dry-run)")


def _daemons_low(wanted: ProtectionWanted, facts: ProtectionFacts | None) -> Verdict:
    """evictd's memory.low on system.slice: needs cgroup v2 mounted memory_recursiveprot and evictd acting."""
    if wanted.daemons_low == OFF:
        if wanted.daemons_low_standing_by and wanted.daemons_low_standing_by != OFF:
            return Verdict(Protection.DAEMONS_MEMORY_LOW, State.OFF, f"{SETTING_KEY}: {OFF}; standing by: "
                           f"{WITHOUT_PSI_KEY}: {wanted.daemons_low_standing_by} counts where the kernel gives no PSI")
        return Verdict(Protection.DAEMONS_MEMORY_LOW, State.OFF, f"{SETTING_KEY}: {OFF}", DAEMONS_LOW_HOW)
    if wanted.reported_only is not None:
        return Verdict(Protection.DAEMONS_MEMORY_LOW, State.UNAVAILABLE, f"acts as off: {wanted.reported_only}",
                       "let evictd act (dryRun: false, and a Kubernetes API)")
    if facts is None:
        return Verdict(Protection.DAEMONS_MEMORY_LOW, State.UNREAD, f"{SETTING_KEY}: {wanted.daemons_low}; the "
                       "node's cgroups not read")
    if facts.daemons_low_missing is not None:
        how = "cgroup v2 (systemd.unified_cgroup_hierarchy=1)" if facts.daemons_low_missing == V1_REASON \
            else DAEMONS_LOW_NODE_HOW
        return Verdict(Protection.DAEMONS_MEMORY_LOW, State.UNAVAILABLE, f"acts as off: {facts.daemons_low_missing}",
                       how)
    return Verdict(Protection.DAEMONS_MEMORY_LOW, State.ACTIVE, f"system.slice's memory.low kept at {SETTING_KEY}: "
                   f"{wanted.daemons_low} (the start-up line `daemons' memory protection` gives its size), so the "
                   "kernel reclaims the pods' pages before the daemons'; the node's own MemoryLow=/MemoryMin= stands")
