"""The eviction journal: decisions that must survive an unreachable API server and a restart.

An eviction is written to the journal *before* anything is sent to the API. Each step that succeeds is
recorded (condition written, DELETE sent, pod deleted, event recorded, stopped locally); the entry is dropped
only when every
API step is done. When the API server is down, the journal keeps what was decided, the daemon retries the
missing steps every cycle, and a restarted daemon picks them up from the file. Finished evictions are
remembered for a while so the same pod is never evicted twice while it terminates.

The file is JSON, replaced atomically (write to a temporary file, fsync, rename), so a crash leaves either
the old or the new journal, never half of one. A write that fails (a full or read-only disk) raises
SampleError naming the file, and is reported to `on_write_error` (the daemon counts it in a metric).
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from evictd.core.errors import SampleError

# How long a finished eviction is remembered (longer than any pod's termination grace period in practice).
REMEMBER_DONE_S = 600.0


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


def upgraded(item: dict[str, Any]) -> dict[str, Any]:
    """An entry as written by evictd 0.1.0 before the eviction sequence changed, in today's fields.

    That version wrote the phase and a `status_written` flag; the status step it flagged is today's condition
    step, and the phase is no longer written.
    """
    item = {key: value for key, value in item.items() if key != "phase"}
    if "status_written" in item:
        item["condition_written"] = item.pop("status_written")
    return item


class EvictionJournal:
    """Entries by pod UID, persisted to `path` (None keeps them in memory only, e.g. in dry-run)."""

    def __init__(self, path: str | None, on_write_error: Callable[[], None] | None = None) -> None:
        self._path = path
        self._on_write_error = on_write_error
        self._entries: dict[str, JournalEntry] = {}
        if path is not None and os.path.exists(path):
            self._entries = self._load(path)

    @staticmethod
    def _load(path: str) -> dict[str, JournalEntry]:
        try:
            with open(path, encoding="utf-8") as handle:
                raw = json.load(handle)
            return {item["uid"]: JournalEntry(**upgraded(item)) for item in raw["evictions"]}
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise SampleError(path, f"unreadable eviction journal: {exc}") from None

    def _save(self) -> None:
        """Write the journal file (raises SampleError when it cannot)."""
        if self._path is None:
            return
        try:
            self._write(self._path)
        except OSError as exc:
            if self._on_write_error is not None:
                self._on_write_error()
            raise SampleError(self._path, f"eviction journal not written: {exc.strerror or exc}") from exc

    def _write(self, path: str) -> None:
        folder = os.path.dirname(path) or "."
        os.makedirs(folder, exist_ok=True)
        document = {"evictions": [asdict(entry) for entry in self._entries.values()]}
        handle, temporary = tempfile.mkstemp(prefix=".journal-", dir=folder)
        try:
            with os.fdopen(handle, "w", encoding="utf-8") as stream:
                json.dump(document, stream)
                stream.flush()
                os.fsync(stream.fileno())
            os.replace(temporary, path)
        except BaseException:
            if os.path.exists(temporary):
                os.unlink(temporary)
            raise

    def record(self, entry: JournalEntry) -> None:
        """Add a decided eviction (persisted before returning; raises SampleError when it cannot be)."""
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
