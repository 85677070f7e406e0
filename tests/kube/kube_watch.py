"""Watch streams: which events a watcher gets, in the order and shape kube-apiserver sends them.

`WatchRequest` holds the parsed options of one watch. `initial_events` gives the synthetic ADDED events a watch
without a resourceVersion (or "0", or with sendInitialEvents) starts with; `events_for` turns stored changes into
the events of a filtered watcher the way the watch cache does: an object that starts matching the selectors
arrives as ADDED, one that stops matching as DELETED (its previous state, stamped with the change's
resourceVersion). `bookmark` builds BOOKMARK objects, which carry only kind, apiVersion and metadata.

`WatchStreamMixin` serves the stream itself: a watch from a compacted resourceVersion gets HTTP 200 and one
ERROR event (410 Expired, "too old resource version: <rv> (<oldest>)"), as the watch cache answers; the stream
ends cleanly at `timeoutSeconds`, ends with an in-stream ERROR 410 when the faults expire it, and is cut
mid-stream (no terminating chunk) when they drop it. `kubectl get -w` asks for Tables: each event then holds a
one-row Table, with column definitions in the first only.
"""

from __future__ import annotations

import copy
import time
from dataclasses import dataclass
from typing import Any

from kube_registry import ResourceInfo
from kube_selectors import FieldTerm, Requirement, fields_match, labels_match
from kube_status import ApiError, bad_request, status_body
from kube_store import Change
from kube_tables import TABLE_RESOURCES, table_for, wants_table

WATCH_POLL_S = 0.05  # longest a stream waits before re-checking its fault switches and the server's stop flag
INITIAL_EVENTS_END_ANNOTATION = "k8s.io/initial-events-end"
DEFAULT_WATCH_TIMEOUT_S = 1800  # kube-apiserver picks 1800-3600 s (--min-request-timeout) when none is asked
EXPIRED_IN_STREAM = "The resourceVersion for the provided watch is too old."


@dataclass(frozen=True, slots=True)
class WatchRequest:
    """One watch's resource, scope, selectors and options."""

    info: ResourceInfo
    namespace: str
    labels: tuple[Requirement, ...]
    fields: tuple[FieldTerm, ...]
    resource_version: str
    timeout_s: float
    allow_bookmarks: bool
    send_initial_events: bool

    def matches(self, obj: dict[str, Any]) -> bool:
        meta = obj.get("metadata") or {}
        if self.namespace and meta.get("namespace") != self.namespace:
            return False
        return labels_match(self.labels, meta.get("labels")) and fields_match(self.fields, self.info.fields(obj))

    @property
    def starts_with_state(self) -> bool:
        """Unset or "0" resourceVersion, or sendInitialEvents: the stream opens with the current objects."""
        return self.send_initial_events or self.resource_version in ("", "0")


def event(kind: str, obj: dict[str, Any]) -> dict[str, Any]:
    return {"type": kind, "object": obj}


