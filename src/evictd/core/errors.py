"""The single error tree of evictd (in the core so pure parsers can raise it; adapters map foreign exceptions in).

    EvictdError
     +-- ConfigError (key, bad value)  +-- QuantityError, DurationError, ScenarioError (exit 2)
     +-- DecodeError (path, value)     a pod or Summary document holds a bad value
     +-- SampleError                   a stats source could not be read: the signal is skipped, never guessed
     +-- CRIError (method, status)     +-- GCError (some removals of a GC pass failed)
     +-- KubeError (verb, status)      +-- EvictionRefused (a disruption budget, a webhook said "not now")
     +-- NotActingError                another evictd holds the node's Lease
     +-- StateLockError (exit 2)       +-- LockFileError, NodeLeaseHeldError

Errors carry data, not only text.
"""

from __future__ import annotations

import reprlib
from collections.abc import Callable
from typing import TypeVar

# A bad value is quoted in error messages up to this length, so one line stays readable.
MAX_VALUE_CHARS = 80


class _Missing:
    """The `value` of a ConfigError for a setting that is required and absent."""

    def __repr__(self) -> str:
        return "missing"


MISSING = _Missing()

# A value is shown a few levels and items deep: an alias bomb must not cost its billions of elements to print.
_BOUNDED = reprlib.Repr()
_BOUNDED.maxlevel = 3
_BOUNDED.maxlist = _BOUNDED.maxtuple = _BOUNDED.maxset = _BOUNDED.maxfrozenset = _BOUNDED.maxdict = 6
_BOUNDED.maxstring = _BOUNDED.maxother = MAX_VALUE_CHARS


class FilePath(str):
    """A value that is a file's path: an error shows it whole (up to PATH_MAX), since a path cut short names no
    file (a test's path under pytest-xdist's folders is over 80 characters)."""


PATH_MAX = 4096


def bounded_repr(value: object) -> str:
    """Return at most MAX_VALUE_CHARS of `value`'s repr (a `FilePath` up to PATH_MAX), in time that does not grow
    with the value's size."""
    if isinstance(value, FilePath):
        return repr(str(value)[:PATH_MAX])
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 128:
        shown = f"<{value.bit_length()}-bit integer>"  # repr of a huge int is slow or refused
    else:
        try:
            shown = _BOUNDED.repr(value)
        except (ValueError, RecursionError):
            shown = f"<unprintable {type(value).__name__}>"
    if len(shown) > MAX_VALUE_CHARS:
        shown = shown[: MAX_VALUE_CHARS - 3] + "..."
    return shown


def os_error_reason(exc: OSError) -> str:
    """Return the OS error's text without the path (the SampleError raised with it names the path)."""
    return exc.strerror or str(exc)


def describe_bad_value(reason: str, key: str | None, value: object) -> str:
    """Return one line: `key` and the bad `value` (when a key is known) followed by the `reason`; a control
    character that a key or reason quotes from the input is shown escaped, so the line stays one."""
    if key is None:
        line = reason
    elif value is MISSING:
        line = f"{key}: missing: {reason}"
    else:
        line = f"{key}: invalid value {bounded_repr(value)}: {reason}"
    return line if line.isprintable() else "".join(c if c.isprintable() else repr(c)[1:-1] for c in line)


class EvictdError(Exception):
    """Base of every error evictd raises on purpose."""


class ConfigError(EvictdError):
    """A configuration value is invalid: `key` names where (``evictionHard[memory.available]``, a flag), `value` is
    the raw value, `reason` the message in the kubelet's wording."""

    def __init__(self, reason: str, *, key: str | None = None, value: object = None) -> None:
        self.reason = reason
        self.key = key
        self.value = value
        super().__init__(self.describe())

    def describe(self) -> str:
        """Return one line: the key and bad value (when known) followed by the kubelet-worded reason."""
        return describe_bad_value(self.reason, self.key, self.value)

    def at(self, key: str, value: object) -> ConfigError:
        """Return a copy of this error located at `key` with `value` (keeps the subclass and reason)."""
        located = type(self).__new__(type(self))
        ConfigError.__init__(located, self.reason, key=key, value=value)
        return located


class QuantityError(ConfigError):
    """A Kubernetes quantity string cannot be parsed; `reason` is the Go error text."""


class DurationError(ConfigError):
    """A Go duration string cannot be parsed; `reason` is the Go `time.ParseDuration` error text."""


class ScenarioError(ConfigError):
    """A `simulate` scenario file is malformed."""


class DecodeError(EvictdError):
    """A decoded JSON or YAML document holds a bad value. `key` is the value's path (e.g.
    ``pods[3].spec.containers[0].resources.requests.memory``), `value` the value (always printable), `reason`
    what is wrong with it; the message reads as a ConfigError's."""

    def __init__(self, reason: str, *, key: str, value: object) -> None:
        self.reason = reason
        self.key = key
        self.value = value
        super().__init__(describe_bad_value(reason, key, value))

    def at(self, key: str) -> DecodeError:
        """Return this error with its value at `key` instead (its document sits inside a larger one)."""
        return DecodeError(self.reason, key=key, value=self.value)


