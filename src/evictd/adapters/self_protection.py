"""evictd's own protection from the node's memory pressure: its memory locked, its OOM score read and set.

The kernel's per-process knobs a node daemon guards itself with, as the kubelet does: `lock_memory`
(`mlockall(MCL_CURRENT | MCL_FUTURE | MCL_ONFAULT)`: pages locked as faulted in, so thrash cannot page the loop out;
without `MCL_ONFAULT` (4.4) reserved stacks and arenas would all become resident, so no lock then);
`read_oom_score_adj`/`set_oom_score_adj` (lowering needs CAP_SYS_RESOURCE); `raise_open_files_limit` (soft
RLIMIT_NOFILE to the hard one, as Go 1.19+ programs do: 1024 would leave kept descriptors room for ~128 pods); and
`memory_figures` (VmLck, VmRSS, and `Locked:` of smaps_rollup: what is resident and locked).

Invariants: locking is tried only where it cannot make a later allocation fail (`lock_refusal`); no kernel refusal
raises: each call returns what happened and why, and evictd runs on. Readers take `proc_root`.
"""

from __future__ import annotations

import ctypes
import errno
import os
import resource
from dataclasses import dataclass
from pathlib import Path

from evictd.core.errors import SampleError
from evictd.core.self_protection import KIB, OOM_SCORE_ADJ_MAX, OOM_SCORE_ADJ_MIN, lock_refusal

# mlockall(2) flags (asm-generic/mman-common.h; the same on x86 and arm64).
MCL_CURRENT = 1
MCL_FUTURE = 2
MCL_ONFAULT = 4
LOCK_FLAGS = MCL_CURRENT | MCL_FUTURE | MCL_ONFAULT
LOCK_FLAG_NAMES = "MCL_CURRENT|MCL_FUTURE|MCL_ONFAULT"
# Bit number of CAP_IPC_LOCK in the CapEff mask of /proc/<pid>/status (linux/capability.h).
CAP_IPC_LOCK = 14


@dataclass(frozen=True, slots=True)
class MemoryLock:
    """What `lock_memory` did: locked, or why not (`reason`, with the kernel's error name when it refused)."""

    locked: bool
    reason: str = ""
    error: str = ""  # EPERM, ENOMEM, EINVAL... when the kernel refused the call


@dataclass(frozen=True, slots=True)
class MemoryFigures:
    """The process's memory as the kernel counts it, in bytes."""

    rss_bytes: int  # VmRSS
    vm_locked_bytes: int  # VmLck: the address space marked locked, resident or not
    locked_resident_bytes: int  # smaps_rollup Locked: resident pages in locked mappings


@dataclass(frozen=True, slots=True)
class OomScoreAdj:
    """What `set_oom_score_adj` did: the value the kernel holds afterwards, and why the write failed, if it did."""

    value: int
    requested: int
    reason: str = ""
    error: str = ""

    @property
    def applied(self) -> bool:
        return not self.reason


# Why mlockall(2) fails, by errno, for what evictd passes it.
MLOCKALL_ERRORS = {
    errno.EPERM: "not permitted: no CAP_IPC_LOCK with RLIMIT_MEMLOCK 0, or a seccomp filter or security module "
                 "denies mlockall",
    errno.ENOMEM: "RLIMIT_MEMLOCK is below the process's size and it has no CAP_IPC_LOCK, or the kernel is out of "
                  "memory",
    errno.EINVAL: "the kernel has no MCL_ONFAULT (Linux before 4.4): locking without it would make every reserved "
                  "page resident",
}


