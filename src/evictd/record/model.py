"""The recording's model: what one recorded cycle line holds, as typed values, and its codec (one JSON line).

A line (`evictd.record.recording` describes the format and how lines build on each other) decodes into a `Line`:
its run, cycle and times, the context written on a segment's first line (dry-run, configuration, layout, the
engine state the run started from), the pod list or its changes, the `Decision` (thresholds met, conditions,
node-level reclaim and its results, evictions, errors, the ranking with each pod's keys), and the Summaries.
`encode_line` writes a `Line` back as the very bytes the recorder writes; the recorder hands it parts it keeps as
text from cycle to cycle (`Encoded`: the Summaries, the ranking), which `encode_line` writes as they are
(`encode_line_parts`: the same text as the parts the recorder writes a chunk at a time).

What is read lazily, because a command may not need it: the ranking (a thousand pods every cycle under pressure)
is kept as the decoded JSON list and turned into `RankedEntry` values only when asked (`Ranking.entries`);
`Ranking.pods` gives the names alone. The configuration, pod list and Summaries are documents of formats of their
own (a KubeletConfiguration, v1 Pods, the Summary API: `simulate` decodes them), carried as decoded JSON.

`decode_line` raises `LineError` (a ValueError) naming the field that does not fit, e.g.
`decision.evicted[0].name is not a string`; a line of a newer format version says so.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction

from evictd.core.fs_layout import FsLayout
from evictd.core.ranking import KeyPart, SortKey, key_part_names, key_parts, named_key_parts
from evictd.core.signals import Signal

# Version 2 writes a Summary as what changed since the line before; version 1 (every Summary whole) is read too.
FORMAT_VERSION = 2
READ_VERSIONS = (1, 2)

Document = Mapping[str, object]
# A value of a pod's ranking keys: a number (a fraction written as a string), a flag, or null (no stats).
KeyValue = bool | int | str | None

# What a line may say (a line saying more is not one evictd wrote): a run id's length, a cycle number, a wall or
# monotonic time in seconds (before the year 10000).
MAX_RUN_CHARS = 64
MAX_CYCLE = 1 << 63
MAX_WALL_S = 253402300800.0

# Compact JSON text (one encoder: `json.dumps` with separators builds one per call).
dumps: Callable[[object], str] = json.JSONEncoder(separators=(",", ":")).encode


class LineError(ValueError):
    """A recorded line that does not fit the format; the message names the field."""


class Absent:
    """The type of ABSENT: a line that does not say (not None, which says "nothing")."""

    def __repr__(self) -> str:
        return "ABSENT"


ABSENT = Absent()


@dataclass(frozen=True, slots=True)
class Encoded:
    """A part of a line already encoded as compact JSON text (kept by the recorder from cycle to cycle)."""

    text: str


# --- the decision --------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ThresholdMet:
    """A threshold the cycle found met: its signal, value (a quantity, or a share of capacity), grace period."""

    signal: str
    quantity: str | None
    percentage: float | None
    grace_period_s: int | float
    grace_met: bool


@dataclass(frozen=True, slots=True)
class RecordedEviction:
    """A pod the cycle evicted, with what the kubelet writes about it (`conditions`: pod conditions as the API
    takes them)."""

    namespace: str
    name: str
    signal: str
    grace_period_s: int
    effective_grace_period_s: int
    reason: str
    message: str
    annotations: Mapping[str, str]
    conditions: tuple[Document, ...]

    @property
    def key(self) -> str:
        """The pod's namespace/name."""
        return f"{self.namespace}/{self.name}"


@dataclass(frozen=True, slots=True)
class ReclaimResult:
    """One node-level reclaim action that ran: what it freed, or why it failed."""

    action: str
    freed_bytes: int
    error: str | None

    def document(self) -> dict[str, object]:
        """The result as the recording writes it."""
        return {"action": self.action, "freedBytes": self.freed_bytes, "error": self.error}