class SampleError(EvictdError):
    """Reading a stats source failed; carries the `path` (or source) and the underlying `reason`."""

    def __init__(self, source: str, reason: str) -> None:
        self.source = source
        self.reason = reason
        super().__init__(f"{source}: {reason}")


_T = TypeVar("_T")
_E = TypeVar("_E", bound=BaseException)


def without_traceback(exc: _E) -> _E:
    """Return `exc` with no traceback on it or on the exceptions it was raised from or during: a kept exception's
    frames would hold the cycle's readings in a reference cycle until a full garbage collection."""
    pending: list[BaseException | None] = [exc]
    seen: set[int] = set()
    while pending:
        link = pending.pop()
        if link is not None and id(link) not in seen:
            seen.add(id(link))
            link.__traceback__ = None
            pending += (link.__cause__, link.__context__)
    return exc


def attempt(read: Callable[[], _T], problems: list[SampleError]) -> _T | None:
    """Return `read()`, or None once the SampleError it raised is added to `problems` (without its traceback)."""
    try:
        return read()
    except SampleError as exc:
        problems.append(without_traceback(exc))
        return None


class CRIError(EvictdError):
    """A CRI call failed; carries the gRPC `method` and status `code`."""

    def __init__(self, method: str, code: str, detail: str) -> None:
        self.method = method
        self.code = code
        self.detail = detail
        super().__init__(f"CRI {method} failed: {code}: {detail}")


class KubeError(EvictdError):
    """A Kubernetes API call failed; carries the `verb`, the HTTP `status` (None if no answer) and detail."""

    def __init__(self, verb: str, status: int | None, detail: str, *, reason: str = "",
                 causes: tuple[tuple[str, str], ...] = ()) -> None:
        self.verb = verb
        self.status = status
        self.detail = detail
        # The Status body's `reason` (TooManyRequests, Forbidden...) and `details.causes` as (reason, message).
        self.reason = reason
        self.causes = causes
        # No status (no answer, an answer that is not JSON, a cache not synced): nothing in parentheses.
        super().__init__(f"Kubernetes API {verb} failed{'' if status is None else f' ({status})'}: {detail}")


class EvictionRefused(KubeError):
    """The Eviction API refused to evict `pod` now (429 for a disruption budget, 403 from an admission webhook);
    `budget` names the PodDisruptionBudget when the API's answer does."""

    def __init__(self, pod: str, error: KubeError, budget: str = "") -> None:
        super().__init__(error.verb, error.status, error.detail, reason=error.reason, causes=error.causes)
        self.pod = pod
        self.budget = budget


class StateLockError(EvictdError):
    """Another process still holds a lock of evictd's after the wait; carries what is locked ("stateDir <path>",
    "the node"), the lock file, what the lock file names as its holder (its PID) and how long evictd waited."""

    def __init__(self, locked: str, lock_file: str, holder_pid: str, waited_s: float) -> None:
        self.locked = locked
        self.lock_file = lock_file
        self.holder_pid = holder_pid
        self.waited_s = waited_s
        super().__init__(f"{locked} is still locked by another evictd (PID {holder_pid}) after "
                         f"{waited_s:g} s; lock file {lock_file}")


class LockFileError(StateLockError):
    """A lock file evictd will not use: not a regular file (a symlink, a folder, a FIFO, a device)."""

    def __init__(self, locked: str, lock_file: str, what: str) -> None:
        EvictdError.__init__(self, f"the lock file of {locked}, {lock_file}, is {what}, not a regular file: "
                                   "evictd does not start (remove it)")
        self.locked = locked
        self.lock_file = lock_file
        self.holder_pid = "unknown"
        self.waited_s = 0.0


class NodeLeaseHeldError(StateLockError):
    """Another evictd still renews this node's Lease after the wait: it runs for this node on another host or
    beside this one with another node lock. Carries the Lease (`namespace/name`), its holder and its last renewal."""

    def __init__(self, lease: str, holder: str, renew_time: str, waited_s: float) -> None:
        EvictdError.__init__(self, f"the node's Lease {lease} is still renewed by another evictd (holder {holder!r}, "
                                   f"last renewed {renew_time}) after {waited_s:g} s: evictd does not start "
                                   "(one evictd per node)")
        self.locked = "the node"
        self.lock_file = f"Lease {lease}"
        self.holder_pid = holder
        self.waited_s = waited_s


class NotActingError(EvictdError):
    """An eviction refused at the last moment: evictd does not hold its node's Lease now (another evictd took it
    while this one was paused). Carries the pod (`namespace/name`) and why."""

    def __init__(self, pod: str, reason: str) -> None:
        super().__init__(f"not evicted: {reason}")
        self.pod = pod
        self.reason = reason
