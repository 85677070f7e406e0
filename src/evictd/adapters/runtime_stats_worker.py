"""The container runtime's stats asked on a thread of their own, so that a cycle that must not wait can stop waiting.

`RuntimeStatsWorker.stats(wait_s)` returns what `ask` (ListContainerStats) returns, waiting at most `wait_s` (None:
until the call ends). The stats source waits briefly only when the node's memory shows a threshold met
(`runtime_wait_s`): the memory ranking reads cgroups, the runtime only names containers. A call an earlier read left
under way is overdue already and not waited for (the 200 MiB/s leak of docs/node-survival.md, "Who is killed").
A call goes on after its caller stopped waiting; the next `stats` waits for it rather than start another, and a late
answer is kept for `take_late`.

Invariants: at most one call at a time; one thread, started at the first call with `wait_s` and reused (a node out of
tasks costs no thread per cycle); without a thread the call runs on the caller's; what the call raises is raised to
the caller that waits for it.
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
