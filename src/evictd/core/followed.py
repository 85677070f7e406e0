"""Which kubelet release's semantics evictd follows, named in one place, and what follows from it (no I/O).

evictd decides as the kubelet FOLLOWED does (its vectors are v1.36.2's) unless the kubelet it stands beside says
otherwise: its version (EvictdConfiguration `kubeletVersion`, e.g. `v1.37.0`; empty: the Node's
`status.nodeInfo.kubeletVersion` as `evictd run` last read it, else FOLLOWED) and its `featureGates` (read from the
KubeletConfiguration). The one difference of 1.37 evictd knows is HugepageAwareEviction (kubernetes#137984, fix
#138127, beta and on by default from 1.37): the node's `memory.available` is the root limit less the working set
less the hugepage capacity, clamped at 0 (pkg/kubelet/server/stats/summary.go adjustForHugePages). Invariants: the
setting wins over the Node, an explicit gate over any version; a version or gate evictd does not know changes
nothing; a bad setting is a ConfigError naming the key, the value and what is accepted, a Node's version evictd
cannot read is not (it is not the operator's configuration: FOLLOWED, and `ignored_node_version` names it); a Node
that could not be read keeps the version last read from it; every source string says where the version came from.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from evictd.core.errors import ConfigError

# The kubelet release whose semantics evictd follows when told nothing else (the kubelet-derived vectors' v1.36.2).
FOLLOWED = (1, 36)
HUGEPAGE_AWARE_EVICTION = "HugepageAwareEviction"
# HugepageAwareEviction is beta and on by default from this release (pkg/features/versioned_kube_features.go).
HUGEPAGE_AWARE_DEFAULT_FROM = (1, 37)
VERSION_KEY = "kubeletVersion"
# Where the kubelet writes its version on its Node (pkg/kubelet/nodestatus/setters.go VersionInfo).
NODE_VERSION_FIELD = "nodeInfo.kubeletVersion"
# The start of every source that is not a version given: FOLLOWED, and why.
NOT_SET = f"evictd's default: {VERSION_KEY} not set"
# A kubelet version as `kubelet --version` or the Node's nodeInfo.kubeletVersion print it, or just major.minor.
_VERSION = re.compile(r"v?(\d+)\.(\d+)(?:\.\d+)?(?:[-+][0-9A-Za-z.+-]*)?")


@dataclass(frozen=True, slots=True)
class KubeletSemantics:
    """The kubelet release followed (`version`, and where it came from) and the state of the gates that change
    evictd's figures (`hugepage_aware`, and why); `ignored_node_version`: the Node's version evictd could not read
    ("" when there was none such)."""

    version: tuple[int, int]
    version_source: str
    hugepage_aware: bool
    gate_source: str
    ignored_node_version: str = ""

    @property
    def version_text(self) -> str:
        return f"v{self.version[0]}.{self.version[1]}"

    def describe(self) -> str:
        return (f"kubelet semantics followed: {self.version_text} ({self.version_source}); "
                f"{HUGEPAGE_AWARE_EVICTION}: {'on' if self.hugepage_aware else 'off'} ({self.gate_source})")


@dataclass(frozen=True, slots=True)
class NodeKubelet:
    """What evictd's Node said of its kubelet at a read: `version_text`, its status.nodeInfo.kubeletVersion ("":
    none), or why the Node could not be read (`unread`, "" when it was)."""

    node_name: str
    version_text: str = ""
    unread: str = ""


def _parsed(text: str) -> tuple[int, int] | None:
    match = _VERSION.fullmatch(text.strip())
    return None if match is None else (int(match.group(1)), int(match.group(2)))


def parse_kubelet_version(text: str) -> tuple[int, int] | None:
    """The (major, minor) of `text` (None: empty, unknown). Raises ConfigError at VERSION_KEY."""
    if not text:
        return None
    version = _parsed(text)
    if version is None:
        raise ConfigError("must be a kubelet version such as v1.37.0, 1.37 or v1.36.2-eks-1234, or empty (unknown: "
                          f"v{FOLLOWED[0]}.{FOLLOWED[1]} semantics)", key=VERSION_KEY, value=text)
    return version


def node_kubelet_kept(last: NodeKubelet | None, read: NodeKubelet) -> NodeKubelet:
    """The Node's word to follow after `read`: `read`, unless it failed after a read that succeeded (`last`), which
    is kept (an API outage never changes the version followed)."""
    if read.unread and last is not None and not last.unread:
        return last
    return read


def followed_version(setting: str, node: NodeKubelet | None, no_node: str = "") -> tuple[tuple[int, int], str, str]:
    """The version to follow, where it came from, and the Node's version not understood (""): the `setting`
    (`kubeletVersion`) when given, else the `node`'s when it has one evictd reads, else FOLLOWED, the source saying
    why (`no_node`: why no Node was looked at, when `node` is None). Raises ConfigError for a bad `setting`."""
    given = parse_kubelet_version(setting)
    if given is not None:
        return given, f"{VERSION_KEY} {setting}", ""
    if node is None:
        return FOLLOWED, f"{NOT_SET}; {no_node}" if no_node else NOT_SET, ""
    where = f"Node {node.node_name}"
    if node.unread:
        return FOLLOWED, f"{NOT_SET}; {where} not read: {node.unread}", ""
    if not node.version_text.strip():
        return FOLLOWED, f"{NOT_SET}; {where} has no {NODE_VERSION_FIELD}", ""
    version = _parsed(node.version_text)
    if version is None:
        return FOLLOWED, f"{NOT_SET}; {where} {NODE_VERSION_FIELD} {node.version_text!r} not understood", \
            node.version_text
    return version, f"{where} {NODE_VERSION_FIELD} {node.version_text}", ""


def kubelet_semantics(version_text: str, gates: Mapping[str, bool], node: NodeKubelet | None = None, *,
                      no_node: str = "") -> KubeletSemantics:
    """What evictd follows for a kubelet of version `version_text` (the setting; empty: unknown) on a Node that said
    `node` (None: not read, `no_node` saying why), with `gates` (`followed_version`)."""
    followed, version_source, ignored = followed_version(version_text, node, no_node)
    if HUGEPAGE_AWARE_EVICTION in gates:
        aware = gates[HUGEPAGE_AWARE_EVICTION]
        gate_source = f"featureGates.{HUGEPAGE_AWARE_EVICTION}: {str(aware).lower()}"
    else:
        aware = followed >= HUGEPAGE_AWARE_DEFAULT_FROM
        since = f"v{HUGEPAGE_AWARE_DEFAULT_FROM[0]}.{HUGEPAGE_AWARE_DEFAULT_FROM[1]}"
        gate_source = f"v{followed[0]}.{followed[1]}'s default; on by default from {since}"
    return KubeletSemantics(followed, version_source, aware, gate_source, ignored)


def hugepage_aware_available(available_bytes: int | None, hugepages_bytes: int) -> int | None:
    """The node's `memory.available` with the hugepage capacity subtracted and clamped at 0, as a 1.37 kubelet's
    adjustForHugePages (None stays None: no figure)."""
    if available_bytes is None:
        return None
    return max(0, available_bytes - hugepages_bytes)
