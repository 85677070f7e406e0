"""Writing evictd's pressure conditions and taints to the Node object.

At once when the pressure conditions change; otherwise as the kubelet writes its status: with the node Lease renewed
(the heartbeat), every `nodeStatusReportFrequency` (5 m, the kubelet's jitter after a change), the Node read every
`nodeStatusUpdateFrequency` so others' changes are written back; without a Lease, every `nodeStatusUpdateFrequency`
(`lastHeartbeatTime` the heartbeat). Status is a strategic-merge patch of evictd's three conditions (by `type`,
others kept); `spec.taints` has no merge key, so taints are read-modify-written with a `resourceVersion`
precondition, retried on conflict. Changes produce the kubelet's node events. A clean stop (`withdraw`) removes the
taints and sets the conditions Unknown (EvictdStopped).
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from evictd.clock import SYSTEM_CLOCK, Clock
from evictd.core.errors import KubeError
from evictd.core.node_status import (
    ConditionMode,
    condition_transitions,
    desired_conditions,
    desired_taints,
    shows_pressure,
    stopped_conditions,
)
from evictd.core.signals import NodeCondition
from evictd.kube.api import KubeApi
from evictd.kube.events import rfc3339

# The kubelet's nodeStatusUpdateFrequency and nodeStatusReportFrequency defaults.
NODE_STATUS_UPDATE_S = 10.0
NODE_STATUS_REPORT_S = 300.0
# A heartbeat may be written this part of the period before it is due (0.4 s of 10 s: more than cycles vary by).
HEARTBEAT_EARLY_FRACTION = 0.04
TAINT_CONFLICT_RETRIES = 3


class Heartbeat(Protocol):
    """evictd's node Lease, as the writer asks it: is it being renewed (`evictd.kube.node_lease.NodeLease`)?"""

    def renewing(self) -> bool: ...


def kubelet_report_jitter() -> float:
    """The kubelet's one-time delay after a status change, as a part of nodeStatusReportFrequency: uniform in
    [-0.5, 0.5) (`delayAfterNodeStatusChange`)."""
    return random.random() - 0.5


class StandingBy(KubeError):
    """A node write not made because evictd stands by (another evictd holds the node, or a pause): no API error."""


