"""Which write an event becomes, decided as the kubelet's event recorder decides it; no I/O.

client-go's EventCorrelator (tools/record/events_cache.go), in order: aggregation (past 10 similar messages within
600 s, one `(combined from similar events): ...` event); counting (a repeat PATCHes `count`, `lastTimestamp` and
`message`); the spam filter (a token bucket per object and type, 25 tokens, one per 300 s; a dropped repeat is still
counted). Records live in an LRU of 4096 as upstream. Time is given monotonic seconds; the writer reports back what
the API took (`created`) or lost (`forget`).
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from typing import Generic, TypeVar

# client-go tools/record/events_cache.go: maxLruCacheEntries, defaultAggregateMaxEvents,
# defaultAggregateIntervalInSeconds, defaultSpamBurst, defaultSpamQPS, EventAggregatorByReasonMessageFunc.
LRU_CACHE_ENTRIES = 4096
AGGREGATE_MAX_EVENTS = 10
AGGREGATE_INTERVAL_S = 600.0
SPAM_BURST = 25
SPAM_REFILL_PER_S = 1.0 / 300.0
COMBINED_PREFIX = "(combined from similar events): "


@dataclass(frozen=True, slots=True)
class Occurrence:
    """One event to record: about `subject` (the object's kind, namespace, name and UID)."""

    subject: tuple[str, str, str, str]
    event_type: str
    reason: str
    message: str


@dataclass(frozen=True, slots=True)
class EventKey:
    """Which written event an occurrence counts on: its message, or None for the combined event."""

    subject: tuple[str, str, str, str]
    event_type: str
    reason: str
    message: str | None


@dataclass(frozen=True, slots=True)
class Create:
    """Write a new event with this message (its count 1)."""

    key: EventKey
    message: str


@dataclass(frozen=True, slots=True)
class Patch:
    """PATCH the event `name`: its count is now `count`, its message `message`."""

    key: EventKey
    name: str
    count: int
    message: str


@dataclass(frozen=True, slots=True)
class Drop:
    """Write nothing: the object's token bucket is empty."""

    key: EventKey


Verdict = Create | Patch | Drop
K = TypeVar("K")
V = TypeVar("V")


class LruCache(Generic[K, V]):
    """A mapping of at most `capacity` entries; a lookup or a store makes an entry the most recent."""

    def __init__(self, capacity: int) -> None:
        self._capacity = capacity
        self._entries: OrderedDict[K, V] = OrderedDict()

    def get(self, key: K) -> V | None:
        value = self._entries.get(key)
        if value is not None:
            self._entries.move_to_end(key)
        return value

    def put(self, key: K, value: V) -> None:
        self._entries[key] = value
        self._entries.move_to_end(key)
        if len(self._entries) > self._capacity:
            self._entries.popitem(last=False)

    def pop(self, key: K) -> None:
        self._entries.pop(key, None)

    def __len__(self) -> int:
        return len(self._entries)


@dataclass(slots=True)
class TokenBucket:
    """`tokens` of `burst`, refilled continuously at `refill_per_s` (client-go's token bucket rate limiter)."""

    tokens: float
    updated_s: float

    def take(self, now_s: float, burst: int, refill_per_s: float) -> bool:
        """Take one token if there is one; return whether there was."""
        self.tokens = min(float(burst), self.tokens + max(0.0, now_s - self.updated_s) * refill_per_s)
        self.updated_s = now_s
        if self.tokens < 1.0:
            return False
        self.tokens -= 1.0
        return True


@dataclass(slots=True)
class SimilarEvents:
    """The distinct messages seen of one object's type and reason (oldest first), and when the last came."""

    messages: dict[str, None]
    last_s: float


@dataclass(slots=True)
class Written:
    """An event on the server: its name and how often it happened."""

    name: str
    count: int


class EventCorrelator:
    """client-go's EventCorrelator with its defaults: aggregation, counting and the per-object spam filter."""

    def __init__(self, *, cache_entries: int = LRU_CACHE_ENTRIES, burst: int = SPAM_BURST,
                 refill_per_s: float = SPAM_REFILL_PER_S, max_similar: int = AGGREGATE_MAX_EVENTS,
                 similar_interval_s: float = AGGREGATE_INTERVAL_S) -> None:
        self._burst = burst
        self._refill_per_s = refill_per_s
        self._max_similar = max_similar
        self._similar_interval_s = similar_interval_s
        self._similar: LruCache[tuple[tuple[str, str, str, str], str, str], SimilarEvents] = LruCache(cache_entries)
        self._written: LruCache[EventKey, Written] = LruCache(cache_entries)
        self._buckets: LruCache[tuple[tuple[str, str, str, str], str], TokenBucket] = LruCache(cache_entries)

    def decide(self, occurrence: Occurrence, now_s: float) -> Verdict:
        """What to write for `occurrence` at `now_s` (monotonic seconds). Counts it in any case."""
        key, message = self._aggregate(occurrence, now_s)
        written = self._written.get(key)
        if written is not None:
            written.count += 1
        if not self._take_token(occurrence, now_s):
            return Drop(key)
        if written is None:
            return Create(key, message)
        return Patch(key, written.name, written.count, message)

    def created(self, key: EventKey, name: str) -> None:
        """The event of `key` was created as `name` (count 1): later occurrences count on it."""
        self._written.put(key, Written(name, 1))

    def forget(self, key: EventKey) -> None:
        """The event of `key` was not written or is gone: the next occurrence creates it."""
        self._written.pop(key)

    def _aggregate(self, occurrence: Occurrence, now_s: float) -> tuple[EventKey, str]:
        """The event `occurrence` counts on and its message: itself, or past the limit the combined event."""
        group = (occurrence.subject, occurrence.event_type, occurrence.reason)
        similar = self._similar.get(group)
        if similar is None or now_s - similar.last_s > self._similar_interval_s:
            similar = SimilarEvents({}, now_s)
        similar.messages[occurrence.message] = None
        similar.last_s = now_s
        self._similar.put(group, similar)
        if len(similar.messages) < self._max_similar:
            return EventKey(*group, occurrence.message), occurrence.message
        # Keep the set below the limit, as upstream (which drops any one; here the oldest).
        del similar.messages[next(iter(similar.messages))]
        return EventKey(*group, None), COMBINED_PREFIX + occurrence.message

    def _take_token(self, occurrence: Occurrence, now_s: float) -> bool:
        source = (occurrence.subject, occurrence.event_type)
        bucket = self._buckets.get(source)
        if bucket is None:
            bucket = TokenBucket(float(self._burst), now_s)
        self._buckets.put(source, bucket)
        return bucket.take(now_s, self._burst, self._refill_per_s)
