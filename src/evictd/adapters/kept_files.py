"""Kept descriptors for the cgroup files a cycle reads every time: open once, re-read with ``pread`` at offset 0.

Job: make re-reading the same cgroupfs files cheap. Every such file is a kernfs ``seq_file`` whose ``show``
runs again whenever a read starts at offset 0, so ``os.pread(fd, n, 0)`` on a descriptor kept from the last
cycle returns the value of now, for about a third of the CPU of open + read + close.

Which files hold, checked by changing each value between two ``pread`` calls on one kept descriptor and
comparing with a fresh open (docs/measured-figures.md, "Kept descriptors"):

* cgroup v1 (this project's host, kernel 6.18): ``memory.usage_in_bytes``, ``memory.stat``,
  ``memory.limit_in_bytes``, ``pids.current`` are fresh. ``cgroup.procs`` and ``tasks`` are NOT: v1 keeps the
  PID list it built for an open file and hands it out again, so they are always opened anew;
* cgroup v2 (the user-mode Linux guest of tests/uml, kernel 6.1): ``memory.current``, ``memory.stat``,
  ``memory.max``, ``pids.current`` (and ``cgroup.procs``, ``memory.events``, not kept) are fresh.

Invariants:

* Only paths the caller chose are kept (`CgroupReader` asks for `KEPT_FILE_NAMES` in hierarchies that are
  ``cgroup`` or ``cgroup2`` mounts, `keeps_files_in`); a fixture tree on tmpfs or ext4 is never read through
  kept descriptors, since a file replaced by rename would read stale there.
* `read` returns None instead of failing: the caller then reads the file by open + read + close, so a failure
  is reported exactly as without this cache. A kept descriptor whose ``pread`` fails is closed first: a
  removed cgroup's files fail with ENODEV, and a cgroup re-created under the same path is a new kernfs node
  that only a new open reaches, so the fallback open reads the new cgroup (or fails with ENOENT as before).
* At most ``cap`` descriptors are kept (`kept_files_cap`: well under RLIMIT_NOFILE); past it, files are read
  by open + read + close. `sweep` closes the descriptors of files not read since the previous sweep (pods
  that went away); `close` closes all. Every descriptor is opened with O_CLOEXEC.
* Thread-safe: one lock around look-up, ``pread`` and close, so that no descriptor is closed (and its number
  reused for another file) while another thread reads it.
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

# At most this many kept descriptors whatever the limit allows: a 1,000-pod node needs about 4,000 (three
# memory files and pids.current per pod), so this leaves room for ~4,000 pods.
KEPT_FILES_MAX = 16384
# The share of RLIMIT_NOFILE's soft limit the cache may take: the other half stays for sockets, notifiers'
# eventfds, the flight recorder and the files read by open + read + close.
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
        """Return the content of `path` read through its kept descriptor (opened now if it has none), or None
        when it is not kept (the cap is reached, or opening or reading failed: the caller opens the file itself,
        which reports the failure or reads a re-created cgroup)."""
        with self._lock:
            return self._read_locked(path)

    def read_many(self, paths: Sequence[str]) -> list[bytes | None]:
        """`read` of each of `paths` in turn under one taking of the lock (a cgroup's files of one reading): the
        content of each, or None where `read` would return None."""
        with self._lock:
            # The hot path of a cycle: each file kept, its one pread getting the whole file. From the first file where
            # that is not so (not kept yet, a failure, a longer file), each is read as `read` reads it.
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
            # Its cgroup was removed (ENODEV). A cgroup made again under the same path is a new node that only
            # a new open reaches: try once below.
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
