"""A party that left a request unanswered is not asked again for a while: the rule the loop's waits on the container
runtime and on the API server share.

A request that got no answer (a deadline passed, a connection refused or reset) says the party hangs or is down;
asking it again at once would make every later request of the cycle wait its deadline too (issue 36's arena: a
runtime and an API server hung for a minute on a node in thrash). So for `UNANSWERED_QUIET_S` after one, the callers
do not ask, and say why in the words `not_asked` gives.

Invariants: pure (times are monotonic seconds given by the caller).
"""

from __future__ import annotations

# How long after an unanswered request a party is not asked again.
UNANSWERED_QUIET_S = 5.0
# How long a request may be under way before the party counts as not answering now, though its deadline has not
# passed yet: a real containerd answered ListContainerStats for 20 containers in 140 ms (median) to 287 ms (worst of
# 50) on a 2-CPU host under load 2-3; a hung one not within the read's 2 s.
OVERDUE_S = 0.5


def overdue_for(started: float | None, now: float) -> float | None:
    """How long the request under way since `started` (None: none) has been overdue for at `now`: its age when that
    is OVERDUE_S or more, else None."""
    if started is None or now - started < OVERDUE_S:
        return None
    return now - started


class Unanswered:
    """When a party last left a request unanswered (None: it answered since, or never failed so)."""

    __slots__ = ("at",)

    def __init__(self) -> None:
        self.at: float | None = None

    def quiet(self, now: float) -> bool:
        """Whether the party is not to be asked at `now`."""
        return self.at is not None and now - self.at < UNANSWERED_QUIET_S

    def not_asked(self, what: str, now: float) -> str | None:
        """Why a `what` ("read", "request") is not sent at `now`; None when the party may be asked."""
        if self.at is None or not self.quiet(now):
            return None
        return f"not asked: a {what} went unanswered {now - self.at:.1f} s ago (asked again {UNANSWERED_QUIET_S:g} s " \
               "after it)"
