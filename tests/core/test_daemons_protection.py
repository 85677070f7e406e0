"""evictd's protection of the daemons decided (evictd.core.daemons_protection): the setting, its size on a node, and
each step's write. The real memory.low is exercised in tests/uml/test_daemons_reclaim_v2.py."""

from __future__ import annotations

import pytest

from evictd.core.daemons_protection import (
    MIB,
    LowState,
    LowTarget,
    NodeLow,
    SizeKind,
    daemons_low_target,
    gke_reserved_bytes,
    parse_daemons_low,
    protection_step,
    release_step,
)
from evictd.core.errors import ConfigError

GIB = 1 << 30
TARGET = LowTarget(384 * MIB, "auto")


@pytest.mark.parametrize(("text", "kind"), [("auto", SizeKind.AUTO), ("off", SizeKind.OFF), ("512Mi", SizeKind.BYTES),
                                            ("1G", SizeKind.BYTES), ("10%", SizeKind.PERCENT),
                                            ("2.5%", SizeKind.PERCENT)])
def test_the_setting_takes_auto_off_a_quantity_or_a_percentage(text: str, kind: SizeKind) -> None:
    assert parse_daemons_low(text).kind is kind


def test_an_unquoted_off_which_yaml_reads_as_false_is_off() -> None:
    assert parse_daemons_low(False).kind is SizeKind.OFF


@pytest.mark.parametrize(("value", "says"), [("lots", "must be"), ("0", "at least 1Mi"), ("-1Gi", "at least 1Mi"),
                                             ("0%", "above 0%"), ("60%", "at most 50%"), ("x%", "must be"),
                                             (512, "must be a string"), (True, "must be a string")])
def test_a_bad_setting_names_the_key_the_value_and_what_is_accepted(value: object, says: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_daemons_low(value)
    message = str(caught.value)
    assert "daemonsMemoryLow" in message and str(value) in message and says in message, message


@pytest.mark.parametrize(("total", "reserved"), [
    (512 * MIB, 255 * MIB),  # under 1 GiB: a flat 255 MiB
    (1536 * MIB, 384 * MIB),  # 25 % of the first 4 GiB
    (4 * GIB, GIB),
    (8 * GIB, int(GIB * (1 + 0.8))),  # 1 GiB + 20 % of the next 4
    (16 * GIB, int(GIB * (1 + 0.8 + 0.8))),  # + 10 % of the next 8
    (256 * GIB, int(GIB * (2.6 + 112 * 0.06 + 128 * 0.02))),  # + 6 % of the next 112, 2 % above 128 GiB
])
def test_auto_without_a_reservation_is_what_gke_reserves(total: int, reserved: int) -> None:
    assert abs(gke_reserved_bytes(total) - reserved) <= 1, (gke_reserved_bytes(total), reserved)


def test_auto_takes_the_kubelets_reservation_when_it_has_one() -> None:
    target = daemons_low_target(parse_daemons_low("auto"), 16 * GIB, 700 * MIB + 12345)
    assert target.bytes == 700 * MIB  # whole MiB, down
    assert "systemReserved + kubeReserved" in target.source
    assert daemons_low_target(parse_daemons_low("auto"), 1536 * MIB, 0).bytes == 384 * MIB


def test_sizes_are_whole_mib_within_the_node() -> None:
    assert daemons_low_target(parse_daemons_low("10%"), 1000 * MIB, 0).bytes == 100 * MIB
    assert daemons_low_target(parse_daemons_low("64Gi"), 8 * GIB, 0).bytes == 8 * GIB
    assert daemons_low_target(parse_daemons_low("off"), 8 * GIB, GIB).bytes is None


def test_evictd_writes_over_zero_and_keeps_its_own() -> None:
    first = protection_step(TARGET, None, NodeLow(0, 0), acting=True)
    assert (first.write, first.state) == (384 * MIB, LowState.APPLIED)
    kept = protection_step(TARGET, None, NodeLow(384 * MIB, 0), acting=True)
    assert (kept.write, kept.state) == (None, LowState.APPLIED)


@pytest.mark.parametrize("read", [NodeLow(512 * MIB, 0), NodeLow(0, 64 * MIB), NodeLow(None, 0),
                                  NodeLow(384 * MIB, 64 * MIB)])
def test_the_nodes_own_protection_stands(read: NodeLow) -> None:
    step = protection_step(TARGET, None, read, acting=True)
    assert (step.write, step.state) == (None, LowState.NODE_OWN)
    assert "evictd writes only over 0" in step.detail


def test_dry_run_writes_nothing_but_taking_its_own_back() -> None:
    assert protection_step(TARGET, None, NodeLow(0, 0), acting=False).write is None
    back = protection_step(TARGET, None, NodeLow(384 * MIB, 0), acting=False)
    assert (back.write, back.state) == (0, LowState.DRY_RUN)
    assert protection_step(TARGET, None, NodeLow(512 * MIB, 0), acting=False).write is None


def test_nothing_is_written_unavailable_unread_or_off() -> None:
    unavailable = protection_step(TARGET, "cgroup v1 has no memory.low", NodeLow(0, 0), acting=True)
    assert (unavailable.write, unavailable.state) == (None, LowState.UNAVAILABLE)
    unread = protection_step(TARGET, None, NodeLow(problem="memory.low: Permission denied"), acting=True)
    assert (unread.write, unread.state) == (None, LowState.UNAVAILABLE)
    assert "Permission denied" in unread.detail
    off = protection_step(LowTarget(None, "off"), None, NodeLow(0, 0), acting=True)
    assert (off.write, off.state) == (None, LowState.OFF)


def test_stop_takes_back_only_evictds_value() -> None:
    assert release_step(TARGET, NodeLow(384 * MIB, 0)) == 0
    assert release_step(TARGET, NodeLow(512 * MIB, 0)) is None
    assert release_step(TARGET, NodeLow(0, 0)) is None
    assert release_step(TARGET, NodeLow(problem="gone")) is None
    assert release_step(LowTarget(None, "off"), NodeLow(0, 0)) is None
