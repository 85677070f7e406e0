"""Eviction thresholds: parsing them the kubelet's way, and deciding which are met.

Rules (KUBELET_SPEC §2.3-§2.5, §4, §6.1):
- The only operator is LessThan; a threshold is met when its quantity is strictly greater than `available`.
- Percentages go through IEEE float32 exactly as Go's `strconv.ParseFloat(s, 32)` then a float32 division by
  100, and are turned into quantities with float64 multiplication and truncation toward zero.
- Only the literal values `0%` and `100%` disable a threshold. Zero hard/soft quantities are errors; a zero
  minimum reclaim is fine; a minimum-reclaim percentage has no upper bound.
- `allocatableMemory.available` copies every `memory.available` threshold whose grace period is 0 when node
  allocatable enforcement includes `pods`; `containerfs.*` thresholds are derived from the filesystem layout.
Error texts are the kubelet's; callers locate them with `ConfigError.at(key, value)`.
"""

from __future__ import annotations

import math
import re
import struct
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from fractions import Fraction
from typing import TypeVar

from evictd.core.duration import parse_go_duration
from evictd.core.errors import MISSING, ConfigError
from evictd.core.fs_layout import FsLayout, meaning_of
from evictd.core.quantity import Quantity, QuantityFormat
from evictd.core.signals import Operator, Signal, parse_signal, parse_stall_signal, spec_of
from evictd.core.summary import STALL_BASIS_POINTS, Observation

# `pods` in enforceNodeAllocatable makes the kubelet enforce allocatable memory (NodeAllocatableEnforcementKey).
NODE_ALLOCATABLE_ENFORCEMENT_KEY = "pods"

# The threshold values that mean "no threshold at all" (compared as literal strings, not numbers).
DISABLING_PERCENTAGES = frozenset({"0%", "100%"})

_V = TypeVar("_V")


@dataclass(frozen=True, slots=True)
class ThresholdValue:
    """A threshold or minimum-reclaim value: an absolute quantity, or else a float32 fraction of capacity."""

    quantity: Quantity | None = None
    percentage: float = 0.0

    def same_as(self, other: ThresholdValue) -> bool:
        """Return True when the kubelet's compareThresholdValue would call the two values equal."""
        if self.quantity is not None or other.quantity is not None:
            return (
                self.quantity is not None
                and other.quantity is not None
                and self.quantity.cmp(other.quantity) == 0
            )
        return self.percentage == other.percentage


@dataclass(frozen=True, slots=True)
class Threshold:
    """One eviction threshold. `operator` is None only for a derived containerfs threshold whose source did not
    exist (never met). `hard` records its list, so equal hard and soft thresholds stay distinct. `copied_from` names
    the threshold an allocatable-memory copy was made from where the kubelet tells the copy apart from an equal
    configured one (the copy shares the `memory.available` entry's pointers: `addAllocatableThresholds`)."""

    signal: Signal
    value: ThresholdValue
    grace_period_s: float = 0.0
    min_reclaim: ThresholdValue | None = None
    operator: Operator | None = Operator.LESS_THAN
    hard: bool = True
    copied_from: Signal | None = None

    @property
    def is_hard(self) -> bool:
        """True for thresholds acted on at once (grace 0): the kubelet's isHardEvictionThreshold."""
        return self.grace_period_s == 0


def same_threshold(a: Threshold, b: Threshold) -> bool:
    """Return True when the kubelet's hasThreshold would match `a` with `b` (min reclaim is ignored)."""
    return (
        a.grace_period_s == b.grace_period_s
        and a.operator == b.operator
        and a.signal == b.signal
        and a.value.same_as(b.value)
    )


# --- float32 percentages -------------------------------------------------------------------------------

_FLOAT32_MANTISSA_BITS = 24  # significand precision of IEEE binary32, hidden bit included
_FLOAT32_MIN_EXPONENT = -149  # exponent of the smallest subnormal binary32 value
_FLOAT32_OVERFLOW = Fraction(2) ** 128  # values rounding to this or above are out of range
_DECIMAL_FLOAT = re.compile(r"[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?", re.ASCII)  # Go reads ASCII digits only
_HEX_FLOAT = re.compile(r"([+-]?)0[xX]([0-9a-fA-F]*)\.?([0-9a-fA-F]*)[pP]([+-]?\d+)", re.ASCII)
_INFINITY = re.compile(r"([+-]?)(?:inf|infinity)", re.IGNORECASE)
_NAN = re.compile(r"nan", re.IGNORECASE)


