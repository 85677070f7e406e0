"""The recording's model: what one recorded cycle line holds, as typed values, and its codec (one JSON line).

A line (format: `evictd.record.recording`) decodes into a `Line`: run, cycle, times, a segment's context (dry-run,
configuration, layout, start engine state), pods or their changes, the `Decision` (`evictd.record.decision`) and
the Summaries. `encode_line` writes a `Line` back as the very bytes the recorder writes (`encode_line_parts`: the
same parts the recorder writes in chunks, with the texts it keeps, `Encoded`). Configuration, pods and Summaries
stay decoded JSON (`simulate` decodes them). `decode_line` raises `LineError` (a ValueError) naming the field that
does not fit; a newer format version says so.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass

from evictd.core.fs_layout import FsLayout
from evictd.record.decision import Decision, decision_document, decode_decision
from evictd.record.line_json import (
    ABSENT,
    Absent,
    Document,
    LineError,
    dumps,
    fail,
    flag,
    integer,
    json_list,
    json_object,
    json_string,
    seconds,
)

# Version 2 writes a Summary as what changed since the line before; version 1 (every Summary whole) is read too.
FORMAT_VERSION = 2
READ_VERSIONS = (1, 2)

# What a line may say (more is not evictd's): a run id's length, a cycle number, times before the year 10000.
MAX_RUN_CHARS = 64
MAX_CYCLE = 1 << 63
MAX_WALL_S = 253402300800.0

@dataclass(frozen=True, slots=True)
class Encoded:
    """A part of a line already encoded as compact JSON text (kept by the recorder from cycle to cycle)."""

    text: str


# --- the line ------------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PodChanges:
    """A pod list as what changed since the list before: pods added or changed, ids gone, and the new order of ids
    when it is not the old one with new pods at the end."""

    set: tuple[Document, ...] | None = None
    removed: tuple[str, ...] | None = None
    order: tuple[str, ...] | None = None


@dataclass(frozen=True, slots=True)
class Line:
    """One recorded cycle line, as written (context fields None or ABSENT where the line does not carry them)."""

    run: str
    cycle: int
    wall: float
    now: float
    decision: Decision
    version: int = FORMAT_VERSION
    # The run's place among the recording's runs: one more than the largest in the folder at its start (None: none).
    sequence: int | None = None
    dry_run: bool | None = None
    config: Document | None = None
    engine_state: Document | Absent | None = ABSENT
    layout: FsLayout | None = None
    pods: Sequence[Document] | None = None
    pod_changes: PodChanges | None = None
    # The Summary: whole (None: the stats could not be read), or as changes from the last one (`summary_json`).
    summary: Document | Encoded | None = None
    summary_changes: Document | Encoded | None = None
    after_reclaim: Document | Encoded | None = None
    # The Summary read after the wait for pods' disk figures, which the disk ranking ranked on (whole; None: none).
    after_disk_wait: Document | Encoded | None = None


# --- encoding ------------------------------------------------------------------------------------------------


def layout_document(layout: FsLayout) -> dict[str, object]:
    """The scenario form of a filesystem layout."""
    return {"dedicatedImageFs": layout.dedicated_imagefs, "splitContainerFs": layout.split_containerfs}


def _text(value: Document | Encoded | None) -> str:
    return value.text if isinstance(value, Encoded) else dumps(value)


def encode_line(line: Line) -> bytes:
    """The line as the recorder writes it: compact JSON, its fields in the recorder's order, a newline."""
    return "".join(encode_line_parts(line)).encode()


def encode_line_parts(line: Line) -> list[str]:
    """`encode_line`'s text as its unjoined parts: the recorder writes them a chunk at a time, so a large line is
    never another whole copy in memory."""
    head: dict[str, object] = {"v": line.version, "run": line.run, "cycle": line.cycle}
    if line.sequence is not None:
        head["seq"] = line.sequence  # right after the cycle: segment_files reads it from a segment's first bytes
    head.update(wall=line.wall, now=line.now)
    if line.dry_run is not None:
        head["dryRun"] = line.dry_run
    if line.config is not None:
        head["config"] = line.config
    if not isinstance(line.engine_state, Absent):
        head["engineState"] = line.engine_state
    if line.layout is not None:
        head["layout"] = layout_document(line.layout)
    pods: list[str] = []
    if line.pods is not None:
        # Pod by pod, each its own part, each document made as asked (`PodDocuments`): never all built at once.
        pods.append(',"pods":[')
        for index, pod in enumerate(line.pods):
            if index:
                pods.append(",")
            pods.append(dumps(pod))
        pods.append("]")
    elif line.pod_changes is not None:
        changes = line.pod_changes
        head["podChanges"] = {name: list(value) for name, value in (
            ("set", changes.set), ("removed", changes.removed), ("order", changes.order)) if value is not None}
    text = [dumps(head)[:-1], *pods, ',"decision":', dumps(decision_document(line.decision))[:-1], ',"ranking":',
            line.decision.ranking.encode(), "}"]
    if line.summary_changes is not None:
        text += [',"summaryChanges":', _text(line.summary_changes)]
    else:
        text += [',"summary":', _text(line.summary)]
    if line.after_reclaim is not None:
        text += [',"afterReclaim":', _text(line.after_reclaim)]
    if line.after_disk_wait is not None:
        text += [',"afterDiskWait":', _text(line.after_disk_wait)]
    text.append("}\n")
    return text


