"""Threshold parsing and evaluation (KUBELET_SPEC §2.3-§2.5, §4.2, §6.1; §17 items 1-5, 7)."""

from __future__ import annotations

import math
import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from evictd.core.errors import ConfigError
from evictd.core.fs_layout import FsLayout
from evictd.core.quantity import Quantity, QuantityFormat
from evictd.core.signals import Signal
from evictd.core.summary import Observation
from evictd.core.thresholds import (
    Threshold,
    ThresholdValue,
    derive_containerfs_thresholds,
    merge_thresholds,
    parse_go_float32,
    parse_percentage,
    parse_threshold_config,
    threshold_quantity,
    thresholds_met,
)


def f32(x: float) -> float:
    return float(struct.unpack("f", struct.pack("f", x))[0])


def q(text: str) -> Quantity:
    return Quantity.parse(text)


def Obs(available: int, capacity: int) -> Observation:
    return Observation(Quantity.from_int(available, QuantityFormat.BINARY_SI),
                       Quantity.from_int(capacity, QuantityFormat.BINARY_SI), None)


def parse(hard=None, soft=None, grace=None, reclaim=None, allocatable=("pods",)):  # type: ignore[no-untyped-def]
    return parse_threshold_config(allocatable, hard or {}, soft or {}, grace or {}, reclaim or {})


# --- percentages ---------------------------------------------------------------------------------------

@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("10.5%", 0.10499999672174454),
        ("10%", 0.10000000149011612),
        ("25.5%", f32(0.255)),
        ("5%", f32(f32(5.0) / 100)),
        ("10%%", 0.10000000149011612),  # every trailing % is stripped
        ("1e1%", 0.10000000149011612),
    ],
    ids=["10.5", "10", "25.5", "5", "double-percent", "exponent"],
)
def test_parse_percentage_is_float32(text: str, expected: float) -> None:
    assert parse_percentage(text) == expected


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ("abc", 'strconv.ParseFloat: parsing "abc": invalid syntax'),
        ("1_0", 'strconv.ParseFloat: parsing "1_0": invalid syntax'),
        ("", 'strconv.ParseFloat: parsing "": invalid syntax'),
        (" 1", 'strconv.ParseFloat: parsing " 1": invalid syntax'),
        ("1e39", 'strconv.ParseFloat: parsing "1e39": value out of range'),
    ],
    ids=["letters", "underscore", "empty", "space", "overflow"],
)
def test_parse_go_float32_errors(text: str, error: str) -> None:
    with pytest.raises(ConfigError) as exc:
        parse_go_float32(text)
    assert exc.value.reason == error


def test_parse_go_float32_rounds_once_from_decimal() -> None:
    # 1.00000005960464477539062500001 lies just above the midpoint between 1 and the next float32:
    # rounding through float64 first would give 1.0 (double rounding); Go rounds once, to 1+2^-23.
    assert parse_go_float32("1.00000005960464477539062500001") == 1 + 2**-23
    assert parse_go_float32("0x1p-2") == 0.25
    assert parse_go_float32("Inf") == math.inf
    assert math.isnan(parse_go_float32("nan"))


@given(st.floats(allow_nan=False, allow_infinity=False, width=32))
def test_parse_go_float32_round_trips_float32_values(value: float) -> None:
    assert parse_go_float32(repr(value)) == value


# --- threshold quantities ------------------------------------------------------------------------------

@pytest.mark.parametrize(
    ("value", "capacity", "expected"),
    [
        (ThresholdValue(percentage=parse_percentage("10.5%")), 1000, 104),
        (ThresholdValue(percentage=parse_percentage("10%")), 1 << 30, 107374184),
        (ThresholdValue(percentage=parse_percentage("20%")), 1000 << 20, 209715203),
        (ThresholdValue(quantity=Quantity.parse("1Gi")), 12345, 1 << 30),
    ],
    ids=["truncates-10.5pct-of-1000", "10pct-of-1Gi", "20pct-of-1000Mi", "quantity-ignores-capacity"],
)
def test_threshold_quantity(value: ThresholdValue, capacity: int, expected: int) -> None:
    result = threshold_quantity(value, Quantity.from_int(capacity, QuantityFormat.BINARY_SI))
    assert result.cmp(Quantity.from_int(expected, QuantityFormat.DECIMAL_SI)) == 0


def test_threshold_quantity_keeps_parsed_format() -> None:
    assert str(threshold_quantity(ThresholdValue(quantity=q("1.5Gi")), q("1Ti"))) == "1536Mi"
    assert str(threshold_quantity(ThresholdValue(quantity=q("1200")), q("1Ti"))) == "1200"


