"""Lints of an eviction configuration the kubelet accepts silently, and the node's allocatable memory (no I/O).

The traps fleets' configurations carry (`check-config` prints them, tests/data/fleet-configs holds real ones):
- SOFT_NEVER_FIRES: a soft threshold at or under the hard threshold of the same signal is never met first, so the
  soft one never evicts (Karpenter's soft `500Mi` under hard `5%` on nodes of 10 GiB and more,
  kubernetes-sigs/karpenter#2852);
- NO_HARD_THRESHOLD: no hard `memory.available` or `nodefs.available` threshold, so the kubelet lets memory or the
  node's disk run out (Azure/karpenter-provider-azure#988; k3s's `--eviction-hard` flag drops memory's);
- SOFT_MARGIN_NOT_RESERVED (a NOTE, the others are WARNINGs): the kubelet subtracts only the hard threshold from
  allocatable (cm/node_container_manager_linux.go hardEvictionReservation), so the margin a soft threshold keeps
  above it is schedulable; Karpenter reserves max(soft, hard) and so expects less than the node reports
  (aws/karpenter-provider-aws#8407).
A percentage needs the node's capacity. `memory_capacity` (bytes) resolves memory's; without it, and for the disk
signals whose filesystem size a configuration cannot know, a lint between a quantity and a percentage names the
capacity from which it holds. Invariants: pure, deterministic, every lint names the key, the value and the fix.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from fractions import Fraction

from evictd.core.kubelet_config import EvictionSettings
from evictd.core.quantity import Quantity, QuantityFormat
from evictd.core.reserved_memory import NodeReservation
from evictd.core.signals import EVICTD_SIGNALS, Signal
from evictd.core.thresholds import Threshold, ThresholdValue, threshold_quantity

SOFT_NEVER_FIRES = "soft-never-fires"
NO_HARD_THRESHOLD = "no-hard-threshold"
SOFT_MARGIN_NOT_RESERVED = "soft-margin-not-reserved"
PADDED_BY_HUGEPAGES = "padded-by-hugepages"
# The signals whose loss kills a node: without a hard threshold nothing stops memory or the root disk running out.
ESSENTIAL_HARD = (Signal.MEMORY_AVAILABLE, Signal.NODEFS_AVAILABLE)
# The signals the kubelet subtracts from allocatable, with the resource they reserve (hardEvictionReservation).
RESERVED_BY_HARD = {Signal.MEMORY_AVAILABLE: "memory", Signal.NODEFS_AVAILABLE: "ephemeral-storage"}
# A warning is a threshold that cannot do what it says; a note a figure that differs from what people assume (a
# soft margin above the hard threshold is how soft thresholds are meant to be used, only not reserved).
WARNING, NOTE = "warning", "note"
# Whose configuration a lint is about: the one evictd applies (--config), or the node's kubelet's (as found).
CONFIGURATION, KUBELET = "configuration", "the node's kubelet"
GIB = 1 << 30  # capacities are named in GiB, as instance sizes are
# How a hard threshold stands to a soft one of its signal (`_hard_first`): met first at every capacity, at none,
# from a capacity on, or up to one.
ALWAYS, NEVER, FROM, UNTIL = "always", "never", "from", "until"


@dataclass(frozen=True, slots=True)
class Lint:
    """One trap: its `code`, the configuration `key` and `value` it is about, what happens, and the fix."""

    code: str
    key: str
    value: str
    detail: str
    fix: str
    severity: str = WARNING
    source: str = CONFIGURATION

    def fields(self) -> dict[str, str]:
        return {"code": self.code, "severity": self.severity, "source": self.source, "key": self.key,
                "value": self.value, "detail": self.detail, "fix": self.fix}

    def __str__(self) -> str:
        where = "" if self.source == CONFIGURATION else f"{self.source}: "
        return f"{where}{self.key}: {self.value}: {self.detail}; fix: {self.fix}"


@dataclass(frozen=True, slots=True)
class Allocatable:
    """The node's allocatable memory as the kubelet computes it: capacity less both reservations and the hard
    `memory.available` threshold, clamped at 0 (node_container_manager_linux.go GetNodeAllocatableAbsolute), less
    the pre-allocated hugepages (nodestatus/setters.go MachineInfo)."""

    capacity_bytes: int
    system_reserved_bytes: int
    kube_reserved_bytes: int
    hard_eviction_bytes: int
    hugepages_bytes: int = 0

    @property
    def bytes(self) -> int:
        return max(0, self.capacity_bytes - self.system_reserved_bytes - self.kube_reserved_bytes
                   - self.hard_eviction_bytes - self.hugepages_bytes)


def _text(value: ThresholdValue) -> str:
    return str(value.quantity) if value.quantity is not None else f"{value.percentage * 100:g}%"


def _resolved(value: ThresholdValue, capacity: int) -> int:
    return threshold_quantity(value, Quantity.from_int(capacity, QuantityFormat.BINARY_SI)).ceil_int()


def _first_capacity_at_or_above(quantity: int, percentage: float) -> int:
    """The least capacity C whose share, truncated as the kubelet truncates it, reaches `quantity`:
    floor(C x percentage) >= quantity, i.e. C >= quantity / percentage (the float32 share, exactly)."""
    return math.ceil(Fraction(quantity) / Fraction(percentage))


def _capacity_text(capacity: int, signal: Signal) -> str:
    unit = "" if "inodes" in signal.value or signal.value.startswith("pid") else "bytes"
    if unit and capacity >= GIB:
        return f"{capacity / GIB:.3g} GiB"
    return f"{capacity}" + (f" {unit}" if unit else "")


def _hard_first(soft: ThresholdValue, hard: ThresholdValue, capacity: int | None) -> tuple[str, int]:
    """Whether `hard` is met no later than `soft`: ALWAYS, NEVER, FROM (on capacities of the crossover and more)
    or UNTIL (of the crossover and less), with the crossover capacity (0 unless FROM or UNTIL)."""
    if capacity is not None:
        return (ALWAYS if _resolved(soft, capacity) <= _resolved(hard, capacity) else NEVER), 0
    if soft.quantity is not None and hard.quantity is not None:
        return (ALWAYS if soft.quantity.cmp(hard.quantity) <= 0 else NEVER), 0
    if soft.quantity is None and hard.quantity is None:
        return (ALWAYS if soft.percentage <= hard.percentage else NEVER), 0
    if soft.quantity is not None:  # soft fixed, hard a share: the share overtakes it on large nodes
        return FROM, _first_capacity_at_or_above(soft.quantity.ceil_int(), hard.percentage)
    assert hard.quantity is not None  # soft a share, hard fixed: the share stays at or under it on small nodes
    return UNTIL, _first_capacity_at_or_above(hard.quantity.ceil_int() + 1, soft.percentage) - 1


def _when(kind: str, crossover: int, signal: Signal) -> str:
    if kind in (ALWAYS, NEVER):
        return ""
    return f" on nodes of {_capacity_text(crossover, signal)} and {'more' if kind == FROM else 'less'}"


def config_lints(settings: EvictionSettings, memory_capacity: int | None = None,
                 source: str = CONFIGURATION) -> list[Lint]:
    """The traps of `settings` (whose: `source`), memory percentages resolved at `memory_capacity` bytes if known;
    in the order of the signals' keys. Never raises for a configuration `settings.thresholds()` accepts."""
    # The kubelet's signals only: the stall family is evictd's own, its values a stall headroom, not memory.
    thresholds = [t for t in settings.thresholds()
                  if t.copied_from is None and t.operator is not None and t.signal not in EVICTD_SIGNALS]
    hard = {t.signal: t for t in thresholds if t.hard}
    soft = {t.signal: t for t in thresholds if not t.hard}
    lints: list[Lint] = []
    for signal in ESSENTIAL_HARD:
        if signal not in hard:
            lints.append(_no_hard(signal, settings, soft.get(signal)))
    for signal, soft_threshold in soft.items():
        hard_threshold = hard.get(signal)
        if hard_threshold is None:
            continue
        capacity = memory_capacity if signal == Signal.MEMORY_AVAILABLE else None
        lints += _pair_lints(signal, soft_threshold, hard_threshold, capacity)
    return [replace(lint, source=source) for lint in lints]


