"""The UIDs of this node's critical pods, remembered across restarts for when the API gives no pod list.

While the API lists pods, `<stateDir>/critical-pods.json` keeps the UIDs of those with a system-critical priority, so
an evictd restarted during an API outage never stops them (`cluster.NodeFallbackPods`). Invariants: replaced
atomically and only when the set changed; it only adds protection (missing or unreadable: empty, reported once); a
failed write keeps the record in memory, is reported, and is tried again after the next cycle.
"""

from __future__ import annotations

from collections.abc import Iterable

from evictd.core.errors import SampleError
from evictd.core.pods import Pod, is_critical_pod, is_mirror_pod
from evictd.kube.atomic_file import read_json_file, write_json_atomically
from evictd.state_dir import CRITICAL_PODS_TEMPORARY_PREFIX

# The largest record read back (a node runs at most a few hundred pods: 40 bytes per UID); whole MiB.
MAX_RECORD_BYTES = 1 << 20


def critical_uids(pods: Iterable[Pod]) -> frozenset[str]:
    """Return the UIDs of the pods critical by their priority (mirror pods are left out: the node runs their
    static pods under other UIDs, and knows those static by their sandboxes)."""
    return frozenset(pod.uid for pod in pods if pod.uid and is_critical_pod(pod) and not is_mirror_pod(pod))


class CriticalPodRecord:
    """The remembered UIDs, persisted to `path` (None keeps them in memory only, e.g. in dry-run)."""

    def __init__(self, path: str | None) -> None:
        self._path = path
        self.problem: str | None = None
        self._uids = self._load()
        self._unwritten = False

    def uids(self) -> frozenset[str]:
        return self._uids

    def remember(self, pods: Iterable[Pod]) -> bool:
        """Keep the critical pods of the API's current pod list; return whether the file was (re)written (a failed
        write is kept in `problem`)."""
        uids = critical_uids(pods)
        if uids == self._uids and not self._unwritten:
            return False
        self._uids = uids
        if self._path is not None:
            try:
                write_json_atomically(self._path, {"criticalPodUIDs": sorted(uids)},
                                      prefix=CRITICAL_PODS_TEMPORARY_PREFIX)
                self.problem = None
                self._unwritten = False
            except OSError as exc:
                self.problem = f"{self._path}: not written: {exc.strerror or exc}"
                self._unwritten = True
        return True

    def _load(self) -> frozenset[str]:
        if self._path is None:
            return frozenset()
        try:
            document = read_json_file(self._path, MAX_RECORD_BYTES)
            uids = document.get("criticalPodUIDs") if isinstance(document, dict) else None
            if document is not None and not (isinstance(uids, list) and all(isinstance(uid, str) for uid in uids)):
                raise SampleError(self._path, "criticalPodUIDs is not a list of strings")
        except SampleError as exc:
            self.problem = f"{self._path}: unreadable, ignored: {exc.reason}"
            return frozenset()
        return frozenset(uids or ())