# --- ParseThresholdConfig --------------------------------------------------------------------------------

def test_hard_soft_grace_min_reclaim_and_allocatable_copy() -> None:
    thresholds = parse(
        hard={"memory.available": "150Mi"},
        soft={"memory.available": "300Mi", "nodefs.available": "10%"},
        grace={"memory.available": "30s", "nodefs.available": "1m30s", "pid.available": "5s"},
        reclaim={"memory.available": "0", "nodefs.available": "5%", "imagefs.available": "1Gi"},
    )
    assert [(t.signal, t.grace_period_s, t.hard) for t in thresholds] == [
        (Signal.MEMORY_AVAILABLE, 0, True),
        (Signal.MEMORY_AVAILABLE, 30, False),
        (Signal.NODEFS_AVAILABLE, 90, False),
        (Signal.ALLOCATABLE_MEMORY_AVAILABLE, 0, True),
    ]
    hard, soft_mem, soft_nodefs, allocatable = thresholds
    assert hard.min_reclaim is not None and hard.min_reclaim.quantity is not None
    assert hard.min_reclaim.quantity.sign() == 0  # zero minimum reclaim is allowed
    assert soft_mem.min_reclaim == hard.min_reclaim
    assert soft_nodefs.min_reclaim == ThresholdValue(percentage=parse_percentage("5%"))
    assert allocatable.value == hard.value and allocatable.min_reclaim == hard.min_reclaim


@pytest.mark.parametrize(("hard", "reclaim", "copies"), [
    ({"memory.available": "1Gi", "allocatableMemory.available": "1Gi"}, {}, 2),  # quantities: Go pointers differ
    ({"memory.available": "10%", "allocatableMemory.available": "10%"}, {}, 1),  # no pointer: one Go map key
    ({"memory.available": "10%", "allocatableMemory.available": "10%"},
     {"memory.available": "1%", "allocatableMemory.available": "1%"}, 2),  # minimum reclaims are pointers
], ids=["equal-quantities-two", "equal-percentages-one", "equal-percentages-with-min-reclaim-two"])
def test_an_allocatable_copy_is_another_threshold_exactly_when_it_is_another_go_map_key(
        hard: dict[str, str], reclaim: dict[str, str], copies: int) -> None:
    """Issue #38 item 7: the kubelet keys thresholdsFirstObservedAt by its Threshold struct, whose value and
    minimum reclaim are pointers; the copy of memory.available shares that entry's pointers."""
    thresholds = parse(hard=hard, reclaim=reclaim)
    allocatable = [t for t in thresholds if t.signal is Signal.ALLOCATABLE_MEMORY_AVAILABLE]
    assert len(allocatable) == 2 and len(set(allocatable)) == copies
    assert [t.copied_from for t in allocatable] == [None, Signal.MEMORY_AVAILABLE if copies == 2 else None]


@pytest.mark.parametrize(
    ("kwargs", "signals"),
    [
        ({"hard": {"memory.available": "100Mi"}, "allocatable": ()}, ["memory.available"]),
        ({"hard": {"memory.available": "100Mi"}, "allocatable": ("system-reserved", "pods")},
         ["memory.available", "allocatableMemory.available"]),
        ({"soft": {"memory.available": "1Gi"}, "grace": {"memory.available": "0s"}},
         ["memory.available", "allocatableMemory.available"]),
        ({"hard": {"nodefs.available": "0%", "imagefs.available": "100%", "memory.available": "1Mi"}},
         ["memory.available", "allocatableMemory.available"]),
        ({"hard": {"nodefs.available": "0.0%"}}, ["nodefs.available"]),
        ({"hard": {"nodefs.available": "100.0%"}}, ["nodefs.available"]),
        ({"soft": {"nodefs.available": "0%"}}, []),
    ],
    ids=[
        "no-allocatable-enforcement",
        "allocatable-enforcement-among-others",
        "soft-with-zero-grace-is-copied-too",
        "0pct-and-100pct-disable",
        "0.0pct-is-not-disabling",
        "100.0pct-is-not-disabling",
        "disabled-soft-needs-no-grace",
    ],
)
def test_which_thresholds_exist(kwargs: dict[str, object], signals: list[str]) -> None:
    assert [str(t.signal) for t in parse(**kwargs)] == signals