def _round_to_float32(exact: Fraction) -> Fraction:
    """Return `exact` rounded to the nearest binary32 value (ties to even), as an exact fraction."""
    if exact == 0:
        return exact
    magnitude = abs(exact)
    exponent = magnitude.numerator.bit_length() - magnitude.denominator.bit_length()
    if Fraction(2) ** exponent > magnitude:
        exponent -= 1
    quantum_exponent = max(exponent - (_FLOAT32_MANTISSA_BITS - 1), _FLOAT32_MIN_EXPONENT)
    quantum = Fraction(2) ** quantum_exponent
    rounded = round(magnitude / quantum) * quantum
    return rounded if exact > 0 else -rounded


def parse_go_float32(text: str) -> float:
    """Return `text` parsed like Go's `strconv.ParseFloat(text, 32)`; ConfigError with Go's text on bad syntax or
    out of float32 range."""
    if _NAN.fullmatch(text):
        return math.nan
    infinity = _INFINITY.fullmatch(text)
    if infinity:
        return -math.inf if infinity.group(1) == "-" else math.inf
    exact: Fraction
    if _DECIMAL_FLOAT.fullmatch(text):
        exact = Fraction(text)
    else:
        hex_float = _HEX_FLOAT.fullmatch(text)
        if hex_float is None or not (hex_float.group(2) or hex_float.group(3)):
            raise ConfigError(f'strconv.ParseFloat: parsing "{text}": invalid syntax')
        sign, whole, fraction, exponent = hex_float.groups()
        mantissa = Fraction(int(whole + fraction, 16), 16 ** len(fraction))
        exact = mantissa * Fraction(2) ** int(exponent) * (-1 if sign == "-" else 1)
    rounded = _round_to_float32(exact)
    if abs(rounded) >= _FLOAT32_OVERFLOW:
        raise ConfigError(f'strconv.ParseFloat: parsing "{text}": value out of range')
    return float(rounded)


def parse_percentage(text: str) -> float:
    """Return the kubelet's parsePercentage of `text`: trailing '%' stripped, float32 value / 100 in float32."""
    number = parse_go_float32(text.rstrip("%"))
    return float(struct.unpack("f", struct.pack("f", number / 100.0))[0])  # Go's float32(x): round to nearest


# --- statements and whole configurations ---------------------------------------------------------------


def _threshold_value(signal: Signal, raw: str) -> ThresholdValue | None:
    """Return the value of a hard/soft statement, or None when the statement disables the threshold."""
    if raw.endswith("%"):
        if raw in DISABLING_PERCENTAGES:
            return None
        percentage = parse_percentage(raw)
        if math.isnan(percentage):
            # Upstream accepts NaN and then differs per platform; evictd refuses it (docs/kubelet-differences.md).
            raise ConfigError(f"eviction percentage threshold {signal} must be a number: {raw}")
        if percentage < 0:
            raise ConfigError(f"eviction percentage threshold {signal} must be >= 0%: {raw}")
        if percentage > 1:
            raise ConfigError(f"eviction percentage threshold {signal} must be <= 100%: {raw}")
        return ThresholdValue(percentage=percentage)
    quantity = Quantity.parse(raw)
    if quantity.sign() <= 0:
        raise ConfigError(f"eviction threshold {signal} must be positive: {quantity}")
    return ThresholdValue(quantity=quantity)


def _min_reclaim_value(signal: Signal, raw: str) -> ThresholdValue:
    if raw.endswith("%"):
        percentage = parse_percentage(raw)
        if math.isnan(percentage) or percentage <= 0:
            raise ConfigError(f"eviction percentage minimum reclaim {signal} must be positive: {raw}")
        return ThresholdValue(percentage=percentage)
    quantity = Quantity.parse(raw)
    if quantity.sign() < 0:
        raise ConfigError(f"negative eviction minimum reclaim specified for {signal}")
    return ThresholdValue(quantity=quantity)


def _grace_period(signal: Signal, raw: str) -> float:
    seconds = parse_go_duration(raw)
    if seconds < 0:
        raise ConfigError(f"invalid eviction grace period specified: {raw}, must be a positive value")
    return seconds


