"""Tests for evictd.core.duration against Go's `time.ParseDuration` and `Duration.String()`.

Expected values come from Go's `src/time/time_test.go` (parseDurationTests, parseDurationErrorTests,
durationTests, TestParseDurationRoundTrip) plus the cases evictd's configuration needs.
"""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from evictd.core.duration import (
    HOUR,
    MAX_DURATION_NS,
    MICROSECOND,
    MILLISECOND,
    MIN_DURATION_NS,
    MINUTE,
    NANOSECOND,
    SECOND,
    format_go_duration,
    format_go_duration_ns,
    parse_go_duration,
    parse_go_duration_ns,
)
from evictd.core.errors import ConfigError, DurationError

# --------------------------------------------------------------------------- parsing

PARSE_CASES: list[tuple[str, int]] = [
    # simple
    ("0", 0),
    ("5s", 5 * SECOND),
    ("30s", 30 * SECOND),
    ("1478s", 1478 * SECOND),
    # sign
    ("-5s", -5 * SECOND),
    ("+5s", 5 * SECOND),
    ("-0", 0),
    ("+0", 0),
    # decimal
    ("5.0s", 5 * SECOND),
    ("5.6s", 5 * SECOND + 600 * MILLISECOND),
    ("5.s", 5 * SECOND),
    (".5s", 500 * MILLISECOND),
    ("1.0s", 1 * SECOND),
    ("1.00s", 1 * SECOND),
    ("1.004s", 1 * SECOND + 4 * MILLISECOND),
    ("1.0040s", 1 * SECOND + 4 * MILLISECOND),
    ("100.00100s", 100 * SECOND + 1 * MILLISECOND),
    # different units
    ("10ns", 10 * NANOSECOND),
    ("11us", 11 * MICROSECOND),
    ("12µs", 12 * MICROSECOND),  # U+00B5
    ("12μs", 12 * MICROSECOND),  # U+03BC
    ("13ms", 13 * MILLISECOND),
    ("14s", 14 * SECOND),
    ("15m", 15 * MINUTE),
    ("16h", 16 * HOUR),
    # composite durations
    ("3h30m", 3 * HOUR + 30 * MINUTE),
    ("10.5s4m", 4 * MINUTE + 10 * SECOND + 500 * MILLISECOND),
    ("-2m3.4s", -(2 * MINUTE + 3 * SECOND + 400 * MILLISECOND)),
    ("1h2m3s4ms5us6ns", HOUR + 2 * MINUTE + 3 * SECOND + 4 * MILLISECOND + 5 * MICROSECOND + 6),
    ("39h9m14.425s", 39 * HOUR + 9 * MINUTE + 14 * SECOND + 425 * MILLISECOND),
    ("1h1h", 2 * HOUR),
    # large value
    ("52763797000ns", 52763797000),
    # more than 9 digits after the decimal point (golang.org/issue/6617)
    ("0.3333333333333333333h", 20 * MINUTE),
    # 1<<53+1 cannot be stored precisely in a float64
    ("9007199254740993ns", 2**53 + 1),
    # the int64 limits
    ("9223372036854775807ns", MAX_DURATION_NS),
    ("9223372036854775.807us", MAX_DURATION_NS),
    ("9223372036s854ms775us807ns", MAX_DURATION_NS),
    ("-9223372036854775808ns", MIN_DURATION_NS),
    ("-9223372036854775.808us", MIN_DURATION_NS),
    ("-9223372036s854ms775us808ns", MIN_DURATION_NS),
    ("-2562047h47m16.854775808s", MIN_DURATION_NS),  # golang.org/issue/48629
    # huge string (issue 15011)
    ("0.100000000000000000000h", 6 * MINUTE),
    # the first overflow check in leadingFraction
    ("0.830103483285477580700h", 49 * MINUTE + 48 * SECOND + 372539827),
    # evictd configuration values
    ("1m30s", 90 * SECOND),
    ("5m", 5 * MINUTE),
    ("300ms", 300 * MILLISECOND),
    ("1.5h", 90 * MINUTE),
    ("0s", 0),
    ("-0s", 0),
    ("000s", 0),
]


@pytest.mark.parametrize(("text", "ns"), PARSE_CASES, ids=[t for t, _ in PARSE_CASES])
def test_parse_ns(text: str, ns: int) -> None:
    assert parse_go_duration_ns(text) == ns


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("1.5s", 1.5),
        ("1h30m", 5400.0),
        ("0", 0.0),
        ("-5m", -300.0),
        ("300ms", 0.3),
        ("1us", 1e-6),
        ("1µs", 1e-6),
        ("1μs", 1e-6),
        ("10ns", 1e-8),
        ("5m0s", 300.0),
        ("1h0m0s", 3600.0),
    ],
    ids=lambda v: str(v),
)
def test_parse_seconds(text: str, seconds: float) -> None:
    result = parse_go_duration(text)
    assert isinstance(result, float)
    assert result == seconds


