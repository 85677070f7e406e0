"""The JSON of a recorded line, as `evictd.record.model` (the line) and `evictd.record.decision` (its decision)
both write and read it: the one compact encoder (`dumps`), `ABSENT` (a line that does not say), and the checked
readers of a decoded line's fields, which raise `LineError` naming the field that does not fit
(`decision.evicted[0].name is not a string`)."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping

Document = Mapping[str, object]

# Compact JSON text (one encoder: `json.dumps` with separators builds one per call).
dumps: Callable[[object], str] = json.JSONEncoder(separators=(",", ":")).encode


class LineError(ValueError):
    """A recorded line that does not fit the format; the message names the field."""


class Absent:
    """The type of ABSENT: a line that does not say (not None, which says "nothing")."""

    def __repr__(self) -> str:
        return "ABSENT"


ABSENT = Absent()


def fail(path: str, what: str) -> LineError:
    return LineError(f"{path} is not {what}")


def json_object(value: object, path: str) -> Document:
    if type(value) is not dict:
        raise fail(path, "an object")
    return value


def json_string(value: object, path: str) -> str:
    if type(value) is not str:
        raise fail(path, "a string")
    return value


def optional_string(value: object, path: str) -> str | None:
    return None if value is None else json_string(value, path)


def integer(value: object, path: str) -> int:
    if type(value) is not int:
        raise fail(path, "an integer")
    return value


def seconds(value: object, path: str) -> int | float:
    if type(value) is not int and type(value) is not float:
        raise fail(path, "a number")
    return value


def flag(value: object, path: str) -> bool:
    if type(value) is not bool:
        raise fail(path, "true or false")
    return value


def json_list(document: Document, name: str, path: str) -> list[object]:
    value = document.get(name)
    if value is None:
        return []
    if type(value) is not list:
        raise fail(f"{path}.{name}" if path else name, "a list")
    return value


def strings(document: Document, name: str, path: str) -> tuple[str, ...]:
    return tuple(json_string(item, f"{path}.{name}[{n}]") for n, item in enumerate(json_list(document, name, path)))
