"""The procfs adapter: machine memory capacity, the task limit and the number of running tasks.

Job: read the three node-wide numbers the kubelet takes from ``/proc`` for eviction signals:

* ``mem_total_bytes`` - ``MemTotal`` of ``/proc/meminfo``, the node memory capacity (cAdvisor's
  machine info ``MemoryCapacity``, the "limit" of the root cgroup in ``memory.available``); any other
  field of ``/proc/meminfo`` in bytes with ``meminfo_bytes`` (``inactive_file_bytes``: the fresh inactive file
  the memcg notifiers arm the root's levels with);
* ``pid_limit`` - the smaller of ``kernel.pid_max`` and ``kernel.threads-max``, both system-wide limits
  on tasks (``pkg/kubelet/stats/pidlimit/pidlimit_linux.go`` ``Stats``: ``Rlimit.MaxPID``);
* ``running_tasks`` - the task count after the ``/`` in the fourth field of ``/proc/loadavg``
  (``runningTaskCount``: ``Rlimit.NumOfRunningProcesses``). The kubelet prefers it to ``sysinfo(2)``,
  whose ``procs`` is a 16-bit field that wraps past 65535 tasks (kubernetes/kubernetes#107107).

And, for evictd's memory stall signals, a memory pressure file: ``pressure/memory`` (node-wide) or a v2 cgroup's
``memory.pressure``, with ``memory_pressure`` (None where the kernel has no PSI: the file is absent); and, for their
stall gate (`evictd.core.stall_gate`), ``global_reclaim_scan_pages``: the pages reclaim scanned for the machine's
shortage since boot, from ``vmstat``; ``vmstat_counts`` reads it with, for the refault signal
(`evictd.core.refault`), the page cache refaulted and activated since boot, from the same file at once.

Invariants:

* Every function takes ``root`` (the procfs mount, ``/proc``) so tests point it at fixture files.
* Any failure - missing file, permission, malformed content - raises ``SampleError(path, reason)``.
  Unlike the kubelet, which silently uses whichever of ``pid_max``/``threads-max`` it could read, evictd
  needs both: a limit read from one file alone may be too high, and evictd never guesses.
* Only reads; one small file per value (two for ``pid_limit``).
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
    """Return the ``some`` and ``full`` lines of the PSI file at `path`; None when the kernel has none there (no
    file: no PSI, or a cgroup v1 hierarchy; EOPNOTSUPP: PSI disabled at boot with ``psi=0``). Raises SampleError
    for a file that cannot be read or parsed."""
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


# /proc/vmstat's counts of pages scanned by reclaim that is not a cgroup's own (mm/vmscan.c counts them only when
# !cgroup_reclaim(sc)): kswapd's and direct reclaim's, and khugepaged's where the kernel has it (6.9 and later).
# Not pgscan_proactive (memory.reclaim, asked for, not a shortage), nor pgscan_anon/pgscan_file (every reclaim).
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


# The page cache refaulted (re-read after reclaim dropped it) and activated at once since boot: Linux 5.9 split the
# counts into _file and _anon (anonymous pages refault from swap: not the page cache thrash this signal measures);
# before, the one count was the page cache's. A kernel with neither (before 3.15) has no refault signal.
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
    """Return the number of tasks (threads included) on the machine, from ``<root>/loadavg``.

    Raises SampleError.
    """
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


def _read_text(path: Path) -> str:
    """The file's content as ASCII text; raises SampleError. Read as bytes (`read_file`: os.open + os.read, no text
    file object): MemTotal read 17 us against 24 us through `Path.read_text` on this project's host, and every
    confirming reading reads it."""
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
