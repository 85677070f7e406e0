"""The eviction journal: decisions that must survive an unreachable API server and a restart.

An eviction is journaled *before* anything is sent; each step that succeeds is recorded and the entry dropped only
when every API step is done, so an API outage or a restart loses nothing and retries the rest. Finished evictions
are remembered a while so no pod is evicted twice. In memory entries are immutable and typed (`ApiStep`,
`Outcome`); in the file steps are flags and outcomes sit in `extra` (`entry_to_json`, `entry_from_json`). The file
is JSON, replaced atomically; an unusable file or a failed write never stops or hides an eviction
(docs/state-and-recording.md, "State").
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import Any, Final

from evictd.clock import SYSTEM_CLOCK, Clock
from evictd.core.engine import PodCondition
from evictd.core.errors import SampleError, bounded_repr
from evictd.core.pods import FrozenMap
from evictd.kube.atomic_file import move_aside, read_json_file, remove_temporaries, write_json_atomically
from evictd.log import Log
from evictd.state_dir import CORRUPT_SUFFIX, JOURNAL_TEMPORARY_PREFIX

# How long a finished eviction is remembered (longer than any pod's termination grace period in practice).
REMEMBER_DONE_S = 600.0
# The file format this evictd writes and reads; a journal without a version is version 1 (evictd 0.1.0).
JOURNAL_VERSION = 1
# An entry is ~1 KiB and lives at most REMEMBER_DONE_S once done: a bigger file is not evictd's (and is not read).
MAX_JOURNAL_BYTES = 16 << 20


class ApiStep(StrEnum):
    """The API writes of an eviction, in the order they are made; the value is the file's flag for it."""

    CONDITION = "condition_written"  # the DisruptionTarget condition (none for a local-storage eviction)
    DELETION = "deleted"  # the pod's deletion went through
    EVENT = "event_written"  # the Evicted event


class Outcome(StrEnum):
    """How the API settled an eviction by refusing one of its steps; the key of the file's `extra` object."""

    ENDED = "ended"  # the pod was gone or replaced before evictd's DELETE: nothing was evicted, the entry ended
    DELETED = "deleted"  # a DELETE sent in an earlier attempt had gone through: the pod was evicted


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
    conditions: tuple[PodCondition, ...]
    annotations: FrozenMap[str, str]
    decided_at: float  # wall-clock seconds since the epoch
    done: frozenset[ApiStep] = frozenset()
    delete_sent: bool = False  # a DELETE went out (it may have gone through even when no answer came back)
    stopped_locally: bool = False
    done_at: float | None = None
    # Sent as an Eviction (`pods/{name}/eviction`) rather than condition and DELETE: `softEvictionsThroughEvictionAPI`.
    eviction_api: bool = False
    # The API's answer ("404: pods \"web\" not found") to a step it refused, by what that answer settled.
    outcomes: FrozenMap[Outcome, str] = field(default_factory=FrozenMap)

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def api_done(self) -> bool:
        return len(self.done) == len(ApiStep)

    @property
    def under_way(self) -> bool:
        """The pod's end is under way: a DELETE went out or through, or it was stopped on the node (not while the
        first writes were refused or unanswered and nothing stopped it)."""
        return self.delete_sent or ApiStep.DELETION in self.done or self.stopped_locally

    def settled(self, outcome: Outcome, answer: str, now: float) -> JournalEntry:
        """This entry once the API's `answer` to a step settled it as `outcome` at `now`."""
        outcomes = FrozenMap({**self.outcomes, outcome: answer})
        if outcome is Outcome.DELETED:
            return replace(self, done=self.done | {ApiStep.DELETION}, outcomes=outcomes)
        return replace(self, done=frozenset(ApiStep), done_at=now, outcomes=outcomes)


