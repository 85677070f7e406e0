"""The live view (src/evictd/observe/live_view.py): signals, thresholds, grace progress, the ranking and recent events.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import replace

from builders import Gi, Mi, pod, pod_stats, stamp, summary
from cycle_reports import (
    MEMORY_CONFIG,
    NOW_WALL,
    WEB_MESSAGE,
    Run,
    failing_cycle,
    memory_step,
    run,
)
from evictd.observe.live_view import render
from evictd.observe.logging_setup import RecentEvents

# --------------------------------------------------------------------------------------------------
# The live view


def rows(screen: str) -> dict[str, list[str]]:
    """Return the signal table's rows by signal name, cells split on the column gaps."""
    table: dict[str, list[str]] = {}
    for line in screen.splitlines():
        cells = re.split(r"\s{2,}", line.strip())
        if "." in cells[0] and len(cells) == 5 and not line.startswith(" "):
            table[cells[0]] = cells[1:]
    return table


def screen_of(run_: Run, index: int, *, dry_run: bool = True, recent: Sequence[str] = ()) -> str:
    return render(run_.reports[index], run_.state, node_name="node-1", cycle=index + 1,
                  now_wall=NOW_WALL, dry_run=dry_run, recent=recent)


def test_live_view_shows_signals_thresholds_and_grace_progress(memory_run: Run) -> None:
    screen = screen_of(memory_run, 2)
    lines = screen.splitlines()
    assert lines[0] == "evictd on node-1 - cycle 3 at 10:00:42 UTC - dry-run: reports, changes nothing"
    assert lines[1] == "node conditions: MemoryPressure"
    assert lines[3].split() == ["SIGNAL", "STATE", "AVAILABLE", "CAPACITY", "THRESHOLDS"]
    table = rows(screen)
    assert table["memory.available"] == ["grace 10/90s", "1.5 GiB", "16.0 GiB", "hard 1.0 GiB, soft 2.0 GiB"]
    assert table["nodefs.available"] == ["ok", "80.0 GiB", "100.0 GiB", "hard 10.0 GiB (10%)"]
    assert table["imagefs.available"] == ["ok", "80.0 GiB", "100.0 GiB", "-"]
    assert table["nodefs.inodesFree"] == ["ok", "1,000,000", "2,000,000", "-"]
    # Configured (the enforceNodeAllocatable copy) but not observed: this summary has no pods container.
    assert table["allocatableMemory.available"] == ["-", "no data", "-", "hard 1.0 GiB"]
    assert "containerfs.available" in table and "pid.available" not in table, "pid: neither observed nor configured"


def test_live_view_ranking_marks_critical_pods(memory_run: Run) -> None:
    calm = screen_of(memory_run, 1)
    assert "eviction order if memory ran short:\n  1. default/static-proxy (never evicted: a static pod)\n" \
           "  2. default/web\n  3. default/db" in calm
    acting = screen_of(memory_run, 3)
    assert rows(acting)["memory.available"][0] == "MET"
    assert "eviction order (this cycle):\n  1. default/static-proxy (never evicted: a static pod)\n  2. default/web\n" \
           in acting
    assert f"would evict default/web (memory.available): {WEB_MESSAGE}" in acting
    assert "acting on memory.available<1Gi (hard)" in acting
    assert f"evicted default/web (memory.available): {WEB_MESSAGE}" in screen_of(memory_run, 3, dry_run=False)
    assert screen_of(memory_run, 3, dry_run=False).splitlines()[0].endswith(" UTC - acting")
    assert "explain" not in acting, "no flight recorder, no decision to explain"


def test_live_view_names_the_decision_of_an_eviction(memory_run: Run) -> None:
    def screen(index: int) -> str:
        return render(memory_run.reports[index], memory_run.state, node_name="node-1", cycle=index + 1,
                      now_wall=NOW_WALL, dry_run=True, run="20261123T100000Z-42")

    lines = screen(3).splitlines()
    assert lines[lines.index(f"would evict default/web (memory.available): {WEB_MESSAGE}") + 1] == \
        "why: evictd explain --decision 20261123T100000Z-42/4"
    assert "explain" not in screen(2), "no eviction, nothing to explain"


def test_live_view_calm_node_and_recent_events(memory_run: Run) -> None:
    screen = screen_of(memory_run, 0, recent=["10:00:40 threshold met memory.available<2Gi", "10:00:41 x"])
    assert "node conditions: none" in screen
    assert rows(screen)["memory.available"][0] == "ok"
    assert screen.endswith("recent events:\n10:00:40 threshold met memory.available<2Gi\n10:00:41 x")


def test_live_view_without_pods_or_stats(memory_run: Run) -> None:
    no_pods = run(MEMORY_CONFIG, [memory_step(0, 8 * Gi)], pods=[])
    assert "eviction order: no pods found on this node" in screen_of(no_pods, 0)
    failed = failing_cycle(MEMORY_CONFIG)
    stats_failed = replace(failed, observed=replace(failed.observed, pods=memory_run.reports[0].observed.pods))
    screen = render(stats_failed, memory_run.state, node_name="node-1", cycle=1, now_wall=NOW_WALL, dry_run=True)
    # A quantity in the units of every other row, with or without data; a percentage as itself without capacity.
    assert rows(screen)["memory.available"] == ["-", "no data", "-", "hard 1.0 GiB, soft 2.0 GiB"]
    assert "eviction order: unknown (stats unavailable)" in screen


