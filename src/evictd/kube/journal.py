"""The eviction journal: decisions that must survive an unreachable API server and a restart.

An eviction is written to the journal *before* anything is sent to the API. Each step that succeeds is
recorded (condition written, DELETE sent, pod deleted, event recorded, stopped locally); the entry is dropped
only when every API step is done. When the API server is down, the journal keeps what was decided, the daemon
retries the missing steps every cycle, and a restarted daemon picks them up from the file. Finished evictions
are remembered for a while so the same pod is never evicted twice while it terminates.

The file is JSON, replaced atomically (write to a temporary `.journal-*` file, fsync, rename), so a crash leaves
either the old or the new journal, never half of one. Invariants, whatever is on disk:
- a journal file that cannot be used (unreadable, not UTF-8, not JSON, empty, truncated, written by a newer
  evictd, an entry with an unknown field or a value of the wrong type) never stops evictd: it is renamed aside
  to `<file>.corrupt-<UTC time>`, logged once as an error with the reason, counted (`on_corrupt`), and evictd
  starts with an empty journal, protecting the node at once;
- a write that fails (ENOSPC, a read-only or missing stateDir) never blocks or hides an eviction: the entry is
  kept in memory, the failure is logged (once per kind of error) and counted (`on_write_failure`), and the
  write is retried by `flush` on later cycles;
- temporary files left by a process killed during a write are removed when the journal is opened.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from dataclasses import MISSING, asdict, dataclass, field, fields, replace
from datetime import UTC, datetime
from typing import Any

from evictd.core.errors import SampleError, bounded_repr
from evictd.kube.atomic_file import move_aside, read_json_file, remove_temporaries, write_json_atomically

# How long a finished eviction is remembered (longer than any pod's termination grace period in practice).
REMEMBER_DONE_S = 600.0
# The file format this evictd writes and reads; a journal without a version is version 1 (evictd 0.1.0).
JOURNAL_VERSION = 1
TEMPORARY_PREFIX = ".journal-"
CORRUPT_SUFFIX = ".corrupt-"
# An entry is about 1 KiB and lives at most REMEMBER_DONE_S after it finished: a real journal holds a few
# hundred KiB at most. A bigger file is not one evictd wrote (and is not read into memory).
MAX_JOURNAL_BYTES = 16 << 20


@dataclass(frozen=True, slots=True)
class JournalEntry:
    """One decided eviction and how far it got."""

    uid: str
    namespace: str
    name: str
    signal: str
    grace_period_s: int
    message: str
    reason: str
    conditions: list[dict[str, Any]]
    annotations: dict[str, str]
    decided_at: float  # wall-clock seconds since the epoch
    condition_written: bool = False
    delete_sent: bool = False  # a DELETE went out (it may have gone through even when no answer came back)
    deleted: bool = False
    event_written: bool = False
    stopped_locally: bool = False
    done_at: float | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def api_done(self) -> bool:
        return self.condition_written and self.deleted and self.event_written


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_seconds(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _is_object(value: object) -> bool:
    return isinstance(value, dict) and all(isinstance(key, str) for key in value)


def _is_objects(value: object) -> bool:
    return isinstance(value, list) and all(_is_object(item) for item in value)


def _is_strings(value: object) -> bool:
    return isinstance(value, dict) and all(isinstance(k, str) and isinstance(v, str) for k, v in value.items())


# What a field of each annotation accepts in the file, and how an error says so.
ANNOTATION_TO_CHECK: dict[str, tuple[str, Callable[[object], bool]]] = {
    "str": ("a string", lambda value: isinstance(value, str)),
    "int": ("an integer", _is_int),
    "bool": ("true or false", lambda value: isinstance(value, bool)),
    "float": ("a number of seconds", _is_seconds),
    "float | None": ("a number of seconds or null", lambda value: value is None or _is_seconds(value)),
    "list[dict[str, Any]]": ("a list of objects", _is_objects),
    "dict[str, str]": ("an object of strings", _is_strings),
    "dict[str, Any]": ("an object", _is_object),
}


def upgraded(item: dict[str, Any]) -> dict[str, Any]:
    """An entry as written by evictd 0.1.0 before the eviction sequence changed, in today's fields.

    That version wrote the phase and a `status_written` flag; the status step it flagged is today's condition
    step, and the phase is no longer written.
    """
    item = {key: value for key, value in item.items() if key != "phase"}
    if "status_written" in item:
        item["condition_written"] = item.pop("status_written")
    return item


def entry_from_json(item: object, index: int) -> JournalEntry:
    """Return the entry of one item of the file's `evictions`; raise ValueError naming the item and field."""
    if not isinstance(item, dict):
        raise ValueError(f"entry {index} is not an object but {bounded_repr(item)}")
    item = upgraded(item)
    known = {f.name: f for f in fields(JournalEntry)}
    for name in item:
        if name not in known:
            raise ValueError(f"entry {index} has an unknown field {bounded_repr(name)} (written by a newer evictd?)")
    for name, spec in known.items():
        if name not in item:
            if spec.default is MISSING and spec.default_factory is MISSING:
                raise ValueError(f"entry {index} has no {name}")
            continue
        wanted, check = ANNOTATION_TO_CHECK[str(spec.type)]
        if not check(item[name]):
            raise ValueError(f"entry {index}: {name} must be {wanted}, not {bounded_repr(item[name])}")
    return JournalEntry(**item)


