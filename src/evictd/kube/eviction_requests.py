"""Soft evictions through the Eviction API, asked off the housekeeping loop (`softEvictionsThroughEvictionAPI`).

`EvictionRequests` is the manager's `ApiEvictor`: `request` starts a round on a thread and returns at once; the
round POSTs each candidate in ranking order until one is accepted, one gets no usable answer (no eviction), or the
round's deadline passes; refusals (429, 403) move on. A hung webhook costs the loop nothing. One round at a time;
the loop collects it (`finished`) and journals the accepted eviction on its own thread (the journal has one writer).
The thread is a daemon: a stop never waits for a hung request.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass

from evictd.clock import SYSTEM_CLOCK, Clock
from evictd.core.engine import Eviction
from evictd.core.errors import EvictionRefused, KubeError
from evictd.core.eviction_api import EvictionApiRound
from evictd.kube.evictor import KubePodEvictor

# One request's wait (kube-apiserver gives an admission webhook 10 s by default).
REQUEST_TIMEOUT_S = 10.0
# A round's wait over all candidates: the kubelet's podCleanupTimeout (30 s).
ROUND_DEADLINE_S = 30.0


@dataclass(frozen=True, slots=True)
class _Round:
    """A round as started: its candidates, when it was decided (wall-clock seconds) and the decision's id."""

    candidates: tuple[Eviction, ...]
    decided_at: float
    decision: str | None


class EvictionRequests:
    """Rounds of Eviction API requests, one at a time, each on a daemon thread (see the module's description)."""

    def __init__(self, evictor: KubePodEvictor, *, request_timeout_s: float = REQUEST_TIMEOUT_S,
                 round_deadline_s: float = ROUND_DEADLINE_S, clock: Clock = SYSTEM_CLOCK) -> None:
        self._evictor = evictor
        self._request_timeout_s = request_timeout_s
        self._round_deadline_s = round_deadline_s
        self._clock = clock
        self._lock = threading.Lock()
        self._round: _Round | None = None  # started and not yet collected
        self._asking: str | None = None  # the pod the round's thread is asking for now
        self._outcome: EvictionApiRound | None = None  # the round's outcome, once it ended

    def request(self, candidates: Sequence[Eviction]) -> bool:
        """Start a round for `candidates` and return at once; False, nothing started, while the last round is under
        way or not yet collected."""
        if not candidates:
            return False
        with self._lock:
            if self._round is not None:
                return False
            started = _Round(tuple(candidates), self._evictor.now(), self._evictor.decision())
            self._round = started
            self._asking = candidates[0].pod.key
            self._outcome = None
        try:
            threading.Thread(target=self._run, args=(started,), name="evictd-eviction-api", daemon=True).start()
        except RuntimeError:  # no thread can be started (a node out of pids): the round runs here, on the loop
            self._run(started)
        return True

    def asking(self) -> str | None:
        with self._lock:
            return self._asking if self._outcome is None else None

    def finished(self) -> EvictionApiRound | None:
        """The round that ended since the last call, its accepted eviction journaled (on the caller's thread, the
        loop's); None when none ended. An eviction whose pod evictd evicted meanwhile is not reported again."""
        with self._lock:
            started, outcome = self._round, self._outcome
            if started is None or outcome is None:
                return None
            self._round = self._outcome = None
        evicted = outcome.evicted
        if evicted is not None and not self._evictor.note_api_eviction(evicted, started.decided_at, started.decision):
            outcome = EvictionApiRound(refusals=outcome.refusals, failure=f"{evicted.pod.key}: evicted meanwhile as "
                                       "the kubelet does (a hard threshold): the Eviction API's eviction not counted")
        return outcome

    def _run(self, started: _Round) -> None:
        try:
            outcome = self._ask(started.candidates)
        except Exception as exc:  # a thread that died here would leave its round under way for good: no soft eviction
            outcome = EvictionApiRound(failure=f"{type(exc).__name__}: {exc}")
        with self._lock:
            self._outcome = outcome
            self._asking = None

    def _ask(self, candidates: Sequence[Eviction]) -> EvictionApiRound:
        """Ask for each candidate in turn (off the loop); return the round's outcome."""
        deadline = self._clock.monotonic() + self._round_deadline_s
        refusals: list[EvictionRefused] = []
        for eviction in candidates:
            remaining_s = deadline - self._clock.monotonic()
            if remaining_s <= 0:
                return EvictionApiRound(refusals=tuple(refusals), failure=(
                    f"the round's deadline of {self._round_deadline_s:g} s passed before {eviction.pod.key} "
                    "was asked"))
            with self._lock:
                self._asking = eviction.pod.key
            try:
                self._evictor.post_eviction(eviction, min(self._request_timeout_s, remaining_s))
            except EvictionRefused as exc:
                refusals.append(exc)
                continue
            except KubeError as exc:
                return EvictionApiRound(refusals=tuple(refusals), failure=f"{eviction.pod.key}: {exc}")
            return EvictionApiRound(evicted=eviction, refusals=tuple(refusals))
        return EvictionApiRound(refusals=tuple(refusals))
