"""A PSI trigger as a notifier: memory pressure stall past a level within a window wakes the loop.

Job: open ``/proc/pressure/memory`` or a v2 cgroup's ``memory.pressure`` O_RDWR|O_NONBLOCK and write a trigger
``"<some|full> <stall us> <window us>"``, NUL-terminated (``/proc/pressure/*`` overwrites the last byte written
with a NUL). The kernel then reports POLLPRI at most once per window when the stall within the window reaches
the given time. Without CAP_SYS_RESOURCE (root here lacks it) only windows that are whole multiples of 2 s are
accepted, so whether this process has it is read first (`has_cap_sys_resource`).

Invariants: a notifier owns exactly one descriptor, opened O_CLOEXEC; a trigger the kernel would refuse raises
ConfigError before anything is opened, and a file that cannot be opened or written SampleError naming it;
``close()`` is idempotent. A firing is judged (`judge`) as it is consumed: ``psi`` when it may change the
decision, ``psi_far`` when not.
"""

from __future__ import annotations

import os
import select
from collections.abc import Callable

from evictd.adapters.notifiers import FdOwner, close_quietly, os_sample_error
from evictd.core.errors import SampleError
from evictd.core.psi import format_us, psi_trigger
from evictd.core.wake import Wake

SYSTEM_MEMORY_PRESSURE = "/proc/pressure/memory"
# Bit number of CAP_SYS_RESOURCE in the CapEff mask of /proc/<pid>/status (linux/capability.h).
CAP_SYS_RESOURCE = 24



def has_cap_sys_resource(proc_root: str = "/proc") -> bool:
    """Return True when this process has CAP_SYS_RESOURCE in its effective set; SampleError if unreadable."""
    path = os.path.join(proc_root, "self", "status")
    try:
        with open(path, encoding="ascii", errors="replace") as status:
            text = status.read()
    except OSError as exc:
        raise os_sample_error(path, exc) from exc
    for line in text.splitlines():
        if line.startswith("CapEff:"):
            try:
                mask = int(line.split(":", 1)[1].strip(), 16)
            except ValueError as exc:
                raise SampleError(path, f"bad CapEff line {line!r}") from exc
            return bool(mask >> CAP_SYS_RESOURCE & 1)
    raise SampleError(path, "no CapEff line")


class PsiNotifier(FdOwner):
    """A PSI trigger on /proc/pressure/memory or a v2 cgroup's memory.pressure; fires with POLLPRI."""

    poll_events = select.POLLPRI

    def __init__(self, path: str, stall_us: int, window_us: int, kind: str = "some", description: str = "", *,
                 privileged: bool | None = None, judge: Callable[[], bool] | None = None,
                 on_fire: Callable[[], None] | None = None) -> None:
        """Open `path` and write the trigger.

        `privileged` says whether the kernel will see CAP_SYS_RESOURCE; None reads it from ``/proc/self/status``.
        `judge`, when given, is asked at each firing whether it may change the decision: when it says no, the
        firing's cause is ``psi_far`` (a cycle is not due) instead of ``psi``. `on_fire`, when given, is told of
        each firing first (a stall threshold's own trigger notes it for the readings after it).
        Raises ConfigError (before opening anything) for a trigger the kernel would refuse, and SampleError naming
        `path` when it cannot be opened or the kernel refuses the trigger anyway.
        """
        self._fd = -1
        self.path = path
        self.cause = Wake.PSI
        self._judge = judge
        self._on_fire = on_fire
        resource = os.path.basename(path.rstrip("/")).removesuffix(".pressure")  # memory.pressure: memory
        self.description = description or f"psi {resource} {kind} {format_us(stall_us)}/{format_us(window_us)}"
        if privileged is None:
            privileged = has_cap_sys_resource()
        trigger = psi_trigger(kind, stall_us, window_us, privileged=privileged)
        fd = -1
        try:
            fd = os.open(path, os.O_RDWR | os.O_NONBLOCK | os.O_CLOEXEC)
            # NUL-terminated: psi_write() in the kernel replaces the last byte written with a NUL.
            os.write(fd, trigger.encode() + b"\0")
        except OSError as exc:
            close_quietly(fd)
            raise os_sample_error(path, exc) from exc
        self._fd = fd

    def consume(self) -> None:
        """Tell `on_fire`, then judge the firing (`judge`); nothing else to do: the kernel clears a trigger's event
        when poll reports it."""
        if self._on_fire is not None:
            self._on_fire()
        self.cause = Wake.PSI if self._judge is None or self._judge() else Wake.PSI_FAR
