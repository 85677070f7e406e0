"""`Unanswered`: a party that left a request unanswered is not asked again for UNANSWERED_QUIET_S."""

from __future__ import annotations

from evictd.core.unanswered import UNANSWERED_QUIET_S, Unanswered


def test_a_party_is_not_asked_within_the_quiet_time_and_is_asked_after_it() -> None:
    unanswered = Unanswered()
    assert not unanswered.quiet(0.0) and unanswered.not_asked("read", 0.0) is None, "never unanswered: asked"
    unanswered.at = 10.0
    assert unanswered.quiet(10.0 + UNANSWERED_QUIET_S - 0.1)
    assert unanswered.not_asked("request", 12.5) == \
        "not asked: a request went unanswered 2.5 s ago (asked again 5 s after it)"
    assert not unanswered.quiet(10.0 + UNANSWERED_QUIET_S) and unanswered.not_asked("read", 15.0) is None
    unanswered.at = None  # answered since
    assert not unanswered.quiet(10.5)