@pytest.mark.parametrize(
    ("kwargs", "key", "reason"),
    [
        ({"hard": {"mem.available": "1Gi"}}, "evictionHard[mem.available]",
         "unsupported eviction signal mem.available"),
        ({"hard": {"swap.available": "1Gi"}}, "evictionHard[swap.available]",
         "unsupported eviction signal swap.available"),
        ({"hard": {"memory.available": "0"}}, "evictionHard[memory.available]",
         "eviction threshold memory.available must be positive: 0"),
        ({"hard": {"memory.available": "-1Gi"}}, "evictionHard[memory.available]",
         "eviction threshold memory.available must be positive: -1Gi"),
        ({"hard": {"memory.available": "0Mi"}}, "evictionHard[memory.available]",
         "eviction threshold memory.available must be positive: 0"),
        ({"hard": {"nodefs.available": "-5%"}}, "evictionHard[nodefs.available]",
         "eviction percentage threshold nodefs.available must be >= 0%: -5%"),
        ({"hard": {"nodefs.available": "150%"}}, "evictionHard[nodefs.available]",
         "eviction percentage threshold nodefs.available must be <= 100%: 150%"),
        ({"hard": {"nodefs.available": "x%"}}, "evictionHard[nodefs.available]",
         'strconv.ParseFloat: parsing "x": invalid syntax'),
        ({"hard": {"nodefs.available": "NaN%"}}, "evictionHard[nodefs.available]",
         "eviction percentage threshold nodefs.available must be a number: NaN%"),
        ({"soft": {"memory.available": "1Gi"}}, "evictionSoftGracePeriod[memory.available]",
         "grace period must be specified for the soft eviction threshold memory.available"),
        ({"soft": {"memory.available": "1Gi"}, "grace": {"memory.available": "-30s"}},
         "evictionSoftGracePeriod[memory.available]",
         "invalid eviction grace period specified: -30s, must be a positive value"),
        ({"soft": {"memory.available": "1Gi"}, "grace": {"memory.available": "30"}},
         "evictionSoftGracePeriod[memory.available]", 'time: missing unit in duration "30"'),
        ({"grace": {"foo.bar": "30s"}}, "evictionSoftGracePeriod[foo.bar]", "unsupported eviction signal foo.bar"),
        ({"reclaim": {"memory.available": "-1"}}, "evictionMinimumReclaim[memory.available]",
         "negative eviction minimum reclaim specified for memory.available"),
        ({"reclaim": {"memory.available": "0%"}}, "evictionMinimumReclaim[memory.available]",
         "eviction percentage minimum reclaim memory.available must be positive: 0%"),
        ({"reclaim": {"memory.available": "-10%"}}, "evictionMinimumReclaim[memory.available]",
         "eviction percentage minimum reclaim memory.available must be positive: -10%"),
        ({"reclaim": {"invalid.foo": "1Gi"}}, "evictionMinimumReclaim[invalid.foo]",
         "unsupported eviction signal invalid.foo"),
    ],
    ids=[
        "unknown-signal", "swap-is-unsupported", "zero-quantity", "negative-quantity", "zero-mi",
        "negative-percentage", "over-100-percent", "bad-percentage", "nan-percentage",
        "soft-no-grace-period", "negative-grace", "grace-missing-unit", "grace-unknown-signal",
        "negative-min-reclaim", "zero-pct-min-reclaim", "negative-pct-min-reclaim", "min-reclaim-unknown-signal",
    ],
)
def test_invalid_configurations(kwargs: dict[str, object], key: str, reason: str) -> None:
    with pytest.raises(ConfigError) as exc:
        parse(**kwargs)
    assert exc.value.key == key
    assert exc.value.reason == reason


def test_min_reclaim_percentage_has_no_upper_bound() -> None:
    (threshold, _) = parse(hard={"memory.available": "1Gi"}, reclaim={"memory.available": "150%"})
    assert threshold.min_reclaim == ThresholdValue(percentage=1.5)


def test_bad_quantity_error_passes_through_with_key_and_value() -> None:
    with pytest.raises(ConfigError) as exc:
        parse(hard={"memory.available": "<=100Mi"})
    assert exc.value.key == "evictionHard[memory.available]" and exc.value.value == "<=100Mi"
    assert "quantities must match the regular expression" in exc.value.reason
    assert "evictionHard[memory.available]" in str(exc.value) and "<=100Mi" in str(exc.value)


# --- thresholds met ------------------------------------------------------------------------------------

