"""The live view's log: each event as one line in words, and the warnings it pins until they are resolved.

A log event (structlog's dict: `event`, `level`, `timestamp` and fields) becomes one sentence: the event's own words,
then the few field values that say what it is about (`pod`, `signal`, `detail`, ...), never `key=value` pairs. A
warning stays pinned above the events while what it reports holds: one logged before "evictd started" (the node and
the settings found at start: oom_score_adj, reserved memory, ...) for the whole run, one with a resolving event in
`RESOLVED_BY` (or a lock taken over) until that event comes for the same subject. Other warnings are events like
the rest, marked `!`.
"""

from __future__ import annotations

from collections import OrderedDict, deque
from collections.abc import Callable, Mapping

# The event that ends start-up: warnings logged before it describe the node and settings as found, for the run.
STARTED_EVENT = "evictd started"
# The event that resolves a pinned warning (logged for the same subject, `SUBJECT_FIELDS`) -> that warning's event.
RESOLVED_BY = {
    "signal source readable again": "signal source unreadable; its signals are absent",
    "pod disk usage whole and current again": "pod disk usage partly unreadable, old or not measured yet",
    "OOM-kill counter readable again": "OOM-kill counter unreadable; kills it counts are not counted",
    "signal readable again": "signal blind: no figure for a signal with a threshold; nothing can act on it",
    "node lease taken over": "node lease held by another evictd: waiting for it to stop renewing",
}
# A lock another evictd held at start (`evictd.run.lock`, one event per lock: "node", "state"), taken over since.
LOCK_TAKEN_OVER = " lock taken over"
LOCK_WAITING = " is locked by another evictd: waiting for it to stop"
PINNED_UNTIL_RESOLVED = frozenset(RESOLVED_BY.values())
# The fields that name what a warning is about: two warnings of one event with different subjects are two.
SUBJECT_FIELDS = ("detail", "signal", "what", "path", "pod")
# The fields worth a place in an event's line, in this order; the others are in the JSON log (`logFormat: json`).
TELLING_FIELDS = ("pod", "signal", "threshold", "what", "value", "detail", "reason", "error", "message")
# How many pinned warnings are kept (a flood of distinct ones keeps the newest).
PINNED_KEPT = 16


def _value(value: object) -> str:
    if isinstance(value, (list, tuple)):
        return ", ".join(str(item) for item in value)
    return str(value)


def _fields(event: Mapping[str, object], names: tuple[str, ...]) -> list[str]:
    return [_value(event[name]) for name in names if event.get(name) not in (None, "", [], ())]


def _started(event: Mapping[str, object]) -> str:
    mode = ", reporting only" if event.get("dry_run") else ""
    return f"evictd started on {event.get('node')}: a cycle every {event.get('interval_s')} s{mode}"


def _protection(event: Mapping[str, object]) -> str:
    if event.get("level") == "warning":
        return f"node memory protection: {event.get('detail')} ({event.get('what')}: {event.get('value')})"
    return f"node memory protection ok: {event.get('what')}"


def _oom_score_adj(event: Mapping[str, object]) -> str:
    return f"oom_score_adj is {event.get('oom_score_adj')}"


def _exposed(event: Mapping[str, object]) -> str:
    return f"oom_score_adj {event.get('oom_score_adj')} exposes evictd: {event.get('detail')}"


def _mode(event: Mapping[str, object]) -> str:
    return f"{event.get('event')}: {event.get('mode')} (from {event.get('source')})"


def _evicting(event: Mapping[str, object]) -> str:
    verb = "would evict" if event.get("event") == "would evict pod" else "evicting"
    return f"{verb} {event.get('pod')} for {event.get('signal')}"


def _threshold_met(event: Mapping[str, object]) -> str:
    available = f" (available {event['available']})" if event.get("available") else ""
    return f"threshold met: {event.get('threshold')}{available}"


# Events with words of their own; any other is its event text and its `TELLING_FIELDS`.
EVENT_TO_WORDS: dict[str, Callable[[Mapping[str, object]], str]] = {
    STARTED_EVENT: _started,
    "node memory protection": _protection,
    "oom_score_adj": _oom_score_adj,
    "oom_score_adj exposes evictd": _exposed,
    "mode": _mode,
    "mode changed": _mode,
    "evicting pod": _evicting,
    "would evict pod": _evicting,
    "threshold met": _threshold_met,
}


def sentence(event: Mapping[str, object]) -> str:
    """Return the event as one line of words (no time, no level)."""
    name = str(event.get("event", ""))
    words = EVENT_TO_WORDS.get(name)
    if words is not None:
        return " ".join(words(event).split())
    told = _fields(event, TELLING_FIELDS)
    return " ".join((f"{name}: {'; '.join(told)}" if told else name).split())


def resolved_warning(name: str) -> str | None:
    """The event of the warning that the event `name` resolves (None: it resolves none)."""
    if name.endswith(LOCK_TAKEN_OVER):
        return name.removesuffix(LOCK_TAKEN_OVER) + LOCK_WAITING
    return RESOLVED_BY.get(name)


def subject(event: Mapping[str, object]) -> tuple[str, ...]:
    """What a warning (or the event resolving it) is about: the values of its `SUBJECT_FIELDS`."""
    return tuple(_value(event.get(name, "")) for name in SUBJECT_FIELDS)


class LiveLog:
    """The live view's log: the last `size` events as lines, and the warnings pinned until resolved."""

    def __init__(self, size: int) -> None:
        self.lines: deque[str] = deque(maxlen=size)
        self._pinned: OrderedDict[tuple[str, ...], str] = OrderedDict()
        self._starting = True

    @property
    def warnings(self) -> list[str]:
        """The pinned warnings, oldest first."""
        return list(self._pinned.values())

    def add(self, event: Mapping[str, object]) -> None:
        """Take one log event: an event line, and a pinned warning or the end of one."""
        name = str(event.get("event", ""))
        level = str(event.get("level", ""))
        text = sentence(event)
        stamp = str(event.get("timestamp", ""))[11:19]
        mark = "!" if level in ("warning", "error", "critical") else " "
        self.lines.append(f"{stamp} {mark} {text}".strip())
        if name == STARTED_EVENT:
            self._starting = False
        resolved = resolved_warning(name)
        if resolved is not None:
            self._pinned.pop((resolved, *subject(event)), None)
        elif mark == "!" and (self._starting or name in PINNED_UNTIL_RESOLVED):
            key = (name, *subject(event))
            self._pinned.pop(key, None)
            self._pinned[key] = text
            while len(self._pinned) > PINNED_KEPT:
                self._pinned.popitem(last=False)
