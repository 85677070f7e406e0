"""The recorded cycle that `evictd explain` is about: found in the recording (by pod, decision id, the last
eviction or the newest cycle) from each cycle's head, and replayed through the eviction manager up to it."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass

from evictd.commands.replay import replayed_runs
from evictd.core.engine import EngineConfig, EngineState
from evictd.core.errors import EvictdError
from evictd.core.fs_layout import FsLayout
from evictd.cycle.ids import decision_id
from evictd.cycle.report import CycleReport
from evictd.record.line_json import Document
from evictd.record.recording import Record


@dataclass(frozen=True, slots=True)
class Explained:
    """One recorded cycle, replayed: the manager's report of it, with the run's configuration and layout."""

    record: Record
    report: CycleReport
    config: EngineConfig
    layout: FsLayout
    start_state: EngineState  # the state the run was replayed from
    restored: bool | None  # the run started from a restored state (None: the recording does not say)


# --- finding the cycle ---------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class RecordHead:
    """What finding a cycle takes of a recorded one: a record without its readings, so that the heads of a whole
    recording fit in a reader's memory (the cycle itself is read again, replayed: `replay_until`)."""

    run: str
    cycle: int
    wall: float
    read_stats: bool
    evicted: tuple[tuple[str, str, str], ...]  # each pod evicted: namespace/name, name, UID ("" unknown)


def record_head(record: Record) -> RecordHead:
    """The head of `record`."""
    evictions = record.decision.evicted
    uids = _uids(record) if evictions else {}
    return RecordHead(record.run, record.cycle, record.wall, record.summary is not None,
                      tuple((e.key, e.name, uids.get(e.key, "")) for e in evictions))


def _uids(record: Record) -> dict[str, str]:
    """The UID of each pod of the cycle's list by namespace/name (cached for the same list object)."""
    last = _LAST_UIDS[0]
    if last is not None and last[0] is record.pods:
        return last[1]
    uids: dict[str, str] = {}
    for pod in record.pods:
        meta = pod.get("metadata")
        if isinstance(meta, Mapping) and meta.get("uid"):
            uids[f"{meta.get('namespace') or 'default'}/{meta.get('name')}"] = str(meta["uid"])
    _LAST_UIDS[0] = (record.pods, uids)
    return uids


# The last pod list `_uids` read, and its UIDs.
_LAST_UIDS: list[tuple[Sequence[Document], dict[str, str]] | None] = [None]


def find_eviction(heads: Sequence[RecordHead], pod: str | None) -> tuple[int, str]:
    """Return the index of the last cycle that evicted `pod` (namespace/name, name or UID; None: any pod) and
    the pod's namespace/name; raise EvictdError naming the pods evicted when there is none."""
    for index in range(len(heads) - 1, -1, -1):
        for key, name, uid in heads[index].evicted:
            if pod is None or pod in (key, name) or (uid and uid == pod):
                return index, key
    evicted = sorted({key for head in heads for key, _, _ in head.evicted})
    if pod is None:
        raise EvictdError("no eviction in the recording")
    known = f"evicted were: {', '.join(evicted)}" if evicted else "it holds no eviction"
    raise EvictdError(f"no eviction of {pod} in the recording ({known})")


def find_decision(heads: Sequence[RecordHead], decision: str) -> int:
    """Return the index of the cycle `decision` (`<run>/<cycle>`); raise EvictdError when not recorded."""
    for index, head in enumerate(heads):
        if decision_id(head.run, head.cycle) == decision:
            return index
    raise EvictdError(f"no decision {decision} in the recording (decision ids are <run>/<cycle>, as logged)")


def replay_until(run: Iterable[Record], target: RecordHead) -> Explained:
    """Replay the run of `target` from its first recorded cycle up to that one; `run` reads that run's records
    (it may hold others, and cycles after the target: they are not read)."""
    if not target.read_stats:
        raise EvictdError(f"cycle {decision_id(target.run, target.cycle)} read no stats: nothing was decided")

    def until_target() -> Iterator[Record]:
        for record in run:
            if record.run == target.run:
                yield record
                if record.cycle == target.cycle and record.wall == target.wall:
                    return

    last: tuple[Record, CycleReport] | None = None
    replayed = next(replayed_runs(until_target()), None)
    if replayed is not None:
        for last in replayed.cycles:  # noqa: B007 (the last one is the one explained)
            pass
    return replayed_cycle(None if replayed is None or last is None else Explained(
        last[0], last[1], replayed.config, replayed.layout, replayed.start_state, replayed.restored), target)


@dataclass(frozen=True, slots=True)
class _Pass:
    """One pass over a recording: each cycle's head, and the last cycle and the last eviction replayed."""

    heads: list[RecordHead]
    last: Explained | None
    last_eviction: Explained | None


def replay_all(records: Iterable[Record]) -> _Pass:
    """Read `records` once, keeping each one's head and replaying every run (`--last` and `--now` explain the
    newest: one pass instead of one for the heads and one more for the run explained)."""
    heads: list[RecordHead] = []

    def counted() -> Iterator[Record]:
        for record in records:
            heads.append(record_head(record))
            yield record

    last = last_eviction = None
    for run in replayed_runs(counted()):
        for record, report in run.cycles:
            last = Explained(record, report, run.config, run.layout, run.start_state, run.restored)
            if record.decision.evicted:
                last_eviction = last
    return _Pass(heads, last, last_eviction)


def replayed_cycle(explained: Explained | None, target: RecordHead) -> Explained:
    """`explained`, when it is the cycle `target` (else an EvictdError saying why that cycle is not replayed)."""
    if not target.read_stats:
        raise EvictdError(f"cycle {decision_id(target.run, target.cycle)} read no stats: nothing was decided")
    if explained is None or (explained.record.run, explained.record.cycle, explained.record.wall) != (
            target.run, target.cycle, target.wall):
        raise EvictdError(f"cycle {decision_id(target.run, target.cycle)} cannot be replayed (the recording changed "
                          "while it was read, or its readings do not decode)")
    return explained