def test_equality_is_not_pressure() -> None:
    (threshold,) = parse(hard={"memory.available": "100Mi"}, allocatable=())
    assert thresholds_met([threshold], {Signal.MEMORY_AVAILABLE: Obs(100 << 20, 1 << 30)}, False) == []
    assert thresholds_met([threshold], {Signal.MEMORY_AVAILABLE: Obs((100 << 20) - 1, 1 << 30)}, False) == [
        threshold
    ]


def test_percentage_threshold_against_capacity_truncates() -> None:
    (threshold,) = parse(hard={"nodefs.available": "10.5%"})
    assert thresholds_met([threshold], {Signal.NODEFS_AVAILABLE: Obs(104, 1000)}, False) == []
    assert thresholds_met([threshold], {Signal.NODEFS_AVAILABLE: Obs(103, 1000)}, False) == [threshold]


def test_min_reclaim_only_when_enforced() -> None:
    (threshold,) = parse(hard={"nodefs.available": "1Gi"}, reclaim={"nodefs.available": "500Mi"})
    observations = {Signal.NODEFS_AVAILABLE: Obs((1 << 30) + 1, 10 << 30)}
    assert thresholds_met([threshold], observations, enforce_min_reclaim=False) == []
    assert thresholds_met([threshold], observations, enforce_min_reclaim=True) == [threshold]


def test_missing_observation_is_not_met() -> None:
    (threshold,) = parse(hard={"pid.available": "100"})
    assert thresholds_met([threshold], {}, False) == []


def test_merge_ignores_min_reclaim_and_keeps_order() -> None:
    a, b = parse(hard={"memory.available": "1Gi", "nodefs.available": "1Gi"}, allocatable=())
    (b_with_reclaim,) = parse(hard={"nodefs.available": "1Gi"}, reclaim={"nodefs.available": "1Gi"})
    assert merge_thresholds([a, b], [b_with_reclaim]) == [a, b]
    assert merge_thresholds([a], [b_with_reclaim]) == [a, b_with_reclaim]


# --- containerfs derivation ------------------------------------------------------------------------------

DISK = {
    "nodefs.available": "10%",
    "nodefs.inodesFree": "5%",
    "imagefs.available": "15%",
    "imagefs.inodesFree": "4%",
}


def _derived(thresholds: list[Threshold], signal: str, hard: bool) -> Threshold:
    (found,) = [t for t in thresholds if t.signal == signal and t.hard == hard]
    return found


@pytest.mark.parametrize(
    ("imagefs", "split", "source"),
    [(False, False, "nodefs"), (True, True, "nodefs"), (True, False, "imagefs")],
    ids=["single-fs", "imagefs-and-split", "imagefs-only"],
)
def test_containerfs_copies_by_layout(imagefs: bool, split: bool, source: str) -> None:
    base = parse(hard=DISK, soft={"nodefs.available": "20%", "imagefs.available": "25%"},
                 grace={"nodefs.available": "1m", "imagefs.available": "2m"})
    derived, warnings = derive_containerfs_thresholds(base, FsLayout(imagefs, split))
    assert warnings == []
    for suffix in ("available", "inodesFree"):
        hard = _derived(derived, f"containerfs.{suffix}", True)
        origin = _derived(base, f"{source}.{suffix}", True)
        assert (hard.value, hard.grace_period_s) == (origin.value, 0)
    soft = _derived(derived, "containerfs.available", False)
    soft_origin = _derived(base, f"{source}.available", False)
    assert (soft.value, soft.grace_period_s) == (soft_origin.value, soft_origin.grace_period_s)
    never = _derived(derived, "containerfs.inodesFree", False)
    assert never.operator is None  # no soft inode source: a copy that can never be met
    assert thresholds_met([never], {Signal.CONTAINERFS_INODES_FREE: Obs(0, 100)}, True) == []


def test_user_containerfs_thresholds_are_overridden_with_warning() -> None:
    base = parse(hard={"nodefs.available": "10%", "containerfs.available": "50%"})
    derived, warnings = derive_containerfs_thresholds(base, FsLayout())
    assert warnings == ["found containerfs.available for hard eviction. ignoring"]
    replaced = derived[[str(t.signal) for t in derived].index("containerfs.available")]
    assert replaced.value == ThresholdValue(percentage=parse_percentage("10%"))
    assert [str(t.signal) for t in derived][:2] == ["nodefs.available", "containerfs.available"]


def test_split_without_imagefs_derives_nothing() -> None:
    base = parse(hard=DISK)
    assert derive_containerfs_thresholds(base, FsLayout(split_containerfs=True)) == (base, [])
