"""Every stats source behind one check: figures it could not decode or could not have measured are unknown.

Wraps the configured stats source so the manager gets a Summary without impossible figures (`evictd.core.plausible`,
bounded by MemTotal, re-read until once readable), and keeps in `refused` what the last Summary lost (undecodable
and impossible); `RefusalLog` logs them once per episode and counts them. The source's errors pass through; a
Summary with nothing refused is passed on as the same object.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from evictd.adapters import procfs
from evictd.core.errors import DecodeError, SampleError
from evictd.core.plausible import Refusal, plausible_summary, refusal_of_decode
from evictd.core.pods import Pod
from evictd.core.summary import Summary
from evictd.cycle.manager import StatsSource
from evictd.log import Log
from evictd.observe.metrics import Metrics

# An episode ends once the figure was sound (or absent) this long: an alternating figure is logged once.
EPISODE_END_S = 300.0


def machine_memory_bytes(proc_root: str = "/proc") -> Callable[[], int | None]:
    """Return a reader of the node's MemTotal in bytes (None while unreadable; read once it has been)."""
    known: list[int] = []

    def read() -> int | None:
        if not known:
            try:
                known.append(procfs.mem_total_bytes(proc_root))
            except SampleError:
                return None
        return known[0]

    return read


class PlausibleStats:
    """A StatsSource: the Summaries of `source` without their impossible figures; `refused` lists the figures the
    last one lost (undecodable and impossible)."""

    def __init__(self, source: StatsSource, memory_capacity: Callable[[], int | None]) -> None:
        self.source = source
        self._memory_capacity = memory_capacity
        self.refused: tuple[Refusal, ...] = ()

    def summary(self, pods: Sequence[Pod] = (), *, reread: bool = False,
                runtime_wait_s: float | None = None) -> Summary:
        """Return the wrapped source's Summary (`reread` and `runtime_wait_s` passed on), impossible figures unknown.
        Raises what the source raises."""
        self.refused = ()
        summary = self.source.summary(pods, reread=reread, runtime_wait_s=runtime_wait_s)
        undecoded: Sequence[DecodeError] = getattr(self.source, "refused", ())
        summary, impossible = plausible_summary(summary, self._memory_capacity())
        self.refused = tuple(refusal_of_decode(error) for error in undecoded) + impossible
        return summary

    def memory_reading(self) -> Callable[[], Summary] | None:
        """How to read the node's memory alone through this check (the source's `memory_reading`, impossible figures
        unknown, nothing logged); None when the source has none."""
        read = self.source.memory_reading()
        if read is None:
            return None

        def plausible() -> Summary:
            return plausible_summary(read(), self._memory_capacity())[0]

        return plausible


class RefusalLog:
    """Logs a refused figure once when its episode starts (field, value, bound, reason) and once when it ends
    (sound for EPISODE_END_S, with how many cycles refused it); counts every refusal in
    evictd_figures_refused_total{field, kind}."""

    def __init__(self, log: Log, metrics: Metrics) -> None:
        self._log = log
        self._metrics = metrics
        # field -> [last refused at (monotonic s), cycles refused in the episode]
        self._episodes: dict[str, list[float]] = {}

    def update(self, number: int, now: float, refused: Sequence[Refusal]) -> None:
        for refusal in refused:
            self._metrics.figures_refused.labels(refusal.family, refusal.kind).inc()
            episode = self._episodes.get(refusal.field)
            if episode is None:
                self._episodes[refusal.field] = [now, 1]
                self._log.warning("figure refused: it is unknown, the rest of the stats are used", cycle=number,
                                  field=refusal.field, value=repr(refusal.value), bound=refusal.bound,
                                  kind=refusal.kind, reason=refusal.reason)
            else:
                episode[0] = now
                episode[1] += 1
        for field, (last, count) in list(self._episodes.items()):
            if now - last >= EPISODE_END_S:
                del self._episodes[field]
                self._log.info("figure sound again", cycle=number, field=field, cycles_refused=int(count),
                               sound_for_s=EPISODE_END_S)
