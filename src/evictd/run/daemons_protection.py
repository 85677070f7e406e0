"""evictd's protection of the daemons in the running daemon: `evictd.core.daemons_protection`'s step after every cycle
and at stop, over the memory.low adapter.

The step runs after each cycle (the mode asked then: dry-run writes nothing but taking evictd's value back); a change
of state is logged once, at info (applied, the node's own value standing, dry-run) or warning (unreadable, a failed
write); the gauge `evictd_daemons_memory_low_bytes` holds evictd's value while it holds, else 0. At stop evictd's
value is taken back. `daemons_protection` builds none where it can never act (off, or unavailable on this node: the
start-up `protection` line says so), so such a node reads nothing after its cycles.
"""

from __future__ import annotations

from collections.abc import Callable

from evictd.adapters.cgroups import CgroupLayout
from evictd.adapters.daemons_protection import protection_unavailable, read_node_low, write_node_low
from evictd.adapters.procfs import mem_total_bytes
from evictd.config import Configuration
from evictd.core.daemons_protection import (
    MIB,
    LowState,
    LowTarget,
    NodeLow,
    daemons_low_target,
    parse_daemons_low,
    protection_step,
    release_step,
)
from evictd.core.errors import SampleError
from evictd.cycle.finished import Cycle
from evictd.log import Log

EVENT = "daemons' memory protection"


class DaemonsProtection:
    """The after-cycle hook and the stop call (see the module)."""

    def __init__(self, target: LowTarget, *, read: Callable[[], NodeLow],
                 write: Callable[[int], None], acting: Callable[[], bool], log: Log,
                 gauge: Callable[[float], None]) -> None:
        self.target = target
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
        step = protection_step(self.target, None, self._read(), acting=self._acting())
        state, detail = step.state, step.detail
        if step.write is not None:
            try:
                self._write(step.write)
            except SampleError as exc:
                state, detail = LowState.UNAVAILABLE, f"memory.low not written: {exc}"
        self._gauge((self.target.bytes or 0) if state is LowState.APPLIED else 0)
        if self._said != (state, detail):
            quiet = state is not LowState.UNAVAILABLE
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


def daemons_protection(config: Configuration, layout: CgroupLayout, *, acting: Callable[[], bool], log: Log,
                       gauge: Callable[[float], None]) -> DaemonsProtection | None:
    """evictd's memory.low on system.slice (`daemonsMemoryLow` of `config`, resolved for the kernel), sized on this
    node; None where it can never act (off, cgroup v1, no memory_recursiveprot, the node's memory unread)."""
    try:
        total = mem_total_bytes()
    except SampleError:
        return None
    reserved = sum(item.memory_bytes or 0 for item in (config.reservation.system_reserved,
                                                         config.reservation.kube_reserved))
    target = daemons_low_target(parse_daemons_low(config.evictd.daemons_memory_low), max(total, MIB), reserved)
    if target.bytes is None or protection_unavailable(layout) is not None:
        return None
    return DaemonsProtection(target, read=lambda: read_node_low(layout),
                             write=lambda value: write_node_low(layout, value), acting=acting, log=log, gauge=gauge)
