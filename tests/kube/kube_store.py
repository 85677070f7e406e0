"""Versioned object storage with a bounded change history: the etcd + watch cache part of the test API server.

Every write takes the next global resourceVersion (an etcd revision) and appends a `Change` to the history;
watchers read the history after their resourceVersion and wait on a condition for new changes. The history is
bounded (`history_limit`) and can be cut with `compact()`: a watch or a consistent list from a resourceVersion
older than `oldest_watchable_rv` is expired (410 Gone), as with a compacted etcd or a watch cache that moved on.
`snapshot_at(rv)` rebuilds the objects of a past resourceVersion by undoing later changes (for continue tokens
and `resourceVersionMatch=Exact`).

Objects are stored and returned as deep copies, so callers never share state with storage (`json_copy`: JSON
trees copied ten times faster than `copy.deepcopy`, which 1 MB tenant pods made the bulk of a large list).
"""

from __future__ import annotations

import copy
import marshal
import threading
import uuid
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from kube_status import expired

DEFAULT_HISTORY_LIMIT = 1000  # changes kept for watch resumption before the oldest are compacted away
FIRST_RESOURCE_VERSION = 1000  # a fresh cluster's etcd revision is never 0; clients treat "0" specially

Key = tuple[str, str]  # (namespace or "", name)


def json_copy(value: Any) -> Any:
    """A deep copy of a tree of dicts, lists and scalars (through `marshal`, in C); anything else through
    `copy.deepcopy`."""
    try:
        return marshal.loads(marshal.dumps(value))
    except ValueError:  # an object marshal does not write (a subclass, a datetime): copied the slow way
        return copy.deepcopy(value)


def rfc3339(moment: datetime | None = None) -> str:
    """metav1.Time as the server writes it: UTC, whole seconds."""
    return (moment or datetime.now(UTC)).strftime("%Y-%m-%dT%H:%M:%SZ")


def rfc3339_micro(moment: datetime | None = None) -> str:
    """metav1.MicroTime as the server writes it (event times)."""
    return (moment or datetime.now(UTC)).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


@dataclass(frozen=True, slots=True)
class Change:
    """One committed write: type is ADDED, MODIFIED or DELETED; `previous` is None for ADDED."""

    rv: int
    type: str
    resource: str
    key: Key
    object: dict[str, Any]
    previous: dict[str, Any] | None