def entry_to_json(entry: JournalEntry) -> dict[str, object]:
    """Return the file's object for `entry` (its fields in the order evictd has always written them)."""
    converted = {"conditions": [condition.to_json() for condition in entry.conditions],
                 "annotations": dict(entry.annotations),
                 "extra": {str(outcome): answer for outcome, answer in entry.outcomes.items()},
                 **{str(step): step in entry.done for step in ApiStep}}
    document = {name: converted[name] if name in converted else getattr(entry, name) for name in ENTRY_FIELDS}
    if not entry.eviction_api:  # written only when set: the journal of an evictd without the option is unchanged
        del document["eviction_api"]
    return document


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_seconds(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _is_object(value: object) -> bool:
    return isinstance(value, dict) and all(isinstance(key, str) for key in value)


_Check = tuple[str, Callable[[object], bool], bool]
_STRING: Final = ("a string", lambda value: isinstance(value, str))
_FLAG: Final = ("true or false", lambda value: isinstance(value, bool))
# Each field of an entry in the file, in write order: what it must hold and whether it must be there.
ENTRY_FIELDS: dict[str, _Check] = {
    **dict.fromkeys(("uid", "namespace", "name", "signal"), (*_STRING, True)),
    "grace_period_s": ("an integer", _is_int, True),
    **dict.fromkeys(("message", "reason"), (*_STRING, True)),
    "conditions": ("a list of objects", lambda value: isinstance(value, list) and all(map(_is_object, value)), True),
    "annotations": ("an object of strings", lambda value: isinstance(value, dict) and all(
        isinstance(k, str) and isinstance(v, str) for k, v in value.items()), True),
    "decided_at": ("a number of seconds", _is_seconds, True),
    **dict.fromkeys(("condition_written", "delete_sent", "deleted", "event_written", "stopped_locally",
                     "eviction_api"), (*_FLAG, False)),
    "done_at": ("a number of seconds or null", lambda value: value is None or _is_seconds(value), False),
    "extra": ("an object", _is_object, False),
}
# The fields of a pod condition in the file, likewise.
CONDITION_FIELDS: dict[str, _Check] = {
    "type": (*_STRING, True), "status": (*_STRING, True), "reason": (*_STRING, False), "message": (*_STRING, False),
    "observedGeneration": ("an integer", _is_int, False),
}


def upgraded(item: dict[str, Any]) -> dict[str, Any]:
    """An entry as evictd 0.1.0 wrote it (phase and `status_written`), in today's fields (the condition step)."""
    item = {key: value for key, value in item.items() if key != "phase"}
    if "status_written" in item:
        item["condition_written"] = item.pop("status_written")
    return item


def _check_fields(item: dict[str, Any], table: dict[str, _Check], where: str) -> None:
    """Raise ValueError naming `where` and the field when `item` does not hold what `table` says."""
    for name in item:
        if name not in table:
            raise ValueError(f"{where} has an unknown field {bounded_repr(name)} (written by a newer evictd?)")
    for name, (wanted, check, required) in table.items():
        if name not in item:
            if required:
                raise ValueError(f"{where} has no {name}")
        elif not check(item[name]):
            raise ValueError(f"{where}: {name} must be {wanted}, not {bounded_repr(item[name])}")


def _condition_from_json(item: dict[str, Any], where: str) -> PodCondition:
    """Return the pod condition of one object of an entry's `conditions`; raise ValueError naming it."""
    _check_fields(item, CONDITION_FIELDS, where)
    return PodCondition(type=item["type"], status=item["status"], reason=item.get("reason", ""),
                        message=item.get("message", ""), observed_generation=item.get("observedGeneration", 0))


def _outcomes_from_json(extra: dict[str, Any], index: int) -> FrozenMap[Outcome, str]:
    """Return the outcomes of an entry's `extra` object; raise ValueError naming what is wrong."""
    for name, answer in extra.items():
        if name not in set(Outcome):
            raise ValueError(f"entry {index}: extra has an unknown outcome {bounded_repr(name)} (written by a newer "
                             "evictd?)")
        if not isinstance(answer, str):
            raise ValueError(f"entry {index}: extra.{name} must be a string, not {bounded_repr(answer)}")
    return FrozenMap((Outcome(name), answer) for name, answer in extra.items())


def entry_from_json(item: object, index: int) -> JournalEntry:
    """Return the entry of one item of the file's `evictions`; raise ValueError naming the item and field."""
    if not isinstance(item, dict):
        raise ValueError(f"entry {index} is not an object but {bounded_repr(item)}")
    item = upgraded(item)
    _check_fields(item, ENTRY_FIELDS, f"entry {index}")
    plain = {name: value for name, value in item.items() if name in JournalEntry.__dataclass_fields__}
    return JournalEntry(**{
        **plain,
        "conditions": tuple(_condition_from_json(condition, f"entry {index}: conditions[{number}]")
                            for number, condition in enumerate(item["conditions"])),
        "annotations": FrozenMap(item["annotations"]),
        "done": frozenset(step for step in ApiStep if item.get(str(step), False)),
        "outcomes": _outcomes_from_json(item.get("extra", {}), index),
    })


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


class EvictionJournal:
    """Entries by pod UID, persisted to `path` (None: memory only, e.g. dry-run). `log` gets the lines about the file;
    `on_corrupt` and `on_write_failure` count those events."""

    def __init__(self, path: str | None, *, log: Log, on_corrupt: Callable[[], None] = lambda: None,
                 on_write_failure: Callable[[], None] = lambda: None, clock: Clock = SYSTEM_CLOCK) -> None:
        self._path = path
        self._log = log
        self._on_write_failure = on_write_failure
        self._entries: dict[str, JournalEntry] = {}
        self._unwritten = False  # the file is behind the entries in memory
        self._write_errno: int | None = None  # the error of the last failed write, logged once per kind
        self._failed_writes = 0
        if path is None:
            return
        remove_temporaries(os.path.dirname(path) or ".", JOURNAL_TEMPORARY_PREFIX, self._log, "journal")
        try:
            self._entries = read_journal(path) or {}
        except SampleError as exc:
            on_corrupt()
            try:
                target = move_aside(path, CORRUPT_SUFFIX, clock.wall())
            except OSError as error:
                self._log.error("eviction journal unusable and not moved aside; starting with an empty journal",
                                path=path, reason=exc.reason, error=error.strerror)
            else:
                self._log.error("eviction journal unusable: moved aside, starting with an empty journal", path=path,
                                reason=exc.reason, moved_to=target)

    def _save(self) -> bool:
        """Write the file; on failure keep the entries in memory for `flush`. Return whether it was written."""
        if self._path is None:
            return True
        document = {"version": JOURNAL_VERSION, "evictions": [entry_to_json(entry) for entry in self._entries.values()]}
        try:
            write_json_atomically(self._path, document, prefix=JOURNAL_TEMPORARY_PREFIX)
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

    def record(self, entry: JournalEntry) -> JournalEntry:
        """Add a decided eviction, or its progress (written to the file before returning, when the file can be
        written); return it."""
        self._entries[entry.uid] = entry
        self._save()
        return entry

    def note_step_done(self, uid: str, step: ApiStep) -> JournalEntry:
        """Record that `step` of the eviction of `uid` went through; return the updated entry."""
        entry = self._entries[uid]
        return self.record(replace(entry, done=entry.done | {step}))

    def note_delete_sent(self, uid: str) -> JournalEntry:
        """Record that a DELETE of the pod of `uid` goes out (before it is sent); return the updated entry."""
        return self.record(replace(self._entries[uid], delete_sent=True))

    def note_stopped_locally(self, uid: str) -> JournalEntry:
        """Record that the pod of `uid` was stopped through the container runtime; return the updated entry."""
        return self.record(replace(self._entries[uid], stopped_locally=True))

    def note_settled(self, uid: str, outcome: Outcome, answer: str, now: float) -> JournalEntry:
        """Record the API's `answer` that settled the eviction of `uid` as `outcome`; return the updated entry."""
        return self.record(self._entries[uid].settled(outcome, answer, now))

    def note_finished(self, uid: str, now: float) -> JournalEntry:
        """Record that every API step of the eviction of `uid` is done, at `now`; return the updated entry."""
        return self.record(replace(self._entries[uid], done_at=now))

    def forget(self, uid: str) -> None:
        """Drop the entry of `uid`: nothing was evicted (an Eviction API request without an answer) and the pod stays
        a candidate."""
        if self._entries.pop(uid, None) is not None:
            self._save()

    def get(self, uid: str) -> JournalEntry:
        return self._entries[uid]

    def pending(self) -> list[JournalEntry]:
        """Entries with API steps still to do, oldest first."""
        return sorted((e for e in self._entries.values() if not e.api_done), key=lambda e: e.decided_at)

    def evicted_uids(self) -> frozenset[str]:
        """Every pod evicted (pending or recently finished)."""
        return frozenset(self._entries)

    def under_way_uids(self) -> frozenset[str]:
        """The pods whose eviction's end is under way: never candidates again. One that reached neither the API's
        deletion nor the node stays a candidate, evicted again when ranked first (as the kubelet's local kill never
        leaves it running)."""
        return frozenset(uid for uid, entry in self._entries.items() if entry.under_way)

    def forget_finished(self, now: float) -> None:
        old = [uid for uid, e in self._entries.items() if e.done_at is not None and now - e.done_at > REMEMBER_DONE_S]
        for uid in old:
            del self._entries[uid]
        if old:
            self._save()