# evictd's bound on one statement's text (the kubelet takes a 5,000-digit quantity and shows it in every message).
MAX_STATEMENT_CHARS = 64


def _per_signal(field: str, entries: Mapping[str, str], parse: Callable[[Signal, str], _V],
                signal_named: Callable[[str], Signal] = parse_signal) -> dict[Signal, _V]:
    """Return `parse(signal, raw)` of each entry of the map `field`; an error is located at the entry."""
    parsed: dict[Signal, _V] = {}
    for name, raw in entries.items():
        try:
            if isinstance(raw, str) and len(raw) > MAX_STATEMENT_CHARS:
                raise ConfigError(f"longer than {MAX_STATEMENT_CHARS} characters (evictd's bound)")
            signal = signal_named(name)
            parsed[signal] = parse(signal, raw)
        except ConfigError as exc:
            raise exc.at(f"{field}[{name}]", raw) from None
    return parsed


def _with_grace_periods(thresholds: list[Threshold], soft_values: Mapping[Signal, ThresholdValue | None],
                        grace_periods: Mapping[Signal, float], reclaims: Mapping[Signal, ThresholdValue],
                        grace_field: str) -> list[Threshold]:
    """Return `thresholds` followed by the soft ones, each with its grace period (ConfigError if one has none)."""
    for signal, value in soft_values.items():
        if value is None:
            continue
        if signal not in grace_periods:
            raise ConfigError(
                f"grace period must be specified for the soft eviction threshold {signal}",
                key=f"{grace_field}[{signal}]",
                value=MISSING,
            )
        thresholds.append(Threshold(signal, value, grace_periods[signal], reclaims.get(signal), hard=False))
    return thresholds


def parse_threshold_config(
    enforce_node_allocatable: Sequence[str],
    hard: Mapping[str, str],
    soft: Mapping[str, str],
    soft_grace_periods: Mapping[str, str],
    min_reclaims: Mapping[str, str],
) -> list[Threshold]:
    """Return the configured thresholds exactly as the kubelet's ParseThresholdConfig builds them: hard, then soft,
    then the allocatable-memory copies. ConfigError (located at the key) on the first invalid entry, in the
    kubelet's order."""
    hard_values = _per_signal("evictionHard", hard, _threshold_value)
    soft_values = _per_signal("evictionSoft", soft, _threshold_value)
    grace_periods = _per_signal("evictionSoftGracePeriod", soft_grace_periods, _grace_period)
    reclaims = _per_signal("evictionMinimumReclaim", min_reclaims, _min_reclaim_value)
    thresholds = [Threshold(signal, value, min_reclaim=reclaims.get(signal))
                  for signal, value in hard_values.items() if value is not None]
    thresholds = _with_grace_periods(thresholds, soft_values, grace_periods, reclaims, "evictionSoftGracePeriod")
    if NODE_ALLOCATABLE_ENFORCEMENT_KEY in enforce_node_allocatable:
        thresholds += [
            replace(threshold, signal=Signal.ALLOCATABLE_MEMORY_AVAILABLE,
                    copied_from=allocatable_copy_origin(threshold))
            for threshold in thresholds
            if threshold.signal is Signal.MEMORY_AVAILABLE and threshold.grace_period_s == 0
        ]
    return thresholds


def allocatable_copy_origin(threshold: Threshold) -> Signal | None:
    """What an allocatableMemory.available copy of `threshold` (a memory.available one) records as its origin:
    memory.available, unless its value and minimum reclaim hold no pointer in the kubelet (see `Threshold`)."""
    if threshold.value.quantity is None and threshold.min_reclaim is None:
        return None
    return threshold.signal


# --- memory stall thresholds (evictd's own, docs/configuration.md "Memory stall thresholds") ------------

# The keys of EvictdConfiguration's stall maps: hard, soft, soft grace periods, minimum reclaims.
STALL_FIELDS = ("stallEvictionHard", "stallEvictionSoft", "stallEvictionSoftGracePeriod", "stallEvictionMinimumReclaim")
# Hard thresholds that count only where the kernel gives no PSI (no /proc/pressure/memory): the refault signals
# standing in for the memory stall signal there (docs/configuration.md, "Thrash without PSI").
WITHOUT_PSI_FIELD = "stallEvictionHardWithoutPSI"
WITHOUT_PSI_SIGNALS = (Signal.DAEMONS_REFAULT, Signal.MEMORY_REFAULT)
_STALL_PERCENT = re.compile(r"(\d{1,3})(?:\.(\d{1,2}))?%", re.ASCII)  # "٤٠%" is no share


