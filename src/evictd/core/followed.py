"""Which kubelet release's semantics evictd follows, named in one place, and what follows from it (no I/O).

evictd decides as the kubelet FOLLOWED does (its vectors are v1.36.2's) unless the kubelet it stands beside says
otherwise: its version (EvictdConfiguration `kubeletVersion`, e.g. `v1.37.0`; empty: unknown, FOLLOWED assumed) and
its `featureGates` (read from the KubeletConfiguration). The one difference of 1.37 evictd knows is
HugepageAwareEviction (kubernetes#137984, fix #138127, beta and on by default from 1.37): the node's
`memory.available` is the root limit less the working set less the hugepage capacity, clamped at 0
(pkg/kubelet/server/stats/summary.go adjustForHugePages). Invariants: an explicit gate wins over the version; a
version or gate evictd does not know changes nothing; every error names the key, the value and what is accepted.
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
# A kubelet version as `kubelet --version` or the Node's nodeInfo.kubeletVersion print it, or just major.minor.
_VERSION = re.compile(r"v?(\d+)\.(\d+)(?:\.\d+)?(?:[-+][0-9A-Za-z.+-]*)?")


@dataclass(frozen=True, slots=True)
class KubeletSemantics:
    """The kubelet release followed (`version`, and where it came from) and the state of the gates that change
    evictd's figures (`hugepage_aware`, and why)."""

    version: tuple[int, int]
    version_source: str
    hugepage_aware: bool
    gate_source: str

    @property
    def version_text(self) -> str:
        return f"v{self.version[0]}.{self.version[1]}"

    def describe(self) -> str:
        return (f"kubelet semantics followed: {self.version_text} ({self.version_source}); "
                f"{HUGEPAGE_AWARE_EVICTION}: {'on' if self.hugepage_aware else 'off'} ({self.gate_source})")


def parse_kubelet_version(text: str) -> tuple[int, int] | None:
    """The (major, minor) of `text` (None: empty, unknown). Raises ConfigError at VERSION_KEY."""
    if not text:
        return None
    match = _VERSION.fullmatch(text.strip())
    if match is None:
        raise ConfigError("must be a kubelet version such as v1.37.0, 1.37 or v1.36.2-eks-1234, or empty (unknown: "
                          f"v{FOLLOWED[0]}.{FOLLOWED[1]} semantics)", key=VERSION_KEY, value=text)
    return int(match.group(1)), int(match.group(2))


def kubelet_semantics(version_text: str, gates: Mapping[str, bool]) -> KubeletSemantics:
    """What evictd follows for a kubelet of version `version_text` (empty: unknown) with `gates`."""
    version = parse_kubelet_version(version_text)
    followed = version if version is not None else FOLLOWED
    version_source = f"{VERSION_KEY} {version_text}" if version is not None else \
        f"evictd's default: {VERSION_KEY} not set"
    if HUGEPAGE_AWARE_EVICTION in gates:
        aware = gates[HUGEPAGE_AWARE_EVICTION]
        gate_source = f"featureGates.{HUGEPAGE_AWARE_EVICTION}: {str(aware).lower()}"
    else:
        aware = followed >= HUGEPAGE_AWARE_DEFAULT_FROM
        since = f"v{HUGEPAGE_AWARE_DEFAULT_FROM[0]}.{HUGEPAGE_AWARE_DEFAULT_FROM[1]}"
        gate_source = f"v{followed[0]}.{followed[1]}'s default; on by default from {since}"
    return KubeletSemantics(followed, version_source, aware, gate_source)


def hugepage_aware_available(available_bytes: int | None, hugepages_bytes: int) -> int | None:
    """The node's `memory.available` with the hugepage capacity subtracted and clamped at 0, as a 1.37 kubelet's
    adjustForHugePages (None stays None: no figure)."""
    if available_bytes is None:
        return None
    return max(0, available_bytes - hugepages_bytes)
