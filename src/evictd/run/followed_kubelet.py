"""The kubelet semantics `evictd run` follows while it runs (`evictd.core.followed`), and what it says of them.

The version is `kubeletVersion` when set; else, with the Kubernetes API, the Node's status.nodeInfo.kubeletVersion
as the Node label watch reads it (at start, then every nodeStatusUpdateFrequency: no request of its own, none on
the loop's path); else v1.36's. The watch's thread hands each read to `node_read`; the loop asks `hugepage_aware`
at each reading of the node's memory. Said once each: the semantics at start (`report_start` when the Node has no
say, else at the first read of the Node, readable or not), each change of the version followed or of the gate (a
kubelet upgraded in place), and each Node version evictd cannot read (a warning naming it). Invariants: a failed
read keeps the Node's last word; nothing here raises or waits.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping

from evictd.core.followed import (
    NODE_VERSION_FIELD,
    KubeletSemantics,
    NodeKubelet,
    kubelet_semantics,
    node_kubelet_kept,
)
from evictd.log import Log

# Why `evictd run` without an API follows no Node's version (the source string says it).
NO_API = f"no Kubernetes API: the Node's {NODE_VERSION_FIELD} is not read"
# Why nothing is followed from the Node before its first read (said only if asked before it).
NOT_READ_YET = f"the Node's {NODE_VERSION_FIELD} not read yet"


def semantics_fields(semantics: KubeletSemantics) -> dict[str, object]:
    """The log fields of `semantics`."""
    return {"version": semantics.version_text, "version_source": semantics.version_source,
            "hugepage_aware_eviction": semantics.hugepage_aware, "gate_source": semantics.gate_source}


class FollowedKubelet:
    """The kubelet semantics followed now, from `setting` (`kubeletVersion`), the KubeletConfiguration's `gates`
    and, when `from_node`, the Node's reads (see the module)."""

    def __init__(self, setting: str, gates: Mapping[str, bool], *, log: Log, from_node: bool) -> None:
        self._setting = setting
        self._gates = dict(gates)
        self._log = log
        # The Node has a say only with an API and no setting: then it is said at the Node's first read.
        self._from_node = from_node and not setting
        self._lock = threading.Lock()
        self._node: NodeKubelet | None = None  # the Node's word followed (a failed read keeps the last one)
        self._semantics = kubelet_semantics(setting, self._gates,
                                            no_node=NOT_READ_YET if self._from_node else NO_API)
        self._said: tuple[tuple[int, int], bool, str] | None = None  # what was last said: version, gate, Node's
        self._warned: set[str] = set()  # the Node versions not understood, warned about once each

    def semantics(self) -> KubeletSemantics:
        with self._lock:
            return self._semantics

    def hugepage_aware(self) -> bool:
        """Whether the node's memory.available subtracts the hugepage capacity now."""
        with self._lock:
            return self._semantics.hugepage_aware

    def report_start(self) -> None:
        """Say the semantics followed, unless the Node's first read will (then nothing yet)."""
        if not self._from_node:
            self._say(self.semantics())

    def node_read(self, read: NodeKubelet) -> None:
        """Follow what a read of the Node said (`read`); say what changed."""
        if not self._from_node:
            return
        with self._lock:
            self._node = node_kubelet_kept(self._node, read)
            self._semantics = kubelet_semantics(self._setting, self._gates, self._node)
            semantics, node = self._semantics, self._node
        ignored = semantics.ignored_node_version
        if ignored and ignored not in self._warned:
            self._warned.add(ignored)
            self._log.warning(f"Node's kubelet version not understood: evictd follows {semantics.version_text}",
                              node=node.node_name, value=ignored, field=NODE_VERSION_FIELD,
                              accepted="a kubelet version such as v1.37.1 or v1.36.2-eks-1234")
        self._say(semantics, node)

    def _say(self, semantics: KubeletSemantics, node: NodeKubelet | None = None) -> None:
        said = (semantics.version, semantics.hugepage_aware, node.version_text if node is not None else "")
        if said == self._said:
            return
        before, self._said = self._said, said
        if before is None:
            self._log.info("kubelet semantics", **semantics_fields(semantics))
        else:
            self._log.info("kubelet semantics changed", previous_version=f"v{before[0][0]}.{before[0][1]}",
                           previous_hugepage_aware_eviction=before[1], **semantics_fields(semantics))
