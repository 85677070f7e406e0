"""Kept descriptors for the cgroup files a cycle reads every time: open once, re-read with ``pread`` at offset 0.

Each such file is a kernfs ``seq_file`` whose ``show`` runs again on a read at offset 0, so a kept descriptor reads
the value of now for a third of open + read + close. Checked fresh, each on a real kernel (tests/adapters):
v1 ``memory.usage_in_bytes``, ``memory.stat``, ``memory.limit_in_bytes``, ``pids.current`` (NOT ``cgroup.procs`` or
``tasks``: v1 hands out the PID list built at open), and the pods cgroup's ``memory.kmem.usage_in_bytes``; v2
``memory.current``, ``memory.stat``, ``memory.max``, ``pids.current``.

Invariants: only `KEPT_FILE_NAMES` (and that kmem file) on ``cgroup``/``cgroup2`` mounts are kept (`keeps_files_in`;
fixtures on tmpfs would read stale); `read` returns None instead of failing, so the caller's open + read reports as
without this cache, and a failing descriptor is closed first (a re-created cgroup is a new node); at most ``cap``
descriptors (`kept_files_cap`), `sweep` closes those unread since the last sweep, `close` all; O_CLOEXEC; one lock
around look-up, ``pread`` and close, so no descriptor number is reused under a reader.
"""

from __future__ import annotations

import os
import resource
import threading
from collections.abc import Sequence

# The files a cycle reads whose kept descriptors read fresh at offset 0 (see the module docstring).
V1_KEPT_FILE_NAMES = frozenset({"memory.usage_in_bytes", "memory.stat", "memory.limit_in_bytes", "pids.current"})
V2_KEPT_FILE_NAMES = frozenset({"memory.current", "memory.stat", "memory.max", "pids.current"})
KEPT_FILE_NAMES = V1_KEPT_FILE_NAMES | V2_KEPT_FILE_NAMES

# Filesystem types of cgroup v1 hierarchies and of the v2 one in /proc/self/mounts.
CGROUP_FILESYSTEM_TYPES = frozenset({"cgroup", "cgroup2"})
MOUNTS = "/proc/self/mounts"

# At most this many kept descriptors whatever the limit: four per pod, room for ~4,000 pods.
KEPT_FILES_MAX = 16384
# The share of RLIMIT_NOFILE's soft limit the cache may take (the rest: sockets, eventfds, recorder, plain reads).
KEPT_FILES_SHARE_OF_LIMIT = 0.5

# cgroupfs files are tiny (memory.stat is ~2 KiB); one pread of this size nearly always gets all.
PREAD_CHUNK_BYTES = 16384

_OPEN_FLAGS = os.O_RDONLY | os.O_CLOEXEC


