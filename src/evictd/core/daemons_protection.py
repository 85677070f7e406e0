"""evictd's protection of the node's daemons from reclaim: cgroup v2 `memory.low` of system.slice, decided (no I/O).

`daemonsMemoryLow` sizes it: `auto` (the KubeletConfiguration's systemReserved + kubeReserved memory; where it reserves
none, what GKE reserves for a node of this memory), a quantity, a percentage of the node's memory, or `off`.
Invariants: evictd writes only over 0 or over its own value, so an operator's `MemoryLow=`/`MemoryMin=` stands; it
never writes over a value it could not read; while the node's mode is dry-run it writes nothing but taking its own
value back; at stop it takes its own value back. Where cgroup2 is not mounted `memory_recursiveprot` a slice's
protection does not reach its services, so nothing is written (`unavailable` says why).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from fractions import Fraction

from evictd.core.errors import ConfigError, QuantityError
from evictd.core.quantity import Quantity

SETTING_KEY = "daemonsMemoryLow"
# Its value where the kernel gives no PSI (`evictd.config.Configuration.for_kernel`), as stallEvictionHardWithoutPSI.
WITHOUT_PSI_KEY = "daemonsMemoryLowWithoutPSI"
KEYS = (SETTING_KEY, WITHOUT_PSI_KEY)
# Why nothing is kept on cgroup v1: no memory.low there (an ok finding, as `evictd.core.node_protection`'s).
V1_REASON = "cgroup v1 has no memory.low"
AUTO, OFF = "auto", "off"
MIB = 1 << 20
GIB = 1 << 30
# A percentage above half the node's memory protects the daemons from the pods' own needs: a typo, not a size.
MAX_PERCENT = 50
# GKE's memory reservation for the kubelet and runtime (its "node allocatable" page): 255 MiB under 1 GiB, then a
# share of each band of memory. `auto`'s size where the KubeletConfiguration reserves none.
SMALL_NODE_BYTES, SMALL_NODE_RESERVED_BYTES = GIB, 255 * MIB
GKE_BANDS = ((4 * GIB, Fraction(25, 100)), (8 * GIB, Fraction(20, 100)), (16 * GIB, Fraction(10, 100)),
             (128 * GIB, Fraction(6, 100)), (None, Fraction(2, 100)))


class SizeKind(StrEnum):
    AUTO = AUTO
    OFF = OFF
    BYTES = "bytes"
    PERCENT = "percent"


@dataclass(frozen=True, slots=True)
class DaemonsLow:
    """The `daemonsMemoryLow` setting: its kind, and the bytes or the percentage it names (0 for auto and off)."""

    kind: SizeKind
    amount: Fraction = Fraction(0)
    text: str = AUTO


def parse_daemons_low(text: object, key: str = SETTING_KEY) -> DaemonsLow:
    """Return the setting `text` (of `key`) means; ConfigError naming the key and the value otherwise."""
    accepted = f'"{AUTO}", "{OFF}", a quantity such as "512Mi" or a percentage of the node\'s memory such as "10%"'
    if text is False:  # YAML 1.1 reads an unquoted off (or no, false) as false
        return DaemonsLow(SizeKind.OFF, text=OFF)
    if not isinstance(text, str):
        raise ConfigError(f"must be a string: {accepted}", key=key, value=text)
    if text in (AUTO, OFF):
        return DaemonsLow(SizeKind(text), text=text)
    if text.endswith("%"):
        try:
            percent = Fraction(text[:-1])
        except (ValueError, ZeroDivisionError):
            raise ConfigError(f"must be {accepted}", key=key, value=text) from None
        if not 0 < percent <= MAX_PERCENT:
            raise ConfigError(f"a percentage must be above 0% and at most {MAX_PERCENT}% ({OFF!r} turns it off)",
                              key=key, value=text)
        return DaemonsLow(SizeKind.PERCENT, percent, text)
    try:
        quantity = Quantity.parse(text)
    except QuantityError:
        raise ConfigError(f"must be {accepted}", key=key, value=text) from None
    if quantity.ceil_int() < MIB:
        raise ConfigError(f"must be at least 1Mi ({OFF!r} turns it off)", key=key, value=text)
    return DaemonsLow(SizeKind.BYTES, Fraction(quantity.ceil_int()), text)


def gke_reserved_bytes(total_bytes: int) -> int:
    """The memory GKE reserves for the kubelet and runtime on a node of `total_bytes`."""
    if total_bytes < SMALL_NODE_BYTES:
        return SMALL_NODE_RESERVED_BYTES
    reserved, below = Fraction(0), 0
    for top, share in GKE_BANDS:
        band_top = total_bytes if top is None else min(top, total_bytes)
        if band_top > below:
            reserved += (band_top - below) * share
        if top is None or total_bytes <= top:
            break
        below = top
    return int(reserved)


@dataclass(frozen=True, slots=True)
class LowTarget:
    """What evictd keeps in system.slice's memory.low (`bytes`; None: off) and where the size comes from."""

    bytes: int | None
    source: str


