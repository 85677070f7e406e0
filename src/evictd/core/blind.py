"""Blind signals: a signal with a threshold that the cycles could not read (issue #43, item 2).

A node whose stats cannot be read has no eviction at all for what they would show, and a daemon that goes on
cycling looks healthy. Each cycle counts, per signal that has a threshold, how many cycles in a row had no figure
for it (`blind_streaks`); from `BLIND_AFTER_CYCLES` in a row the signal is blind (`blind_signals`). Three: one
cycle without a figure is a moment (a runtime restarting, a cgroup being created), three in a row is a state; at
the default 10 s interval a signal is called blind within 30 s, so that an alert on it fires within a minute.

Invariants: no I/O, no clock; nothing here mutates its inputs.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping

from evictd.core.signals import Signal

BLIND_AFTER_CYCLES = 3


def blind_streaks(previous: Mapping[Signal, int], thresholded: Iterable[Signal],
                  observed: Collection[Signal]) -> dict[Signal, int]:
    """Return, for each signal of `thresholded` without a figure in `observed`, how many cycles in a row (this
    one included) had none, counting on from `previous`; a signal read this cycle starts again from zero."""
    return {signal: previous.get(signal, 0) + 1 for signal in dict.fromkeys(thresholded) if signal not in observed}


def blind_signals(streaks: Mapping[Signal, int]) -> tuple[Signal, ...]:
    """The signals of `streaks` unread for `BLIND_AFTER_CYCLES` cycles in a row or more, in `streaks`' order."""
    return tuple(signal for signal, cycles in streaks.items() if cycles >= BLIND_AFTER_CYCLES)