@dataclass(frozen=True, slots=True)
class RankKeys:
    """The keys a pod was ranked by: memory and disk signals rank by exceedsRequests, priority and
    usageAboveRequest; pid.available by priority and processes (`exceeds_requests` ABSENT). None: no stats."""

    priority: int
    ranked_usage: KeyValue
    exceeds_requests: bool | Absent | None = ABSENT

    @property
    def usage_name(self) -> str:
        """The name of the usage key: `processes` (pid.available) or `usageAboveRequest`."""
        return "processes" if self.exceeds_requests is ABSENT else "usageAboveRequest"

    def document(self) -> dict[str, KeyValue]:
        """The keys by name, as the recording writes them."""
        if isinstance(self.exceeds_requests, Absent):
            return {"priority": self.priority, "processes": self.ranked_usage}
        return {"exceedsRequests": self.exceeds_requests, "priority": self.priority,
                "usageAboveRequest": self.ranked_usage}


@dataclass(frozen=True, slots=True)
class RankedEntry:
    """One pod of a recorded ranking."""

    pod: str
    uid: str
    critical: bool
    keys: RankKeys | None  # None: a line of an evictd that recorded the names alone


@dataclass(frozen=True, slots=True)
class Ranking:
    """A recorded ranking, in order: the decoded JSON list (`items`, turned into `RankedEntry` values when asked),
    or, written by the recorder, its text."""

    items: Sequence[object] = ()
    text: str | None = None

    def pods(self) -> list[str]:
        """Each ranked pod's namespace/name, in order."""
        return [str(item.get("pod")) if type(item) is dict else str(item) for item in self.items]

    def entries(self) -> tuple[RankedEntry, ...]:
        """The ranking as typed entries; raises LineError naming a field that does not fit."""
        return tuple(_ranked_entry(item, f"decision.ranking[{n}]") for n, item in enumerate(self.items))

    def encode(self) -> str:
        return self.text if self.text is not None else dumps(list(self.items))


@dataclass(frozen=True, slots=True)
class EvictionApiRefusal:
    """The Eviction API's refusal to evict a pod (softEvictionsThroughEvictionAPI): HTTP status (None: no answer),
    the reason (or its cause's, such as DisruptionBudget), the budget it names ("" when none), the API's message."""

    pod: str
    status: int | None
    reason: str
    budget: str
    message: str


@dataclass(frozen=True, slots=True)
class EvictionApiUse:
    """How a soft eviction used the Eviction API: each refusal in order, or why it went the kubelet's way
    (`bypassed`: a hard threshold met, or the deadline passed)."""

    refusals: tuple[EvictionApiRefusal, ...] = ()
    bypassed: str | None = None

    def document(self) -> dict[str, object]:
        if self.bypassed is not None:
            return {"bypassed": self.bypassed}
        return {"refusals": [{"pod": r.pod, "status": r.status, "reason": r.reason, "budget": r.budget,
                              "message": r.message} for r in self.refusals]}


@dataclass(frozen=True, slots=True)
class Decision:
    """What one cycle decided (as `simulate` reports a step), with the reclaim results, errors, and the ranking."""

    conditions: tuple[str, ...] = ()
    thresholds_met: tuple[ThresholdMet, ...] = ()
    reclaim: tuple[str, ...] = ()
    reclaim_succeeded: bool | None = None
    evicted: tuple[RecordedEviction, ...] = ()
    reclaim_results: tuple[ReclaimResult, ...] = ()
    errors: tuple[str, ...] | None = None
    eviction_api: EvictionApiUse | None = None
    # Why the pod list could not be used (None: it could), and whether the pods came from the node instead.
    pod_list_problem: str | None = None
    pods_from_node: bool = False
    ranking: Ranking = field(default_factory=Ranking)


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


# --- encoding ------------------------------------------------------------------------------------------------


