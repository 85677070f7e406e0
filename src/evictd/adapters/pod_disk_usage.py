"""Pods' disk usage measured away from the housekeeping cycle: walked in rounds, read back with its age.

Each pod's emptyDir volumes and log folders are walked (`disk_usage`) without the cycle waiting, as the kubelet's
``fsResourceAnalyzer`` measures asynchronously and reports its last figure with its time. `PodDiskWalker` (in the
disk walker process) advances one round per pod per pass within `entry_budget` entries, resuming where it paused;
a round's figures are published only whole, stamped with its start (as the kubelet stamps ``metav1.Now()`` before
``du``); an unreadable folder costs only itself (`problem` names it). `PodDiskStore` (in the daemon) holds the wanted
pods and their last figures behind a lock held only for lookups: `readings` gives each pod its last figures however
old (never 0), with a stable `SampleError` past `stale_after_s`; `wait_for_figures` is the manager's bounded
`DiskFigures` wait (docs/how-a-cycle-decides.md step 9). Ages are on the system-wide monotonic clock.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Generator, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import NamedTuple

from evictd.adapters.disk_usage import DirUsage, DiskUsageCache, WalkBudget, shown_path
from evictd.adapters.pod_dirs import container_log_dirs, volume_dirs
from evictd.clock import SYSTEM_CLOCK, Clock
from evictd.core.errors import ConfigError, SampleError

# Entries (lstat calls) one pod's round may look at per pass (~0.7 s of walking); bigger trees take several passes.
DEFAULT_ENTRY_BUDGET = 250_000

# The source of every problem the store reports about a pod's disk figures: this, then "<namespace>/<name>".
POD_DISK_SOURCE_PREFIX = "disk usage of pod "

# Figures older than this are reported (still used): twice the kubelet's volumeStatsAggPeriod (1 min).
DEFAULT_STALE_AFTER_S = 120.0


class PodKey(NamedTuple):
    """What names a pod's folders: its UID (volumes) and namespace, name and UID (log folder). A named tuple:
    hashed and compared for every pod every cycle, in C."""

    uid: str
    namespace: str
    name: str


@dataclass(frozen=True, slots=True)
class SpaceUsed:
    """Allocated bytes and inodes of one volume or log folder."""

    used_bytes: int
    inodes_used: int


@dataclass(frozen=True, slots=True)
class PodDiskFigures:
    """One completed round over a pod: its volumes and log folders, when it began (monotonic and wall), and
    `problem` (the first unreadable part and how many more; unreadable folders left out, partial ones counted)."""

    pod: PodKey
    measured_at_monotonic: float
    measured_at_wall: float
    volumes: tuple[tuple[str, SpaceUsed], ...] = ()
    logs: tuple[tuple[str, SpaceUsed], ...] = ()
    problem: SampleError | None = None


class PodDiskWalker:
    """Measures pods' volumes and log folders in rounds of at most `entry_budget` entries per pod and pass; owns its
    `DiskUsageCache` (one thread). ConfigError for an `entry_budget` below 1."""

    def __init__(self, *, kubelet_root: str, pod_logs_dir: str, entry_budget: int = DEFAULT_ENTRY_BUDGET,
                 clock: Clock = SYSTEM_CLOCK) -> None:
        if entry_budget < 1:
            raise ConfigError("must be at least 1", key="entry_budget", value=entry_budget)
        self._kubelet_root = kubelet_root
        self._pod_logs_dir = pod_logs_dir
        self._entry_budget = entry_budget
        self._cache = DiskUsageCache(clock=clock)
        self._clock = clock
        # A pod's measurement in progress: the paused generator and the budget it draws on.
        self._rounds: dict[PodKey, tuple[Generator[None, None, PodDiskFigures], WalkBudget]] = {}

    def rounds_in_progress(self) -> frozenset[PodKey]:
        """Return the pods whose round paused on its budget and goes on next pass."""
        return frozenset(self._rounds)

    def run_pass(self, pods: Iterable[PodKey]) -> Iterator[PodDiskFigures]:
        """Advance the round of every pod in `pods` by one budget; yield the figures of each round that
        completes, as it completes. Rounds of pods no longer listed are dropped."""
        wanted = dict.fromkeys(pods)
        for gone in [pod for pod in self._rounds if pod not in wanted]:
            self._rounds.pop(gone)[0].close()
        self._cache.start_cycle()
        for pod in wanted:
            if pod not in self._rounds:
                budget = WalkBudget(self._entry_budget)
                self._rounds[pod] = (self._round(pod, budget), budget)
            steps, budget = self._rounds[pod]
            budget.entries_left = self._entry_budget
            try:
                next(steps)
            except StopIteration as done:
                del self._rounds[pod]
                yield done.value

    def _round(self, pod: PodKey, budget: WalkBudget) -> Generator[None, None, PodDiskFigures]:
        """Measure every volume and log folder of `pod`, pausing whenever `budget` is spent."""
        started = self._clock.monotonic()
        started_wall = self._clock.wall().timestamp()
        problems: list[SampleError] = []
        volumes: tuple[tuple[str, SpaceUsed], ...] = ()
        logs: tuple[tuple[str, SpaceUsed], ...] = ()
        if pod.uid:
            volumes = yield from self._folders(lambda: volume_dirs(self._kubelet_root, pod.uid), budget, problems)
        if pod.uid and pod.name and pod.namespace:
            logs = yield from self._folders(
                lambda: container_log_dirs(self._pod_logs_dir, pod.namespace, pod.name, pod.uid), budget, problems)
        return PodDiskFigures(pod, started, started_wall, volumes, logs, _first(problems))

    def _folders(self, listed: Callable[[], list[tuple[str, str]]], budget: WalkBudget,
                 problems: list[SampleError]) -> Generator[None, None, tuple[tuple[str, SpaceUsed], ...]]:
        """Measure each (name, folder) `listed` returns; what cannot be read is added to `problems`."""
        try:
            folders = listed()
        except SampleError as exc:
            problems.append(exc)
            return ()
        measured = []
        for name, path in folders:
            try:
                usage = yield from self._cache.walk(path, budget)
            except SampleError as exc:
                problems.append(exc)
                continue
            if usage is None:
                continue
            if usage.unreadable is not None:
                problems.append(SampleError(shown_path(path), f"counted without {usage.unreadable}"))
            measured.append((name, _space(usage)))
        return tuple(measured)


def _space(usage: DirUsage) -> SpaceUsed:
    return SpaceUsed(usage.used_bytes, usage.inodes_used)


def _first(problems: Sequence[SampleError]) -> SampleError | None:
    """One error for a round's problems: the first, saying how many more there were."""
    if len(problems) <= 1:
        return problems[0] if problems else None
    first = problems[0]
    return SampleError(first.source, f"{first.reason} (and {len(problems) - 1} more unreadable folders)")


