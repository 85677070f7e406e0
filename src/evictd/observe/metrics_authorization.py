"""Verdicts on `/metrics` scrapes' bearer tokens (`metricsAuthorization: Webhook`), off the HTTP thread.

The HTTP thread never waits for the API: it asks `verdict` (the cache, no I/O) and, for a token not reviewed yet,
`ask`, which queues the token for the reviewer thread; that thread reviews it (`review`: the TokenReview and
SubjectAccessReview of evictd.kube.metrics_access), caches the verdict for its lifetime and calls `wake` so the
endpoint answers the scrapes waiting on it.

Invariants: tokens are held only as SHA-256 digests, in the cache (at most MAX_CACHED) and the queue (at most
MAX_PENDING); at most REVIEWS_PER_S reviews a second (bursts of REVIEW_BURST) reach the API, so a flood of made-up
tokens costs the API server and evictd a bounded rate; `ask` says False when a token cannot be queued now.
"""

from __future__ import annotations

import hashlib
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable

from evictd.core.metrics_access import Verdict, unreviewed

# Tokens waiting for their review: scrapers are a handful; more is a flood, turned away (429) until the queue drains.
MAX_PENDING = 16
# Verdicts kept: a handful of scrapers' tokens; the oldest verdict goes first past this.
MAX_CACHED = 256
# Reviews a second, and at once: a scraper's token is reviewed every 2 minutes (the verdict's lifetime).
REVIEWS_PER_S = 5.0
REVIEW_BURST = 10.0
# The `verdict` label of evictd_metrics_token_reviews_total, by a verdict's status.
REVIEW_VERDICTS = {200: "allowed", 401: "unauthenticated", 403: "forbidden", 503: "unavailable"}


def token_digest(token: str) -> bytes:
    return hashlib.sha256(token.encode("utf-8", "surrogateescape")).digest()


class MetricsAuthorizer:
    """The verdict cache and the reviewer thread (`start`, `stop`)."""

    def __init__(self, review: Callable[[str], Verdict], *, on_review: Callable[[Verdict], None] = lambda _: None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._review = review
        self._on_review = on_review
        self._clock = clock
        self._lock = threading.Condition()
        self._cache: OrderedDict[bytes, tuple[Verdict, float]] = OrderedDict()
        self._pending: deque[tuple[bytes, str]] = deque()
        self._queued: set[bytes] = set()
        self._tokens = REVIEW_BURST
        self._tokens_at = clock()
        self._stop = False
        self._wake: Callable[[], None] = lambda: None
        self._thread: threading.Thread | None = None

    def start(self, wake: Callable[[], None]) -> None:
        """Start reviewing; `wake` is called (on the reviewer thread) after each verdict is cached."""
        self._wake = wake
        self._thread = threading.Thread(target=self._run, name="evictd-metrics-auth", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        with self._lock:
            self._stop = True
            self._lock.notify_all()
        if self._thread is not None:
            self._thread.join(timeout=10.0)  # a review in flight ends at its request deadline

    def verdict(self, token: str) -> Verdict | None:
        """The cached verdict on `token`, or None (not reviewed, or expired)."""
        digest = token_digest(token)
        with self._lock:
            found = self._cache.get(digest)
            if found is None:
                return None
            verdict, until = found
            if self._clock() >= until:
                del self._cache[digest]
                return None
            return verdict

    def ask(self, token: str) -> bool:
        """Queue `token` for review (True; also when it is queued already), or False: the queue is full or the
        review rate is spent (the scrape is told to retry)."""
        digest = token_digest(token)
        with self._lock:
            if digest in self._queued:
                return True
            now = self._clock()
            self._tokens = min(REVIEW_BURST, self._tokens + (now - self._tokens_at) * REVIEWS_PER_S)
            self._tokens_at = now
            if len(self._pending) >= MAX_PENDING or self._tokens < 1.0:
                return False
            self._tokens -= 1.0
            self._pending.append((digest, token))
            self._queued.add(digest)
            self._lock.notify_all()
            return True

    def _run(self) -> None:
        while True:
            with self._lock:
                while not self._pending and not self._stop:
                    self._lock.wait()
                if self._stop:
                    return
                digest, token = self._pending.popleft()
            try:
                verdict = self._review(token)
            except Exception as exc:  # a bug must not end the thread: the scrape gets a 503, retried soon
                verdict = unreviewed(f"{type(exc).__name__}: {exc}")
            with self._lock:
                self._queued.discard(digest)
                self._cache[digest] = (verdict, self._clock() + verdict.ttl_s)
                self._cache.move_to_end(digest)
                while len(self._cache) > MAX_CACHED:
                    self._cache.popitem(last=False)
            self._on_review(verdict)
            self._wake()
