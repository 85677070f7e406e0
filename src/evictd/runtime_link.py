"""The container runtime, attached when it first answers: at start, or later while evictd runs.

A node's runtime may come up after evictd (a systemd ordering that only orders, a runtime that failed to start
and is restarted, a runtime being upgraded). Without the runtime evictd observes and reports; once `Version`
answers on the CRI endpoint, the runtime's parts are built and wired in (`attach`), and node-level reclaim,
periodic GC, writable layers and the local stop work from then on. Until then the endpoint is asked again
after a housekeeping cycle, at most every `retry_s`, with a short deadline so that a runtime that hangs
cannot hold the loop up. Once attached it stays attached: the gRPC channel reconnects by itself when the
runtime restarts, and every CRI call already treats an unanswered call as a failure of that call.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, Generic, TypeVar

from evictd.core.errors import EvictdError
from evictd.cri import RuntimeVersion
from evictd.cri.client import CriClient

# How often an absent runtime is asked again, and how long one Version call may take.
RUNTIME_RETRY_S = 5.0
VERSION_PROBE_TIMEOUT_S = 2.0

_Parts = TypeVar("_Parts")


class RuntimeLink(Generic[_Parts]):
    """Asks the CRI endpoint for the runtime until it answers, then attaches it once.

    `attach(version)` builds and wires the runtime's parts and returns them (`parts` from then on).
    """

    def __init__(
        self,
        client: CriClient,
        attach: Callable[[RuntimeVersion], _Parts],
        log: Any,
        *,
        retry_s: float = RUNTIME_RETRY_S,
        probe_timeout_s: float = VERSION_PROBE_TIMEOUT_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.client = client
        self.parts: _Parts | None = None
        self._attach = attach
        self._log = log
        self._retry_s = retry_s
        self._probe_timeout_s = min(probe_timeout_s, client.timeout_s)
        self._clock = clock
        self._next_try = float("-inf")
        self._failures = 0

    def connect(self) -> _Parts | None:
        """Ask the runtime now (unless attached) and attach it if it answers; return its parts or None."""
        if self.parts is not None:
            return self.parts
        self._next_try = self._clock() + self._retry_s
        try:
            version = self.client.version(timeout_s=self._probe_timeout_s)
        except EvictdError as exc:
            if self._failures == 0:
                self._log.info("no container runtime answers: node-level reclaim is reported, not carried out; "
                               "asked again after cycles", endpoint=self.client.endpoint, error=str(exc),
                               retry_s=self._retry_s)
            self._failures += 1
            return None
        self.parts = self._attach(version)
        # Logged once attached, so that everything the line announces (metrics, reclaim) is already in place.
        self._log.info("container runtime", endpoint=self.client.endpoint, runtime=version.runtime_name,
                       version=version.runtime_version, api=version.runtime_api_version,
                       unanswered_attempts=self._failures)
        return self.parts

    def poll(self) -> _Parts | None:
        """After a cycle: ask again if the runtime is absent and the retry period has passed."""
        if self.parts is None and self._clock() >= self._next_try:
            return self.connect()
        return self.parts
