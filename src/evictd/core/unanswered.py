"""A party that left a request unanswered is not asked again for a while: the rule the loop's waits on the container
runtime and on the API server share.

No answer (deadline passed, connection refused or reset) says the party hangs or is down; asking again would make
every later request of the cycle wait too. For `UNANSWERED_QUIET_S` after one, callers do not ask, and say why
(`not_asked`). Pure (times are given monotonic seconds).
"""

from __future__ import annotations

# How long after an unanswered request a party is not asked again.
UNANSWERED_QUIET_S = 5.0
# A request under way this long counts as unanswered now: well above a loaded containerd's ListContainerStats.
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