def _stall_basis_points(signal: Signal, raw: str) -> int:
    """Return a stall share "<n>%" (0 to 100, at most two decimals: the kernel's precision) in basis points."""
    found = _STALL_PERCENT.fullmatch(raw) if isinstance(raw, str) else None
    points = None if found is None else int(found.group(1)) * 100 + int((found.group(2) or "0").ljust(2, "0"))
    if points is None or points > STALL_BASIS_POINTS:
        share = ("of the window" if spec_of(signal).stall is not None
                 else "of the daemons' memory re-read in 2 s" if signal is Signal.DAEMONS_REFAULT
                 else "of the node's memory refaulted in 10 s")
        raise ConfigError(f"stall threshold {signal} must be a share {share} from 0% to 100%, with at most "
                          f"two decimals: {raw}")
    return points


def _stall_value(signal: Signal, raw: str) -> ThresholdValue:
    """A stall share of X% as the headroom threshold it is: met when the headroom (10000 - stalled basis points)
    is below 10000 - X + 1, i.e. when the stall is at or above X (so 0% is always met, 100% only at a full stall)."""
    return ThresholdValue(Quantity.from_int(STALL_BASIS_POINTS - _stall_basis_points(signal, raw) + 1,
                                            QuantityFormat.DECIMAL_SI))


def stall_share_points(value: ThresholdValue) -> int:
    """Return the stall share a stall threshold's value (`_stall_value`) stands for, in basis points (4000: 40%)."""
    return STALL_BASIS_POINTS + 1 - (value.quantity.ceil_int() if value.quantity is not None else 0)


def stall_share_text(value: ThresholdValue) -> str:
    """Return the stall share a stall threshold's value (`_stall_value`) stands for, as configured ("40%")."""
    return f"{stall_share_points(value) / 100:g}%"


def _stall_min_reclaim(signal: Signal, raw: str) -> ThresholdValue:
    """A minimum reclaim of Y%: the stall must fall Y below the threshold's share before the signal is relieved."""
    return ThresholdValue(Quantity.from_int(_stall_basis_points(signal, raw), QuantityFormat.DECIMAL_SI))


def parse_stall_thresholds(hard: Mapping[str, str], soft: Mapping[str, str], soft_grace_periods: Mapping[str, str],
                           min_reclaims: Mapping[str, str]) -> list[Threshold]:
    """Return the memory stall thresholds of EvictdConfiguration's stall maps (STALL_FIELDS), hard ones then soft,
    as LessThan thresholds on the stall headroom; ConfigError located at the offending entry."""
    hard_field, soft_field, grace_field, reclaim_field = STALL_FIELDS
    hard_values = _per_signal(hard_field, hard, _stall_value, parse_stall_signal)
    soft_values: dict[Signal, ThresholdValue | None] = {
        **_per_signal(soft_field, soft, _stall_value, parse_stall_signal)}
    grace_periods = _per_signal(grace_field, soft_grace_periods, _grace_period, parse_stall_signal)
    reclaims = _per_signal(reclaim_field, min_reclaims, _stall_min_reclaim, parse_stall_signal)
    thresholds = [Threshold(signal, value, min_reclaim=reclaims.get(signal)) for signal, value in hard_values.items()]
    return _with_grace_periods(thresholds, soft_values, grace_periods, reclaims, grace_field)


def parse_without_psi_thresholds(without_psi: Mapping[str, str], hard: Mapping[str, str]) -> list[Threshold]:
    """Return the hard thresholds of `WITHOUT_PSI_FIELD`: refault signals only (`WITHOUT_PSI_SIGNALS`), none also in
    stallEvictionHard (`hard`); ConfigError located at the offending entry."""
    values = _per_signal(WITHOUT_PSI_FIELD, without_psi, _stall_value, parse_stall_signal)
    accepted = ", ".join(WITHOUT_PSI_SIGNALS)
    for name in without_psi:
        signal = parse_stall_signal(name)
        if signal not in WITHOUT_PSI_SIGNALS:
            raise ConfigError(f"{signal} needs PSI, so it cannot stand in where the kernel has none (accepted: "
                              f"{accepted})").at(f"{WITHOUT_PSI_FIELD}[{name}]", without_psi[name])
        if name in hard:
            raise ConfigError(f"{signal} is in stallEvictionHard too, where it counts on every kernel: keep one"
                              ).at(f"{WITHOUT_PSI_FIELD}[{name}]", without_psi[name])
    return [Threshold(signal, value) for signal, value in values.items()]