# --- decoding ------------------------------------------------------------------------------------------------


def _time(value: object, path: str, low: float) -> int | float:
    time_s = seconds(value, path)
    if not low <= time_s < MAX_WALL_S:
        raise fail(path, f"a time from {low:g} to {MAX_WALL_S:g} s")
    return time_s


def _layout(value: object) -> FsLayout:
    document = json_object(value, "layout")
    unknown = sorted(set(document) - {"dedicatedImageFs", "splitContainerFs"})
    if unknown:
        raise LineError(f"layout.{unknown[0]} is not a layout field")
    return FsLayout(dedicated_imagefs=flag(document.get("dedicatedImageFs", False), "layout.dedicatedImageFs"),
                    split_containerfs=flag(document.get("splitContainerFs", False), "layout.splitContainerFs"))


def _pod_changes(value: object) -> PodChanges:
    document = json_object(value, "podChanges")
    listed = {name: json_list(document, name, "podChanges") if name in document else None
              for name in ("set", "removed", "order")}
    pods, removed, order = listed["set"], listed["removed"], listed["order"]
    return PodChanges(
        set=None if pods is None else tuple(json_object(p, f"podChanges.set[{n}]") for n, p in enumerate(pods)),
        removed=None if removed is None else tuple(json_string(i, f"podChanges.removed[{n}]")
                                                   for n, i in enumerate(removed)),
        order=None if order is None else tuple(json_string(i, f"podChanges.order[{n}]")
                                               for n, i in enumerate(order)))


def _summary(document: Document, name: str) -> Document | None:
    value = document.get(name)
    return None if value is None else json_object(value, name)


def _run(value: object) -> str:
    run = json_string(value, "run")
    if len(run) > MAX_RUN_CHARS:
        raise fail("run", f"a run id (at most {MAX_RUN_CHARS} characters)")
    return run


def _cycle(value: object) -> int:
    cycle = integer(value, "cycle")
    if not 0 <= cycle < MAX_CYCLE:
        raise fail("cycle", "a cycle number")
    return cycle


def _version(value: object) -> int:
    if type(value) is not int:
        raise fail("v", "a format version")
    if value > FORMAT_VERSION:
        raise LineError(f"format version {value} is newer than this evictd reads (up to {FORMAT_VERSION}): "
                        "written by a newer evictd")
    if value not in READ_VERSIONS:
        raise LineError(f"format version {value} is not one evictd wrote")
    return value


def _no_constant(name: str) -> object:
    raise LineError(f"{name} is not JSON")


def decode_line(raw: bytes | str) -> Line:
    """The line `raw` (one JSON object); raises LineError naming what does not fit (ValueError for bad JSON,
    RecursionError for JSON nested too deeply)."""
    document = json_object(json.loads(raw, parse_constant=_no_constant), "a line")
    version = _version(document.get("v"))
    pods = document.get("pods")
    dry_run = document.get("dryRun")
    config = document.get("config")
    layout = document.get("layout")
    changes = document.get("podChanges")
    state = document.get("engineState", ABSENT)
    sequence = document.get("seq")
    return Line(
        version=version,
        run=_run(document.get("run", "")),
        cycle=_cycle(document.get("cycle", 0)),
        sequence=None if sequence is None else _cycle(sequence),
        wall=_time(document.get("wall"), "wall", 0),
        now=_time(document.get("now"), "now", -MAX_WALL_S),
        dry_run=None if dry_run is None else flag(dry_run, "dryRun"),
        config=None if config is None else json_object(config, "config"),
        engine_state=state if state is ABSENT or state is None else json_object(state, "engineState"),
        layout=None if layout is None else _layout(layout),
        pods=None if pods is None else [json_object(p, f"pods[{n}]")
                                        for n, p in enumerate(json_list(document, "pods", ""))],
        pod_changes=None if changes is None else _pod_changes(changes),
        decision=decode_decision(document.get("decision")),
        summary=_summary(document, "summary"),
        summary_changes=_summary(document, "summaryChanges"),
        after_reclaim=_summary(document, "afterReclaim"),
        after_disk_wait=_summary(document, "afterDiskWait"))
