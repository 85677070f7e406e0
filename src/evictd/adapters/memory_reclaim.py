"""The cgroup v2 ``memory.reclaim`` adapter: reads where pods' page cache is, and asks the kernel to reclaim it.

For reclaim before evict (`evictd.core.memory_reclaim`) and for the daemons (`evictd.core.daemons_reclaim`): reads
``active_file`` and ``inactive_file`` of the BestEffort, Burstable and pods cgroups, and carries out a `ReclaimPlan`,
writing `step_bytes` at a time to each target's ``memory.reclaim`` (5.19+) until its working set (its usage, for a
plan `by_usage`) fell by the bytes asked, EAGAIN, four times the bytes were written, or the monotonic budget
ran out (checked before each write: at most one step over). Targets outside the pods cgroup are refused. On v1 or
before 5.19 there is no ``memory.reclaim`` (``force_empty`` is no partial reclaim): `unavailable` says so.

Invariants: every OSError becomes a `SampleError` naming the file; nothing but ``memory.reclaim`` is written.
"""
from __future__ import annotations

import errno
import os
import time
from collections.abc import Callable
from dataclasses import dataclass

from evictd.adapters import procfs
from evictd.adapters.cgroups import (
    DRIVER_TO_QOS_CGROUPS,
    QOS_BESTEFFORT,
    QOS_BURSTABLE,
    V2_INACTIVE_FILE_KEY,
    CgroupReader,
    cgroup_folder,
    flat_keyed_value,
    join_cgroup,
    read_file,
)
from evictd.core.errors import SampleError
from evictd.core.memory_reclaim import BESTEFFORT, BURSTABLE, PODS, CacheHolder, ReclaimPlan

ACTIVE_FILE_KEY = b"active_file"
# Bytes written per target at most, in multiples of those asked: pages that come straight back lower nothing.
MAX_WRITTEN_FACTOR = 4
TIER_OF_QOS = {QOS_BESTEFFORT: BESTEFFORT, QOS_BURSTABLE: BURSTABLE}

V1_UNAVAILABLE = ("cgroup v1 has no memory.reclaim (memory.force_empty empties a whole cgroup: not a partial "
                  "reclaim)")
NO_RECLAIM_FILE = "the kernel has no memory.reclaim (Linux 5.19 or newer has it)"


@dataclass(frozen=True, slots=True)
class ReclaimOutcome:
    """What an attempt did: the working-set bytes it freed (per target, in order), how many writes, how long it took,
    and why it stopped ("done", "budget", "kernel could reclaim no more", "written 4x the bytes asked")."""

    freed_bytes: tuple[tuple[str, int], ...]
    writes: int
    elapsed_s: float
    stopped: str

    @property
    def total_freed_bytes(self) -> int:
        return sum(freed for _, freed in self.freed_bytes)


