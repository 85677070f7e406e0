"""Shadow mode in the daemon: each dry-run cycle's decisions against the evictions the kubelet carried out.

In dry-run with the API, `ShadowComparer` feeds the evictions evictd decided and the pods the kubelet has since
recorded as evicted (seen through evictd's own pod watch) to `evictd.core.shadow.compare`; each settled comparison
is logged, counted in `evictd_shadow_comparisons_total{outcome, resource}` and appended to `<stateDir>/shadow.jsonl`
(`evictd shadow-report`; rotated to `.1` past `RECORD_MAX_BYTES`; a failed write is logged once). Pods evicted
before evictd started are never compared.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterable, Sequence
from datetime import UTC, datetime
from typing import Any

from evictd.clock import SYSTEM_CLOCK, Clock
from evictd.core.engine import Eviction
from evictd.core.pods import Pod
from evictd.core.shadow import (
    DEFAULT_MATCH_WINDOW_S,
    Comparison,
    ShadowEviction,
    ShadowState,
    compare,
    kubelet_eviction_resource,
    resource_of_signal,
)
from evictd.kube.events import rfc3339
from evictd.log import Log
from evictd.state_dir import ROTATED_SUFFIX, SHADOW_FILE

RECORD_MAX_BYTES = 4 << 20


def comparison_record(comparison: Comparison, wall_s: float) -> dict[str, Any]:
    """One comparison as `shadow.jsonl` stores it (and `shadow-report --output json` prints it)."""

    def side(eviction: ShadowEviction | None) -> dict[str, str] | None:
        if eviction is None:
            return None
        return {"pod": eviction.pod_key, "uid": eviction.pod_uid, "resource": eviction.resource}

    record: dict[str, Any] = {
        "time": rfc3339(datetime.fromtimestamp(wall_s, UTC)),
        "outcome": str(comparison.outcome),
        "evictd": side(comparison.evictd),
        "kubelet": side(comparison.kubelet),
    }
    if comparison.evictd is not None and comparison.kubelet is not None:
        # Positive: the kubelet's record came later (its tick, its grace period, its status write).
        record["kubeletLaterBySeconds"] = round(comparison.kubelet.at - comparison.evictd.at, 3)
    return record


class ShadowComparer:
    """Compares after every dry-run cycle; `pods` returns every pod of the node the watch knows, terminal ones too."""

    def __init__(self, pods: Callable[[], Iterable[Pod]], record_folder: str | None,
                 on_comparison: Callable[[Comparison], None], log: Log, *, window_s: float = DEFAULT_MATCH_WINDOW_S,
                 clock: Clock = SYSTEM_CLOCK) -> None:
        self._pods = pods
        self._path = os.path.join(record_folder, SHADOW_FILE) if record_folder else None
        self._on_comparison = on_comparison
        self._log = log
        self._window_s = window_s
        self._clock = clock
        self._state = ShadowState()
        self._seen: set[str] | None = None  # the kubelet's evictions already taken in (None: not started)
        self._write_failed = False

    def after_cycle(self, evictions: Sequence[Eviction]) -> list[Comparison]:
        """Take in this cycle's decisions and the kubelet's new evictions; record what got settled."""
        now = self._clock.monotonic()
        kubelet = self._new_kubelet_evictions(now)
        ours = [ShadowEviction(now, e.pod.uid, e.pod.key, resource_of_signal(e.signal)) for e in evictions]
        self._state, settled = compare(self._state, ours, kubelet, now, self._window_s)
        for comparison in settled:
            self._report(comparison)
        return settled

    def _new_kubelet_evictions(self, now: float) -> list[ShadowEviction]:
        evicted = {}
        for pod in self._pods():
            resource = kubelet_eviction_resource(pod.status_phase, pod.status_reason, pod.status_message,
                                                 pod.status_termination_by_kubelet)
            if resource is not None:
                evicted[pod.uid] = ShadowEviction(now, pod.uid, pod.key, resource)
        # None before the first cycle (earlier kubelet evictions are history); pods deleted since are forgotten.
        new = [] if self._seen is None else [e for uid, e in evicted.items() if uid not in self._seen]
        self._seen = set(evicted)
        return new

    def _report(self, comparison: Comparison) -> None:
        self._on_comparison(comparison)
        record = comparison_record(comparison, self._clock.wall().timestamp())
        self._log.info("shadow comparison", outcome=record["outcome"], evictd=record["evictd"],
                       kubelet=record["kubelet"], kubelet_later_by_s=record.get("kubeletLaterBySeconds"))
        if self._path is None:
            return
        try:
            if os.path.exists(self._path) and os.path.getsize(self._path) > RECORD_MAX_BYTES:
                os.replace(self._path, self._path + ROTATED_SUFFIX)
            os.makedirs(os.path.dirname(self._path) or ".", exist_ok=True)
            with open(self._path, "a", encoding="utf-8") as handle:
                handle.write(json.dumps(record) + "\n")
            self._write_failed = False
        except OSError as exc:
            if not self._write_failed:
                self._log.warning("shadow comparison not recorded", path=self._path, error=str(exc))
            self._write_failed = True
