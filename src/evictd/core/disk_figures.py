"""Pods not measured yet under disk pressure: which pods a disk ranking would rank on figures nobody read.

A pod's volumes and logs are measured by the disk walker beside the cycle, so a newly listed pod has no disk
figures yet, and the kubelet's ranking counts missing as 0 bytes (a filling pod could tie a Guaranteed one). The
rule (evictd's own; docs/kubelet-differences.md): `unmeasured_pods` names the pods a disk ranking would rank without
figures, `pods_to_wait_for` those not waited for already; the shell waits a bounded time once per pod, then ranks.
Pure; a pod without any stats entry is not "unmeasured" (the kubelet ranks it first on purpose), nor one whose
figures were read in part or refused.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence

from evictd.core.fs_layout import FsLayout, FsStatsType, meaning_of
from evictd.core.pods import Pod
from evictd.core.ranking import StatsOf
from evictd.core.signals import Ranking, Signal, spec_of

# The disk usage parts the walker measures (a ranking counting none of them, e.g. a dedicated imagefs, needs none).
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
    """Return the pods of `unmeasured` whose uid is not in `waited_for`; none when `waited_for` is None (the source
    has nothing to wait for)."""
    if waited_for is None:
        return ()
    return tuple(pod for pod in unmeasured if pod.uid not in waited_for)