def write_cgroup_value(path: str, amount: int) -> bool:
    """Write the integer `amount` to the cgroup file at `path`; return False when the kernel answers EAGAIN (for
    ``memory.reclaim``: it reclaimed less). Raises SampleError for any other failure."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC)
    except OSError as exc:
        raise SampleError(path, exc.strerror or str(exc)) from exc
    try:
        os.write(fd, str(amount).encode())
    except OSError as exc:
        if exc.errno == errno.EAGAIN:
            return False
        raise SampleError(path, exc.strerror or str(exc)) from exc
    finally:
        os.close(fd)
    return True


class CgroupMemoryReclaimer:
    """Reads the pods' cache holders and carries out reclaim plans on a cgroup v2 hierarchy (see the module)."""

    def __init__(self, cgroups: CgroupReader, *, proc_root: str = "/proc",
                 monotonic: Callable[[], float] = time.monotonic,
                 write: Callable[[str, int], bool] = write_cgroup_value) -> None:
        self._cgroups = cgroups
        self._hierarchy = str(cgroups.layout.memory_hierarchy)
        self._pods = cgroups.pods_cgroup()
        self._qos = DRIVER_TO_QOS_CGROUPS[cgroups.layout.driver]
        self._proc_root = proc_root
        self._monotonic = monotonic
        self._write = write

    def unavailable(self) -> str | None:
        """Why this node cannot reclaim before evicting (None: it can)."""
        if self._cgroups.layout.version == 1:
            return V1_UNAVAILABLE
        if not os.path.isdir(self._folder(self._pods)):
            return f"no pods cgroup {self._pods!r}"
        if not os.path.exists(self._folder(self._pods) + "/memory.reclaim"):
            return NO_RECLAIM_FILE
        return None

    def holders(self) -> tuple[CacheHolder, ...]:
        """The QoS tiers' and the pods cgroup's active and inactive file (a tier without a cgroup is left out). Raises
        SampleError."""
        found = []
        for qos, name in self._qos.items():
            cgroup = join_cgroup(self._pods, name)
            if os.path.isdir(self._folder(cgroup)):
                found.append(self._holder(cgroup, TIER_OF_QOS[qos]))
        found.append(self._holder(self._pods, PODS))
        return tuple(found)

    def _holder(self, cgroup: str, tier: str) -> CacheHolder:
        path = self._folder(cgroup) + "/memory.stat"
        data = read_file(path)
        return CacheHolder(cgroup, tier, flat_keyed_value(path, data, ACTIVE_FILE_KEY),
                           flat_keyed_value(path, data, V2_INACTIVE_FILE_KEY))

    def refault_file_bytes(self) -> int | None:
        """The node's page cache refaulted since boot (/proc/vmstat), None when unreadable."""
        try:
            return procfs.vmstat_counts(self._proc_root).refault_file_bytes
        except SampleError:
            return None

    def reclaim(self, plan: ReclaimPlan) -> ReclaimOutcome:
        """Carry out `plan` within its budget (see the module). Raises SampleError on a failed read or write (what
        was freed before it is lost to the report, not to the node)."""
        for target in plan.targets:
            self._inside_pods(target.cgroup)
        start = self._monotonic()
        deadline = start + plan.budget_s
        freed: list[tuple[str, int]] = []
        writes = 0
        stopped = "done"
        for target in plan.targets:
            path = self._folder(target.cgroup) + "/memory.reclaim"
            before = self._fallen_from(target.cgroup, plan.by_usage)
            dropped = written = 0
            while dropped < target.bytes:
                if self._monotonic() >= deadline:
                    stopped = "budget"
                    break
                if written >= MAX_WRITTEN_FACTOR * target.bytes:
                    stopped = f"written {MAX_WRITTEN_FACTOR}x the bytes asked"
                    break
                amount = min(plan.step_bytes, target.bytes - dropped)
                writes += 1
                written += amount
                complete = self._write(path, amount)
                dropped = max(0, before - self._fallen_from(target.cgroup, plan.by_usage))
                if not complete:
                    stopped = "kernel could reclaim no more"
                    break
            freed.append((target.cgroup, dropped))
            if stopped == "budget":
                break
        return ReclaimOutcome(tuple(freed), writes, self._monotonic() - start, stopped)

    def _inside_pods(self, cgroup: str) -> None:
        if cgroup != self._pods and not cgroup.startswith(self._pods + "/"):
            raise SampleError(self._folder(cgroup), f"not below the pods cgroup {self._pods!r}: never reclaimed")

    def _folder(self, cgroup: str) -> str:
        return cgroup_folder(self._hierarchy, cgroup)

    def _stat(self, cgroup: str, key: bytes) -> int:
        path = self._folder(cgroup) + "/memory.stat"
        return flat_keyed_value(path, read_file(path), key)

    def _fallen_from(self, cgroup: str, by_usage: bool) -> int:
        """What a target's fall is counted in: its usage (`by_usage`), else its working set (usage less inactive file,
        what the memory signals count)."""
        folder = self._folder(cgroup)
        path = folder + "/memory.current"
        try:
            current = int(read_file(path))
        except ValueError as exc:
            raise SampleError(path, "not an integer") from exc
        return current if by_usage else max(0, current - self._stat(cgroup, V2_INACTIVE_FILE_KEY))
