"""The rules of evictd's protection of itself (no I/O): when locking its memory is safe, which OOM scores leave it
exposed (`evictd.adapters.self_protection` asks the kernel).

`MCL_FUTURE` is safe only with CAP_IPC_LOCK or an unlimited RLIMIT_MEMLOCK: the kernel counts whole mappings against
a finite limit, so a new thread stack or arena would fail. An oom_score_adj above `OOM_SCORE_ADJ_WARN_ABOVE` lets
the OOM killer take evictd before pods.
"""

from __future__ import annotations

# The kernel's bounds of oom_score_adj (linux/oom.h OOM_SCORE_ADJ_MIN: never killed; OOM_SCORE_ADJ_MAX).
OOM_SCORE_ADJ_MIN = -1000
OOM_SCORE_ADJ_MAX = 1000
# The kubelet's guaranteed/node-critical value (qos/policy.go guaranteedOOMScoreAdj); above it evictd may die first.
OOM_SCORE_ADJ_WARN_ABOVE = -997
# The kubelet's own --oom-score-adj: one above the minimum, so a leaking evictd can still be killed and restarted.
RECOMMENDED_OOM_SCORE_ADJ = -999

KIB = 1024


def lock_refusal(cap_ipc_lock: bool, memlock_limit_bytes: int | None) -> str:
    """Return why evictd must not lock its memory (empty: it may). `memlock_limit_bytes` is RLIMIT_MEMLOCK's
    soft limit, None when unlimited."""
    if cap_ipc_lock or memlock_limit_bytes is None:
        return ""
    return (f"no CAP_IPC_LOCK and RLIMIT_MEMLOCK is {memlock_limit_bytes // KIB} KiB: the kernel counts every "
            "locked mapping's whole size against it, so later allocations would fail; give evictd CAP_IPC_LOCK "
            "or LimitMEMLOCK=infinity")


def oom_score_adj_warning(value: int) -> str:
    """Why `value` leaves evictd exposed to the OOM killer (empty: it does not)."""
    if value <= OOM_SCORE_ADJ_WARN_ABOVE:
        return ""
    return (f"above {OOM_SCORE_ADJ_WARN_ABOVE} (the kubelet's value for guaranteed and node-critical pods): the "
            f"kernel's OOM killer may take evictd before pods; {RECOMMENDED_OOM_SCORE_ADJ} is recommended "
            "(OOMScoreAdjust= in the unit, or oomScoreAdj)")