@dataclass(frozen=True, slots=True)
class PodDiskReading:
    """What the cycle uses of a pod's disk figures: its last `figures` (None: never measured) and `problems` to
    report (part unreadable, figures stale, none yet after `stale_after_s`). Neither: not measured yet, not overdue."""

    figures: PodDiskFigures | None = None
    problems: tuple[SampleError, ...] = ()


NOT_MEASURED_YET = PodDiskReading()


class PodDiskStore:
    """The pods the cycle wants measured and the last figures of each, shared between threads: `want` and `readings`
    (the cycle's) take the lock once for lookups only; `record` stores arriving figures; `wait_for_wanted` lets the
    feeding thread sleep until the wanted pods change."""

    def __init__(self, *, stale_after_s: float = DEFAULT_STALE_AFTER_S,
                 clock: Clock = SYSTEM_CLOCK) -> None:
        self.stale_after_s = stale_after_s
        self._clock = clock
        # A plain lock for the cycle's lookups (entered in C); the condition on it only wakes the feeder.
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        # ... and wakes a cycle waiting for pods' first figures (`wait_for_figures`).
        self._recorded = threading.Condition(self._lock)
        # pod -> the cycle's own wanted key (figures kept under it, not each line's copy) and when first wanted
        self._wanted: dict[PodKey, tuple[PodKey, float]] = {}
        self._wanted_order: tuple[PodKey, ...] = ()
        self._version = 0
        # pod -> its last figures and the reading they give while fresh (built once, when recorded)
        self._latest: dict[PodKey, tuple[PodDiskFigures, PodDiskReading]] = {}

    def want(self, pods: Iterable[PodKey]) -> None:
        """Measure these pods from now on (and only these); forget the figures of the others."""
        order = tuple(dict.fromkeys(pods))
        with self._lock:
            if order == self._wanted_order:
                return
            now = self._clock.monotonic()
            self._wanted = {pod: (pod, self._wanted.get(pod, (pod, now))[1]) for pod in order}
            self._wanted_order = order
            self._latest = {pod: latest for pod, latest in self._latest.items() if pod in self._wanted}
            self._version += 1
            self._changed.notify_all()

    def wanted(self) -> tuple[int, tuple[PodKey, ...]]:
        """Return the version of the wanted pods and the pods, in the order the cycle listed them."""
        with self._lock:
            return self._version, self._wanted_order

    def wait_for_wanted(self, after_version: int, timeout_s: float,
                        until: Callable[[], bool] = lambda: False) -> tuple[int, tuple[PodKey, ...]]:
        """Wait up to `timeout_s` for the wanted pods to differ from `after_version`, or for `until` to hold when
        `nudge` wakes the wait; return them as `wanted`."""
        with self._changed:
            self._changed.wait_for(lambda: self._version != after_version or until(), timeout_s)
            return self._version, self._wanted_order

    def nudge(self) -> None:
        """Wake every `wait_for_wanted` to look at its `until` again (a stop)."""
        with self._changed:
            self._changed.notify_all()

    def record(self, figures: PodDiskFigures) -> None:
        """Keep `figures` as the pod's latest, if the pod is still wanted and they are not older."""
        with self._lock:
            wanted = self._wanted.get(figures.pod)
            previous = self._latest.get(figures.pod)
            if wanted is None or (previous is not None and
                                  previous[0].measured_at_monotonic > figures.measured_at_monotonic):
                return
        if figures.pod is not wanted[0]:
            figures = PodDiskFigures(wanted[0], figures.measured_at_monotonic, figures.measured_at_wall,
                                     figures.volumes, figures.logs, figures.problem)
        problem = figures.problem
        reading = PodDiskReading(figures=figures, problems=() if problem is None else (
            SampleError(_source(figures.pod), f"{problem.source}: {problem.reason}"),))
        with self._lock:
            previous = self._latest.get(figures.pod)
            if figures.pod in self._wanted and (
                    previous is None or previous[0].measured_at_monotonic <= figures.measured_at_monotonic):
                self._latest[figures.pod] = (figures, reading)
                self._recorded.notify_all()

    def wait_for_figures(self, pods: Sequence[PodKey], timeout_s: float) -> bool:
        """Wait up to `timeout_s` until every pod of `pods` has figures; return whether they all do (a pod no longer
        wanted never does)."""
        with self._recorded:
            return self._recorded.wait_for(lambda: all(pod in self._latest for pod in pods), timeout_s)

    def latest(self, pod: PodKey) -> PodDiskFigures | None:
        """Return the pod's last figures whatever their age (for tests and reports; the cycle uses `readings`)."""
        with self._lock:
            latest = self._latest.get(pod)
        return latest[0] if latest is not None else None

    def readings(self, pods: Sequence[PodKey], now: float) -> list[PodDiskReading]:
        """Return, for each pod, its last figures at monotonic time `now` (however old) and what to report."""
        with self._lock:
            latest = [self._latest.get(pod) for pod in pods]
            wanted = self._wanted  # `want` replaces this dictionary, never changes it: safe to read after
        stale_after_s = self.stale_after_s
        result = []
        for pod, found in zip(pods, latest, strict=True):
            if found is None:
                waited = now - wanted.get(pod, (pod, now))[1]
                result.append(NOT_MEASURED_YET if waited <= stale_after_s else PodDiskReading(problems=(SampleError(
                    _source(pod), f"not measured within {stale_after_s:.0f} s of the pod being first seen: counted "
                                  "as absent; the disk walker is behind or not running"),)))
                continue
            figures, reading = found
            if now - figures.measured_at_monotonic > stale_after_s:
                # The same words every cycle (the age is in the figures' time and in /metrics): logged once.
                reading = PodDiskReading(figures=figures, problems=(*reading.problems, SampleError(
                    _source(pod), f"last complete measurement older than {stale_after_s:.0f} s: used as it is, as "
                                  "the kubelet uses its last (a walk that long, or the disk walker behind or not "
                                  "running)")))
            result.append(reading)
        return result


def _source(pod: PodKey) -> str:
    return f"{POD_DISK_SOURCE_PREFIX}{pod.namespace}/{pod.name}"
