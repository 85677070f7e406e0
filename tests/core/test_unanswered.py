"""`Unanswered`: a party that left a request unanswered is not asked again for UNANSWERED_QUIET_S; `overdue_for`: a
request under way for OVERDUE_S or more says the party is not answering now."""

from __future__ import annotations

from evictd.core.unanswered import OVERDUE_S, UNANSWERED_QUIET_S, Unanswered, overdue_for


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


def test_a_request_under_way_is_overdue_from_overdue_s_on() -> None:
    assert overdue_for(None, 100.0) is None, "nothing under way"
    assert overdue_for(100.0, 100.0 + OVERDUE_S - 0.01) is None
    assert overdue_for(100.0, 100.0 + OVERDUE_S) == OVERDUE_S
    assert overdue_for(100.0, 102.5) == 2.5
