"""What `evictd run` says at start about its thresholds and the hand-over: a loud warning (and
`evictd_thresholds_configured` at 0 for both kinds, which the shipped alert EvictdNoThresholds fires on) when it has
no threshold at all, then who evicts on each signal beside the node's kubelet (`evictd.core.handover`): one
"hand-over" line, and one warning per signal where nobody evicts or the kubelet acts before evictd. First, the
kubelet release whose semantics it follows and the gates that change its figures (`evictd.run.followed_kubelet`;
when they come from the Node, said at its first read instead).
"""

from __future__ import annotations

from evictd.config import Configuration
from evictd.core.handover import NO_THRESHOLDS, Handover, judge_handover
from evictd.cycle.render import verdict_fields
from evictd.kubelet_file import KubeletFile
from evictd.log import Log
from evictd.observe.metrics import Metrics
from evictd.run.followed_kubelet import FollowedKubelet

# What the operator must know when evictd has no threshold: the node may have no eviction at all.
NO_THRESHOLDS_CONSEQUENCE = ("no pod is evicted under memory, disk or PID pressure by evictd; if the kubelet's own "
                             "thresholds are 0% too the node has no node-pressure eviction at all and the kernel's OOM "
                             "killer is what is left")


def report_handover(config: Configuration, kubelet: KubeletFile | None, log: Log, metrics: Metrics,
                    followed: FollowedKubelet) -> Handover:
    """Log the configuration's warnings, the kubelet semantics `followed` (unless the Node's first read says them),
    then evictd's thresholds against the kubelet's (`kubelet`: None when not looked for), and export their count;
    return the hand-over judged (its races are said again whenever evictd starts acting: `evictd.run.mode_switch`)."""
    for warning in config.warnings:
        log.warning("configuration warning", detail=warning)
    followed.report_start()
    thresholds = [t for t in config.eviction.thresholds() if t.operator is not None]
    hard = sum(1 for t in thresholds if t.is_hard)
    metrics.thresholds_configured.labels("hard").set(hard)
    metrics.thresholds_configured.labels("soft").set(len(thresholds) - hard)
    if not thresholds:
        log.warning("no eviction thresholds", detail=NO_THRESHOLDS, consequence=NO_THRESHOLDS_CONSEQUENCE)
    handover = judge_handover(thresholds, None if kubelet is None else kubelet.thresholds(),
                              evictd_dry_run=config.evictd.dry_run)
    say = log.info if not handover.problems else log.warning
    say("hand-over", mode=str(handover.mode), summary=handover.summary,
        kubelet_config=kubelet.note if kubelet is not None else "not looked for",
        signals={str(v.signal): v.now for v in handover.verdicts})
    for verdict in handover.problems:
        log.warning("hand-over problem", **verdict_fields(verdict))
    return handover