def layout_document(layout: FsLayout) -> dict[str, object]:
    """The scenario form of a filesystem layout."""
    return {"dedicatedImageFs": layout.dedicated_imagefs, "splitContainerFs": layout.split_containerfs}


def _decision_head(decision: Decision) -> dict[str, object]:
    document: dict[str, object] = {
        "conditions": list(decision.conditions),
        "thresholdsMet": [{"signal": t.signal, "value": {"quantity": t.quantity} if t.quantity is not None
                           else {"percentage": t.percentage},
                           "gracePeriodSeconds": t.grace_period_s, "graceMet": t.grace_met}
                          for t in decision.thresholds_met],
        "reclaim": list(decision.reclaim),
        "reclaimSucceeded": decision.reclaim_succeeded,
        "evicted": [{"namespace": e.namespace, "name": e.name, "signal": e.signal,
                     "gracePeriodSeconds": e.grace_period_s,
                     "effectiveGracePeriodSeconds": e.effective_grace_period_s, "reason": e.reason,
                     "message": e.message, "annotations": dict(e.annotations), "conditions": list(e.conditions)}
                    for e in decision.evicted],
        "reclaimResults": [r.document() for r in decision.reclaim_results],
    }
    if decision.errors is not None:
        document["errors"] = list(decision.errors)
    if decision.eviction_api is not None:
        document["evictionApi"] = decision.eviction_api.document()
    if decision.pod_list_problem is not None:
        document["podListProblem"] = decision.pod_list_problem
        document["podsFromNode"] = decision.pods_from_node
    return document


def _text(value: Document | Encoded | None) -> str:
    return value.text if isinstance(value, Encoded) else dumps(value)


def encode_line(line: Line) -> bytes:
    """The line as the recorder writes it: compact JSON, its fields in the recorder's order, a newline."""
    return "".join(encode_line_parts(line)).encode()


def encode_line_parts(line: Line) -> list[str]:
    """`encode_line`'s text as the parts it is made of, not joined: the recorder writes them a bounded chunk at a
    time, so that a large line (a segment's first, with the whole pod list and Summary) is never one more copy
    of itself in memory, twice (text, then bytes)."""
    head: dict[str, object] = {"v": line.version, "run": line.run, "cycle": line.cycle, "wall": line.wall,
                               "now": line.now}
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
        # Pod by pod, each its own part: the recorder's list makes each pod's document as it is asked for
        # (`PodDocuments`), so the documents of a whole list are never all built at once, nor its text joined.
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
    text = [dumps(head)[:-1], *pods, ',"decision":', dumps(_decision_head(line.decision))[:-1], ',"ranking":',
            line.decision.ranking.encode(), "}"]
    if line.summary_changes is not None:
        text += [',"summaryChanges":', _text(line.summary_changes)]
    else:
        text += [',"summary":', _text(line.summary)]
    if line.after_reclaim is not None:
        text += [',"afterReclaim":', _text(line.after_reclaim)]
    text.append("}\n")
    return text


def _key_value_of(part: KeyPart) -> KeyValue:
    return str(part) if isinstance(part, Fraction) else part


def rank_keys(signal: Signal, key: SortKey) -> RankKeys:
    """The recorded form of a sort key `rank_pods_with_keys` gave for `signal`."""
    parts = named_key_parts(signal, key)
    priority = parts["priority"]
    assert isinstance(priority, int)
    if "processes" in parts:
        return RankKeys(priority=priority, ranked_usage=_key_value_of(parts["processes"]))
    exceeds = parts["exceedsRequests"]
    assert exceeds is None or isinstance(exceeds, bool)
    return RankKeys(priority=priority, ranked_usage=_key_value_of(parts["usageAboveRequest"]),
                    exceeds_requests=exceeds)


# The text of a sort key's parts, by signal: a template with a `%s` for each part (`key_part_names`).
_TEMPLATES: dict[Signal, str] = {}
_FLAG_TEXTS: dict[KeyPart, str] = {None: "null", True: "true", False: "false"}