# --------------------------------------------------------------------------- errors (Go's exact texts)

ERROR_CASES: list[tuple[str, str]] = [
    ("", 'time: invalid duration ""'),
    ("3", 'time: missing unit in duration "3"'),
    ("5", 'time: missing unit in duration "5"'),
    ("00", 'time: missing unit in duration "00"'),
    ("1.5", 'time: missing unit in duration "1.5"'),
    ("1h5", 'time: missing unit in duration "1h5"'),
    ("-", 'time: invalid duration "-"'),
    ("+", 'time: invalid duration "+"'),
    ("s", 'time: invalid duration "s"'),
    ("x", 'time: invalid duration "x"'),
    (".", 'time: invalid duration "."'),
    ("-.", 'time: invalid duration "-."'),
    (".s", 'time: invalid duration ".s"'),
    ("+.s", 'time: invalid duration "+.s"'),
    ("--5s", 'time: invalid duration "--5s"'),
    (" 5s", 'time: invalid duration " 5s"'),
    ("1d", 'time: unknown unit "d" in duration "1d"'),
    ("5d", 'time: unknown unit "d" in duration "5d"'),
    ("1S", 'time: unknown unit "S" in duration "1S"'),
    ("1sec", 'time: unknown unit "sec" in duration "1sec"'),
    ("1h 30m", 'time: unknown unit "h " in duration "1h 30m"'),
    ("5s ", 'time: unknown unit "s " in duration "5s "'),
    ("1-5s", 'time: unknown unit "-" in duration "1-5s"'),
    ('5"s', 'time: unknown unit "\\"s" in duration "5\\"s"'),
    ("5\\s", 'time: unknown unit "\\\\s" in duration "5\\\\s"'),
    ("5\ns", 'time: unknown unit "\\x0as" in duration "5\\x0as"'),
    ("5\x7fs", 'time: unknown unit "\x7fs" in duration "5\x7fs"'),  # DEL is printed as is
    ("5×", 'time: unknown unit "\\xc3\\x97" in duration "5\\xc3\\x97"'),
    # undecodable bytes (carried as surrogate escapes) and U+FFFD, as in Go's tests
    ("\udc85\udc85", 'time: invalid duration "\\x85\\x85"'),
    ("\udcffff", 'time: invalid duration "\\xffff"'),
    ("hello \udcffff world", 'time: invalid duration "hello \\xffff world"'),
    ("\ufffd", 'time: invalid duration "\\xef\\xbf\\xbd"'),
    ("\ufffd hello \ufffd world", 'time: invalid duration "\\xef\\xbf\\xbd hello \\xef\\xbf\\xbd world"'),
    # overflow
    ("9223372036854775810ns", 'time: invalid duration "9223372036854775810ns"'),
    ("9223372036854775808ns", 'time: invalid duration "9223372036854775808ns"'),
    ("-9223372036854775809ns", 'time: invalid duration "-9223372036854775809ns"'),
    ("9223372036854776us", 'time: invalid duration "9223372036854776us"'),
    ("3000000h", 'time: invalid duration "3000000h"'),
    ("9223372036854775.808us", 'time: invalid duration "9223372036854775.808us"'),
    ("9223372036854ms775us808ns", 'time: invalid duration "9223372036854ms775us808ns"'),
    ("99999999999999999999h", 'time: invalid duration "99999999999999999999h"'),
    ("2562048h", 'time: invalid duration "2562048h"'),
]


@pytest.mark.parametrize(("text", "reason"), ERROR_CASES, ids=[ascii(t)[:40] for t, _ in ERROR_CASES])
def test_parse_errors(text: str, reason: str) -> None:
    with pytest.raises(DurationError) as info:
        parse_go_duration_ns(text)
    assert info.value.reason == reason
    with pytest.raises(DurationError) as info_seconds:
        parse_go_duration(text)
    assert info_seconds.value.reason == reason


def test_error_can_be_located() -> None:
    with pytest.raises(DurationError) as info:
        parse_go_duration("5d")
    located = info.value.at("evictionPressureTransitionPeriod", "5d")
    assert isinstance(located, DurationError)
    assert isinstance(located, ConfigError)
    assert str(located) == (
        'evictionPressureTransitionPeriod: invalid value \'5d\': time: unknown unit "d" in duration "5d"'
    )


def test_parse_rejects_non_str() -> None:
    with pytest.raises(TypeError):
        parse_go_duration_ns(5)  # type: ignore[arg-type]


# --------------------------------------------------------------------------- formatting

