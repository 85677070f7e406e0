"""Tests of evictd.core.decode: error paths, the checks with and without `if_null`, and their wording."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from evictd.core.decode import (
    EMPTY_MAPPING,
    INT32_MAX,
    INT32_MIN,
    INT64_MAX,
    INT64_MIN,
    child,
    integer,
    invalid,
    list_of,
    mapping,
    printable,
    sequence,
    string,
)
from evictd.core.errors import DecodeError

HUGE = 10**5000  # repr() of this raises ValueError in CPython (int max str digits)


@pytest.mark.parametrize(
    ("path", "name", "expected"),
    [
        pytest.param("pod.metadata", "name", "pod.metadata.name", id="plain"),
        pytest.param("pods[0]", "ephemeral-storage", "pods[0].ephemeral-storage", id="dash-is-plain"),
        pytest.param("pods[0]", "process_stats", "pods[0].process_stats", id="underscore-is-plain"),
        pytest.param(
            "metadata.annotations",
            "kubernetes.io/config.source",
            "metadata.annotations[kubernetes.io/config.source]",
            id="dots-and-slash-bracketed",
        ),
        pytest.param("limits", "nvidia.com/gpu", "limits[nvidia.com/gpu]", id="resource-name-bracketed"),
        pytest.param("labels", "1st", "labels[1st]", id="leading-digit-bracketed"),
        pytest.param("labels", "", "labels[]", id="empty-bracketed"),
        pytest.param("labels", "a b", "labels[a b]", id="space-bracketed"),
    ],
)
def test_child_brackets_keys_that_are_not_plain(path: str, name: str, expected: str) -> None:
    assert child(path, name) == expected


def test_element() -> None:
    assert list_of([0, 0, 0, 0], "spec.containers", lambda _, key: key)[3] == "spec.containers[3]"


def test_printable_replaces_only_what_repr_refuses() -> None:
    assert printable([1, "a"]) == [1, "a"]
    assert printable(HUGE) == "<unprintable int>"


def test_invalid_builds_a_printable_error_without_raising() -> None:
    error = invalid("must be an integer", "spec.priority", HUGE)
    assert isinstance(error, DecodeError)
    assert (error.reason, error.key, error.value) == ("must be an integer", "spec.priority", "<unprintable int>")
    assert str(error) == "spec.priority: invalid value '<unprintable int>': must be an integer"


Check = Callable[..., Any]


@pytest.mark.parametrize(
    ("check", "value", "reason"),
    [
        pytest.param(mapping, [], "must be a mapping", id="mapping-list"),
        pytest.param(mapping, "a", "must be a mapping", id="mapping-string"),
        pytest.param(mapping, None, "must be a mapping", id="mapping-null-rejected-by-default"),
        pytest.param(mapping, {1: "a"}, "mapping keys must be strings", id="mapping-int-key"),
        pytest.param(sequence, {}, "must be a list", id="list-mapping"),
        pytest.param(sequence, "abc", "must be a list", id="list-string"),
        pytest.param(sequence, None, "must be a list", id="list-null-rejected-by-default"),
        pytest.param(string, 7, "must be a string", id="string-int"),
        pytest.param(string, b"x", "must be a string", id="string-bytes"),
        pytest.param(string, None, "must be a string", id="string-null-rejected-by-default"),
        pytest.param(integer, True, "must be an integer", id="integer-bool"),
        pytest.param(integer, 1.0, "must be an integer", id="integer-float"),
        pytest.param(integer, "1", "must be an integer", id="integer-string"),
        pytest.param(integer, None, "must be an integer", id="integer-null-rejected-by-default"),
        pytest.param(integer, INT64_MAX + 1, f"must be between {INT64_MIN} and {INT64_MAX}", id="integer-above-int64"),
        pytest.param(integer, INT64_MIN - 1, f"must be between {INT64_MIN} and {INT64_MAX}", id="integer-below-int64"),
        pytest.param(integer, HUGE, f"must be between {INT64_MIN} and {INT64_MAX}", id="integer-unprintable"),
    ],
)
def test_checks_reject_with_one_wording(check: Check, value: Any, reason: str) -> None:
    with pytest.raises(DecodeError) as caught:
        check(value, "a.b")
    assert (caught.value.reason, caught.value.key) == (reason, "a.b")
    assert str(caught.value)


@pytest.mark.parametrize(
    ("check", "value"),
    [
        pytest.param(mapping, {"a": 1}, id="mapping"),
        pytest.param(mapping, {}, id="empty-mapping"),
        pytest.param(sequence, [1, "a"], id="list"),
        pytest.param(sequence, (1,), id="tuple"),
        pytest.param(string, "", id="empty-string"),
        pytest.param(integer, 0, id="zero"),
        pytest.param(integer, INT64_MAX, id="int64-max"),
        pytest.param(integer, INT64_MIN, id="int64-min"),
    ],
)
def test_checks_return_good_values_unchanged(check: Check, value: Any) -> None:
    assert check(value, "k") is value


@pytest.mark.parametrize("check", [mapping, sequence, string, integer], ids=lambda c: c.__name__)
@pytest.mark.parametrize("if_null", [None, "", 0, (), EMPTY_MAPPING], ids=repr)
def test_if_null_is_returned_for_null_only(check: Check, if_null: object) -> None:
    assert check(None, "k", if_null=if_null) is if_null


@pytest.mark.parametrize(
    ("check", "value", "reason"),
    [
        pytest.param(mapping, 0, "must be a mapping", id="mapping"),
        pytest.param(sequence, "", "must be a list", id="list"),
        pytest.param(string, 0, "must be a string", id="string"),
        pytest.param(integer, "", "must be an integer", id="integer"),
    ],
)
def test_if_null_does_not_excuse_other_falsy_values(check: Check, value: Any, reason: str) -> None:
    with pytest.raises(DecodeError, match=reason):
        check(value, "k", if_null=None)


def test_integer_bounds_are_inclusive_and_named() -> None:
    assert integer(INT32_MIN, "p", low=INT32_MIN, high=INT32_MAX) == INT32_MIN
    assert integer(INT32_MAX, "p", low=INT32_MIN, high=INT32_MAX) == INT32_MAX
    with pytest.raises(DecodeError) as caught:
        integer(-1, "p", low=0, high=10)
    assert (caught.value.reason, caught.value.key, caught.value.value) == ("must be between 0 and 10", "p", -1)


def _name(value: object, key: str) -> str:
    return string(mapping(value, key).get("name"), child(key, "name"))


def test_list_of_decodes_each_element_at_its_index() -> None:
    assert list_of([{"name": "a"}, {"name": "b"}], "items", _name) == ("a", "b")
    assert list_of([], "items", _name) == ()
    assert list_of(None, "items", _name, if_null=()) == ()
    with pytest.raises(DecodeError) as caught:
        list_of([{"name": "a"}, {"name": 2}], "items", _name)
    assert caught.value.key == "items[1].name"
    with pytest.raises(DecodeError, match="must be a list"):
        list_of(None, "items", _name)


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=6),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=10,
)


@settings(max_examples=200, deadline=None)
@given(JSON)
def test_checks_raise_only_scenario_error_and_keep_input(value: Any) -> None:
    before = copy.deepcopy(value)
    for check in (mapping, sequence, string, integer):
        try:
            check(value, "k")
        except DecodeError as exc:
            assert exc.key == "k"
    assert value == before
