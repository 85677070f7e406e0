"""The decision a recorded line holds: what one cycle decided, made from its report (`decision_of`), and its JSON
(`decision_document`, `decode_decision`).

Parts are the report's where the recording holds them as they are (`EvictionApiUse`, `PodListProblem`), else
recorded forms made in one place (each `of`): thresholds met, evictions, reclaim results, the ranking with keys
(also written as text by `RankingEncoder`). The ranking is decoded lazily (`Ranking.entries`; `Ranking.pods` gives
the names alone).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction

from evictd.core.engine import Eviction, ThresholdStatus
from evictd.core.pods import Pod, is_critical_pod
from evictd.core.ranking import KeyPart, SortKey, key_part_names, key_parts, named_key_parts
from evictd.core.signals import Signal
from evictd.cycle.render import JsonObject, seconds_json
from evictd.cycle.report import CycleReport, EvictionApiRefusal, EvictionApiUse, PodListProblem, ReclaimResult
from evictd.record.line_json import (
    ABSENT,
    Absent,
    Document,
    dumps,
    fail,
    flag,
    integer,
    json_list,
    json_object,
    json_string,
    optional_string,
    seconds,
    strings,
)

# A value of a pod's ranking keys: a number (a fraction written as a string), a flag, or null (no stats).
KeyValue = bool | int | str | None


# --- the decision --------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ThresholdMet:
    """A threshold the cycle found met: its signal, value (a quantity, or a share of capacity), grace period."""

    signal: str
    quantity: str | None
    percentage: float | None
    grace_period_s: int | float
    grace_met: bool

    @classmethod
    def of(cls, status: ThresholdStatus) -> ThresholdMet:
        threshold = status.threshold
        quantity = threshold.value.quantity
        return cls(signal=str(threshold.signal), quantity=None if quantity is None else str(quantity),
                   percentage=None if quantity is not None else threshold.value.percentage,
                   grace_period_s=seconds_json(threshold.grace_period_s), grace_met=status.grace_met)


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

    @classmethod
    def of(cls, eviction: Eviction) -> RecordedEviction:
        return cls(namespace=eviction.pod.namespace, name=eviction.pod.name, signal=eviction.signal,
                   grace_period_s=eviction.grace_period_override_s,
                   effective_grace_period_s=eviction.effective_grace_period_s, reason=eviction.reason,
                   message=eviction.message, annotations=dict(eviction.annotations),
                   conditions=tuple(condition.to_json() for condition in eviction.conditions))


@dataclass(frozen=True, slots=True)
class RecordedReclaim:
    """One node-level reclaim action that ran: what it freed, or why it failed (the action by its name, as the
    recording writes it: a line may name an action this evictd does not know)."""

    action: str
    freed_bytes: int
    error: str | None

    @classmethod
    def of(cls, result: ReclaimResult) -> RecordedReclaim:
        return cls(action=str(result.action), freed_bytes=result.freed_bytes, error=result.error)

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
class Decision:
    """What one cycle decided, as the recording keeps it: conditions and thresholds met, node-level reclaim and
    results, evictions, the errors' texts (None: none recorded), the ranking with keys, the Eviction API use and the
    pod list problem (None: not concerned)."""

    conditions: tuple[str, ...] = ()
    thresholds_met: tuple[ThresholdMet, ...] = ()
    reclaim: tuple[str, ...] = ()
    reclaim_succeeded: bool | None = None
    evicted: tuple[RecordedEviction, ...] = ()
    reclaim_results: tuple[RecordedReclaim, ...] = ()
    errors: tuple[str, ...] | None = None
    eviction_api: EvictionApiUse | None = None
    pod_list_problem: PodListProblem | None = None
    ranking: Ranking = field(default_factory=Ranking)


# --- made from a cycle's report ------------------------------------------------------------------------------


def decision_of(report: CycleReport, *, ranking: bool = True) -> Decision:
    """What a cycle decided, as a recording keeps it: `simulate`'s step, the reclaim results, errors, and the full
    ranking with each pod's keys (`RankingEncoder` writes the same ranking as text; without `ranking` it is left
    out)."""
    assessment, ranked, acted = report.decided.assessment, report.decided.ranking, report.acted
    # The keys the cycle sorted each pod by, carried in the report (not computed again).
    items: list[object] = [] if ranked is None or not ranking else [
        {**_ranked_pod_json(pod), "keys": rank_keys(ranked.signal, key).document()}
        for pod, key in zip(ranked.pods, ranked.keys, strict=True)]
    errors = tuple(error.description for error in report.errors)
    return Decision(
        conditions=tuple(str(c) for c in assessment.node_conditions),
        thresholds_met=tuple(ThresholdMet.of(status) for status in assessment.thresholds),
        reclaim=tuple(str(result.action) for result in acted.reclaim),
        reclaim_succeeded=acted.reclaim_succeeded,
        evicted=tuple(RecordedEviction.of(eviction) for eviction in acted.evictions),
        reclaim_results=tuple(RecordedReclaim.of(result) for result in acted.reclaim),
        errors=errors or None,
        eviction_api=acted.eviction_api,
        pod_list_problem=report.observed.pod_list_problem,
        ranking=Ranking(items=items))


def _ranked_pod_json(pod: Pod) -> JsonObject:
    return {"pod": pod.key, "uid": pod.uid, "critical": is_critical_pod(pod)}


class RankingEncoder:
    """Writes a decision's ranking (`decision_of`'s) as JSON text, keeping the text of each pod's name, UID and
    criticality while it is the same pod object (the pod list keeps them between changes)."""

    def __init__(self) -> None:
        self._pods: dict[int, tuple[Pod, str]] = {}

    def encode(self, report: CycleReport) -> Ranking:
        """Return the ranking of `report`, as compact JSON text."""
        ranked = report.decided.ranking
        if ranked is None or not ranked.pods:
            return Ranking(text="[]")
        known = self._pods
        texts: dict[int, tuple[Pod, str]] = {}
        parts = []
        for pod, key in zip(ranked.pods, ranked.keys, strict=True):
            entry = known.get(id(pod))
            if entry is None or entry[0] is not pod:
                entry = (pod, dumps(_ranked_pod_json(pod))[:-1] + ',"keys":')
            texts[id(pod)] = entry  # held, so that its id is not reused while remembered
            parts.append(entry[1] + rank_keys_text(ranked.signal, key) + "}")
        self._pods = texts
        return Ranking(text="[" + ",".join(parts) + "]")


# --- a ranking's keys ----------------------------------------------------------------------------------------


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


# --- written and read back -----------------------------------------------------------------------------------


def decision_document(decision: Decision) -> dict[str, object]:
    """The decision as a line writes it, but for its ranking (written after it, as text: `Ranking.encode`)."""
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
        document["evictionApi"] = eviction_api_document(decision.eviction_api)
    if decision.pod_list_problem is not None:
        document["podListProblem"] = decision.pod_list_problem.reason
        document["podsFromNode"] = decision.pod_list_problem.pods_from_node
    return document


def eviction_api_document(use: EvictionApiUse) -> dict[str, object]:
    """How a soft eviction used the Eviction API, as a line writes it."""
    if use.bypassed is not None and not (use.refusals or use.evicted or use.failure):
        return {"bypassed": use.bypassed}  # as evictd has always written it
    document: dict[str, object] = {"refusals": [{"pod": r.pod, "status": r.status, "reason": r.reason,
                                                 "budget": r.budget, "message": r.message} for r in use.refusals]}
    # Written only when set: a line of an evictd that asked the API on its loop reads as it was written.
    for key, value in (("bypassed", use.bypassed), ("asked", list(use.asked) or None), ("waiting", use.waiting),
                       ("evicted", use.evicted), ("failure", use.failure), ("pendingRelease", use.pending_release)):
        if value is not None:
            document[key] = value
    return document


def _threshold_met(value: object, path: str) -> ThresholdMet:
    item = json_object(value, path)
    threshold = json_object(item.get("value"), f"{path}.value")
    quantity = threshold.get("quantity")
    percentage = None if quantity is not None else seconds(threshold.get("percentage"), f"{path}.value.percentage")
    return ThresholdMet(signal=json_string(item.get("signal"), f"{path}.signal"),
                        quantity=optional_string(quantity, f"{path}.value.quantity"),
                        percentage=None if percentage is None else float(percentage),
                        grace_period_s=seconds(item.get("gracePeriodSeconds"), f"{path}.gracePeriodSeconds"),
                        grace_met=flag(item.get("graceMet"), f"{path}.graceMet"))


def _eviction(value: object, path: str) -> RecordedEviction:
    item = json_object(value, path)
    annotations = json_object(item.get("annotations", {}), f"{path}.annotations")
    return RecordedEviction(
        namespace=json_string(item.get("namespace"), f"{path}.namespace"),
        name=json_string(item.get("name"), f"{path}.name"),
        signal=json_string(item.get("signal"), f"{path}.signal"),
        grace_period_s=integer(item.get("gracePeriodSeconds"), f"{path}.gracePeriodSeconds"),
        effective_grace_period_s=integer(item.get("effectiveGracePeriodSeconds"),
                                          f"{path}.effectiveGracePeriodSeconds"),
        reason=json_string(item.get("reason"), f"{path}.reason"),
        message=json_string(item.get("message"), f"{path}.message"),
        annotations={json_string(k, f"{path}.annotations"): json_string(v, f"{path}.annotations.{k}")
                     for k, v in annotations.items()},
        conditions=tuple(json_object(c, f"{path}.conditions[{n}]")
                         for n, c in enumerate(json_list(item, "conditions", path))))


def _reclaim_result(value: object, path: str) -> RecordedReclaim:
    item = json_object(value, path)
    return RecordedReclaim(action=json_string(item.get("action"), f"{path}.action"),
                           freed_bytes=integer(item.get("freedBytes", 0), f"{path}.freedBytes"),
                           error=optional_string(item.get("error"), f"{path}.error"))


def _key_value(value: object, path: str) -> KeyValue:
    if value is None or isinstance(value, bool | int):
        return value
    if isinstance(value, str):
        try:
            Fraction(value)
        except ValueError:
            raise fail(path, "a number") from None
        return value
    raise fail(path, "a number")


def _rank_keys(value: object, path: str) -> RankKeys:
    keys = json_object(value, path)
    priority = integer(keys.get("priority"), f"{path}.priority")
    if "processes" in keys:
        return RankKeys(priority=priority, ranked_usage=_key_value(keys["processes"], f"{path}.processes"))
    exceeds_value = keys.get("exceedsRequests")
    exceeds = None if exceeds_value is None else flag(exceeds_value, f"{path}.exceedsRequests")
    usage = _key_value(keys.get("usageAboveRequest"), f"{path}.usageAboveRequest")
    return RankKeys(priority=priority, ranked_usage=usage, exceeds_requests=exceeds)


def _ranked_entry(value: object, path: str) -> RankedEntry:
    if isinstance(value, str):  # names alone
        return RankedEntry(pod=value, uid="", critical=False, keys=None)
    item = json_object(value, path)
    keys = item.get("keys")
    return RankedEntry(pod=json_string(item.get("pod"), f"{path}.pod"),
                       uid=json_string(item.get("uid", ""), f"{path}.uid"),
                       critical=flag(item.get("critical", False), f"{path}.critical"),
                       keys=None if keys is None else _rank_keys(keys, f"{path}.keys"))


def _eviction_api(value: object, path: str) -> EvictionApiUse:
    document = json_object(value, path)
    bypassed = optional_string(document.get("bypassed"), f"{path}.bypassed")
    if "refusals" not in document and bypassed is not None:
        return EvictionApiUse(bypassed=bypassed)
    refusals = []
    for n, item in enumerate(json_list(document, "refusals", path)):
        where = f"{path}.refusals[{n}]"
        refusal = json_object(item, where)
        status = refusal.get("status")
        refusals.append(EvictionApiRefusal(
            pod=json_string(refusal.get("pod"), f"{where}.pod"),
            status=None if status is None else integer(status, f"{where}.status"),
            reason=json_string(refusal.get("reason"), f"{where}.reason"),
            budget=json_string(refusal.get("budget"), f"{where}.budget"),
            message=json_string(refusal.get("message"), f"{where}.message")))
    return EvictionApiUse(refusals=tuple(refusals), bypassed=bypassed,
                          asked=tuple(json_string(pod, f"{path}.asked") for pod in json_list(document, "asked", path)),
                          waiting=optional_string(document.get("waiting"), f"{path}.waiting"),
                          evicted=optional_string(document.get("evicted"), f"{path}.evicted"),
                          failure=optional_string(document.get("failure"), f"{path}.failure"),
                          pending_release=optional_string(document.get("pendingRelease"), f"{path}.pendingRelease"))


def decode_decision(value: object, path: str = "decision") -> Decision:
    """The decision of a line (a line without one decided nothing recorded: an empty decision)."""
    if value is None:
        return Decision()
    document = json_object(value, path)
    succeeded = document.get("reclaimSucceeded")
    problem = optional_string(document.get("podListProblem"), f"{path}.podListProblem")
    from_node = flag(document.get("podsFromNode", False), f"{path}.podsFromNode")
    return Decision(
        conditions=strings(document, "conditions", path),
        thresholds_met=tuple(_threshold_met(item, f"{path}.thresholdsMet[{n}]")
                             for n, item in enumerate(json_list(document, "thresholdsMet", path))),
        reclaim=strings(document, "reclaim", path),
        reclaim_succeeded=None if succeeded is None else flag(succeeded, f"{path}.reclaimSucceeded"),
        evicted=tuple(_eviction(item, f"{path}.evicted[{n}]")
                      for n, item in enumerate(json_list(document, "evicted", path))),
        reclaim_results=tuple(_reclaim_result(item, f"{path}.reclaimResults[{n}]")
                              for n, item in enumerate(json_list(document, "reclaimResults", path))),
        errors=strings(document, "errors", path) if "errors" in document else None,
        eviction_api=None if "evictionApi" not in document else _eviction_api(document["evictionApi"],
                                                                              f"{path}.evictionApi"),
        pod_list_problem=None if problem is None else PodListProblem(problem, pods_from_node=from_node),
        ranking=Ranking(items=json_list(document, "ranking", path)))
