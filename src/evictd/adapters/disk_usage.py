"""Disk and inode usage of pods' local ephemeral volumes and logs, cached and refreshed incrementally.
Counted as upstream ``pkg/volume/util/fs/fs_unix.go`` ``DiskUsage`` (what ``du -s -x -B1`` / ``--inodes`` print):
every entry ``lstat``'ed (symlinks counted, not followed); bytes are ``st_blocks * 512``; inodes count entries;
hard links once per measurement; other devices neither counted nor entered (only that entry, not Go's rest of the
directory); vanished entries ignored; unreadable parts left out and named in ``unreadable`` (a lower bound, where
upstream gives up on the volume). No project quotas. Which folders: `evictd.adapters.pod_dirs`.

Cache: one record per directory (identity, blocks, links, subdirectories); each call ``lstat``s known directories
and lists again only those whose inode or mtime changed, that aged past their jittered ``max_age_s``, or whose mtime
was within ``RACY_WINDOW_NS`` of their listing (git's "racy clean"). So every reading behind a value at t was taken
after ``t - max_age_s``. ``walk`` pauses after its ``WalkBudget`` of entries and resumes later, mid-directory too,
publishing only whole trees; ``usage`` is a walk without budget. ``start_cycle`` forgets paths unasked for
``keep_cycles``. Invariants: one tree, one device per figure; a figure that left something out is not cached; an
unreadable root raises ``SampleError`` and drops its tree. Not thread-safe: the disk walker's thread owns it.
"""

from __future__ import annotations

import math
import os
import stat
import time
import zlib
from collections.abc import Callable, Generator, Iterator, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass
from types import MappingProxyType

from evictd.clock import SYSTEM_CLOCK, Clock
from evictd.core.errors import SampleError, os_error_reason

# st_blocks counts 512-byte units on Linux whatever the block size (stat(2)), as upstream multiplies.
STAT_BLOCK_BYTES = 512

# The kubelet recomputes volume usage every volumeStatsAggPeriod, 1 minute by default.
DEFAULT_MAX_AGE_S = 60.0

# Entries of pods deleted a few cycles ago are dropped; a pod skipped for one cycle keeps its tree.
DEFAULT_KEEP_CYCLES = 3

# Spread of per-directory age limits below max_age_s, so trees first measured together drift apart.
AGE_JITTER_FRACTION = 0.25

# Timestamps come from the coarse kernel clock (1-10 ms behind); a second also absorbs small wall-clock steps.
RACY_WINDOW_NS = 1_000_000_000

# Errors that mean "this path is not there (any more)": a missing entry or a component that is not a folder.
_GONE = (FileNotFoundError, NotADirectoryError)

# Paths in messages are cut past this many characters (a deeply nested one exceeds PATH_MAX and goes into logs).
MAX_SHOWN_PATH_CHARS = 240


class WalkBudget:
    """How many more entries the walks of one pass may look at (`math.inf`: no limit); refilled by the caller, a
    walk that finds it spent pauses."""

    __slots__ = ("entries_left",)

    def __init__(self, entries: float) -> None:
        self.entries_left = entries

    def spend(self, entries: int) -> None:
        """Count `entries` looked at (the budget may go below zero: the next check pauses the walk)."""
        self.entries_left -= entries


# A walk paused on its budget yields; its return value is the tree's usage (None: the path does not exist).
Walk = Generator[None, None, "DirUsage | None"]


@dataclass(frozen=True, slots=True)
class DirUsage:
    """Disk usage of a directory tree: allocated bytes, entries, when its oldest part was read, and `unreadable`
    (its first part and count; None: the whole tree was read)."""

    used_bytes: int
    inodes_used: int
    measured_at_monotonic: float
    unreadable: str | None = None


class _Unreadable:
    """The parts of one walk that could not be read: the first, and how many."""

    __slots__ = ("count", "first")

    def __init__(self) -> None:
        self.first: str | None = None
        self.count = 0

    def add(self, path: str, exc: OSError) -> None:
        if self.first is None:
            self.first = f"{shown_path(path)}: {os_error_reason(exc)}"
        self.count += 1

    def summary(self) -> str | None:
        if self.first is None:
            return None
        return self.first if self.count == 1 else f"{self.first} (and {self.count - 1} more)"