class NodeStatusWriter:
    """Keeps the node's evictd conditions and taints current. `dry_run` (a flag, or a function of the node's mode)
    computes without writing; with a renewed `heartbeat` unchanged conditions are written every `report_period_s`.
    Acting -> dry-run withdraws what was written; dry-run -> acting writes at once."""

    def __init__(self, api: KubeApi, node_name: str, mode: ConditionMode, *,
                 update_period_s: float = NODE_STATUS_UPDATE_S, report_period_s: float = NODE_STATUS_REPORT_S,
                 heartbeat: Heartbeat | None = None, jitter: Callable[[], float] = kubelet_report_jitter,
                 dry_run: bool | Callable[[], bool] = False, timeout_s: float = 10.0, clock: Clock = SYSTEM_CLOCK,
                 standby: Callable[[], str | None] = lambda: None) -> None:
        self._api = api
        # Why evictd must not write now (`standby_reason`), asked right before each write (a paused writer resumed).
        self._standby = standby
        self._node = node_name
        self._mode = mode
        self._period_s = update_period_s
        self._dry_run_given = dry_run
        self._dry_run = dry_run if isinstance(dry_run, bool) else False  # a function is asked at each update
        self._was_dry_run: bool | None = None  # the mode of the last update (None: none yet)
        self._timeout_s = timeout_s
        self._clock = clock
        self._written: tuple[NodeCondition, ...] | None = None
        # The next heartbeat write, on a fixed rate; a cycle a little early may write it (phase moves, rate does not).
        self._due_at = float("-inf")
        self._early_s = update_period_s * HEARTBEAT_EARLY_FRACTION
        # With the Lease renewed: when the next report of unchanged conditions is due.
        self._report_period_s = report_period_s
        self._report_due_at = float("-inf")
        self._check_due_at = float("-inf")  # the next read of the Node between reports
        self._heartbeat = heartbeat
        self._jitter = jitter

    def update(self, pressure: Sequence[NodeCondition]) -> list[tuple[str, str]]:
        """Write conditions and taints if due or changed; return the (event reason, condition) transitions. Raises
        KubeError when the node cannot be read or written (the next cycle tries again)."""
        self._dry_run = self._mode_now()
        if self._was_dry_run is not None and self._dry_run != self._was_dry_run:
            self._written = None  # a mode change: the next write starts afresh
            if self._dry_run:  # acting until now: what it wrote is withdrawn, as at a stop
                self._write(lambda existing, now: stopped_conditions(existing, self._mode, now), (), self._timeout_s,
                            force=True)
                self._was_dry_run = True
                return []
        self._was_dry_run = self._dry_run
        current = tuple(c for c in NodeCondition if c in pressure)
        changed = current != self._written
        now_s = self._clock.monotonic()
        leased = self._heartbeat is not None and self._heartbeat.renewing()
        node = None
        if not changed and now_s < (self._report_due_at if leased else self._due_at) - self._early_s:
            # With the Lease the Node is still read once per update period, so others' changes are written back.
            if not leased or now_s < self._check_due_at - self._early_s:
                return []
            self._check_due_at = now_s + self._period_s
            node = self._api.read_node(self._node, timeout_s=self._timeout_s)
            if shows_pressure((node.get("status") or {}).get("conditions") or [],
                              (node.get("spec") or {}).get("taints") or [], current, self._mode):
                return []
        self._write(lambda existing, now: desired_conditions(existing, current, self._mode, now), current,
                    self._timeout_s, node)
        transitions = condition_transitions(self._written or (), current) if changed else []
        self._written = current
        # A change restarts the period; a heartbeat keeps its marks unless cycles stopped for a period or more.
        self._due_at = now_s + self._period_s if changed or now_s >= self._due_at + self._period_s \
            else self._due_at + self._period_s
        # The kubelet's report: a change (or the first write) adds its one-time jitter to the next one.
        self._report_due_at = now_s + self._report_period_s * (1 + (self._jitter() if changed else 0.0))
        self._check_due_at = now_s + self._period_s
        return transitions

    def withdraw(self, timeout_s: float) -> None:
        """On a clean stop: evictd's conditions to Unknown (EvictdStopped), its taints removed; nothing in dry-run.
        Each request waits at most `timeout_s`. Raises KubeError."""
        if not (self._dry_run if self._was_dry_run is not None else self._mode_now()):
            self._write(lambda existing, now: stopped_conditions(existing, self._mode, now), (), timeout_s)

    def _mode_now(self) -> bool:
        """Whether the writer is in dry-run now (a function given is asked)."""
        return self._dry_run_given() if callable(self._dry_run_given) else self._dry_run_given

    def _write(self, conditions: Callable[[list[Any], str], list[dict[str, Any]]], pressure: Sequence[NodeCondition],
               timeout_s: float, node: dict[str, Any] | None = None, *, force: bool = False) -> None:
        """Read the node (unless `node` was just read) and patch its status with `conditions(its conditions, now)`
        and its taints for `pressure` (in dry-run only the read, unless `force`)."""
        if node is None:
            node = self._api.read_node(self._node, timeout_s=timeout_s)
        patch = {"status": {"conditions": conditions((node.get("status") or {}).get("conditions") or [],
                                                     rfc3339(self._clock.wall()))}}
        if self._dry_run and not force:
            return
        self._not_standing_by()
        written = self._api.patch_node_status(self._node, patch, timeout_s=timeout_s)
        # Start the taint write from the node the status write returned (the read one's version would conflict).
        for attempt in range(TAINT_CONFLICT_RETRIES):
            taints = (written.get("spec") or {}).get("taints") or []
            wanted = desired_taints(taints, pressure, self._mode)
            if wanted == taints:
                return
            body = {"metadata": {"resourceVersion": written["metadata"]["resourceVersion"]}, "spec": {"taints": wanted}}
            self._not_standing_by()
            try:
                self._api.patch_node(self._node, body, timeout_s=timeout_s)
                return
            except KubeError as exc:
                if exc.status != 409 or attempt == TAINT_CONFLICT_RETRIES - 1:
                    raise
            written = self._api.read_node(self._node, timeout_s=timeout_s)

    def _not_standing_by(self) -> None:
        """Raise KubeError (nothing written) while evictd stands by."""
        reason = self._standby()
        if reason is not None:
            raise StandingBy("patch nodes", None, f"not written: standing by ({reason})")
