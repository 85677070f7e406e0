"""The refault figure (`evictd.core.refault`): the share of the node's memory refaulted within the last ~10 s, from
two readings of /proc/vmstat's cumulative count a window apart. Pure, table-driven."""

from __future__ import annotations

import pytest

from evictd.core.refault import (
    REFAULT_MIN_SPAN_S,
    REFAULT_WINDOW_S,
    RefaultFigure,
    RefaultSample,
    next_samples,
    refault_figure,
    refault_observation,
)

GiB = 1 << 30
MiB = 1 << 20
NODE = 25_600 * MiB  # divides into whole bytes by 10, 20, 40, 50 and 100


def sample(at: float, refault: int, activate: int | None = None) -> RefaultSample:
    return RefaultSample(at, refault, activate)


def readings(*pairs: tuple[float, int]) -> tuple[RefaultSample, ...]:
    """Feed (at, count) readings through next_samples, as cycles do; return what is kept after the last."""
    kept: tuple[RefaultSample, ...] = ()
    for at, count in pairs:
        kept = next_samples(kept, sample(at, count), at)
    return kept


@pytest.mark.parametrize(("pairs", "expected_basis_points"), [
    pytest.param([(0.0, 0)], None, id="first-reading-absent-not-zero"),
    pytest.param([(0.0, 0), (10.0, 0)], 0, id="no-refaults-zero"),
    pytest.param([(0.0, 0), (10.0, NODE // 20)], 500, id="a-twentieth-of-memory-in-10s-is-5-percent"),
    pytest.param([(0.0, 0), (10.0, NODE // 20 - 1)], 499, id="just-under-5-percent-floored"),
    pytest.param([(0.0, 0), (20.0, NODE // 10)], 500, id="a-20s-span-scaled-to-10s"),
    pytest.param([(0.0, 0), (5.0, NODE // 40)], 500, id="a-5s-span-scaled-to-10s"),
    pytest.param([(0.0, 0), (REFAULT_MIN_SPAN_S - 0.1, NODE)], None, id="span-under-the-minimum-absent"),
    pytest.param([(0.0, 0), (10.0, 3 * NODE)], 10_000, id="more-than-all-memory-capped-at-100-percent"),
    pytest.param([(0.0, 0), (10.0, NODE // 100), (11.0, NODE // 100 + NODE // 50)], 272,
                 id="a-woken-cycle-compares-with-the-reading-a-window-before"),
    pytest.param([(0.0, 5 * GiB), (10.0, 1 * GiB)], None, id="counter-went-back-new-baseline-absent"),
    pytest.param([(0.0, 5 * GiB), (10.0, 1 * GiB), (20.0, 1 * GiB + NODE // 100)], 100,
                 id="after-a-new-baseline-a-figure-again"),
])
def test_the_figure(pairs: list[tuple[float, int]], expected_basis_points: int | None) -> None:
    figure = refault_figure(readings(*pairs), NODE)
    assert (None if figure is None else figure.refaulted_basis_points) == expected_basis_points


def test_only_the_readings_of_the_last_window_are_kept() -> None:
    kept = readings(*[(float(at), at * MiB) for at in range(0, 31, 2)])
    assert [s.read_at for s in kept] == [20.0, 22.0, 24.0, 26.0, 28.0, 30.0]  # the newest at least 10 s old, and on
    assert kept[-1].read_at - kept[0].read_at == REFAULT_WINDOW_S


def test_an_unread_count_keeps_the_readings() -> None:
    kept = readings((0.0, 0), (10.0, MiB))
    assert next_samples(kept, None, 12.0) == kept


@pytest.mark.parametrize(("memory_bytes",), [pytest.param(None, id="no-capacity"), pytest.param(0, id="zero")])
def test_no_memory_capacity_no_figure(memory_bytes: int | None) -> None:
    assert refault_figure(readings((0.0, 0), (10.0, MiB)), memory_bytes) is None


@pytest.mark.parametrize(("base", "latest", "expected"), [
    pytest.param(0, NODE // 100, 1.0, id="activations-reported"),
    pytest.param(None, NODE // 100, None, id="not-counted-before"),
    pytest.param(NODE, 0, None, id="went-back"),
])
def test_activations(base: int | None, latest: int, expected: float | None) -> None:
    figure = refault_figure((sample(0.0, 0, base), sample(10.0, NODE // 20, latest)), NODE)
    assert figure is not None and figure.activated_percent == expected


def test_the_observation_is_a_headroom_of_10000_like_the_stall_signals() -> None:
    observed = refault_observation(RefaultFigure(NODE // 20, None, 10.0, NODE), None)
    assert (observed.available.ceil_int(), observed.capacity.ceil_int()) == (9500, 10_000)
