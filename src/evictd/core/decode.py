"""Decoding JSON-like input (decoded JSON or YAML) into core values, one checked field at a time.

Job: the generic half of every parser in evictd (pods, Summary API documents, simulate scenarios): build the
path of a value for error messages, check that a value is a mapping, a list, a string or an integer in
range, decode each element of a list, and build the `DecodeError` that names the path and the bad value
(`evictd simulate` reports it as a `ScenarioError`, with the same path).
Domain decoders (quantities, RFC 3339 times, stats blocks, volumes) live with their dataclasses and are
built from these.

Invariants:
- Nothing here mutates its input or raises anything but `DecodeError`; the error's `key` is the path of
  the bad value (``pods[3].metadata.annotations[kubernetes.io/config.source]``) and its `value` can always
  be printed (a value `repr()` refuses, such as an int of more than 4300 digits, is replaced by a stand-in).
- Reasons share one wording: "must be a mapping", "must be a list", "must be a string", "must be an
  integer", "must be between X and Y", "mapping keys must be strings".
- JSON null is never decided here: each check rejects None unless the caller passes `if_null=`, the value to
  return in its place (None to keep "absent", an empty value where Go's decoder leaves a zero value).
- A JSON integer is an `int` but not a `bool`; floats are never integers, not even 1.0.
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

# A map key that can follow a dot in a path; any other key (with dots or slashes, as in
# "kubernetes.io/config.source") is written in brackets so the path stays unambiguous.
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
    """Return `value` as a string-keyed mapping, or `if_null` for None.

    Raises DecodeError "must be a mapping" (also for None without `if_null`) or "mapping keys must be
    strings" (YAML allows other keys; JSON does not).
    """
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
    """Return `value` as a list (a list or tuple; never a string), or `if_null` for None.

    Raises DecodeError "must be a list" (also for None without `if_null`).
    """
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
    """Return `decode_item(item, "key[i]")` for each element of the list `value`, or `if_null` for None.

    Raises DecodeError "must be a list" (also for None without `if_null`), or whatever `decode_item` raises.
    """
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
    """Return `value` as an int within [low, high] (default: Go's int64 range), or `if_null` for None.

    Raises DecodeError "must be an integer" (bools and floats included) or "must be between low and high".
    """
    if value is None and if_null is not _REJECT:
        return if_null
    if isinstance(value, bool) or not isinstance(value, int):
        raise invalid("must be an integer", key, value)
    if not low <= value <= high:
        raise invalid(f"must be between {low} and {high}", key, value)
    return value
