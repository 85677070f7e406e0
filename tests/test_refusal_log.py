"""RefusalLog (run/plausible_stats.py): a refused figure is said once per episode, however it alternates."""

from __future__ import annotations

from evictd.core.plausible import IMPOSSIBLE, Refusal
from evictd.observe.metrics import Metrics
from evictd.run.plausible_stats import EPISODE_END_S, RefusalLog
from log_capture import LogCapture

FIELD = "pods[default/web].memory.workingSetBytes"
REFUSED = Refusal(field=FIELD, value=3 << 40, kind=IMPOSSIBLE, reason="above the node's capacity", bound=1 << 40,
                  family="pods.memory.workingSetBytes")


def test_a_figure_alternating_between_sound_and_impossible_is_one_warning_then_one_all_clear() -> None:
    """Issue 43: a figure sound every other cycle wrote an unreadable/readable pair every other cycle."""
    log, metrics = LogCapture(), Metrics()
    refusals = RefusalLog(log, metrics)
    now = 0.0
    for number in range(1, 61):  # 10 minutes at a 10 s interval, refused on every odd cycle
        refusals.update(number, now, [REFUSED] if number % 2 else [])
        now += 10.0
    warnings = log.named("figure refused: it is unknown, the rest of the stats are used")
    assert [(e["cycle"], e["field"], e["kind"], e["bound"]) for e in warnings] == [(1, FIELD, IMPOSSIBLE, 1 << 40)]
    assert log.at("info") == []  # never sound for EPISODE_END_S meanwhile
    for number in range(61, 61 + int(EPISODE_END_S // 10) + 1):  # sound from now on
        refusals.update(number, now, [])
        now += 10.0
    assert [event for event, _ in log.at("info")] == ["figure sound again"]
    [clear] = log.named("figure sound again")
    assert clear["field"] == FIELD and clear["cycles_refused"] == 30
    refusals.update(999, now, [REFUSED])  # a new episode is said again
    assert len(log.named("figure refused: it is unknown, the rest of the stats are used")) == 2
    sample = metrics.registry.get_sample_value("evictd_figures_refused_total",
                                               {"field": "pods.memory.workingSetBytes", "kind": IMPOSSIBLE})
    assert sample == 31