def _no_hard(signal: Signal, settings: EvictionSettings, soft: Threshold | None) -> Lint:
    given = settings.hard.get(signal.value)
    value = f"{given!r} (disabled)" if given is not None else f"absent from {dict(settings.hard)!r}"
    what = "memory" if signal == Signal.MEMORY_AVAILABLE else "the node's root disk"
    detail = (f"no hard {signal.value} threshold: the kubelet lets {what} run out"
              + (" (the soft one waits its grace period)" if soft is not None else "")
              + "; an evictionHard map (or --eviction-hard flag) given replaces the kubelet's defaults unless "
              "mergeDefaultEvictionSettings")
    default = {"memory.available": "100Mi", "nodefs.available": "10%"}[signal.value]
    return Lint(NO_HARD_THRESHOLD, f"evictionHard.{signal.value}", value, detail,
                f"add {signal.value}: {default} (the kubelet's default) to evictionHard, or set "
                "mergeDefaultEvictionSettings: true")


def _pair_lints(signal: Signal, soft: Threshold, hard: Threshold, capacity: int | None) -> list[Lint]:
    lints: list[Lint] = []
    pair = f"soft {_text(soft.value)}, hard {_text(hard.value)}"
    at = f" at {_capacity_text(capacity, signal)}" if capacity is not None else ""
    kind, crossover = _hard_first(soft.value, hard.value, capacity)
    if kind != NEVER:
        lints.append(Lint(SOFT_NEVER_FIRES, f"evictionSoft.{signal.value}", pair,
                          f"the soft threshold is at or under the hard one{at}{_when(kind, crossover, signal)}: "
                          "the hard one is met first, the soft one never evicts",
                          f"raise evictionSoft.{signal.value} above the hard threshold in the same unit (both "
                          "quantities or both percentages, e.g. hard 5%, soft 10%)"))
    resource = RESERVED_BY_HARD.get(signal)
    if resource and kind != ALWAYS:
        # The soft one sits above the hard one where the hard one is not met first: the complement of `kind`.
        above = {NEVER: NEVER, FROM: UNTIL, UNTIL: FROM}[kind]
        lints.append(Lint(SOFT_MARGIN_NOT_RESERVED, f"evictionSoft.{signal.value}", pair,
                          f"the kubelet subtracts only evictionHard.{signal.value} from allocatable {resource}"
                          f"{at}{_when(above, crossover, signal)}: pods requesting all of it hold the node in soft "
                          "pressure, and Karpenter, which reserves max(soft, hard), expects less allocatable than "
                          "the node reports",
                          f"reserve the margin in kubeReserved/systemReserved {resource}, or raise the hard "
                          "threshold to the soft one if it must never be scheduled", NOTE))
    return lints