def kept_files_cap() -> int:
    """Return how many descriptors a `KeptFiles` may keep here: KEPT_FILES_MAX, or half the soft RLIMIT_NOFILE
    when that is lower."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return KEPT_FILES_MAX
    return max(0, min(KEPT_FILES_MAX, int(soft * KEPT_FILES_SHARE_OF_LIMIT)))


def keeps_files_in(folder: str, mounts: str = MOUNTS) -> bool:
    """True when `folder` lies in a cgroup hierarchy (its mount in `mounts` is of type ``cgroup`` or ``cgroup2``):
    only there have kept descriptors been shown to read fresh. False when the mount table cannot be read."""
    try:
        with open(mounts, encoding="utf-8", errors="replace") as table:
            lines = table.read().splitlines()
    except OSError:
        return False
    target = os.path.realpath(folder)
    best, best_type = "", ""
    for line in lines:
        fields = line.split()
        if len(fields) < 3:
            continue
        # Mount points escape blanks in octal (\040); cgroup mounts have none, and a wrong match only keeps open.
        point, fs_type = fields[1].replace("\\040", " "), fields[2]
        inside = target == point or target.startswith(point.rstrip("/") + "/")
        if inside and len(point) >= len(best):
            best, best_type = point, fs_type
    return best_type in CGROUP_FILESYSTEM_TYPES


class KeptFiles:
    """Descriptors kept open across cycles, one per file path, re-read with ``pread`` at offset 0."""

    __slots__ = ("_cap", "_fds", "_lock", "_read_since_sweep")

    def __init__(self, cap: int) -> None:
        self._cap = cap
        self._fds: dict[str, int] = {}
        self._read_since_sweep: set[str] = set()
        self._lock = threading.Lock()

    def read(self, path: str) -> bytes | None:
        """Return the content of `path` through its kept descriptor (opened now if needed), or None when not kept
        (cap reached, or open or read failed: the caller's own open reports or reads a re-created cgroup)."""
        with self._lock:
            return self._read_locked(path)

    def read_many(self, paths: Sequence[str]) -> list[bytes | None]:
        """`read` of each of `paths` in turn under one taking of the lock (a cgroup's files of one reading): the
        content of each, or None where `read` would return None."""
        with self._lock:
            # Hot path: each file kept, one pread getting it whole; from the first that is not, read as `read` does.
            fds, pread = self._fds, os.pread
            got: list[bytes | None] = []
            try:
                for path in paths:
                    data = pread(fds[path], PREAD_CHUNK_BYTES, 0)
                    if len(data) == PREAD_CHUNK_BYTES:
                        break
                    got.append(data)
            except (KeyError, OSError):
                pass
            read = len(got)
            if read == len(paths):
                self._read_since_sweep.update(paths)
                return got
            self._read_since_sweep.update(paths[:read])
            got.extend(self._read_locked(path) for path in paths[read:])
            return got

    def _read_locked(self, path: str) -> bytes | None:
        """`read` with the lock held."""
        fd = self._fds.get(path)
        if fd is not None:
            # The hot path of a cycle, one call per file: `_pread_all` inlined for its common case.
            try:
                data: bytes | None = os.pread(fd, PREAD_CHUNK_BYTES, 0)
            except OSError:
                data = None
            if data is not None and len(data) == PREAD_CHUNK_BYTES:
                data = _pread_all(fd)
            if data is not None:
                self._read_since_sweep.add(path)
                return data
            # Its cgroup was removed (ENODEV); one made again under the path is reached only by a new open, below.
            del self._fds[path]
            os.close(fd)
        if len(self._fds) >= self._cap:
            return None
        try:
            fd = os.open(path, _OPEN_FLAGS)
        except OSError:
            return None
        data = _pread_all(fd)
        if data is None:
            os.close(fd)
            return None
        self._fds[path] = fd
        self._read_since_sweep.add(path)
        return data

    def sweep(self) -> int:
        """Close the descriptors of files not read since the previous sweep; return how many were closed."""
        with self._lock:
            gone = self._fds.keys() - self._read_since_sweep  # a set difference, in C: ~4,000 paths each cycle
            for path in gone:
                os.close(self._fds.pop(path))
            self._read_since_sweep.clear()
            return len(gone)

    def close(self) -> None:
        """Close every kept descriptor (the cache stays usable: files are opened again when read)."""
        with self._lock:
            for fd in self._fds.values():
                os.close(fd)
            self._fds.clear()
            self._read_since_sweep.clear()

    def __del__(self) -> None:
        # A reader dropped without `close` (tests build many) leaves no descriptor behind, as a file object would.
        for fd in self._fds.values():
            os.close(fd)
        self._fds.clear()


def _pread_all(fd: int) -> bytes | None:
    """Return everything `fd` holds from offset 0, or None if reading fails."""
    try:
        data = os.pread(fd, PREAD_CHUNK_BYTES, 0)
        if len(data) < PREAD_CHUNK_BYTES:  # seq_file hands out all it has up to the buffer size in one read
            return data
        chunks = [data]
        while chunk := os.pread(fd, PREAD_CHUNK_BYTES, sum(map(len, chunks))):
            chunks.append(chunk)
        return b"".join(chunks)
    except OSError:
        return None