class Store:
    """Thread-safe objects by resource and key, the global resourceVersion and the change history."""

    def __init__(self, history_limit: int = DEFAULT_HISTORY_LIMIT) -> None:
        self._cond = threading.Condition(threading.RLock())
        self._objects: dict[str, dict[Key, dict[str, Any]]] = {}
        self._rv = FIRST_RESOURCE_VERSION
        self._history: deque[Change] = deque()
        self._history_limit = history_limit
        self._oldest_watchable_rv = FIRST_RESOURCE_VERSION
        self._closed = False

    @property
    def lock(self) -> threading.Condition:
        """The storage lock: hold it to read-modify-write atomically (it is re-entrant)."""
        return self._cond

    @property
    def resource_version(self) -> int:
        with self._cond:
            return self._rv

    @property
    def oldest_watchable_rv(self) -> int:
        with self._cond:
            return self._oldest_watchable_rv

    def get(self, resource: str, key: Key) -> dict[str, Any] | None:
        with self._cond:
            found = self._objects.get(resource, {}).get(key)
            return json_copy(found) if found is not None else None

    def list(self, resource: str, namespace: str = "", *, copies: bool = True) -> tuple[list[dict[str, Any]], int]:
        """Objects of a resource (in one namespace, or all when empty) sorted by key, and the current rv.
        `copies=False`: the stored objects themselves, for a caller that copies what it keeps and changes nothing."""
        with self._cond:
            items = [json_copy(obj) if copies else obj for key, obj in sorted(self._objects.get(resource, {}).items())
                     if not namespace or key[0] == namespace]
            return items, self._rv

    def snapshot_at(self, resource: str, rv: int, namespace: str = "", *, copies: bool = True) -> list[dict[str, Any]]:
        """The objects as they were at resourceVersion `rv`; raises 410 if the history no longer reaches it."""
        with self._cond:
            if rv < self._oldest_watchable_rv:
                raise expired(f"too old resource version: {rv} ({self._oldest_watchable_rv})")
            state = dict(self._objects.get(resource, {}))
            for change in reversed(self._history):
                if change.rv <= rv:
                    break
                if change.resource != resource:
                    continue
                if change.previous is None:
                    state.pop(change.key, None)
                else:
                    state[change.key] = change.previous
            return [json_copy(obj) if copies else obj for key, obj in sorted(state.items())
                    if not namespace or key[0] == namespace]

    def _commit(self, kind: str, resource: str, key: Key, obj: dict[str, Any], previous: dict[str, Any] | None) -> int:
        self._rv += 1
        # A DELETED event carries the last state stamped with the deletion's revision, as etcd watchers send it.
        obj["metadata"]["resourceVersion"] = str(self._rv)
        if kind != "DELETED":
            self._objects.setdefault(resource, {})[key] = obj
        else:
            self._objects.get(resource, {}).pop(key, None)
        self._history.append(Change(self._rv, kind, resource, key, json_copy(obj),
                                    json_copy(previous) if previous is not None else None))
        while len(self._history) > self._history_limit:
            self._oldest_watchable_rv = self._history.popleft().rv
        self._cond.notify_all()
        return self._rv

    def create(self, resource: str, key: Key, obj: dict[str, Any]) -> dict[str, Any] | None:
        """Store a new object (uid and creationTimestamp filled when absent); None if the key is taken."""
        with self._cond:
            if key in self._objects.get(resource, {}):
                return None
            stored = json_copy(obj)
            meta = stored.setdefault("metadata", {})
            meta.setdefault("uid", str(uuid.uuid4()))
            meta.setdefault("creationTimestamp", rfc3339())
            self._commit("ADDED", resource, key, stored, None)
            return json_copy(stored)

    def update(self, resource: str, key: Key, obj: dict[str, Any]) -> dict[str, Any]:
        """Replace an existing object with a new resourceVersion (callers check existence under `lock`)."""
        with self._cond:
            previous = self._objects[resource][key]
            stored = json_copy(obj)
            self._commit("MODIFIED", resource, key, stored, previous)
            return json_copy(stored)

    def delete(self, resource: str, key: Key) -> dict[str, Any] | None:
        """Remove an object; returns its last state, or None when it did not exist."""
        with self._cond:
            previous = self._objects.get(resource, {}).get(key)
            if previous is None:
                return None
            self._commit("DELETED", resource, key, json_copy(previous), previous)
            return json_copy(previous)

    def compact(self, rv: int | None = None) -> int:
        """Forget the history up to `rv` (default: now); watches from older versions then get 410 Gone."""
        with self._cond:
            target = self._rv if rv is None else min(rv, self._rv)
            while self._history and self._history[0].rv <= target:
                self._history.popleft()
            self._oldest_watchable_rv = max(self._oldest_watchable_rv, target)
            return self._oldest_watchable_rv

    def changes_after(
        self, rv: int, timeout_s: float, stop: Callable[[], bool] = lambda: False
    ) -> list[Change]:
        """Changes with a resourceVersion above `rv`, waiting up to `timeout_s` for the first one.

        Raises ApiError 410 when `rv` is older than the history reaches.
        """
        with self._cond:
            if rv < self._oldest_watchable_rv:
                raise expired(f"too old resource version: {rv} ({self._oldest_watchable_rv})")
            if self._rv <= rv and not self._closed and not stop():
                self._cond.wait(timeout_s)
            if rv < self._oldest_watchable_rv:
                raise expired(f"too old resource version: {rv} ({self._oldest_watchable_rv})")
            return [change for change in self._history if change.rv > rv]

    def wait_for_rv(self, rv: int, timeout_s: float) -> bool:
        """Wait until the store reaches `rv` (a list with a future resourceVersion); False on timeout."""
        with self._cond:
            return self._cond.wait_for(lambda: self._rv >= rv, timeout_s)

    def wake_watchers(self) -> None:
        """Wake every waiting watcher (after a fault switch or on shutdown) so it re-checks its state."""
        with self._cond:
            self._cond.notify_all()

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()