def allocatable_memory(settings: EvictionSettings, reservation: NodeReservation,
                       capacity: int, hugepages: int = 0) -> Allocatable:
    """The kubelet's allocatable memory at `capacity` bytes (reservations that cannot be read count 0, as the
    report of them says)."""
    hard = [t for t in settings.thresholds()
            if t.hard and t.signal == Signal.MEMORY_AVAILABLE and t.operator is not None and t.copied_from is None]
    eviction = _resolved(hard[0].value, capacity) if hard else 0
    return Allocatable(capacity, reservation.system_reserved.memory_bytes or 0,
                       reservation.kube_reserved.memory_bytes or 0, eviction, hugepages)


def hugepage_padding_lints(settings: EvictionSettings, hugepages_bytes: int, hugepage_aware: bool,
                           memory_capacity: int | None = None) -> list[Lint]:
    """A `memory.available` threshold at or above the node's hugepage total when the kubelet followed subtracts
    hugepages itself: the padding operators added for the old signal now makes it evict that much earlier."""
    if not hugepage_aware or hugepages_bytes <= 0:
        return []
    lints: list[Lint] = []
    for threshold in settings.thresholds():
        if threshold.signal != Signal.MEMORY_AVAILABLE or threshold.operator is None or threshold.copied_from:
            continue
        if threshold.value.quantity is None and memory_capacity is None:
            continue
        value = (threshold.value.quantity.ceil_int() if threshold.value.quantity is not None
                 else _resolved(threshold.value, memory_capacity or 0))
        if value < hugepages_bytes:
            continue
        kind = "evictionHard" if threshold.hard else "evictionSoft"
        rest = Quantity.from_int(value - hugepages_bytes, QuantityFormat.BINARY_SI)
        lints.append(Lint(PADDED_BY_HUGEPAGES, f"{kind}.{threshold.signal.value}", _text(threshold.value),
                          f"at or above the node's hugepage total ({hugepages_bytes} bytes), which the kubelet "
                          "followed (HugepageAwareEviction on) already subtracts from memory.available: padding "
                          "added for the old signal now evicts that much earlier",
                          f"remove the padding ({kind}.{threshold.signal.value}: {rest} if it was the hugepage "
                          "total), or turn the gate off to keep the old signal"))
    return lints

