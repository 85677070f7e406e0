"""Label and field selectors, parsed and matched as k8s.io/apimachinery/pkg/labels and pkg/fields do.

Label selectors: comma-separated requirements `k`, `!k`, `k=v`, `k==v`, `k!=v`, `k in (a,b)`, `k notin (a,b)`,
`k>n`, `k<n`; `!=` and `notin` also match objects without the label, as upstream. Field selectors: `k=v`,
`k==v`, `k!=v` terms with backslash escapes (`\\,`, `\\=`, `\\\\`). Parse errors raise `SelectorError`, which the
HTTP layer turns into 400 BadRequest like the real query-parameter decoding.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

# Characters that end an identifier in the upstream label lexer (labels/selector.go isSpecialSymbol/whitespace).
_SPECIAL = set("!=<>(),")
_WHITESPACE = set(" \t\r\n")
_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
_QUALIFIED_NAME_PART = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")


class SelectorError(ValueError):
    """A selector that does not parse; the message is what the API server reports."""


@dataclass(frozen=True, slots=True)
class Requirement:
    """One label requirement: operator is exists, !, =, !=, in, notin, gt or lt."""

    key: str
    operator: str
    values: tuple[str, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        present = self.key in labels
        value = labels.get(self.key)
        if self.operator == "exists":
            return present
        if self.operator == "!":
            return not present
        if self.operator in ("=", "in"):
            return present and value in self.values
        if self.operator in ("!=", "notin"):
            return not present or value not in self.values
        if not present or value is None:
            return False
        try:
            number = int(value)
        except ValueError:
            return False
        bound = int(self.values[0])
        return number > bound if self.operator == "gt" else number < bound


def _tokens(text: str) -> list[str]:
    tokens: list[str] = []
    i = 0
    while i < len(text):
        char = text[i]
        if char in _WHITESPACE:
            i += 1
        elif char in _SPECIAL:
            two = text[i : i + 2]
            if two in ("!=", "=="):
                tokens.append(two)
                i += 2
            else:
                tokens.append(char)
                i += 1
        else:
            start = i
            while i < len(text) and text[i] not in _SPECIAL and text[i] not in _WHITESPACE:
                i += 1
            tokens.append(text[start:i])
    return tokens


def _check_key(key: str) -> None:
    prefix, _, name = key.rpartition("/")
    if not name or len(name) > 63 or not _QUALIFIED_NAME_PART.match(name) or (prefix == "" and "/" in key):
        raise SelectorError(f'unable to parse requirement: key: Invalid value: "{key}": name part must consist of '
                            "alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric "
                            "character")


def _check_value(value: str) -> None:
    if len(value) > 63 or not _LABEL_VALUE.match(value):
        raise SelectorError(f'unable to parse requirement: values[0][key]: Invalid value: "{value}": a valid label '
                            "must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must "
                            "start and end with an alphanumeric character")


def parse_label_selector(text: str) -> tuple[Requirement, ...]:
    """Parse a label selector; an empty string selects everything."""
    tokens = _tokens(text)
    requirements: list[Requirement] = []
    i = 0

    def take() -> str:
        nonlocal i
        if i >= len(tokens):
            raise SelectorError("found '', expected: identifier")
        i += 1
        return tokens[i - 1]

    while i < len(tokens):
        token = take()
        if token == "!":
            key = take()
            _check_key(key)
            requirements.append(Requirement(key, "!"))
        else:
            if token in _SPECIAL or token in ("!=", "=="):
                raise SelectorError(f"found '{token}', expected: !, identifier, or 'end of string'")
            key = token
            _check_key(key)
            operator = tokens[i] if i < len(tokens) else ","
            if operator == ",":
                requirements.append(Requirement(key, "exists"))
            elif operator in ("=", "==", "!="):
                i += 1
                value = tokens[i] if i < len(tokens) and tokens[i] != "," else ""
                if value:
                    i += 1
                _check_value(value)
                requirements.append(Requirement(key, "!=" if operator == "!=" else "=", (value,)))
            elif operator in ("in", "notin"):
                i += 1
                if take() != "(":
                    raise SelectorError("found '', expected: '('")
                values: list[str] = []
                while True:
                    value = take()
                    if value == ")":
                        break
                    if value == ",":
                        continue
                    _check_value(value)
                    values.append(value)
                if not values:
                    raise SelectorError("for 'in', 'notin' operators, values set can't be empty")
                requirements.append(Requirement(key, operator, tuple(values)))
            elif operator in (">", "<"):
                i += 1
                bound = take()
                if not re.fullmatch(r"-?\d+", bound):
                    raise SelectorError(f"for 'Gt', 'Lt' operators, the value must be an integer: {bound}")
                requirements.append(Requirement(key, "gt" if operator == ">" else "lt", (bound,)))
            else:
                raise SelectorError(f"found '{operator}', expected: in, notin, =, ==, !=, gt, lt")
        if i < len(tokens):
            if tokens[i] != ",":
                raise SelectorError(f"found '{tokens[i]}', expected: ',' or 'end of string'")
            i += 1
            if i == len(tokens):
                raise SelectorError("found '', expected: identifier after ','")
    return tuple(requirements)


def labels_match(requirements: tuple[Requirement, ...], labels: Mapping[str, str] | None) -> bool:
    """True when every requirement holds for the labels (a missing map is an empty one)."""
    present = labels or {}
    return all(r.matches(present) for r in requirements)


@dataclass(frozen=True, slots=True)
class FieldTerm:
    """One field requirement: `field <op> value` with op `=` or `!=`."""

    field: str
    operator: str
    value: str


def _split_unescaped(text: str, separator: str) -> list[str]:
    parts: list[str] = []
    current: list[str] = []
    escaped = False
    for char in text:
        if escaped:
            current.append("\\" + char)
            escaped = False
        elif char == "\\":
            escaped = True
        elif char == separator:
            parts.append("".join(current))
            current = []
        else:
            current.append(char)
    if escaped:
        current.append("\\")
    parts.append("".join(current))
    return parts


def _unescape(value: str) -> str:
    out: list[str] = []
    i = 0
    while i < len(value):
        if value[i] == "\\":
            if i + 1 >= len(value) or value[i + 1] not in "\\,=":
                raise SelectorError(f"invalid field selector: invalid escape sequence in '{value}'")
            out.append(value[i + 1])
            i += 2
        else:
            if value[i] in ",=":
                raise SelectorError(f"invalid field selector: unescaped '{value[i]}' in '{value}'")
            out.append(value[i])
            i += 1
    return "".join(out)


def parse_field_selector(text: str) -> tuple[FieldTerm, ...]:
    """Parse a field selector; an empty string selects everything."""
    if not text:
        return ()
    terms: list[FieldTerm] = []
    for raw in _split_unescaped(text, ","):
        if not raw:
            continue
        for operator, op_name in (("!=", "!="), ("==", "="), ("=", "=")):
            index = raw.find(operator)
            if index >= 0:
                terms.append(FieldTerm(raw[:index], op_name, _unescape(raw[index + len(operator) :])))
                break
        else:
            raise SelectorError(f"invalid selector: '{text}'; can't understand '{raw}'")
    return tuple(terms)


def fields_match(terms: tuple[FieldTerm, ...], fields: Mapping[str, str]) -> bool:
    """True when every term holds (fields were checked with `check_fields_supported` first)."""
    return all((fields.get(term.field, "") == term.value) == (term.operator == "=") for term in terms)


def check_fields_supported(terms: tuple[FieldTerm, ...], supported: frozenset[str]) -> None:
    """Raise SelectorError for the first field the resource cannot select on (checked before listing)."""
    for term in terms:
        if term.field not in supported:
            raise SelectorError(f"field label not supported: {term.field}")
