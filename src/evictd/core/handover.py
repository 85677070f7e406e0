"""The hand-over, judged: per signal, who evicts first on this node (evictd, the kubelet, both, nobody), and whether
the two configurations make the **backstop mode** (docs/deployment.md, "Handing eviction over from the kubelet").

On one signal the higher threshold acts first: evictd's first is its highest hard threshold (a soft one waits out
its grace), the kubelet's its highest, hard or soft. The backstop holds where evictd's highest hard threshold is
strictly above all the kubelet's there. Quantities and percentages do not compare offline (capacity unknown): the
order is then unknown. Only the kubelet's signals are listed (and evictd's stall signals where configured); a signal
nobody guards that the kubelet guards by default (`DEFAULT_EVICTION_HARD`) is a problem. Pure.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum

from evictd.core.kubelet_config import DEFAULT_EVICTION_HARD
from evictd.core.quantity import Quantity
from evictd.core.signals import Signal, spec_of
from evictd.core.thresholds import Threshold, ThresholdValue

# What `run` logs at start and check-config prints when evictd has no threshold at all.
NO_THRESHOLDS = ("no eviction threshold configured (no evictionHard, evictionSoft or stall thresholds): evictd "
                 "evicts nothing on this node")
# The kubelet's own signals, in the order check-config lists them (containerfs.* follow their source).
KUBELET_SIGNALS = (Signal.MEMORY_AVAILABLE, Signal.ALLOCATABLE_MEMORY_AVAILABLE, Signal.NODEFS_AVAILABLE,
                   Signal.NODEFS_INODES_FREE, Signal.IMAGEFS_AVAILABLE, Signal.IMAGEFS_INODES_FREE,
                   Signal.PID_AVAILABLE)
# The signals a kubelet guards out of the box: nobody evicting on one of them is a hand-over gone wrong.
GUARDED_BY_DEFAULT = frozenset(Signal(name) for name in DEFAULT_EVICTION_HARD)


class Evicts(StrEnum):
    """Who evicts on one signal, as configured (evictd as if acting; `SignalVerdict.now` accounts for dry-run)."""

    NOBODY = "nobody"
    EVICTD = "evictd"  # evictd alone (the kubelet has no threshold there)
    KUBELET = "kubelet"  # the kubelet alone
    EVICTD_FIRST = "evictd-first"  # both; evictd's hard threshold above every kubelet one: the backstop
    SAME = "same-threshold"  # both at the same threshold: whichever checks first
    KUBELET_FIRST = "kubelet-first"  # both; the kubelet's threshold at or above evictd's first one
    ORDER_UNKNOWN = "order-unknown"  # both; a quantity against a percentage, or evictd with soft thresholds only
    EVICTD_UNKNOWN_KUBELET = "evictd-kubelet-unknown"  # evictd has a threshold; the kubelet's configuration unread
    UNKNOWN = "unknown"  # evictd has none, and the kubelet's configuration was not read


# The verdicts where the kubelet evicts before evictd or races it: loud while evictd acts (`racing_signals`).
RACING = (Evicts.SAME, Evicts.KUBELET_FIRST)
# What to do about a race, as a problem line says it: the kubelet's side, then evictd's (`race_fix`).
RACE_FIX = ("fix: lower the kubelet's threshold for this signal below evictd's hard threshold (a backstop), or to "
            "0% (evictd alone)")
# A threshold evictd would be raised to, above the kubelet's: twice its quantity, or five points over its share.
RAISE_FACTOR = 2
RAISE_POINTS = 5


class Mode(StrEnum):
    """What the two configurations make of the node as a whole."""

    BACKSTOP = "backstop"  # evictd first on every signal it shares, the kubelet below it
    EVICTD_ALONE = "evictd-alone"  # the kubelet's thresholds all off (`0%`)
    KUBELET_ALONE = "kubelet-alone"  # evictd has no threshold
    OVERLAP = "overlap"  # both on some signal, not (verified) as a backstop
    NONE = "none"  # no threshold on either side
    KUBELET_UNKNOWN = "kubelet-unknown"


@dataclass(frozen=True, slots=True)
class SignalVerdict:
    signal: Signal
    evictd: tuple[Threshold, ...]
    kubelet: tuple[Threshold, ...] | None  # None: the kubelet's configuration unknown
    evicts: Evicts
    now: str  # who evicts today, in words (a dry-run evictd evicts nothing)
    detail: str
    problem: bool  # worth a warning: nobody on a guarded signal, a race with the kubelet, an unverified order


@dataclass(frozen=True, slots=True)
class Handover:
    verdicts: tuple[SignalVerdict, ...]
    mode: Mode
    summary: str
    evictd_dry_run: bool

    @property
    def problems(self) -> tuple[SignalVerdict, ...]:
        return tuple(v for v in self.verdicts if v.problem)


def racing_signals(handover: Handover) -> frozenset[Signal]:
    """The signals where the kubelet's threshold equals or exceeds evictd's hard one (`RACING`): an acting evictd
    races the kubelet there."""
    return frozenset(v.signal for v in handover.verdicts if v.evicts in RACING)


def compare_values(a: ThresholdValue, b: ThresholdValue) -> int | None:
    """-1, 0 or 1 as `a` is below, equal to or above `b`; None when one is a quantity and the other a percentage."""
    if a.quantity is not None and b.quantity is not None:
        return a.quantity.cmp(b.quantity)
    if a.quantity is None and b.quantity is None:
        return (a.percentage > b.percentage) - (a.percentage < b.percentage)
    return None


def _highest(thresholds: Sequence[Threshold]) -> ThresholdValue | None:
    """The highest value of `thresholds`, or None when there are none or they do not compare with each other."""
    best: ThresholdValue | None = None
    for threshold in thresholds:
        if best is None:
            best = threshold.value
            continue
        order = compare_values(threshold.value, best)
        if order is None:
            return None
        if order > 0:
            best = threshold.value
    return best


def _value_text(value: ThresholdValue) -> str:
    return str(value.quantity) if value.quantity is not None else f"{value.percentage * 100:.6g}%"


def raised_above(value: ThresholdValue) -> ThresholdValue | None:
    """A threshold value clear of `value` (RAISE_FACTOR times a quantity, RAISE_POINTS over a share), or None when
    there is none to offer (a zero quantity, a share too close to 100%)."""
    if value.quantity is not None:
        if value.quantity.sign() <= 0:
            return None
        return ThresholdValue(Quantity(value.quantity.value * RAISE_FACTOR, value.quantity.format))
    # Whole points: a float32 share (0.1 is 0.10000000149...) reads as the percentage it was written as.
    points = math.floor(value.percentage * 100 + 1e-4) + RAISE_POINTS
    return ThresholdValue(percentage=points / 100) if points < 100 else None


def race_fix(signal: Signal, kubelet: ThresholdValue) -> str:
    """The fix of a race on `signal` with the kubelet's highest threshold `kubelet` there: lower the kubelet's, or
    raise evictd's (named, when one can be offered) above it."""
    raised = raised_above(kubelet)
    if raised is None:
        return f"{RACE_FIX}; or raise evictd's hard threshold above the kubelet's {_value_text(kubelet)}"
    # allocatableMemory.available's thresholds are copies of memory.available's: that is the key to set.
    key = Signal.MEMORY_AVAILABLE if signal is Signal.ALLOCATABLE_MEMORY_AVAILABLE else signal
    return (f"{RACE_FIX}; or raise evictd's hard threshold above the kubelet's {_value_text(kubelet)}, e.g. "
            f"`evictionHard: {{{key}: {_value_text(raised)}}}` (fleet-wide: the chart's `eviction` value)")


