"""The v2 memory watch at the margin, on a real cgroup v2 kernel (issue 37 item 3): a node held steady just above a hard
threshold costs the watch a few looks a second, not fifty, and a burst from there is still decided at once.

One guest boot (Debian's kernel: no PSI, so the watch is what wakes evictd; tests/uml/guest_v2_margin.py's ``check``
scenario does the work and writes JSON), ~40 s of guest time: the pods cgroup held ~11 MiB above
``allocatableMemory.available<60Mi`` with the 10 s interval; evictd with the watch measured over 8 s; then a 40 MiB
burst from that steady margin, decided by the same daemon. (The watch off, for comparison, is the benchmark's:
bench/v2_wakeup_latency.py --margin-cost.)

What is asserted, and why these bounds: the watch's thread (the daemon's thread that woke most often; the others
wake 2-4 times a second) wakes at most 45 times a second (the fast pace looks 50 times; the steady pace spends
0.75 CPU s a minute on looks, `evictd.core.wake.LOOK_CPU_SHARE`: in this guest a look costs 0.5-0.8 ms of
the thread's CPU on a quiet host, 16-20 looks a second measured, fewer on a loaded one, down to 4 a second at the
250 ms cap; no look here costs under 0.3 ms, which the share allows 41.7 times a second). The thread's CPU is the
benchmark's figure (bench/v2_wakeup_latency.py --margin-cost), not asserted: in the guest's own accounting it was
0.54-0.92 s a minute on a quiet host and 3.05 with the whole suite beside it, so a bound on it measured the host's
load. The burst is decided
within 2 s of the kernel's figure crossing (the rule's bound is 250 ms plus a look and a cycle; the tick is 10 s;
the guest on a loaded host adds up to ~1 s at p99).
"""

from __future__ import annotations

from typing import Any

import pytest
from uml_guest import GuestRun, boot_guest

BODY = """
T="$EVICTD_REPO/tests"
export PYTHONPATH="$EVICTD_REPO/src:$T/uml:$T/daemon:$T/kube:$T"
"$EVICTD_PYTHON" "$EVICTD_REPO/tests/uml/guest_v2_margin.py" check > "$UML_OUT/margin.log" 2>&1
"""
# The share allows 41.7 looks a second at the cheapest look seen (0.3 ms), the thread's own wake-ups beside them;
# under the fast pace's 50, which is what the bound tells apart.
WATCH_WAKEUPS_PER_S = 45.0
DECIDED_WITHIN_S = 2.0


@pytest.fixture(scope="module")
def check(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    out = tmp_path_factory.mktemp("evictd-v2-margin")
    # Debian's kernel, whatever EVICTD_UML_KERNEL says: without PSI the watch is what wakes evictd.
    run: GuestRun = boot_guest(BODY, out, timeout_s=240, kernel="default")
    document: dict[str, Any] = run.json("margin-check.json")
    if "error" in document:
        raise AssertionError(f"guest scenario failed: {document['traceback']}\n{run.text('margin.log')[-3000:]}")
    return document


def test_a_steady_margin_costs_the_watch_a_few_looks_a_second(check: dict[str, Any]) -> None:
    (on,) = check["segments"]
    assert on["watch"] is True
    assert all(5 <= margin <= 25 for margin in on["marginMiB"]), on
    assert on["thresholdsMet"] == 0, on
    assert on["wakeups"].get("memory_watch", 0) == 0, "steady: the watch never wakes the loop"
    # The thread that woke most often with the watch on is the watch's (the others wake 2-4 times a second).
    watch_thread = on["busiestThread"]
    assert watch_thread["wakeupsPerS"] <= WATCH_WAKEUPS_PER_S, on


def test_a_burst_from_the_steady_margin_is_decided_at_once(check: dict[str, Any]) -> None:
    crossing = check["crossing"]
    assert crossing["kernelCrossedAt"] is not None and crossing["evictedPod"] == "v2/burst-0"
    assert 0 <= crossing["decidedLateS"] <= DECIDED_WITHIN_S, crossing
    assert crossing["wakeups"]["memory_watch"] >= 1, "the watch, not the tick, woke the loop"
