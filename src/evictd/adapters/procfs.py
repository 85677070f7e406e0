"""The procfs adapter: machine memory capacity, the task limit, running tasks, PSI and /proc/vmstat counts.

What the kubelet takes from ``/proc``: ``mem_total_bytes`` (``MemTotal``, cAdvisor's ``MemoryCapacity``; other
fields with ``meminfo_bytes``), ``pid_limit`` (the smaller of ``kernel.pid_max`` and ``kernel.threads-max``:
pidlimit_linux.go ``Stats``) and ``running_tasks`` (``/proc/loadavg``'s fourth field, as ``runningTaskCount``:
``sysinfo(2)``'s 16-bit ``procs`` wraps, kubernetes#107107). For evictd's stall signals: ``memory_pressure`` (a PSI
file; None where the kernel has none) and ``vmstat_counts`` (global reclaim scans for the stall gate, page cache
refaults and activations for the refault signal); ``has_cap_sys_resource`` for PSI trigger windows.

Invariants: every function takes ``root`` (``/proc``) so tests use fixtures; any failure raises
``SampleError(path, reason)``; ``pid_limit`` needs both files (one alone may be too high; never guessed); reads only.
"""

from __future__ import annotations

import errno
import os
import re
from dataclasses import dataclass
from pathlib import Path

from evictd.adapters.cgroups import UINT64_DIGITS, flat_keyed_value, read_file
from evictd.core.errors import SampleError
from evictd.core.summary import PsiData, PsiStats

# /proc/meminfo reports sizes in kibibytes, labelled "kB".
MEMINFO_UNIT_BYTES = 1024
MEMINFO_UNIT = "kB"

# /proc/loadavg: "0.58 0.88 0.51 3/99 10295" - the fourth field is running/total tasks.
LOADAVG_FIELDS = 5
LOADAVG_TASKS_FIELD = 3

# Bit number of CAP_SYS_RESOURCE in the CapEff mask of /proc/<pid>/status (linux/capability.h).
CAP_SYS_RESOURCE = 24


def meminfo_bytes(field: str, root: str | Path = "/proc") -> int:
    """Return the `field` line (``MemTotal``, ``SwapFree``...) of ``<root>/meminfo`` in bytes. Raises SampleError."""
    path = Path(root) / "meminfo"
    text = _read_text(path)
    # The field's line found directly (MemTotal is the first of ~50 lines); a key is a whole line's start.
    key = field + ":"
    if text.startswith(key):
        at = 0
    else:
        at = text.find("\n" + key) + 1
        if not at:
            raise SampleError(str(path), f"no {field} line")
    end = text.find("\n", at)
    rest = text[at + len(key):] if end < 0 else text[at + len(key):end]
    parts = rest.split()
    if len(parts) != 2 or parts[1] != MEMINFO_UNIT:
        raise SampleError(str(path), f"{field} is not '<n> kB': {rest.strip()!r}")
    return _uint(path, parts[0]) * MEMINFO_UNIT_BYTES


# A PSI line (Documentation/accounting/psi.rst): "some avg10=0.22 avg60=0.17 avg300=1.11 total=58761459".
_PSI_LINE = re.compile(r"(some|full) avg10=(\d{1,3}\.\d\d) avg60=(\d{1,3}\.\d\d) avg300=(\d{1,3}\.\d\d) total=(\d+)")


def memory_pressure(path: str | Path) -> PsiStats | None:
    """Return the ``some`` and ``full`` lines of the PSI file at `path`; None when the kernel has none there (no file,
    or EOPNOTSUPP with ``psi=0``). Raises SampleError for a file that cannot be read or parsed."""
    path = Path(path)
    try:
        text = path.read_text(encoding="ascii")
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as exc:
        if exc.errno == errno.EOPNOTSUPP:
            return None
        raise SampleError(str(path), exc.strerror or type(exc).__name__) from exc
    except UnicodeDecodeError as exc:
        raise SampleError(str(path), f"not ASCII text: {exc.reason}") from exc
    lines = {}
    for line in text.splitlines():
        found = _PSI_LINE.fullmatch(line.strip())
        if found is None:
            raise SampleError(str(path), f"not a PSI line: {line[:80]!r}")
        kind, avg10, avg60, avg300, total = found.groups()
        lines[kind] = PsiData(_uint(path, total), float(avg10), float(avg60), float(avg300))
    if set(lines) != {"some", "full"}:
        raise SampleError(str(path), "not both a some and a full line")
    return PsiStats(some=lines["some"], full=lines["full"])


# Pages scanned by reclaim that is not a cgroup's own (mm/vmscan.c, !cgroup_reclaim): kswapd, direct, khugepaged
# (6.9+). Not pgscan_proactive (memory.reclaim) nor pgscan_anon/pgscan_file (every reclaim).
GLOBAL_SCAN_KEYS = (b"pgscan_kswapd", b"pgscan_direct")
OPTIONAL_GLOBAL_SCAN_KEYS = (b"pgscan_khugepaged",)


def global_reclaim_scan_pages(root: str | Path = "/proc") -> int:
    """Return the pages reclaim scanned for the machine's shortage since boot (GLOBAL_SCAN_KEYS, plus
    OPTIONAL_GLOBAL_SCAN_KEYS where present) of ``<root>/vmstat``. Raises SampleError."""
    path = str(Path(root) / "vmstat")
    return _global_scan_pages(path, read_file(path))