def _order(signal: Signal, evictd: Sequence[Threshold], kubelet: Sequence[Threshold]) -> tuple[Evicts, str]:
    """Who acts first where both have thresholds on the signal, and why."""
    hard = [t for t in evictd if t.is_hard]
    if not hard:
        return Evicts.ORDER_UNKNOWN, ("evictd has only soft thresholds here: a drop faster than their grace period "
                                     "meets the kubelet's first; give evictd a hard threshold above the kubelet's")
    first, theirs = _highest(hard), _highest(kubelet)
    order = None if first is None or theirs is None else compare_values(first, theirs)
    if order is None:
        return Evicts.ORDER_UNKNOWN, ("a quantity against a percentage: the order depends on the capacity; state "
                                      "both sides the same way to have it checked")
    if order > 0:
        return Evicts.EVICTD_FIRST, "evictd acts first; the kubelet acts only if evictd did not (backstop)"
    assert theirs is not None  # compared above
    if order == 0:
        return Evicts.SAME, ("both at the same threshold: whichever checks first evicts, the kubelet and evictd "
                             f"race; {race_fix(signal, theirs)}")
    return Evicts.KUBELET_FIRST, ("the kubelet's threshold is above evictd's first one: the kubelet evicts before "
                                  f"evictd; {race_fix(signal, theirs)}")


def _verdict(signal: Signal, evictd: tuple[Threshold, ...], kubelet: tuple[Threshold, ...] | None,
             dry_run: bool) -> SignalVerdict:
    guarded = signal in GUARDED_BY_DEFAULT
    if kubelet is None:
        if evictd:
            evicts, detail, problem = Evicts.EVICTD_UNKNOWN_KUBELET, "the kubelet's thresholds are unknown", False
        else:
            evicts, detail, problem = Evicts.UNKNOWN, "evictd has no threshold here; the kubelet's is unknown", False
    elif not evictd and not kubelet:
        evicts, problem = Evicts.NOBODY, guarded
        detail = ("no threshold on either side: pods are not evicted for this signal"
                  + (" (a kubelet guards it by default)" if guarded else ""))
    elif not kubelet:
        evicts, detail, problem = Evicts.EVICTD, "the kubelet's threshold is off: evictd alone", False
    elif not evictd:
        evicts, detail, problem = Evicts.KUBELET, "evictd has no threshold here: the kubelet alone", False
    else:
        evicts, detail = _order(signal, evictd, kubelet)
        # The same threshold races only an acting evictd (the hand-over's dry-run step shares it on purpose).
        problem = evicts in (Evicts.KUBELET_FIRST, Evicts.ORDER_UNKNOWN) or (evicts is Evicts.SAME and not dry_run)
    if dry_run and evicts is Evicts.EVICTD:  # the hand-over done in the wrong order
        detail, problem = f"{detail}, and evictd is in dry-run: nobody evicts today", True
    return SignalVerdict(signal, evictd, kubelet, evicts, _now(evicts, dry_run, bool(kubelet)), detail, problem)