# --- containerfs derivation (KUBELET_SPEC §4.2) --------------------------------------------------------


def derive_containerfs_thresholds(
    thresholds: Sequence[Threshold], layout: FsLayout
) -> tuple[list[Threshold], list[str]]:
    """Return the thresholds with `containerfs.*` set for `layout`, and the warnings the kubelet logs, as upstream
    UpdateContainerFsThresholds: hard or soft by grace period, the last matching source wins, a user containerfs
    threshold is replaced in place, missing ones appended; an absent source gives a copy that is never met."""
    sources = meaning_of(layout).containerfs_sources
    result = list(thresholds)
    warnings: list[str] = []
    for threshold in thresholds:
        if threshold.signal in sources:
            kind = "hard" if threshold.is_hard else "soft"
            warnings.append(f"found {threshold.signal} for {kind} eviction. ignoring")
    for target, source in sources.items():
        for hard in (True, False):
            copied = [t for t in thresholds if t.signal == source and t.is_hard == hard]
            derived = (
                replace(copied[-1], signal=target, hard=hard)
                if copied
                else Threshold(signal=target, value=ThresholdValue(), operator=None, hard=hard)
            )
            slots = [i for i, t in enumerate(thresholds) if t.signal is target and t.is_hard == hard]
            if slots:
                result[slots[-1]] = derived
            else:
                result.append(derived)
    return result, warnings


# --- evaluation ----------------------------------------------------------------------------------------


def threshold_quantity(value: ThresholdValue, capacity: Quantity) -> Quantity:
    """Return the kubelet's GetThresholdQuantity: the quantity itself, or the truncated float32 share."""
    if value.quantity is not None:
        return value.quantity
    share = int(float(capacity.ceil_int()) * value.percentage)
    return Quantity.from_int(share, QuantityFormat.BINARY_SI)


def thresholds_met(
    thresholds: Sequence[Threshold], observations: Mapping[Signal, Observation], enforce_min_reclaim: bool
) -> list[Threshold]:
    """Return the thresholds (in input order) whose quantity, plus the minimum reclaim with `enforce_min_reclaim`,
    exceeds the observed available amount; unobserved ones are not met."""
    met: list[Threshold] = []
    for threshold in thresholds:
        observed = observations.get(threshold.signal)
        if observed is None or threshold.operator is not Operator.LESS_THAN:
            continue
        quantity = threshold_quantity(threshold.value, observed.capacity)
        if enforce_min_reclaim and threshold.min_reclaim is not None:
            quantity = quantity + threshold_quantity(threshold.min_reclaim, observed.capacity)
        if quantity.cmp(observed.available) > 0:
            met.append(threshold)
    return met


def unique_as_go_map_keys(thresholds: Sequence[Threshold]) -> list[Threshold]:
    """Return `thresholds` as the kubelet's `map[evictionapi.Threshold]time.Time` keys them, in order: two
    percentage thresholds with no minimum reclaim (nil pointers) and equal signal, operator, share and grace are
    one key; a quantity or a minimum reclaim makes a key of its own (../shared/kubelet-divergences/02)."""
    seen: set[tuple[object, ...]] = set()
    unique = []
    for threshold in thresholds:
        if threshold.value.quantity is None and threshold.min_reclaim is None:
            key = (threshold.signal, threshold.operator, threshold.value.percentage, threshold.grace_period_s)
            if key in seen:
                continue
            seen.add(key)
        unique.append(threshold)
    return unique


def merge_thresholds(first: Sequence[Threshold], second: Sequence[Threshold]) -> list[Threshold]:
    """Return `first` followed by the items of `second` that `first` does not already hold."""
    merged = list(first)
    for threshold in second:
        if not any(same_threshold(threshold, present) for present in merged):
            merged.append(threshold)
    return merged