def entries_from_document(document: object) -> dict[str, JournalEntry]:
    """Return the entries of a parsed journal file by UID; raise ValueError saying what is wrong with it."""
    if not isinstance(document, dict):
        raise ValueError(f"not a JSON object but {bounded_repr(document)}")
    version = document.get("version", 1)
    if not _is_int(version) or version < 1:
        raise ValueError(f"version must be a positive integer, not {bounded_repr(version)}")
    if version > JOURNAL_VERSION:
        raise ValueError(f"written by a newer evictd (journal version {version}; this evictd reads "
                         f"{JOURNAL_VERSION})")
    for name in document:
        if name not in ("version", "evictions"):
            raise ValueError(f"unknown field {bounded_repr(name)} (written by a newer evictd?)")
    items = document.get("evictions")
    if not isinstance(items, list):
        raise ValueError(f"evictions must be a list, not {bounded_repr(items)}")
    entries = [entry_from_json(item, index) for index, item in enumerate(items)]
    return {entry.uid: entry for entry in entries}


def read_journal(path: str) -> dict[str, JournalEntry] | None:
    """Return the entries of the journal file at `path`, None when there is none; raise SampleError(path,
    reason) when the file cannot be used."""
    document = read_json_file(path, MAX_JOURNAL_BYTES)
    if document is None:
        return None
    try:
        return entries_from_document(document)
    except ValueError as exc:
        raise SampleError(path, str(exc)) from None


class _Unlogged:
    """The log of a journal nobody watches (tests that look only at the file): every line dropped."""

    def _drop(self, event: str, **fields: Any) -> None:
        return None

    info = warning = error = _drop


def _nothing() -> None:
    return None


class EvictionJournal:
    """Entries by pod UID, persisted to `path` (None keeps them in memory only, e.g. in dry-run).

    `log` receives the lines about the file (a bad file moved aside, stale temporary files, failed writes);
    `on_corrupt` and `on_write_failure` count those events (the daemon's metrics).
    """

    def __init__(
        self,
        path: str | None,
        *,
        log: Any = None,
        on_corrupt: Callable[[], None] = _nothing,
        on_write_failure: Callable[[], None] = _nothing,
        wall_clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self._path = path
        self._log = log if log is not None else _Unlogged()
        self._on_write_failure = on_write_failure
        self._entries: dict[str, JournalEntry] = {}
        self._unwritten = False  # the file is behind the entries in memory
        self._write_errno: int | None = None  # the error of the last failed write, logged once per kind
        self._failed_writes = 0
        if path is None:
            return
        remove_temporaries(os.path.dirname(path) or ".", TEMPORARY_PREFIX, self._log, "journal")
        try:
            self._entries = read_journal(path) or {}
        except SampleError as exc:
            on_corrupt()
            self._move_aside(path, exc.reason, wall_clock())

    def _move_aside(self, path: str, reason: str, now: datetime) -> None:
        try:
            target = move_aside(path, CORRUPT_SUFFIX, now)
        except OSError as exc:
            self._log.error("eviction journal unusable and not moved aside; starting with an empty journal",
                            path=path, reason=reason, error=exc.strerror)
            return
        self._log.error("eviction journal unusable: moved aside, starting with an empty journal", path=path,
                        reason=reason, moved_to=target)

    def _write(self) -> None:
        """Replace the file with the entries in memory; raise OSError."""
        assert self._path is not None
        document = {"version": JOURNAL_VERSION, "evictions": [asdict(entry) for entry in self._entries.values()]}
        write_json_atomically(self._path, document, prefix=TEMPORARY_PREFIX)

    def _save(self) -> bool:
        """Write the file; on failure keep the entries in memory for `flush`. Return whether it was written."""
        if self._path is None:
            return True
        try:
            self._write()
        except OSError as exc:
            self._unwritten = True
            self._failed_writes += 1
            self._on_write_failure()
            if exc.errno != self._write_errno:
                self._log.error("eviction journal not written: decisions kept in memory and carried out, the "
                                "write is retried every cycle", path=self._path, error=exc.strerror or str(exc))
            self._write_errno = exc.errno
            return False
        if self._unwritten:
            self._log.info("eviction journal written again", path=self._path, failed_writes=self._failed_writes)
        self._unwritten = False
        self._write_errno = None
        self._failed_writes = 0
        return True

    def flush(self) -> bool:
        """Write the file if an earlier write failed; return whether the file holds every entry."""
        return self._save() if self._unwritten else True

    def record(self, entry: JournalEntry) -> None:
        """Add a decided eviction (written to the file before returning, when the file can be written)."""
        self._entries[entry.uid] = entry
        self._save()

    def update(self, uid: str, **changes: Any) -> JournalEntry:
        """Record progress of the eviction of `uid`; return the updated entry."""
        entry = replace(self._entries[uid], **changes)
        self._entries[uid] = entry
        self._save()
        return entry

    def get(self, uid: str) -> JournalEntry | None:
        return self._entries.get(uid)

    def pending(self) -> list[JournalEntry]:
        """Entries with API steps still to do, oldest first."""
        return sorted((e for e in self._entries.values() if not e.api_done), key=lambda e: e.decided_at)

    def evicted_uids(self) -> frozenset[str]:
        """Every pod evicted (pending or recently finished): never a candidate again."""
        return frozenset(self._entries)

    def forget_finished(self, now: float) -> int:
        """Drop finished entries older than REMEMBER_DONE_S; return how many."""
        old = [uid for uid, e in self._entries.items() if e.done_at is not None and now - e.done_at > REMEMBER_DONE_S]
        for uid in old:
            del self._entries[uid]
        if old:
            self._save()
        return len(old)
