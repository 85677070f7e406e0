"""The rules of evictd's protection of itself (no I/O): when locking its memory is safe, which OOM scores leave it
exposed. `evictd.adapters.self_protection` asks the kernel; these say what the answers mean.

* Locking with `MCL_FUTURE` is safe only with CAP_IPC_LOCK or an unlimited RLIMIT_MEMLOCK: the kernel counts
  every locked mapping's whole size (not its resident pages) against a finite limit, so once evictd's address
  space outgrew it a new mapping would fail (a thread's stack, a malloc arena), and "protected" would become
  "cannot allocate".
* An oom_score_adj above `OOM_SCORE_ADJ_WARN_ABOVE` lets the kernel's OOM killer take evictd before pods.
"""

from __future__ import annotations

# The kernel's bounds of oom_score_adj (linux/oom.h OOM_SCORE_ADJ_MIN: never killed; OOM_SCORE_ADJ_MAX).
OOM_SCORE_ADJ_MIN = -1000
OOM_SCORE_ADJ_MAX = 1000
# The kubelet's value for guaranteed and node-critical pods (pkg/kubelet/qos/policy.go guaranteedOOMScoreAdj;
# burstable pods get 3 to 999, best-effort ones 1000). Above it the kernel may kill evictd before pods.
OOM_SCORE_ADJ_WARN_ABOVE = -997
# What the docs recommend: the kubelet's own (KubeletOOMScoreAdj, its --oom-score-adj default). One above
# OOM_SCORE_ADJ_MIN, so that the kernel can still end a leaking evictd as a last resort: at -1000, an OOM inside
# the unit's MemoryMax= would find nothing it may kill, and evictd would hang instead of being restarted.
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