def _number_text(part: KeyPart) -> str:
    """A usage part that is not an int: null (no stats), or a fraction (a string)."""
    return "null" if part is None else f'"{part}"'


def rank_keys_text(signal: Signal, key: SortKey) -> str:
    """`rank_keys` as compact JSON text, written directly (the recorder writes one per ranked pod per cycle)."""
    template = _TEMPLATES.get(signal)
    if template is None:
        template = _TEMPLATES[signal] = "{" + ",".join(f'"{name}":%s' for name in key_part_names(signal)) + "}"
    parts = key_parts(signal, key)
    if len(parts) == 2:  # priority, processes
        priority, usage = parts
        return template % (priority, usage if type(usage) is int else _number_text(usage))
    exceeds, priority, usage = parts  # exceedsRequests, priority, usageAboveRequest
    return template % (_FLAG_TEXTS[exceeds], priority, usage if type(usage) is int else _number_text(usage))


# --- decoding ------------------------------------------------------------------------------------------------


def _fail(path: str, what: str) -> LineError:
    return LineError(f"{path} is not {what}")


def _object(value: object, path: str) -> Document:
    if type(value) is not dict:
        raise _fail(path, "an object")
    return value


def _string(value: object, path: str) -> str:
    if type(value) is not str:
        raise _fail(path, "a string")
    return value


def _optional_string(value: object, path: str) -> str | None:
    return None if value is None else _string(value, path)


def _integer(value: object, path: str) -> int:
    if type(value) is not int:
        raise _fail(path, "an integer")
    return value


def _seconds(value: object, path: str) -> int | float:
    if type(value) is not int and type(value) is not float:
        raise _fail(path, "a number")
    return value


def _time(value: object, path: str, low: float) -> int | float:
    seconds = _seconds(value, path)
    if not low <= seconds < MAX_WALL_S:
        raise _fail(path, f"a time from {low:g} to {MAX_WALL_S:g} s")
    return seconds


def _flag(value: object, path: str) -> bool:
    if type(value) is not bool:
        raise _fail(path, "true or false")
    return value


def _list(document: Document, name: str, path: str) -> list[object]:
    value = document.get(name)
    if value is None:
        return []
    if type(value) is not list:
        raise _fail(f"{path}.{name}" if path else name, "a list")
    return value


def _strings(document: Document, name: str, path: str) -> tuple[str, ...]:
    return tuple(_string(item, f"{path}.{name}[{n}]") for n, item in enumerate(_list(document, name, path)))


def _threshold_met(value: object, path: str) -> ThresholdMet:
    item = _object(value, path)
    threshold = _object(item.get("value"), f"{path}.value")
    quantity = threshold.get("quantity")
    percentage = None if quantity is not None else _seconds(threshold.get("percentage"), f"{path}.value.percentage")
    return ThresholdMet(signal=_string(item.get("signal"), f"{path}.signal"),
                        quantity=_optional_string(quantity, f"{path}.value.quantity"),
                        percentage=None if percentage is None else float(percentage),
                        grace_period_s=_seconds(item.get("gracePeriodSeconds"), f"{path}.gracePeriodSeconds"),
                        grace_met=_flag(item.get("graceMet"), f"{path}.graceMet"))


def _eviction(value: object, path: str) -> RecordedEviction:
    item = _object(value, path)
    annotations = _object(item.get("annotations", {}), f"{path}.annotations")
    return RecordedEviction(
        namespace=_string(item.get("namespace"), f"{path}.namespace"),
        name=_string(item.get("name"), f"{path}.name"),
        signal=_string(item.get("signal"), f"{path}.signal"),
        grace_period_s=_integer(item.get("gracePeriodSeconds"), f"{path}.gracePeriodSeconds"),
        effective_grace_period_s=_integer(item.get("effectiveGracePeriodSeconds"),
                                          f"{path}.effectiveGracePeriodSeconds"),
        reason=_string(item.get("reason"), f"{path}.reason"),
        message=_string(item.get("message"), f"{path}.message"),
        annotations={_string(k, f"{path}.annotations"): _string(v, f"{path}.annotations.{k}")
                     for k, v in annotations.items()},
        conditions=tuple(_object(c, f"{path}.conditions[{n}]")
                         for n, c in enumerate(_list(item, "conditions", path))))