def daemons_low_target(setting: DaemonsLow, total_bytes: int, reserved_bytes: int) -> LowTarget:
    """The size of `setting` on a node of `total_bytes` whose KubeletConfiguration reserves `reserved_bytes`
    (systemReserved + kubeReserved memory), in whole MiB (the kernel keeps memory.low in pages; a MiB reads back
    as written) and at most the node's memory."""
    if setting.kind is SizeKind.OFF:
        return LowTarget(None, f"{SETTING_KEY}: {OFF}")
    if setting.kind is SizeKind.AUTO:
        if reserved_bytes > 0:
            wanted, source = reserved_bytes, "auto: systemReserved + kubeReserved memory"
        else:
            wanted, source = gke_reserved_bytes(total_bytes), "auto: no memory reserved, GKE's reservation for " \
                                                              "a node of this memory"
    elif setting.kind is SizeKind.PERCENT:
        wanted, source = int(total_bytes * setting.amount / 100), f"{SETTING_KEY}: {setting.text} of the memory"
    else:
        wanted, source = int(setting.amount), f"{SETTING_KEY}: {setting.text}"
    return LowTarget(max(MIB, min(wanted, total_bytes)) // MIB * MIB, source)


@dataclass(frozen=True, slots=True)
class NodeLow:
    """system.slice's memory.low and memory.min as read (bytes; None for "max"), or why they could not be."""

    low_bytes: int | None = 0
    min_bytes: int | None = 0
    problem: str = ""


class LowState(StrEnum):
    """What holds system.slice's memory.low after a step."""

    APPLIED = "applied"  # evictd's value
    NODE_OWN = "node's own"  # the operator's (or another agent's): left as it is
    DRY_RUN = "dry-run"  # nothing of evictd's: the node's mode is dry-run
    OFF = "off"
    UNAVAILABLE = "unavailable"


@dataclass(frozen=True, slots=True)
class LowStep:
    """One step's verdict: the bytes to write now (None: nothing), the state that follows, and why."""

    write: int | None
    state: LowState
    detail: str


def _shown(value: int | None) -> str:
    return "max" if value is None else f"{value // MIB} MiB" if value % MIB == 0 else f"{value} bytes"


def protection_step(target: LowTarget, unavailable: str | None, read: NodeLow, *, acting: bool) -> LowStep:
    """What to write to system.slice's memory.low, given what was `read` there now (see the module)."""
    if target.bytes is None:
        return LowStep(None, LowState.OFF, f"{target.source}: the node's memory.low is left as it is")
    if unavailable is not None:
        return LowStep(None, LowState.UNAVAILABLE, unavailable)
    if read.problem:
        return LowStep(None, LowState.UNAVAILABLE, f"system.slice's memory.low not read: {read.problem}")
    ours = read.low_bytes == target.bytes
    if not acting:
        return LowStep(0 if ours else None, LowState.DRY_RUN,
                       f"would keep memory.low at {_shown(target.bytes)} ({target.source})")
    if read.min_bytes != 0 or (read.low_bytes != 0 and not ours):
        return LowStep(None, LowState.NODE_OWN,
                       f"the node's own memory.low={_shown(read.low_bytes)} memory.min={_shown(read.min_bytes)} "
                       f"stand (evictd writes only over 0)")
    return LowStep(None if ours else target.bytes, LowState.APPLIED,
                   f"memory.low kept at {_shown(target.bytes)} ({target.source})")


def release_step(target: LowTarget, read: NodeLow) -> int | None:
    """What to write at stop: 0 when memory.low still holds evictd's value, else nothing."""
    if target.bytes is None or read.problem or read.low_bytes != target.bytes:
        return None
    return 0