def _now(evicts: Evicts, dry_run: bool, kubelet_has: bool) -> str:
    """Who evicts today, in words."""
    if dry_run and evicts not in (Evicts.NOBODY, Evicts.UNKNOWN, Evicts.EVICTD_UNKNOWN_KUBELET):
        return "the kubelet (evictd in dry-run)" if kubelet_has else "nobody (evictd in dry-run)"
    if dry_run and evicts is Evicts.EVICTD_UNKNOWN_KUBELET:
        return "not evictd: dry-run (the kubelet: unknown)"
    return {
        Evicts.NOBODY: "nobody",
        Evicts.EVICTD: "evictd",
        Evicts.KUBELET: "the kubelet",
        Evicts.EVICTD_FIRST: "evictd, the kubelet as backstop",
        Evicts.SAME: "both, at the same threshold",
        Evicts.KUBELET_FIRST: "the kubelet first, then evictd",
        Evicts.ORDER_UNKNOWN: "both, order unknown",
        Evicts.EVICTD_UNKNOWN_KUBELET: "evictd (the kubelet: unknown)",
        Evicts.UNKNOWN: "not evictd (the kubelet: unknown)",
    }[evicts]


def judge_handover(evictd: Sequence[Threshold], kubelet: Sequence[Threshold] | None, *,
                   evictd_dry_run: bool) -> Handover:
    """Return, for each signal, who evicts with evictd's thresholds `evictd` and the kubelet's `kubelet` (None: its
    configuration unknown); evictd in dry-run evicts nothing today, and the order is judged as if it acted."""
    usable = [t for t in evictd if t.operator is not None]
    theirs = None if kubelet is None else [t for t in kubelet if t.operator is not None]
    own_signals = [s for s in Signal if s not in KUBELET_SIGNALS and spec_of(s).stall_family
                   and any(t.signal is s for t in usable)]
    verdicts = tuple(_verdict(signal, tuple(t for t in usable if t.signal is signal),
                              None if theirs is None else tuple(t for t in theirs if t.signal is signal),
                              evictd_dry_run)
                     for signal in (*KUBELET_SIGNALS, *own_signals))
    mode = _mode(usable, theirs, verdicts)
    return Handover(verdicts, mode, _summary(mode, verdicts, evictd_dry_run), evictd_dry_run)


def _mode(evictd: Sequence[Threshold], kubelet: Sequence[Threshold] | None,
          verdicts: Sequence[SignalVerdict]) -> Mode:
    if kubelet is None:
        return Mode.KUBELET_UNKNOWN
    if not evictd:
        return Mode.KUBELET_ALONE if kubelet else Mode.NONE
    if not kubelet:
        return Mode.EVICTD_ALONE
    shared = [v for v in verdicts if v.evictd and v.kubelet]
    return Mode.BACKSTOP if shared and all(v.evicts is Evicts.EVICTD_FIRST for v in shared) else Mode.OVERLAP


def _summary(mode: Mode, verdicts: Sequence[SignalVerdict], dry_run: bool) -> str:
    nobody = [str(v.signal) for v in verdicts if v.evicts is Evicts.NOBODY and v.signal in GUARDED_BY_DEFAULT]
    text = {
        Mode.BACKSTOP: "backstop mode: on every signal both guard, evictd's hard threshold is above the kubelet's "
                       "(the kubelet acts only if evictd did not)",
        Mode.EVICTD_ALONE: "evictd alone: the kubelet's thresholds are all off (0%); nothing evicts if evictd stops",
        Mode.KUBELET_ALONE: "the kubelet alone: evictd has no threshold",
        Mode.OVERLAP: "not a backstop: on some signal the kubelet acts before evictd, at the same threshold, or in "
                      "an order that cannot be checked",
        Mode.NONE: "NO EVICTION: neither evictd nor the kubelet has a threshold",
        Mode.KUBELET_UNKNOWN: "the kubelet's configuration was not read: only evictd's side is known",
    }[mode]
    if dry_run:
        text += "; evictd is in dry-run and evicts nothing today"
    if nobody and mode is not Mode.NONE:
        text += f"; nobody evicts on {', '.join(nobody)}"
    return text
