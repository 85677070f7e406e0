"""The container runtime's stats asked on a thread of their own, so that a cycle that must not wait can stop waiting.

Job: `RuntimeStatsWorker.stats(wait_s)` returns what `ask` (the runtime slot's `container_stats`: ListContainerStats
with the cycle read's own deadline) returns, waiting at most `wait_s` seconds for it (None: until the call ends,
as a plain call would). The node's stats source waits a short time only in a cycle whose node memory shows a
memory threshold met (`evictd.core.settled.runtime_wait_s`): the memory ranking reads the pods' cgroups, not the
runtime, whose answer only names the containers in the eviction message, and the containers it named last are
then measured from their cgroups. On the arena's real node, a fast leak's hard crossing waited 2 s on an
unanswered ListContainerStats before its cycle decided (docs/node-survival.md, "be-fast and be-burst on the real
node"). A read that may stop waiting does not wait at all for a call an earlier read left under way: that call is
overdue already (the runtime is not answering now); on the real node the 200 MiB/s leak's hard crossing waited
0.5 s more on the same starved containerd and was OOM-killed by the kernel 0.24 s before the decision.

A call goes on after its caller stopped waiting. The next `stats` waits for that call instead of starting a second,
and an answer that came while nobody waited is kept for `take_late` (the source names containers with it).

Invariants: at most one call at a time; the thread is started at the first call that may be waited on for less
than it takes (`wait_s` given) and reused from then on, so that a node that has run out of tasks does not cost a
thread each cycle. Where no thread can be started, the call is made on the caller's thread, as a plain call. What
the call raises is raised to the caller that waits for it.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence

from evictd.core.errors import CRIError
from evictd.cri import ContainerUsage

# What the runtime answers: its containers' stats by pod uid (None: no runtime attached).
Answer = Mapping[str, Sequence[ContainerUsage]] | None
METHOD = "ListContainerStats"
# The code of the CRIError raised when the caller stopped waiting (gRPC's own codes are upper case too).
NOT_WAITED_FOR = "NOT_WAITED_FOR"


class RuntimeStatsWorker:
    """One ListContainerStats at a time, on a thread of its own once a caller may stop waiting for it."""

    def __init__(self, ask: Callable[[], Answer], thread_name: str = "evictd-runtime-stats") -> None:
        self._ask = ask
        self._thread_name = thread_name
        self._changed = threading.Condition()
        self._thread: threading.Thread | None = None
        self._wanted = False  # a call asked of the thread, not yet begun
        self._busy = False  # a call asked of the thread, not yet ended
        self._waited_for = False  # a caller still waits for the call under way
        self._outcome: tuple[Answer, Exception | None] = (None, None)
        self._late: Answer = None
        self._has_late = False

    def stats(self, wait_s: float | None) -> Answer:
        """The runtime's answer, waited for at most `wait_s` seconds (None: until the call ends). Raises what the
        call raised, or a CRIError whose code is NOT_WAITED_FOR when the call had not ended within `wait_s`."""
        with self._changed:
            if not self._busy and (wait_s is None or not self._started()):
                plain = True
            else:
                plain = False
                overdue = self._busy and wait_s is not None  # an earlier read stopped waiting for this call
                if not self._busy:
                    self._busy = self._wanted = True
                    self._changed.notify_all()
                self._waited_for = True
                if not self._changed.wait_for(lambda: not self._busy, timeout=0.0 if overdue else wait_s):
                    self._waited_for = False
                    raise CRIError(METHOD, NOT_WAITED_FOR,
                                   "the call an earlier read left under way has not ended; it goes on, and its answer "
                                   "is kept" if overdue else
                                   f"no answer within {wait_s:g} s; the call goes on, and its answer is kept")
                answer, error = self._outcome
                self._outcome = (None, None)
        if plain:
            return self._ask()
        if error is not None:
            raise error
        return answer

    def take_late(self) -> tuple[bool, Answer]:
        """Whether an answer came while no caller waited for it, and that answer (once)."""
        with self._changed:
            late, self._has_late, self._late = (self._has_late, self._late), False, None
            return late

    def _started(self) -> bool:
        """Whether the thread runs (started now if not); False where no thread can be started."""
        if self._thread is not None:
            return True
        thread = threading.Thread(target=self._run, name=self._thread_name, daemon=True)
        try:
            thread.start()
        except RuntimeError:  # "can't start new thread": the node has no task left for one
            return False
        self._thread = thread
        return True

    def _run(self) -> None:
        while True:
            with self._changed:
                self._changed.wait_for(lambda: self._wanted)
                self._wanted = False
            outcome: tuple[Answer, Exception | None]
            try:
                outcome = (self._ask(), None)
            except Exception as exc:  # raised to the caller that waits; the thread serves the next call
                outcome = (None, exc)
            with self._changed:
                if self._waited_for:
                    self._outcome = outcome
                    self._waited_for = False
                elif outcome[1] is None:
                    self._late, self._has_late = outcome[0], True
                self._busy = False
                self._changed.notify_all()