def test_live_view_shows_the_first_five_pods() -> None:
    many = [pod(f"p{i}", requests={"memory": "10Mi"}) for i in range(7)]
    stats = [pod_stats(p, memory=(100 + i) * Mi) for i, p in enumerate(many)]
    step = {"at": 0, "summary": summary(memory=8 * Gi, memory_ws=8 * Gi, pods=stats, time=stamp(0))}
    screen = screen_of(run(MEMORY_CONFIG, [step], pods=many), 0)
    assert "  5. default/p2\n  ... and 2 more" in screen
    assert "  1. default/p6\n" in screen


def test_live_view_says_there_is_no_threshold_rather_than_ok_when_none_is_configured() -> None:
    # evictionHard: {} (any map, even empty, drops the kubelet's defaults) and no soft thresholds: nothing guarded.
    unguarded = run({"evictionHard": {}}, [memory_step(0, 8 * Gi)])
    screen = screen_of(unguarded, 0)
    assert screen.splitlines()[1] == ("NO EVICTION THRESHOLDS: no eviction threshold configured (no evictionHard, "
                                      "evictionSoft or stall thresholds): evictd evicts nothing on this node")
    table = rows(screen)
    assert table["memory.available"] == ["no threshold", "8.0 GiB", "16.0 GiB", "-"]
    assert {cells[0] for cells in table.values()} <= {"no threshold", "-"}, "no signal reads ok"


# --------------------------------------------------------------------------------------------------
# The live view's log: events in words, warnings pinned until resolved


def test_events_are_sentences_and_start_up_warnings_stay_pinned() -> None:
    log = RecentEvents(size=3)
    log.add({"event": "oom_score_adj exposes evictd", "level": "warning", "oom_score_adj": 0, "detail": "above -997",
             "timestamp": "2026-11-27T10:00:00Z"})
    log.add({"event": "evictd started", "level": "info", "node": "n1", "interval_s": 10.0, "dry_run": False,
             "timestamp": "2026-11-27T10:00:01Z"})
    log.add({"event": "evicted pod not stopped on the node; the kubelet stops it", "level": "warning",
             "pod": "default/web", "error": "timeout", "timestamp": "2026-11-27T10:00:02Z"})
    assert list(log.lines) == ["10:00:00 ! oom_score_adj 0 exposes evictd: above -997",
                               "10:00:01   evictd started on n1: a cycle every 10.0 s",
                               "10:00:02 ! evicted pod not stopped on the node; the kubelet stops it: default/web; "
                               "timeout"]
    assert log.warnings == ["oom_score_adj 0 exposes evictd: above -997"], "a warning after start is an event"
    for second in range(3, 6):
        log.add({"event": "tick", "level": "info", "timestamp": f"2026-11-27T10:00:0{second}Z"})
    assert "oom_score_adj" not in "".join(log.lines) and log.warnings, "pinned after its event scrolled away"


def test_a_problem_warning_is_pinned_until_its_resolving_event_for_the_same_subject() -> None:
    log = RecentEvents()
    log.add({"event": "evictd started", "level": "info"})
    gone = "signal source unreadable; its signals are absent"
    for source in ("memory.stat: gone", "vmstat: gone"):
        log.add({"event": gone, "level": "warning", "cycle": 3, "detail": source})
    assert log.warnings == [f"{gone}: memory.stat: gone", f"{gone}: vmstat: gone"]
    log.add({"event": "signal source readable again", "level": "info", "cycle": 4, "detail": "vmstat: gone"})
    assert log.warnings == [f"{gone}: memory.stat: gone"]


def test_a_lock_waited_for_at_start_is_unpinned_once_taken_over() -> None:
    log = RecentEvents()
    log.add({"event": "node is locked by another evictd: waiting for it to stop", "level": "warning",
             "holder_pid": 7, "lock_file": "/run/evictd/node.lock"})
    log.add({"event": "node lease held by another evictd: waiting for it to stop renewing", "level": "warning",
             "lease": "evictd-system/n1", "holder": "h"})
    log.add({"event": "oom_score_adj exposes evictd", "level": "warning", "oom_score_adj": 0, "detail": "d"})
    log.add({"event": "node lock taken over", "level": "info", "previous_holder_pid": 7})
    log.add({"event": "node lease taken over", "level": "info", "lease": "evictd-system/n1", "previous_holder": "h"})
    assert log.warnings == ["oom_score_adj 0 exposes evictd: d"]


def test_a_screen_of_a_given_size_keeps_the_signals_and_warnings_and_cuts_the_events(memory_run: Run) -> None:
    events = [f"10:00:{i:02} event {i}" for i in range(30)]
    warnings = ["oom_score_adj 0 exposes evictd: " + "x" * 200, "no memory is reserved for system or kube daemons"]
    screen = render(memory_run.reports[3], memory_run.state, node_name="node-1", cycle=4, now_wall=NOW_WALL,
                    dry_run=True, recent=events, warnings=warnings, size=(80, 24))
    lines = screen.splitlines()
    assert len(lines) <= 24 and max(len(line) for line in lines) <= 80
    assert lines[0].startswith("evictd on node-1") and "memory.available" in rows(screen)
    assert "! oom_score_adj 0 exposes evictd: xxx" in screen and "! no memory is reserved" in screen
    assert lines[-1] == "10:00:29 event 29", "the newest event last"
    assert "eviction order (this cycle): 3 pods, first default/static-proxy (never evicted: " in lines, "cut at 80"
    assert f"would evict default/web (memory.available): {WEB_MESSAGE}"[:80] in lines
