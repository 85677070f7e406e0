"""The suite's one way to wait for something that happens in another thread or process: poll it.

`wait_until(predicate, timeout_s, what)` calls `predicate` every `interval_s` until it returns something
truthy, and returns that. On timeout it raises `error` (AssertionError: the test fails) naming `what`; without
`what` it returns the last falsy answer instead, for `assert wait_until(...)` and for waits whose outcome the
test checks itself.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")

DEFAULT_TIMEOUT_S = 5.0
DEFAULT_INTERVAL_S = 0.02


def wait_until(predicate: Callable[[], T], timeout_s: float = DEFAULT_TIMEOUT_S, what: str | None = None, *,
               interval_s: float = DEFAULT_INTERVAL_S, error: type[Exception] = AssertionError) -> T:
    """Poll `predicate` until it returns something truthy (returned) or `timeout_s` passed (see the module)."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            if what is None:
                return value
            raise error(f"timed out after {timeout_s:g} s waiting for {what}")
        time.sleep(interval_s)