def _reclaim_result(value: object, path: str) -> ReclaimResult:
    item = _object(value, path)
    return ReclaimResult(action=_string(item.get("action"), f"{path}.action"),
                         freed_bytes=_integer(item.get("freedBytes", 0), f"{path}.freedBytes"),
                         error=_optional_string(item.get("error"), f"{path}.error"))


def _key_value(value: object, path: str) -> KeyValue:
    if value is None or isinstance(value, bool | int):
        return value
    if isinstance(value, str):
        try:
            Fraction(value)
        except ValueError:
            raise _fail(path, "a number") from None
        return value
    raise _fail(path, "a number")


def _rank_keys(value: object, path: str) -> RankKeys:
    keys = _object(value, path)
    priority = _integer(keys.get("priority"), f"{path}.priority")
    if "processes" in keys:
        return RankKeys(priority=priority, ranked_usage=_key_value(keys["processes"], f"{path}.processes"))
    flag = keys.get("exceedsRequests")
    exceeds = None if flag is None else _flag(flag, f"{path}.exceedsRequests")
    usage = _key_value(keys.get("usageAboveRequest"), f"{path}.usageAboveRequest")
    return RankKeys(priority=priority, ranked_usage=usage, exceeds_requests=exceeds)


def _ranked_entry(value: object, path: str) -> RankedEntry:
    if isinstance(value, str):  # names alone
        return RankedEntry(pod=value, uid="", critical=False, keys=None)
    item = _object(value, path)
    keys = item.get("keys")
    return RankedEntry(pod=_string(item.get("pod"), f"{path}.pod"), uid=_string(item.get("uid", ""), f"{path}.uid"),
                       critical=_flag(item.get("critical", False), f"{path}.critical"),
                       keys=None if keys is None else _rank_keys(keys, f"{path}.keys"))


def _eviction_api(value: object, path: str) -> EvictionApiUse:
    document = _object(value, path)
    if "bypassed" in document:
        return EvictionApiUse(bypassed=_string(document["bypassed"], f"{path}.bypassed"))
    refusals = []
    for n, item in enumerate(_list(document, "refusals", path)):
        where = f"{path}.refusals[{n}]"
        refusal = _object(item, where)
        status = refusal.get("status")
        refusals.append(EvictionApiRefusal(
            pod=_string(refusal.get("pod"), f"{where}.pod"),
            status=None if status is None else _integer(status, f"{where}.status"),
            reason=_string(refusal.get("reason"), f"{where}.reason"),
            budget=_string(refusal.get("budget"), f"{where}.budget"),
            message=_string(refusal.get("message"), f"{where}.message")))
    return EvictionApiUse(refusals=tuple(refusals))


