"""`Daemon.run` stepped on a scripted waiter: when cycles run after a memory notification.

The manager is the real one over scripted stats (no I/O); the waiter records the timeout of every wait and
answers with the wake-up causes the test scripts, so the loop's schedule is visible without real sleeps.
"""

from __future__ import annotations

from collections.abc import Iterator

from builders import Gi, Mi, summary
from evictd.config import eviction_settings
from evictd.core.engine import EngineConfig
from evictd.core.signals import FsLayout
from evictd.core.summary import Summary, summary_from_dict
from evictd.daemon import NOTIFICATION_FOLLOW_UPS_S, Daemon
from evictd.http_endpoint import Health
from evictd.manager import EvictionManager
from evictd.metrics import Metrics
from evictd.simulate import FakeClock, FixedLayout

INTERVAL_S = 10.0


class ScriptedWaiter:
    """Records each wait's timeout; answers with the next scripted causes (nothing: the timer)."""

    def __init__(self, causes: Iterator[list[str]]) -> None:
        self.timeouts: list[float] = []
        self._causes = causes

    def wait(self, timeout_s: float) -> list[str]:
        self.timeouts.append(round(timeout_s, 3))
        return next(self._causes, [])

    def wake(self) -> None:
        return None

    def close(self) -> None:
        return None


class MemoryStats:
    """Node memory: above the 1Gi threshold until `crossed_at_cycle`, below it from then on."""

    def __init__(self, crossed_at_cycle: int) -> None:
        self.cycle = 0
        self._crossed_at = crossed_at_cycle

    def summary(self) -> Summary:
        self.cycle += 1
        available = 512 * Mi if self.cycle >= self._crossed_at else 2 * Gi
        return summary_from_dict(summary(memory=available))


class NoReclaim:
    def reclaim(self, action: object) -> int:
        return 0


class NoEviction:
    def evict(self, eviction: object) -> None:
        return None


class NoPods:
    def active_pods(self) -> list[object]:
        return []


def run_loop(crossed_at_cycle: int, causes: list[list[str]], cycles: int) -> list[float]:
    """Run `cycles` cycles; return the timeouts the loop waited with."""
    manager = EvictionManager(
        EngineConfig.from_settings(eviction_settings({"evictionHard": {"memory.available": "1Gi"}})),
        stats=MemoryStats(crossed_at_cycle), layout=FixedLayout(FsLayout()), pods=NoPods(),  # type: ignore[arg-type]
        reclaimer=NoReclaim(), evictor=NoEviction(), clock=FakeClock())  # type: ignore[arg-type]
    waiter = ScriptedWaiter(iter(causes))
    daemon = Daemon(manager=manager, waiter=waiter, metrics=Metrics(), health=Health(INTERVAL_S),
                    interval_s=INTERVAL_S, dry_run=True, node_name="n", max_cycles=cycles)
    assert daemon.run() == 0
    return waiter.timeouts


def test_cycles_follow_a_notification_closely_until_one_sees_the_crossing() -> None:
    # Cycle 1: quiet, the timer. Wait 2 is cut short by a memcg notification; cycles 3 and 4 still see the
    # signal above the threshold (pages being charged); cycle 5 sees it met; one settled-state check follows.
    timeouts = run_loop(crossed_at_cycle=5, causes=[[], ["memcg"]], cycles=7)
    first, notified, *after = timeouts
    assert first > INTERVAL_S - 1 and notified > INTERVAL_S - 1
    assert after[:2] == list(NOTIFICATION_FOLLOW_UPS_S[:2])  # 1 ms, 1 ms: not yet crossed
    assert after[2] == NOTIFICATION_FOLLOW_UPS_S[-1]  # crossed in cycle 5: only the 1 s confirmation is left
    assert after[3] > INTERVAL_S - 1  # then the housekeeping cadence


def test_a_notification_that_finds_nothing_runs_the_whole_schedule_then_the_cadence() -> None:
    timeouts = run_loop(crossed_at_cycle=1000, causes=[["psi"]], cycles=len(NOTIFICATION_FOLLOW_UPS_S) + 3)
    assert timeouts[1:1 + len(NOTIFICATION_FOLLOW_UPS_S)] == list(NOTIFICATION_FOLLOW_UPS_S)
    assert timeouts[-1] > INTERVAL_S - 1
