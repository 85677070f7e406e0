"""evictd's protection of the daemons in the running daemon: `evictd.core.daemons_protection`'s step after every cycle
and at stop, over the memory.low adapter.

The step runs after each cycle (the mode asked then: dry-run writes nothing but taking evictd's value back); a change
of state is logged once, at info (applied) or warning (standing aside, unavailable, a failed write); the gauge
`evictd_daemons_memory_low_bytes` holds evictd's value while it holds, else 0. At stop evictd's value is taken back.
"""

from __future__ import annotations

from collections.abc import Callable

from evictd.core.daemons_protection import V1_REASON, LowState, LowTarget, NodeLow, protection_step, release_step
from evictd.core.errors import SampleError
from evictd.cycle.finished import Cycle
from evictd.log import Log

EVENT = "daemons' memory protection"


class DaemonsProtection:
    """The after-cycle hook and the stop call (see the module)."""

    def __init__(self, target: LowTarget, unavailable: str | None, *, read: Callable[[], NodeLow],
                 write: Callable[[int], None], acting: Callable[[], bool], log: Log,
                 gauge: Callable[[float], None]) -> None:
        self.target = target
        self.unavailable = unavailable
        self._read = read
        self._write = write
        self._acting = acting
        self._log = log
        self._gauge = gauge
        self._said: tuple[LowState, str] | None = None

    def __call__(self, cycle: Cycle) -> None:
        self.step()

    def step(self) -> LowState:
        """One step now; returns the state that holds after it."""
        step = protection_step(self.target, self.unavailable, self._read(), acting=self._acting())
        state, detail = step.state, step.detail
        if step.write is not None:
            try:
                self._write(step.write)
            except SampleError as exc:
                state, detail = LowState.UNAVAILABLE, f"memory.low not written: {exc}"
        self._gauge((self.target.bytes or 0) if state is LowState.APPLIED else 0)
        if self._said != (state, detail):
            quiet = state is not LowState.UNAVAILABLE or detail == V1_REASON
            (self._log.info if quiet else self._log.warning)(EVENT, state=str(state), detail=detail)
            self._said = (state, detail)
        return state

    def stop(self) -> None:
        """Take evictd's value back, if memory.low still holds it."""
        if release_step(self.target, self._read()) is None:
            return
        try:
            self._write(0)
        except SampleError as exc:
            self._log.warning(EVENT, state="left", detail=f"memory.low not taken back at stop: {exc}")
            return
        self._gauge(0)
        self._log.info(EVENT, state="taken back", detail="memory.low set back to 0 at stop")
