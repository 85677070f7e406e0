"""EventCorrelator (src/evictd/kube/event_correlator.py): client-go's decisions, one table row per behaviour.

Each row is a script of occurrences (seconds after the previous one, object, type, reason, message) and the
verdicts expected, written as `new <message>`, `patch <count> <message>` or `drop`. Every created event is
reported back as created, as the recorder does after the API server took it.
"""

from __future__ import annotations

import pytest

from evictd.kube.event_correlator import (
    COMBINED_PREFIX,
    Create,
    Drop,
    EventCorrelator,
    EventKey,
    Occurrence,
    Patch,
    Verdict,
)

POD = ("Pod", "shop", "web", "uid-web")
DB = ("Pod", "shop", "db", "uid-db")
NODE = ("Node", "", "node-1", "node-1")

Step = tuple[float, tuple[str, str, str, str], str, str, str]


def run(script: list[Step], correlator: EventCorrelator | None = None) -> list[str]:
    correlator = correlator if correlator is not None else EventCorrelator()
    now = 0.0
    seen: list[str] = []
    for gap_s, subject, event_type, reason, message in script:
        now += gap_s
        verdict = correlator.decide(Occurrence(subject, event_type, reason, message), now)
        seen.append(describe(verdict))
        if isinstance(verdict, Create):
            correlator.created(verdict.key, f"event-{len(seen)}")
    return seen


def describe(verdict: Verdict) -> str:
    if isinstance(verdict, Drop):
        return "drop"
    if isinstance(verdict, Patch):
        return f"patch {verdict.count} {verdict.message}"
    return f"new {verdict.message}"


def same(times: int, gap_s: float = 0.1, subject: tuple[str, str, str, str] = NODE, event_type: str = "Warning",
         reason: str = "EvictionThresholdMet", message: str = "Attempting to reclaim memory") -> list[Step]:
    return [(gap_s, subject, event_type, reason, message)] * times


def distinct(count: int, reason: str = "", gap_s: float = 0.0, subject: tuple[str, str, str, str] = POD,
             first: int = 0) -> list[Step]:
    """`count` events about `subject`: each its own reason (when `reason` is empty) and message."""
    return [(gap_s, subject, "Warning", reason or f"R{n}", f"m{n}") for n in range(first, first + count)]


CASES: list[tuple[str, list[Step], list[str]]] = [
    ("a repeat counts on the event it repeats",
     same(3), ["new Attempting to reclaim memory", "patch 2 Attempting to reclaim memory",
               "patch 3 Attempting to reclaim memory"]),
    ("an hour later a repeat still counts on it (the logger has no window)",
     same(1) + same(1, gap_s=3600), ["new Attempting to reclaim memory", "patch 2 Attempting to reclaim memory"]),
    ("25 writes per object and type, then nothing",
     distinct(26), [f"new m{n}" for n in range(25)] + ["drop"]),
    ("a dropped repeat is still counted: the next PATCH carries it",
     same(27) + same(1, gap_s=300),
     ["new Attempting to reclaim memory"] + [f"patch {n} Attempting to reclaim memory" for n in range(2, 26)]
     + ["drop", "drop", "patch 28 Attempting to reclaim memory"]),
    ("one token back per 300 s, never more than 25 saved",
     distinct(25) + distinct(1, gap_s=299.0, first=25) + distinct(1, gap_s=2.0, first=26) + distinct(1, first=27)
     + distinct(1, gap_s=36000.0, first=28) + distinct(25, first=29),
     [f"new m{n}" for n in range(25)] + ["drop", "new m26", "drop"] + [f"new m{n}" for n in range(28, 53)]
     + ["drop"]),
    ("each object and each type has a bucket of its own",
     distinct(25) + distinct(1, subject=DB) + [(0.0, POD, "Normal", "Started", "s")] + distinct(1, first=25),
     [f"new m{n}" for n in range(25)] + ["new m0", "new s", "drop"]),
    ("the tenth similar message opens the combined event; later ones count on it",
     distinct(12, reason="Evicted", gap_s=1.0),
     [f"new m{n}" for n in range(9)] + [f"new {COMBINED_PREFIX}m9", f"patch 2 {COMBINED_PREFIX}m10",
                                        f"patch 3 {COMBINED_PREFIX}m11"]),
    ("similar events more than 600 s apart start counting again",
     distinct(9, reason="Evicted") + distinct(1, reason="Evicted", gap_s=601.0, first=9),
     [f"new m{n}" for n in range(10)]),
    ("similar events within 600 s of each other keep counting, however long the series",
     [(599.0, POD, "Warning", "Evicted", f"m{n}") for n in range(10)],
     [f"new m{n}" for n in range(9)] + [f"new {COMBINED_PREFIX}m9"]),
]


@pytest.mark.parametrize(("script", "expected"), [(s, e) for _, s, e in CASES], ids=[name for name, _, _ in CASES])
def test_decisions(script: list[Step], expected: list[str]) -> None:
    assert run(script) == expected


def test_a_combined_event_is_keyed_apart_from_the_events_it_combines() -> None:
    correlator = EventCorrelator()
    verdicts = [correlator.decide(Occurrence(POD, "Warning", "Evicted", f"m{n}"), float(n)) for n in range(10)]
    assert verdicts[0] == Create(EventKey(POD, "Warning", "Evicted", "m0"), "m0")
    assert verdicts[9] == Create(EventKey(POD, "Warning", "Evicted", None), COMBINED_PREFIX + "m9")


def test_forgetting_an_event_makes_the_next_occurrence_create_it() -> None:
    correlator = EventCorrelator()
    first = correlator.decide(Occurrence(NODE, "Warning", "R", "m"), 0.0)
    assert isinstance(first, Create)
    correlator.created(first.key, "node-1.a")
    assert correlator.decide(Occurrence(NODE, "Warning", "R", "m"), 1.0) == Patch(first.key, "node-1.a", 2, "m")
    correlator.forget(first.key)  # the PATCH found no event
    assert correlator.decide(Occurrence(NODE, "Warning", "R", "m"), 2.0) == Create(first.key, "m")


def test_a_create_not_reported_back_is_created_again() -> None:
    # The recorder reports a create only once the API server took it: a failed one leaves nothing to count on.
    correlator = EventCorrelator()
    assert isinstance(correlator.decide(Occurrence(NODE, "Warning", "R", "m"), 0.0), Create)
    assert isinstance(correlator.decide(Occurrence(NODE, "Warning", "R", "m"), 1.0), Create)


def test_the_caches_keep_the_most_recent_entries() -> None:
    assert run(same(2, subject=POD) + same(1, subject=DB) + same(1, subject=NODE) + same(1, subject=POD),
               EventCorrelator(cache_entries=2)) == [
        "new Attempting to reclaim memory", "patch 2 Attempting to reclaim memory",
        "new Attempting to reclaim memory", "new Attempting to reclaim memory",
        "new Attempting to reclaim memory",  # the pod's event was the least recent: forgotten
    ]
