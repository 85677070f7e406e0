"""Decoding JSON-like input (decoded JSON or YAML) into core values, one checked field at a time.

The generic half of every parser (pods, Summary documents, simulate scenarios): value paths for messages, checks
for a mapping, list, string or ranged integer, and the `DecodeError` naming the path and the value. Invariants:
nothing is mutated and only `DecodeError` is raised, its `value` always printable; reasons share one wording ("must
be a mapping", "must be between X and Y", ...); None is rejected unless the caller passes `if_null=`; an integer
is an `int` but not a `bool`, never a float.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from types import MappingProxyType
from typing import Final, TypeVar, overload

from evictd.core.errors import DecodeError

# Go's integer ranges: the default bounds of `integer` are int64's, as for most Kubernetes API fields.
INT64_MIN: Final = -(2**63)
INT64_MAX: Final = 2**63 - 1
INT32_MIN: Final = -(2**31)
INT32_MAX: Final = 2**31 - 1

# The mapping to pass as `if_null=` where null decodes to an empty object (read-only, so it can be shared).
EMPTY_MAPPING: Final[Mapping[str, object]] = MappingProxyType({})

# Map keys that may follow a dot in a path; others ("kubernetes.io/config.source") go in brackets, unambiguous.
_PLAIN_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_-]*\Z")

_T = TypeVar("_T")
_D = TypeVar("_D")


class _Reject:
    """The type of `_REJECT`: the default `if_null`, meaning "null is an error"."""


_REJECT: Final = _Reject()


# --- paths and errors --------------------------------------------------------------------------------------


def child(path: str, name: str) -> str:
    """Return the path of map entry `name` below `path`: ``path.name``, or ``path[name]`` for other keys."""
    return f"{path}.{name}" if _PLAIN_KEY.match(name) else f"{path}[{name}]"


def printable(value: object) -> object:
    """Return `value`, or a stand-in string when `repr()` refuses it (CPython's int-to-str digit limit)."""
    try:
        repr(value)
    except (ValueError, RecursionError):
        return f"<unprintable {type(value).__name__}>"
    return value


def invalid(reason: str, key: str, value: object) -> DecodeError:
    """Return (not raise) the DecodeError for `value` at `key`, so callers can `raise ... from exc`."""
    return DecodeError(reason, key=key, value=printable(value))


# --- checks ------------------------------------------------------------------------------------------------


@overload
def mapping(value: object, key: str) -> Mapping[str, object]: ...
@overload
def mapping(value: object, key: str, *, if_null: _D) -> Mapping[str, object] | _D: ...
def mapping(value: object, key: str, *, if_null: object = _REJECT) -> object:
    """Return `value` as a string-keyed mapping, or `if_null` for None; DecodeError "must be a mapping" or
    "mapping keys must be strings"."""
    if value is None and if_null is not _REJECT:
        return if_null
    if type(value) is not dict and not isinstance(value, Mapping):  # a plain dict (most values) skips the ABC check
        raise invalid("must be a mapping", key, value)
    for name in value:
        if not isinstance(name, str):
            raise invalid("mapping keys must be strings", key, name)
    return value


@overload
def sequence(value: object, key: str) -> Sequence[object]: ...
@overload
def sequence(value: object, key: str, *, if_null: _D) -> Sequence[object] | _D: ...
def sequence(value: object, key: str, *, if_null: object = _REJECT) -> object:
    """Return `value` as a list (list or tuple, never a string), or `if_null` for None; DecodeError otherwise."""
    if value is None and if_null is not _REJECT:
        return if_null
    if not isinstance(value, list | tuple):
        raise invalid("must be a list", key, value)
    return value


@overload
def list_of(value: object, key: str, decode_item: Callable[[object, str], _T]) -> tuple[_T, ...]: ...
@overload
def list_of(
    value: object, key: str, decode_item: Callable[[object, str], _T], *, if_null: _D
) -> tuple[_T, ...] | _D: ...
def list_of(
    value: object, key: str, decode_item: Callable[[object, str], _T], *, if_null: object = _REJECT
) -> object:
    """Return `decode_item(item, "key[i]")` for each element of the list `value`, or `if_null` for None."""
    if value is None and if_null is not _REJECT:
        return if_null
    return tuple(decode_item(item, f"{key}[{i}]") for i, item in enumerate(sequence(value, key)))


@overload
def string(value: object, key: str) -> str: ...
@overload
def string(value: object, key: str, *, if_null: _D) -> str | _D: ...
def string(value: object, key: str, *, if_null: object = _REJECT) -> object:
    """Return `value` as a string, or `if_null` for None. Raises DecodeError "must be a string"."""
    if value is None and if_null is not _REJECT:
        return if_null
    if not isinstance(value, str):
        raise invalid("must be a string", key, value)
    return value


@overload
def integer(value: object, key: str, *, low: int = ..., high: int = ...) -> int: ...
@overload
def integer(value: object, key: str, *, low: int = ..., high: int = ..., if_null: _D) -> int | _D: ...
def integer(
    value: object, key: str, *, low: int = INT64_MIN, high: int = INT64_MAX, if_null: object = _REJECT
) -> object:
    """Return `value` as an int within [low, high] (default int64), or `if_null` for None; DecodeError otherwise."""
    if value is None and if_null is not _REJECT:
        return if_null
    if isinstance(value, bool) or not isinstance(value, int):
        raise invalid("must be an integer", key, value)
    if not low <= value <= high:
        raise invalid(f"must be between {low} and {high}", key, value)
    return value
