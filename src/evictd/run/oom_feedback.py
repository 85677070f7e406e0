"""OOM-kill feedback of the daemon: after each cycle, the kernel's OOM kills since the last one, judged.

Reads the counters (`evictd.adapters.oom_counters`; per cgroup only when `cgroups_walk_needed`), runs
`evictd.core.oom.oom_feedback` with what the cycle leaves evictd doing, and names the pods and containers. No logs:
the `OomReport` goes into the cycle report; unreadable counters go to `problems` and count zero, never guessed.
With a counters file (`evictd.record.oom_counters_file`) `resume` starts from this boot's last run (kills while not
running counted), `save` (after the hooks that report the kills) and `close` keep it current.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import replace
from datetime import datetime

from evictd.adapters.oom_counters import OomCounters
from evictd.clock import SYSTEM_CLOCK, Clock
from evictd.core.errors import EvictdError, SampleError, attempt
from evictd.core.oom import (
    OomReading,
    OomReport,
    OomState,
    PodOomKill,
    activity_after_cycle,
    cgroups_walk_needed,
    oom_feedback,
)
from evictd.core.oom_saved import ResumedOom
from evictd.cycle.finished import Cycle
from evictd.cycle.report import CycleReport, CycleStep
from evictd.record.oom_counters_file import OomCountersFile

# The runtime's containers of one pod (ID -> name); raises EvictdError when the runtime does not answer.
ContainerNames = Callable[[str], Mapping[str, str]]


class OomFeedback:
    """`dry_run`: evictions decided, not carried out (a function: the node's mode, asked each cycle). `saved`: the
    counters file (None: kills before this process are never counted)."""

    def __init__(self, counters: OomCounters, *, dry_run: bool | Callable[[], bool], container_names: ContainerNames,
                 clock: Clock = SYSTEM_CLOCK, saved: OomCountersFile | None = None) -> None:
        self.state = OomState()
        self.problems: tuple[SampleError, ...] = ()
        self.container_names = container_names
        self._counters = counters
        self._dry_run = dry_run
        self._clock = clock
        self._saved = saved
        self._read_at: datetime | None = None  # when the counters were last read (wall clock)

    def resume(self) -> ResumedOom | None:
        """Start from the counters the last run of this boot saved (before the first cycle); return what was
        kept (None without a counters file)."""
        if self._saved is None:
            return None
        resumed = self._saved.restore()
        self.state = resumed.state
        return resumed

    def save(self, cycle: Cycle) -> None:
        """Save the counters as last read (an after-cycle hook, after the kills were reported)."""
        if self._saved is not None and self._read_at is not None:
            self._saved.save(self.state, self._read_at)

    def close(self) -> None:
        """Write the last reading to the counters file (at stop)."""
        if self._saved is not None:
            self._saved.close()

    def observe(self, report: CycleReport) -> OomReport:
        """Read the counters now; return the kills since the last call, attributed, named and classified."""
        problems: list[SampleError] = []
        self._read_at = self._clock.wall()  # before reading: a later run counts only kills after it
        node = attempt(self._counters.node_kills, problems)
        pods = attempt(self._counters.pods_kills, problems)
        walk = cgroups_walk_needed(self.state, node, pods)
        cgroups = attempt(self._counters.cgroup_kills, problems) if walk else None
        activity = activity_after_cycle(report.decided.assessment, report.acted.evictions,
                                        bool(report.errors_of(CycleStep.EVICTION)),
                                        self._dry_run() if callable(self._dry_run) else self._dry_run)
        self.state, found = oom_feedback(self.state, OomReading(node=node, pods=pods, cgroups=cgroups), activity,
                                         self._clock.monotonic())
        self.problems = tuple(problems)
        if not found.pod_kills:
            return found
        return replace(found, pod_kills=tuple(self._named(found.pod_kills, report)))

    def _named(self, kills: tuple[PodOomKill, ...], report: CycleReport) -> list[PodOomKill]:
        keys = {pod.uid: pod.key for pod in report.observed.pods}
        if report.observed.summary is not None:
            for stats in report.observed.summary.pods:
                keys.setdefault(stats.pod_ref.uid, f"{stats.pod_ref.namespace}/{stats.pod_ref.name}")
        names: dict[str, Mapping[str, str]] = {}
        named = []
        for kill in kills:
            container_name = ""
            if kill.container_id:
                if kill.pod_uid not in names:
                    try:
                        names[kill.pod_uid] = self.container_names(kill.pod_uid)
                    except EvictdError:
                        names[kill.pod_uid] = {}  # the kill is still reported, by container ID
                container_name = names[kill.pod_uid].get(kill.container_id, "")
            named.append(replace(kill, pod_key=keys.get(kill.pod_uid, ""), container_name=container_name))
        return named
