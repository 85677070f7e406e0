"""Blind signals: a signal with a threshold that the cycles could not read.

A node whose stats cannot be read evicts nothing for them while the daemon looks healthy. Each cycle counts, per
thresholded signal, the cycles in a row without a figure (`blind_streaks`); from `BLIND_AFTER_CYCLES` the signal is
blind (`blind_signals`). No I/O, no clock; inputs are not mutated.
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