def lock_memory(cap_ipc_lock: bool | None = None, proc_root: str = "/proc") -> MemoryLock:
    """Lock every page evictd has and will have; return what happened, never raise (`cap_ipc_lock` None: read from
    `proc_root`)."""
    try:
        if cap_ipc_lock is None:
            cap_ipc_lock = has_capability(CAP_IPC_LOCK, proc_root)
        limit = resource.getrlimit(resource.RLIMIT_MEMLOCK)[0]
    except (SampleError, OSError) as exc:
        return MemoryLock(False, f"cannot tell whether locking is safe: {exc}")
    refusal = lock_refusal(cap_ipc_lock, None if limit == resource.RLIM_INFINITY else limit)
    if refusal:
        return MemoryLock(False, refusal)
    try:
        mlockall = ctypes.CDLL(None, use_errno=True).mlockall  # the process's own symbols: its C library's
    except (AttributeError, OSError):
        return MemoryLock(False, "the C library has no mlockall")
    mlockall.argtypes = [ctypes.c_int]
    mlockall.restype = ctypes.c_int
    if mlockall(LOCK_FLAGS) == 0:
        return MemoryLock(True)
    code = ctypes.get_errno()
    return MemoryLock(False, MLOCKALL_ERRORS.get(code, os.strerror(code)), errno.errorcode.get(code, str(code)))


def has_capability(bit: int, proc_root: str = "/proc") -> bool:
    """Return True when this process has capability `bit` in its effective set. Raises SampleError."""
    path = Path(proc_root) / "self" / "status"
    try:
        mask = int(_status_field(path, "CapEff"), 16)
    except ValueError as exc:
        raise SampleError(str(path), "bad CapEff line") from exc
    return bool(mask >> bit & 1)


def raise_open_files_limit() -> tuple[int, int]:
    """Raise the soft RLIMIT_NOFILE to the hard one; return (soft before, soft now). An unlimited hard limit is
    left as it is (the kernel caps the soft one at fs.nr_open), and so is the limit when the kernel refuses."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or soft == hard:
        return soft, soft
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    except (OSError, ValueError):
        return soft, soft
    return soft, hard


def memory_figures(proc_root: str = "/proc") -> MemoryFigures:
    """VmRSS, VmLck and the resident locked memory of this process. Raises SampleError."""
    status = Path(proc_root) / "self" / "status"
    rollup = Path(proc_root) / "self" / "smaps_rollup"
    return MemoryFigures(rss_bytes=_kib_field(status, "VmRSS") * KIB, vm_locked_bytes=_kib_field(status, "VmLck") * KIB,
                         locked_resident_bytes=_kib_field(rollup, "Locked") * KIB)


def read_oom_score_adj(proc_root: str = "/proc") -> int:
    """This process's oom_score_adj. Raises SampleError."""
    path = Path(proc_root) / "self" / "oom_score_adj"
    text = _read(path).strip()
    try:
        value = int(text)
    except ValueError as exc:
        raise SampleError(str(path), f"not an integer: {text[:40]!r}") from exc
    if not OOM_SCORE_ADJ_MIN <= value <= OOM_SCORE_ADJ_MAX:
        raise SampleError(str(path), f"out of range: {value}")
    return value


def set_oom_score_adj(requested: int, proc_root: str = "/proc") -> OomScoreAdj:
    """Write `requested` to this process's oom_score_adj; return the value held afterwards and why a write failed.
    Raises SampleError only when the value cannot be read back."""
    path = Path(proc_root) / "self" / "oom_score_adj"
    reason = code = ""
    try:
        with open(path, "w", encoding="ascii") as handle:
            handle.write(str(requested))
    except OSError as exc:
        code = errno.errorcode.get(exc.errno or 0, "")
        reason = exc.strerror or str(exc)
        if exc.errno in (errno.EACCES, errno.EPERM):
            reason = "lowering it needs CAP_SYS_RESOURCE, which this process lacks"
    return OomScoreAdj(value=read_oom_score_adj(proc_root), requested=requested, reason=reason, error=code)


def _status_field(path: Path, name: str) -> str:
    for line in _read(path).splitlines():
        key, sep, rest = line.partition(":")
        if sep and key == name:
            return rest.strip()
    raise SampleError(str(path), f"no {name} line")


def _kib_field(path: Path, name: str) -> int:
    value = _status_field(path, name)
    number, _, unit = value.partition(" ")
    if unit.strip() != "kB" or not number.isdigit():
        raise SampleError(str(path), f"{name} is not '<n> kB': {value!r}")
    return int(number)


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="ascii", errors="replace")
    except OSError as exc:
        raise SampleError(str(path), exc.strerror or str(exc)) from exc
