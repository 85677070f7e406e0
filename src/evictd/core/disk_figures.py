"""Pods not measured yet under disk pressure: which pods a disk ranking would rank on figures nobody read.

evictd's pods' volumes and logs are measured by the disk walker, beside the cycle (`evictd.adapters.pod_disk_usage`):
a pod listed for the first time has no disk figures until the walker's next round over it completes. Its stats then
carry no ``ephemeral_storage`` block (and no volume or log blocks), and the kubelet's rank function counts what is
missing as 0 bytes: in the cycle that first lists a pod filling an emptyDir beside a Guaranteed pod, both rank at 0
and the tie goes to listing order (issue 36's ``disk-fill-fast``: the Guaranteed pod was evicted first).

The rule (evictd's own; docs/kubelet-differences.md): a disk ranking never acts at once on a pod without disk figures.
`unmeasured_pods` names the pods a ranking for a disk signal would rank without the figures it needs (the ranking
counts logs or local volumes, and the pod has stats but no ephemeral-storage figure), `pods_to_wait_for` those of them
not waited for already. The shell waits a bounded time for the walker's figures of those, once per pod, then ranks on
what it has: a walker that never answers delays a disk eviction by one bound, never blocks it.

Invariants: pure; a pod without any stats entry is not "unmeasured" here (the kubelet's rule ranks it first, on
purpose: `evictd.core.ranking`), and neither is a pod whose figures were read in part or refused (it has a block).
"""

from __future__ import annotations

from collections.abc import Collection, Sequence

from evictd.core.fs_layout import FsLayout, FsStatsType, meaning_of
from evictd.core.pods import Pod
from evictd.core.ranking import StatsOf
from evictd.core.signals import Ranking, Signal, spec_of

# The parts of a pod's disk usage the disk walker measures: a ranking that counts neither needs none of its figures
# (imagefs ranking with a dedicated image filesystem counts writable layers only, which the runtime gives each cycle).
WALKED_FS_STATS = frozenset({FsStatsType.LOGS, FsStatsType.LOCAL_VOLUME_SOURCE})


def needs_walked_figures(signal: Signal, layout: FsLayout) -> bool:
    """Return whether ranking pods for `signal` under `layout` counts figures the disk walker measures."""
    if spec_of(signal).ranking is not Ranking.DISK:
        return False
    return not WALKED_FS_STATS.isdisjoint(meaning_of(layout).rank_fs_stats[signal])


def unmeasured_pods(signal: Signal, layout: FsLayout, pods: Sequence[Pod], stats_of: StatsOf) -> tuple[Pod, ...]:
    """Return the pods of `pods` (in their order) that a ranking for `signal` would rank without their disk figures:
    a stats entry without an ephemeral-storage block. Empty when the ranking needs no walked figures."""
    if not needs_walked_figures(signal, layout):
        return ()
    unmeasured = []
    for pod in pods:
        stats = stats_of(pod)
        if stats is not None and stats.ephemeral_storage is None:
            unmeasured.append(pod)
    return tuple(unmeasured)


def pods_to_wait_for(unmeasured: Sequence[Pod], waited_for: Collection[str] | None) -> tuple[Pod, ...]:
    """Return the pods of `unmeasured` whose disk figures the cycle should wait for: those whose uid is not in
    `waited_for` (the pods already waited for once). None: the stats source has nothing to wait for (the kubelet's
    Summary, `evictd simulate`), so nothing is waited for."""
    if waited_for is None:
        return ()
    return tuple(pod for pod in unmeasured if pod.uid not in waited_for)