def shown_path(path: str) -> str:
    """Return `path`, its middle cut out when longer than MAX_SHOWN_PATH_CHARS."""
    if len(path) <= MAX_SHOWN_PATH_CHARS:
        return path
    keep = MAX_SHOWN_PATH_CHARS // 2
    return f"{path[:keep]}...({len(path) - 2 * keep} characters)...{path[-keep:]}"


@dataclass(frozen=True, slots=True)
class _DirRecord:
    """What one listing of one directory found (the directory's own blocks are read afresh each time)."""

    inode: int
    mtime_ns: int
    scanned_at_monotonic: float
    age_limit_s: float
    racy: bool
    files_bytes: int  # entries with a single link that are not directories
    files_inodes: int
    linked_bytes: Mapping[int, int]  # inode -> bytes of entries with several links
    subdirs: tuple[str, ...]


class _Tree:
    """The cached records of one asked path, all on `device`: `checks` (per directory but the root, the stat it was
    counted with), `root_check`, `fresh_until` (the first age limit), `racy`. Only `last_asked_cycle` changes."""

    __slots__ = ("checks", "device", "fresh_until", "last_asked_cycle", "racy", "records", "result", "root_check")

    def __init__(self, device: int, records: Mapping[str, _DirRecord], last_asked_cycle: int, result: DirUsage,
                 dir_blocks: tuple[int, ...]) -> None:
        self.device = device
        self.records = records
        self.last_asked_cycle = last_asked_cycle
        self.result = result
        keys = [
            (path, (record.inode, record.mtime_ns, blocks, device))
            for (path, record), blocks in zip(records.items(), dir_blocks, strict=True)
        ]
        self.root_check = keys[0][1] if keys else None
        self.checks = tuple(keys[1:])
        self.fresh_until = min(
            (record.scanned_at_monotonic + record.age_limit_s for record in records.values()), default=-math.inf
        )
        self.racy = any(record.racy for record in records.values())