FORMAT_CASES: list[tuple[int, str]] = [
    (0, "0s"),
    (1 * NANOSECOND, "1ns"),
    (1100 * NANOSECOND, "1.1µs"),
    (2200 * MICROSECOND, "2.2ms"),
    (3300 * MILLISECOND, "3.3s"),
    (4 * MINUTE + 5 * SECOND, "4m5s"),
    (4 * MINUTE + 5001 * MILLISECOND, "4m5.001s"),
    (5 * HOUR + 6 * MINUTE + 7001 * MILLISECOND, "5h6m7.001s"),
    (8 * MINUTE + 1 * NANOSECOND, "8m0.000000001s"),
    (MAX_DURATION_NS, "2562047h47m16.854775807s"),
    (MIN_DURATION_NS, "-2562047h47m16.854775808s"),
    # evictd examples
    (5 * MINUTE, "5m0s"),
    (HOUR, "1h0m0s"),
    (1500 * MILLISECOND, "1.5s"),
    (300 * MILLISECOND, "300ms"),
    (90 * SECOND, "1m30s"),
    (MICROSECOND, "1µs"),
    (999 * NANOSECOND, "999ns"),
    (999_999_999, "999.999999ms"),
    (SECOND, "1s"),
    (HOUR + 1, "1h0m0.000000001s"),
    (100 * HOUR, "100h0m0s"),
]


@pytest.mark.parametrize(("ns", "text"), FORMAT_CASES, ids=[t for _, t in FORMAT_CASES])
def test_format_ns(ns: int, text: str) -> None:
    assert format_go_duration_ns(ns) == text
    if 0 < ns <= MAX_DURATION_NS:
        assert format_go_duration_ns(-ns) == "-" + text  # Go's TestDurationString negates as well


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (300.0, "5m0s"),
        (3600.0, "1h0m0s"),
        (1.5, "1.5s"),
        (0.0, "0s"),
        (-0.0, "0s"),
        (0.3, "300ms"),
        (90.0, "1m30s"),
        (1e-6, "1µs"),
        (-300.0, "-5m0s"),
        (300, "5m0s"),  # an int is converted exactly
        (10**9, "277777h46m40s"),
        (0.1 + 0.2, "300ms"),  # rounds to whole nanoseconds
        (1e-10, "0s"),
        (6e-10, "1ns"),
    ],
    ids=lambda v: str(v),
)
def test_format_seconds(seconds: float, text: str) -> None:
    assert format_go_duration(seconds) == text


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf, 1e10, -1e10, 9.3e9])
def test_format_seconds_out_of_range(bad: float) -> None:
    with pytest.raises(ValueError):
        format_go_duration(bad)


def test_format_ns_validates() -> None:
    with pytest.raises(ValueError):
        format_go_duration_ns(MAX_DURATION_NS + 1)
    with pytest.raises(ValueError):
        format_go_duration_ns(MIN_DURATION_NS - 1)
    with pytest.raises(TypeError):
        format_go_duration_ns(1.0)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        format_go_duration_ns(True)


def test_round_trip_at_the_int64_limits() -> None:
    # Go TestParseDurationRoundTrip
    for ns in (MAX_DURATION_NS, MIN_DURATION_NS):
        assert parse_go_duration_ns(format_go_duration_ns(ns)) == ns


# --------------------------------------------------------------------------- properties

DURATION_ALPHABET = "0123456789.+-nsuµμmh d"
duration_like = st.from_regex(r"[+-]?([0-9]{0,20}(\.[0-9]{0,25})?(ns|us|µs|μs|ms|s|m|h)){1,4}", fullmatch=True)
int64 = st.integers(min_value=MIN_DURATION_NS, max_value=MAX_DURATION_NS)


@given(st.one_of(st.text(), st.text(alphabet=DURATION_ALPHABET, max_size=30), duration_like))
def test_parse_raises_only_duration_error(text: str) -> None:
    try:
        ns = parse_go_duration_ns(text)
    except DurationError as exc:
        assert exc.reason.startswith("time: ")
        assert exc.reason.endswith('"')
    else:
        assert MIN_DURATION_NS <= ns <= MAX_DURATION_NS


@given(int64)
def test_format_parse_round_trip(ns: int) -> None:
    text = format_go_duration_ns(ns)
    assert parse_go_duration_ns(text) == ns
    assert parse_go_duration(text) == ns / SECOND


@given(st.integers(min_value=-(2**50), max_value=2**50))
def test_float_seconds_round_trip(ns: int) -> None:
    seconds = ns / SECOND
    text = format_go_duration(seconds)
    assert text == format_go_duration_ns(ns)
    assert parse_go_duration(text) == seconds


@given(
    st.lists(
        st.tuples(st.integers(min_value=0, max_value=10**6), st.sampled_from(["h", "m", "s", "ms", "us", "ns"])),
        min_size=1,
    )
)
def test_composite_durations_add_up(parts: list[tuple[int, str]]) -> None:
    units = {"h": HOUR, "m": MINUTE, "s": SECOND, "ms": MILLISECOND, "us": MICROSECOND, "ns": NANOSECOND}
    text = "".join(f"{count}{unit}" for count, unit in parts)
    total = sum(count * units[unit] for count, unit in parts)
    if total <= MAX_DURATION_NS:
        assert parse_go_duration_ns(text) == total
        assert parse_go_duration_ns("-" + text) == -total