def initial_events(request: WatchRequest, items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Synthetic ADDED events for the objects that match now."""
    return [event("ADDED", request.info.view(obj)) for obj in items if request.matches(obj)]


def events_for(request: WatchRequest, change: Change) -> dict[str, Any] | None:
    """The event this watcher sees for one stored change, or None when it concerns other objects."""
    if change.resource != request.info.storage:
        return None
    now = change.type != "DELETED" and request.matches(change.object)
    before = change.previous is not None and request.matches(change.previous)
    if change.type == "DELETED":
        return event("DELETED", request.info.view(change.object)) if before else None
    if now and before:
        return event("MODIFIED", request.info.view(change.object))
    if now:
        return event("ADDED", request.info.view(change.object))
    if before and change.previous is not None:
        gone = copy.deepcopy(change.previous)
        gone["metadata"]["resourceVersion"] = str(change.rv)
        return event("DELETED", request.info.view(gone))
    return None


def bookmark(request: WatchRequest, rv: int, initial_events_end: bool = False) -> dict[str, Any]:
    """A BOOKMARK event at `rv`; the one ending sendInitialEvents carries the initial-events-end annotation."""
    metadata: dict[str, Any] = {"resourceVersion": str(rv)}
    if initial_events_end:
        metadata["annotations"] = {INITIAL_EVENTS_END_ANNOTATION: "true"}
    return event("BOOKMARK", {"kind": request.info.kind, "apiVersion": request.info.api_version,
                              "metadata": metadata})


class StreamDropped(Exception):
    """The connection is to be cut without a proper end (fault injection)."""


def query_bool(values: list[str] | None) -> bool:
    """metav1 query-parameter bools: present and neither "0" nor "false" (any case) is true, even empty."""
    if not values:
        return False
    return not (values[0] == "0" or values[0].lower() == "false")


class WatchStreamMixin:
    """The watch verb of `kube_http.ApiHandler`: a chunked stream of JSON events until timeout, fault or stop.

    Uses the handler's `core`, `query`, `headers`, `wfile`, `_headers`, `_chunk` and `_list_query`.
    """

    core: Any
    query: dict[str, list[str]]
    headers: Any
    wfile: Any

    def _watch(self, info: ResourceInfo, namespace: str) -> None:
        query = self._list_query()
        timeout_text = (self.query.get("timeoutSeconds") or [""])[0]
        request = WatchRequest(
            info, namespace, query.labels, query.fields, query.resource_version,
            float(timeout_text) if timeout_text else DEFAULT_WATCH_TIMEOUT_S,
            query_bool(self.query.get("allowWatchBookmarks")),
            query_bool(self.query.get("sendInitialEvents")),
        )
        if request.send_initial_events and query.resource_version_match != "NotOlderThan":
            raise bad_request("sendInitialEvents requires setting resourceVersionMatch to NotOlderThan")
        if query.resource_version not in ("", "0") and not query.resource_version.isdigit():
            raise bad_request(f'resourceVersion: Invalid value: "{query.resource_version}"')
        control = self.core.faults.open_watch()
        try:
            self._headers(200, "application/json", {"Transfer-Encoding": "chunked"})
            self.end_headers()
            self._stream(request, control)
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()
        finally:
            self.core.faults.close_watch(control)

    def _send_event(self, request: WatchRequest, watch_event: dict[str, Any]) -> None:
        if self.table_include is not None and watch_event["type"] != "BOOKMARK" and watch_event["type"] != "ERROR":
            # `kubectl get -w`: each object as a one-row Table; column definitions only in the first one.
            table = table_for(request.info, watch_event["object"], self.table_include)
            if self.table_sent:
                table["columnDefinitions"] = None
            self.table_sent = True
            watch_event = {"type": watch_event["type"], "object": table}
        self._chunk(watch_event)

    def _stream(self, request: WatchRequest, control: Any) -> None:
        store, sent = self.core.store, 0
        self.table_sent = False
        self.table_include: str | None = None
        if wants_table(self.headers.get("Accept", "")) and not request.info.group \
                and request.info.storage in TABLE_RESOURCES:
            self.table_include = (self.query.get("includeObject") or ["Metadata"])[0]
        deadline = time.monotonic() + request.timeout_s
        if request.starts_with_state:
            items, cursor = store.list(request.info.storage, request.namespace)
            for item in initial_events(request, items):
                self._send_event(request, item)
                sent += 1
            if request.send_initial_events and request.allow_bookmarks:
                self._chunk(bookmark(request, cursor, initial_events_end=True))
        else:
            cursor = int(request.resource_version)
        next_bookmark = time.monotonic() + self.core.bookmark_interval_s
        while True:
            if control.drop.is_set() or (control.drop_after_events is not None and sent >= control.drop_after_events):
                raise StreamDropped()
            if control.expire.is_set():
                self._chunk({"type": "ERROR", "object": status_body(410, "Expired", EXPIRED_IN_STREAM)})
                return
            now = time.monotonic()
            if now >= deadline or self.core.stopping.is_set():
                return
            if request.allow_bookmarks and now >= next_bookmark:
                self._chunk(bookmark(request, cursor))
                next_bookmark = now + self.core.bookmark_interval_s
            try:
                changes = store.changes_after(cursor, min(WATCH_POLL_S, deadline - now),
                                              self.core.stopping.is_set)
            except ApiError as error:
                self._chunk({"type": "ERROR", "object": error.body})
                return
            for change in changes:
                cursor = change.rv
                watch_event = events_for(request, change)
                if watch_event is None:
                    continue
                self._send_event(request, watch_event)
                sent += 1
                if control.drop_after_events is not None and sent >= control.drop_after_events:
                    raise StreamDropped()
