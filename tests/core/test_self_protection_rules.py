"""The rules of evictd's protection of itself: when locking is safe, which OOM scores leave it exposed."""

from __future__ import annotations

import pytest

from evictd.core.self_protection import (
    OOM_SCORE_ADJ_WARN_ABOVE,
    RECOMMENDED_OOM_SCORE_ADJ,
    lock_refusal,
    oom_score_adj_warning,
)


@pytest.mark.parametrize(
    ("cap_ipc_lock", "limit", "refused"),
    [(True, 8 << 20, False), (True, 0, False), (False, None, False), (False, 8 << 20, True), (False, 0, True),
     (False, 64 << 30, True)],
    ids=["cap-finite-limit", "cap-zero-limit", "unlimited", "no-cap-8MiB", "no-cap-zero", "no-cap-64GiB"],
)
def test_locking_is_safe_only_with_cap_ipc_lock_or_no_limit(cap_ipc_lock: bool, limit: int | None,
                                                            refused: bool) -> None:
    reason = lock_refusal(cap_ipc_lock, limit)
    assert bool(reason) is refused
    if refused:
        assert limit is not None and f"RLIMIT_MEMLOCK is {limit // 1024} KiB" in reason
        assert "CAP_IPC_LOCK" in reason and "LimitMEMLOCK=infinity" in reason


@pytest.mark.parametrize(
    ("value", "exposed"),
    [(-1000, False), (-999, False), (-997, False), (-996, True), (0, True), (1000, True)],
    ids=["never-killed", "kubelet-own", "node-critical-pod", "above-node-critical", "default", "best-effort"],
)
def test_an_oom_score_adj_above_the_node_critical_pods_is_a_warning(value: int, exposed: bool) -> None:
    warning = oom_score_adj_warning(value)
    assert bool(warning) is exposed
    if exposed:
        assert str(OOM_SCORE_ADJ_WARN_ABOVE) in warning and str(RECOMMENDED_OOM_SCORE_ADJ) in warning
