"""The Node's `evictd.io/mode` label as evictd last read it, and the Events that say the mode changed.

A thread reads evictd's Node every `period_s` (`nodeStatusUpdateFrequency`) and keeps the label; the loop asks
`label` at each cycle, so no request is on the loop's path. `start` reads once within `START_READ_TIMEOUT_S` (unless
`read_at_start` is off: then the thread reads at once). Until a first read succeeds the label counts as absent;
afterwards an outage keeps the last value (never flips a node); a failed read is logged once per streak. Each read
also hands `on_kubelet` what the Node says of its kubelet (`node_kubelet`: nodeInfo.kubeletVersion, or why it could
not be read), on the thread that read. The thread also writes the Events the loop hands it (`announce`), best
effort.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from evictd.core.errors import KubeError
from evictd.core.followed import NodeKubelet
from evictd.core.run_mode import MODE_LABEL
from evictd.kube.api import KubeApi
from evictd.kube.events import EventRecorder
from evictd.log import Log

# At start the first read waits at most this long: an API that does not answer must not hold the first cycle.
START_READ_TIMEOUT_S = 3.0
REQUEST_TIMEOUT_S = 10.0
# How long `stop` waits for the thread's request under way.
STOP_WAIT_S = 2.0


def node_kubelet(node_name: str, node: Mapping[str, Any]) -> NodeKubelet:
    """What the Node object `node` says of its kubelet: status.nodeInfo.kubeletVersion ("" when absent)."""
    status = node.get("status")
    info = status.get("nodeInfo") if isinstance(status, Mapping) else None
    version = info.get("kubeletVersion") if isinstance(info, Mapping) else None
    return NodeKubelet(node_name, "" if version is None else str(version))


class NodeLabelWatch:
    """Reads the Node's `evictd.io/mode` on its thread, and writes the mode Events (see the module)."""

    def __init__(self, api: KubeApi, node_name: str, events: EventRecorder, *, log: Log, period_s: float,
                 on_error: Callable[[KubeError], None] = lambda error: None,
                 on_kubelet: Callable[[NodeKubelet], None] = lambda said: None, read_at_start: bool = True) -> None:
        self._api = api
        self._node = node_name
        self._events = events
        self._log = log
        self._period_s = period_s
        self._on_error = on_error
        self._on_kubelet = on_kubelet
        self._read_at_start = read_at_start
        self._lock = threading.Lock()
        self._label: str | None = None
        self._failing = False
        self._announcements: queue.SimpleQueue[tuple[str, str, str]] = queue.SimpleQueue()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def label(self) -> str | None:
        """The label's value as last read (None: absent, or never read)."""
        with self._lock:
            return self._label

    def announce(self, event_type: str, reason: str, message: str) -> None:
        """Have the thread write an Event on the Node; returns at once."""
        self._announcements.put((event_type, reason, message))
        self._wake.set()

    def read_now(self, timeout_s: float = REQUEST_TIMEOUT_S) -> bool:
        """Read the Node once and keep its label; return whether the read succeeded (a failure is logged)."""
        try:
            node = self._api.read_node(self._node, timeout_s=timeout_s)
        except KubeError as exc:
            self._on_error(exc)
            if not self._failing:
                self._log.warning("node label unreadable: the mode stays as it is", label=MODE_LABEL, error=str(exc))
            self._failing = True
            self._on_kubelet(NodeKubelet(self._node, unread=str(exc)))
            return False
        self._on_kubelet(node_kubelet(self._node, node))
        labels = (node.get("metadata") or {}).get("labels") or {}
        value = labels.get(MODE_LABEL)
        with self._lock:
            self._label = value if isinstance(value, str) else None if value is None else str(value)
        if self._failing:
            self._log.info("node label readable again", label=MODE_LABEL)
        self._failing = False
        return True

    def start(self) -> None:
        """Read the Node once (at most START_READ_TIMEOUT_S; not with `read_at_start` off), then start the thread."""
        if self._thread is not None:
            return
        if self._read_at_start:
            self.read_now(START_READ_TIMEOUT_S)
        self._thread = threading.Thread(target=self._run, name="evictd-node-mode", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(STOP_WAIT_S)

    def _run(self) -> None:
        read_at = time.monotonic() + (self._period_s if self._read_at_start else 0.0)
        while not self._stop.is_set():
            self._write_announcements()
            wait_s = read_at - time.monotonic()
            if wait_s > 0 and self._wake.wait(wait_s):
                self._wake.clear()
                continue  # an announcement or the stop: the next read keeps its time
            if self._stop.is_set():
                return
            self.read_now()
            read_at = time.monotonic() + self._period_s

    def _write_announcements(self) -> None:
        while True:
            try:
                event_type, reason, message = self._announcements.get_nowait()
            except queue.Empty:
                return
            try:
                self._events.record(self._events.node_ref(), event_type, reason, message, timeout_s=REQUEST_TIMEOUT_S)
            except KubeError as exc:
                self._on_error(exc)
                self._log.warning("mode event not written", reason=reason, error=str(exc))