def decode_decision(value: object, path: str = "decision") -> Decision:
    """The decision of a line (a line without one decided nothing recorded: an empty decision)."""
    if value is None:
        return Decision()
    document = _object(value, path)
    succeeded = document.get("reclaimSucceeded")
    problem = document.get("podListProblem")
    return Decision(
        conditions=_strings(document, "conditions", path),
        thresholds_met=tuple(_threshold_met(item, f"{path}.thresholdsMet[{n}]")
                             for n, item in enumerate(_list(document, "thresholdsMet", path))),
        reclaim=_strings(document, "reclaim", path),
        reclaim_succeeded=None if succeeded is None else _flag(succeeded, f"{path}.reclaimSucceeded"),
        evicted=tuple(_eviction(item, f"{path}.evicted[{n}]")
                      for n, item in enumerate(_list(document, "evicted", path))),
        reclaim_results=tuple(_reclaim_result(item, f"{path}.reclaimResults[{n}]")
                              for n, item in enumerate(_list(document, "reclaimResults", path))),
        errors=_strings(document, "errors", path) if "errors" in document else None,
        eviction_api=None if "evictionApi" not in document else _eviction_api(document["evictionApi"],
                                                                              f"{path}.evictionApi"),
        pod_list_problem=_optional_string(problem, f"{path}.podListProblem"),
        pods_from_node=_flag(document.get("podsFromNode", False), f"{path}.podsFromNode"),
        ranking=Ranking(items=_list(document, "ranking", path)))


def _layout(value: object) -> FsLayout:
    document = _object(value, "layout")
    unknown = sorted(set(document) - {"dedicatedImageFs", "splitContainerFs"})
    if unknown:
        raise LineError(f"layout.{unknown[0]} is not a layout field")
    return FsLayout(dedicated_imagefs=_flag(document.get("dedicatedImageFs", False), "layout.dedicatedImageFs"),
                    split_containerfs=_flag(document.get("splitContainerFs", False), "layout.splitContainerFs"))


def _pod_changes(value: object) -> PodChanges:
    document = _object(value, "podChanges")
    listed = {name: _list(document, name, "podChanges") if name in document else None
              for name in ("set", "removed", "order")}
    pods, removed, order = listed["set"], listed["removed"], listed["order"]
    return PodChanges(
        set=None if pods is None else tuple(_object(p, f"podChanges.set[{n}]") for n, p in enumerate(pods)),
        removed=None if removed is None else tuple(_string(i, f"podChanges.removed[{n}]")
                                                   for n, i in enumerate(removed)),
        order=None if order is None else tuple(_string(i, f"podChanges.order[{n}]") for n, i in enumerate(order)))


def _summary(document: Document, name: str) -> Document | None:
    value = document.get(name)
    return None if value is None else _object(value, name)


def _run(value: object) -> str:
    run = _string(value, "run")
    if len(run) > MAX_RUN_CHARS:
        raise _fail("run", f"a run id (at most {MAX_RUN_CHARS} characters)")
    return run


def _cycle(value: object) -> int:
    cycle = _integer(value, "cycle")
    if not 0 <= cycle < MAX_CYCLE:
        raise _fail("cycle", "a cycle number")
    return cycle


def _version(value: object) -> int:
    if type(value) is not int:
        raise _fail("v", "a format version")
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
    document = _object(json.loads(raw, parse_constant=_no_constant), "a line")
    version = _version(document.get("v"))
    pods = document.get("pods")
    dry_run = document.get("dryRun")
    config = document.get("config")
    layout = document.get("layout")
    changes = document.get("podChanges")
    state = document.get("engineState", ABSENT)
    return Line(
        version=version,
        run=_run(document.get("run", "")),
        cycle=_cycle(document.get("cycle", 0)),
        wall=_time(document.get("wall"), "wall", 0),
        now=_time(document.get("now"), "now", -MAX_WALL_S),
        dry_run=None if dry_run is None else _flag(dry_run, "dryRun"),
        config=None if config is None else _object(config, "config"),
        engine_state=state if state is ABSENT or state is None else _object(state, "engineState"),
        layout=None if layout is None else _layout(layout),
        pods=None if pods is None else [_object(p, f"pods[{n}]") for n, p in enumerate(_list(document, "pods", ""))],
        pod_changes=None if changes is None else _pod_changes(changes),
        decision=decode_decision(document.get("decision")),
        summary=_summary(document, "summary"),
        summary_changes=_summary(document, "summaryChanges"),
        after_reclaim=_summary(document, "afterReclaim"))