class DiskUsageCache:
    """Measures directory trees, reusing the records of directories that did not change (`max_age_s`: relisted at
    least this often; `keep_cycles`: forget unasked paths; `clock`: monotonic; `scandir`: injectable)."""

    def __init__(self, *, max_age_s: float = DEFAULT_MAX_AGE_S, keep_cycles: int = DEFAULT_KEEP_CYCLES,
                 clock: Clock = SYSTEM_CLOCK,
                 scandir: Callable[[str], AbstractContextManager[Iterator[os.DirEntry[str]]]] = os.scandir) -> None:
        self._max_age_s = max_age_s
        self._keep_cycles = keep_cycles
        self._clock = clock
        self._scandir = scandir
        self._cycle = 0
        self._trees: dict[str, _Tree] = {}

    def cached_paths(self) -> frozenset[str]:
        return frozenset(self._trees)

    def start_cycle(self) -> int:
        """Begin a housekeeping cycle; forget paths not asked for in the last `keep_cycles` cycles (return how many)."""
        self._cycle += 1
        oldest_kept = self._cycle - self._keep_cycles
        stale = [path for path, tree in self._trees.items() if tree.last_asked_cycle < oldest_kept]
        for path in stale:
            del self._trees[path]
        return len(stale)

    def usage(self, path: str) -> DirUsage | None:
        """Return the disk usage of the tree at `path`, or None if it does not exist (a non-directory counts as
        one entry). Raises SampleError(path, reason) when `path` itself cannot be read, dropping its cache."""
        walk = self.walk(path, WalkBudget(math.inf))
        try:
            next(walk)
        except StopIteration as done:
            return done.value  # type: ignore[no-any-return]  # the Walk generator returns DirUsage | None
        walk.close()
        raise AssertionError("a walk without a budget paused")  # pragma: no cover - never spends its budget

    def walk(self, path: str, budget: WalkBudget) -> Walk:
        """Measure the tree at `path` as `usage` does, yielding whenever `budget` is spent; drive it with ``next()``
        after refilling; its return value is the usage (None: no such path). Closing it closes its listing."""
        now = self._clock.monotonic()
        try:
            root_stat = os.lstat(path)
        except OSError as exc:
            self._trees.pop(path, None)
            if isinstance(exc, _GONE):
                return None
            raise SampleError(path, os_error_reason(exc)) from exc
        budget.spend(1)
        if not stat.S_ISDIR(root_stat.st_mode):
            self._trees.pop(path, None)
            return DirUsage(root_stat.st_blocks * STAT_BLOCK_BYTES, 1, now)
        old = self._trees.get(path)
        # Steady state: every directory as listed, none too old: the same figure, one lstat per directory.
        if old is not None and _unchanged(old, root_stat, now):
            budget.spend(len(old.checks))
            old.last_asked_cycle = self._cycle
            return old.result
        old_records = old.records if old is not None and old.device == root_stat.st_dev else {}
        records, result, blocks = yield from self._measure(path, root_stat, old_records, now, budget)
        if result.unreadable is not None:
            self._trees.pop(path, None)  # measured afresh next time: a steady-state check would hide the error
        else:
            self._trees[path] = _Tree(root_stat.st_dev, MappingProxyType(records), self._cycle, result, blocks)
        return result

    # --- Walking ----------------------------------------------------------------------------------

    def _measure(self, root: str, root_stat: os.stat_result, old_records: Mapping[str, _DirRecord], now: float,
                 budget: WalkBudget) -> Generator[None, None, tuple[dict[str, _DirRecord], DirUsage, tuple[int, ...]]]:
        """Return the fresh records of the tree at `root`, its usage and each directory's blocks, pausing on budget."""
        device = root_stat.st_dev
        records: dict[str, _DirRecord] = {}
        blocks: list[int] = []
        plain_bytes = 0
        plain_inodes = 0
        linked: dict[int, int] = {}
        oldest = now
        unreadable = _Unreadable()
        # An explicit stack, not recursion: a pod can create trees deeper than Python's recursion limit.
        pending: list[tuple[str, os.stat_result]] = [(root, root_stat)]
        while pending:
            while budget.entries_left <= 0:
                yield
            dir_path, dir_stat = pending.pop()
            plain_bytes += dir_stat.st_blocks * STAT_BLOCK_BYTES
            plain_inodes += 1
            previous = old_records.get(dir_path)
            children = None
            if previous is not None and self._still_valid(previous, dir_stat, now):
                budget.spend(len(previous.subdirs))
                children = self._subdir_stats(dir_path, previous, device)
            if children is not None and previous is not None:
                record = previous
            else:
                scanned, children = yield from self._scan(dir_path, dir_stat, device, now, budget, unreadable)
                if scanned is None:
                    continue  # vanished after its parent was listed, or unreadable: counted as an empty directory
                record = scanned
            records[dir_path] = record
            blocks.append(dir_stat.st_blocks)
            plain_bytes += record.files_bytes
            plain_inodes += record.files_inodes
            linked.update(record.linked_bytes)
            oldest = min(oldest, record.scanned_at_monotonic)
            pending.extend(children)
        usage = DirUsage(plain_bytes + sum(linked.values()), plain_inodes + len(linked), oldest, unreadable.summary())
        return records, usage, tuple(blocks)

    @staticmethod
    def _still_valid(record: _DirRecord, dir_stat: os.stat_result, now: float) -> bool:
        return (
            not record.racy
            and record.inode == dir_stat.st_ino
            and record.mtime_ns == dir_stat.st_mtime_ns
            and now - record.scanned_at_monotonic < record.age_limit_s
        )

    @staticmethod
    def _subdir_stats(dir_path: str, record: _DirRecord, device: int) -> list[tuple[str, os.stat_result]] | None:
        """Return the known subdirectories' stats, or None if one is no longer as listed (or unreadable)."""
        children: list[tuple[str, os.stat_result]] = []
        for name in record.subdirs:
            child = os.path.join(dir_path, name)
            try:
                child_stat = os.lstat(child)
            except OSError:
                return None
            if not stat.S_ISDIR(child_stat.st_mode) or child_stat.st_dev != device:
                return None  # replaced or mounted over without the listing changing: list the parent again
            children.append((child, child_stat))
        return children

    def _scan(
        self, dir_path: str, dir_stat: os.stat_result, device: int, now: float, budget: WalkBudget,
        unreadable: _Unreadable,
    ) -> Generator[None, None, tuple[_DirRecord | None, list[tuple[str, os.stat_result]]]]:
        """List `dir_path`; return its record (None if it vanished or cannot be listed) and its subdirectories'
        stats; unreadable entries go to `unreadable`. Pauses mid-listing whenever `budget` is spent."""
        files_bytes = 0
        files_inodes = 0
        linked: dict[int, int] = {}
        subdirs: list[str] = []
        children: list[tuple[str, os.stat_result]] = []
        # dir_stat precedes the listing: a change in the same tick would leave the mtime equal (the racy rule).
        listing_started_ns = time.time_ns()
        # Entries are counted in a local and charged to the budget in bulk: the loop stays as cheap as before.
        allowed = budget.entries_left
        seen = 0
        try:
            with self._scandir(dir_path) as entries:
                for entry in entries:
                    if seen >= allowed:
                        budget.spend(seen)
                        seen = 0
                        while budget.entries_left <= 0:
                            yield
                        allowed = budget.entries_left
                    seen += 1
                    try:
                        entry_stat = entry.stat(follow_symlinks=False)
                    except FileNotFoundError:
                        continue  # deleted after the directory was read, as upstream ignores it
                    except OSError as exc:  # e.g. a path past PATH_MAX (ENAMETOOLONG): left out, as du does
                        unreadable.add(entry.path, exc)
                        continue
                    if entry_stat.st_dev != device:
                        continue  # a mount point: neither counted nor descended into
                    if stat.S_ISDIR(entry_stat.st_mode):
                        subdirs.append(entry.name)
                        children.append((os.path.join(dir_path, entry.name), entry_stat))
                    elif entry_stat.st_nlink > 1:
                        linked[entry_stat.st_ino] = entry_stat.st_blocks * STAT_BLOCK_BYTES
                    else:
                        files_bytes += entry_stat.st_blocks * STAT_BLOCK_BYTES
                        files_inodes += 1
        except _GONE:
            budget.spend(seen)
            return None, []
        except OSError as exc:
            budget.spend(seen)
            unreadable.add(dir_path, exc)
            return None, []
        budget.spend(seen)
        record = _DirRecord(
            inode=dir_stat.st_ino,
            mtime_ns=dir_stat.st_mtime_ns,
            scanned_at_monotonic=now,
            age_limit_s=self._age_limit_s(dir_path),
            # A recent mtime is not trusted next time (see listing_started_ns).
            racy=dir_stat.st_mtime_ns >= listing_started_ns - RACY_WINDOW_NS,
            files_bytes=files_bytes,
            files_inodes=files_inodes,
            linked_bytes=MappingProxyType(linked),
            subdirs=tuple(subdirs),
        )
        return record, children

    def _age_limit_s(self, dir_path: str) -> float:
        """Return this directory's re-listing period: max_age_s less a fixed, path-derived fraction."""
        spread = (zlib.crc32(os.fsencode(dir_path)) & 0xFFFF) / 0x10000
        return self._max_age_s * (1.0 - AGE_JITTER_FRACTION * spread)


def _unchanged(tree: _Tree, root_stat: os.stat_result, now: float) -> bool:
    """True when every directory of `tree` is as counted (identity, mtime, blocks), none too old, none racy."""
    if tree.racy or now >= tree.fresh_until or tree.root_check is None:
        return False
    if (root_stat.st_ino, root_stat.st_mtime_ns, root_stat.st_blocks, root_stat.st_dev) != tree.root_check:
        return False
    lstat, isdir = os.lstat, stat.S_ISDIR
    for dir_path, counted in tree.checks:
        try:
            dir_stat = lstat(dir_path)
        except OSError:
            return False  # gone or unreadable: the full walk decides what that means
        if not isdir(dir_stat.st_mode) or (dir_stat.st_ino, dir_stat.st_mtime_ns, dir_stat.st_blocks,
                                           dir_stat.st_dev) != counted:
            return False
    return True