def _has_key(data: bytes, key: bytes) -> bool:
    return data.startswith(key + b" ") or b"\n" + key + b" " in data


def _global_scan_pages(path: str, data: bytes) -> int:
    keys = [*GLOBAL_SCAN_KEYS, *(key for key in OPTIONAL_GLOBAL_SCAN_KEYS if _has_key(data, key))]
    return sum(flat_keyed_value(path, data, key) for key in keys)


# Page cache refaulted and activated since boot: the _file counts since 5.9 (_anon refaults from swap), the one count
# before; none before 3.15.
REFAULT_KEYS = (b"workingset_refault_file", b"workingset_refault")
ACTIVATE_KEYS = (b"workingset_activate_file", b"workingset_activate")
# /proc/vmstat counts pages; the Summary counts bytes.
PAGE_BYTES = os.sysconf("SC_PAGE_SIZE")


@dataclass(frozen=True, slots=True)
class VmstatCounts:
    """The counts of one read of /proc/vmstat evictd follows: global reclaim scans (pages), page cache refaulted and
    activated (bytes; None where the kernel has no such count)."""

    global_scan_pages: int
    refault_file_bytes: int | None
    activate_file_bytes: int | None


def _first_count_bytes(path: str, data: bytes, keys: tuple[bytes, ...]) -> int | None:
    key = next((key for key in keys if _has_key(data, key)), None)
    return None if key is None else flat_keyed_value(path, data, key) * PAGE_BYTES


def vmstat_counts(root: str | Path = "/proc") -> VmstatCounts:
    """Return the global reclaim scans (`global_reclaim_scan_pages`) and the page cache refaulted and activated
    since boot (REFAULT_KEYS, ACTIVATE_KEYS: the first present) of one read of ``<root>/vmstat``. Raises
    SampleError."""
    path = str(Path(root) / "vmstat")
    data = read_file(path)
    return VmstatCounts(_global_scan_pages(path, data), _first_count_bytes(path, data, REFAULT_KEYS),
                        _first_count_bytes(path, data, ACTIVATE_KEYS))


def inactive_file_bytes(root: str | Path = "/proc") -> int:
    """Return ``Inactive(file)`` of ``<root>/meminfo`` in bytes: the machine's inactive page cache as it is now (the
    root memory cgroup's ``total_inactive_file`` counts the same pages, up to 2 s late). Raises SampleError."""
    return meminfo_bytes("Inactive(file)", root)


def mem_total_bytes(root: str | Path = "/proc") -> int:
    """Return ``MemTotal`` of ``<root>/meminfo`` in bytes. Raises SampleError."""
    return meminfo_bytes("MemTotal", root)


def pid_limit(root: str | Path = "/proc") -> int:
    """Return min(``kernel.pid_max``, ``kernel.threads-max``) read below ``root``. Raises SampleError."""
    kernel = Path(root) / "sys" / "kernel"
    return min(_uint(path, _read_text(path)) for path in (kernel / "pid_max", kernel / "threads-max"))


def running_tasks(root: str | Path = "/proc") -> int:
    """Return the number of tasks (threads included) on the machine, from ``<root>/loadavg``. Raises SampleError."""
    path = Path(root) / "loadavg"
    text = _read_text(path)
    fields = text.split()
    if len(fields) < LOADAVG_FIELDS:
        raise SampleError(str(path), f"expected {LOADAVG_FIELDS} fields: {text.strip()!r}")
    running, sep, total = fields[LOADAVG_TASKS_FIELD].partition("/")
    if not sep or "/" in total:
        raise SampleError(str(path), f"fourth field is not 'running/total': {fields[LOADAVG_TASKS_FIELD]!r}")
    # The running count is not used, but a garbled one means the whole line cannot be trusted.
    _uint(path, running)
    return _uint(path, total)


def has_cap_sys_resource(root: str | Path = "/proc") -> bool:
    """Whether this process has CAP_SYS_RESOURCE in its effective set (``<root>/self/status``'s CapEff). Raises
    SampleError."""
    path = Path(root) / "self" / "status"
    for line in read_file(str(path)).decode("ascii", errors="replace").splitlines():  # Name: may be any bytes
        if line.startswith("CapEff:"):
            try:
                mask = int(line.split(":", 1)[1].strip(), 16)
            except ValueError as exc:
                raise SampleError(str(path), f"bad CapEff line {line!r}") from exc
            return bool(mask >> CAP_SYS_RESOURCE & 1)
    raise SampleError(str(path), "no CapEff line")


def _read_text(path: Path) -> str:
    """The file's content as ASCII text, read as bytes (cheaper; MemTotal is read by every confirming reading)."""
    try:
        return read_file(str(path)).decode("ascii")
    except UnicodeDecodeError as exc:
        raise SampleError(str(path), f"not ASCII text: {exc.reason}") from exc


def _uint(path: Path, text: str) -> int:
    stripped = text.strip()
    # str.isdigit() would accept non-ASCII digits; signs, spaces and '_' (which int() accepts) are garbage.
    if not (stripped.isascii() and stripped.isdigit()):
        raise SampleError(str(path), f"not an unsigned integer: {stripped[:60]!r}")
    if len(stripped) > UINT64_DIGITS:  # no kernel writes such a number (and int() refuses past 4300 digits)
        raise SampleError(str(path), f"out of the uint64 range: {stripped[:60]!r}...")
    return int(stripped)
