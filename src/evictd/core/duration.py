"""Go `time.ParseDuration` and `time.Duration.String()`, exact to the nanosecond.

Upstream: `src/time/format.go` (ParseDuration, leadingInt, leadingFraction, quote) and `src/time/time.go`
(Duration.format). Work is on int64 nanoseconds; the float-seconds functions are thin wrappers. Fractions
accumulate as Go's float64 step does, so results match bit for bit. Errors are `DurationError` with Go's text, the
input quoted as `time.quote` quotes it (surrogate-escaped bytes as the raw bytes).
"""

from __future__ import annotations

import math
from typing import Final

from evictd.core.errors import DurationError

NANOSECOND: Final = 1
MICROSECOND: Final = 1000 * NANOSECOND
MILLISECOND: Final = 1000 * MICROSECOND
SECOND: Final = 1000 * MILLISECOND
MINUTE: Final = 60 * SECOND
HOUR: Final = 60 * MINUTE

MAX_DURATION_NS: Final = 2**63 - 1
MIN_DURATION_NS: Final = -(2**63)

_TWO_63: Final = 2**63
_UNITS: Final[dict[str, int]] = {
    "ns": NANOSECOND,
    "us": MICROSECOND,
    "µs": MICROSECOND,  # U+00B5 micro sign
    "μs": MICROSECOND,  # U+03BC Greek small letter mu
    "ms": MILLISECOND,
    "s": SECOND,
    "m": MINUTE,
    "h": HOUR,
}
_HEX: Final = "0123456789abcdef"


def _go_quote(text: str) -> str:
    """Go `time.quote`: double-quote `text`, hex-escaping every byte of control and non-ASCII characters."""
    out = ['"']
    for char in text:
        code = ord(char)
        if code < 0x20 or code >= 0x80:
            out.extend(f"\\x{_HEX[byte >> 4]}{_HEX[byte & 0xF]}" for byte in _char_bytes(char))
        elif char == '"' or char == "\\":
            out.append("\\" + char)
        else:
            out.append(char)
    out.append('"')
    return "".join(out)


def _char_bytes(char: str) -> bytes:
    """The bytes Go would hold for `char`: UTF-8, a surrogate escape's original byte, else the surrogate."""
    try:
        return char.encode("utf-8")
    except UnicodeEncodeError:
        try:
            return char.encode("utf-8", "surrogateescape")
        except UnicodeEncodeError:
            return char.encode("utf-8", "surrogatepass")


def parse_go_duration_ns(text: str) -> int:
    """Parse a Go duration string (`300ms`, `-1.5h`, `2h45m`) into integer nanoseconds, accepting exactly what
    `time.ParseDuration` accepts; DurationError with Go's texts."""
    if not isinstance(text, str):
        raise TypeError(f"parse_go_duration_ns expects str, not {type(text).__name__}")
    invalid = f"time: invalid duration {_go_quote(text)}"
    s = text
    negative = False
    if s and (s[0] == "-" or s[0] == "+"):
        negative = s[0] == "-"
        s = s[1:]
    if s == "0":
        return 0
    if not s:
        raise DurationError(invalid)

    total = 0
    pos = 0
    n = len(s)
    while pos < n:
        char = s[pos]
        if not (char == "." or "0" <= char <= "9"):
            raise DurationError(invalid)

        # leadingInt: [0-9]*, an error beyond 2**63.
        start = pos
        whole = 0
        while pos < n and "0" <= s[pos] <= "9":
            if whole > _TWO_63 // 10:
                raise DurationError(invalid)
            whole = whole * 10 + (ord(s[pos]) - 48)
            if whole > _TWO_63:
                raise DurationError(invalid)
            pos += 1
        had_whole = pos != start

        # leadingFraction: (\.[0-9]*)?, silently stops accumulating precision on overflow.
        fraction = 0
        scale = 1.0
        had_fraction = False
        if pos < n and s[pos] == ".":
            pos += 1
            start = pos
            overflow = False
            while pos < n and "0" <= s[pos] <= "9":
                if not overflow:
                    if fraction > (_TWO_63 - 1) // 10:
                        overflow = True
                    else:
                        candidate = fraction * 10 + (ord(s[pos]) - 48)
                        if candidate > _TWO_63:
                            overflow = True
                        else:
                            fraction = candidate
                            scale *= 10
                pos += 1
            had_fraction = pos != start
        if not had_whole and not had_fraction:
            raise DurationError(invalid)  # no digits, e.g. ".s" or "-.s"

        # Unit: everything up to the next '.' or digit.
        start = pos
        while pos < n and not (s[pos] == "." or "0" <= s[pos] <= "9"):
            pos += 1
        if pos == start:
            raise DurationError(f"time: missing unit in duration {_go_quote(text)}")
        unit_text = s[start:pos]
        unit = _UNITS.get(unit_text)
        if unit is None:
            raise DurationError(f"time: unknown unit {_go_quote(unit_text)} in duration {_go_quote(text)}")

        if whole > _TWO_63 // unit:
            raise DurationError(invalid)
        value = whole * unit
        if fraction > 0:
            # Go: float64 is needed to be nanosecond accurate for fractions of hours.
            value += int(float(fraction) * (float(unit) / scale))
            if value > _TWO_63:
                raise DurationError(invalid)
        total += value
        if total > _TWO_63:
            raise DurationError(invalid)

    if negative:
        return -total
    if total > MAX_DURATION_NS:
        raise DurationError(invalid)
    return total


def parse_go_duration(text: str) -> float:
    """`parse_go_duration_ns(text)` in seconds (`"1.5s"` -> 1.5, `"300ms"` -> 0.3)."""
    return parse_go_duration_ns(text) / SECOND


def _fmt_frac(value: int, prec: int) -> tuple[str, int]:
    """Go `fmtFrac`: the fraction of value/10**prec without trailing zeros ("" when zero), and the quotient."""
    quotient, remainder = divmod(value, 10**prec)
    if remainder == 0:
        return "", quotient
    return "." + str(remainder).rjust(prec, "0").rstrip("0"), quotient


def format_go_duration_ns(ns: int) -> str:
    """Go `Duration.String()` of `ns` nanoseconds: `72h3m0.5s`, `1.2ms`, `1µs`, `0s` (int64 range only)."""
    if isinstance(ns, bool) or not isinstance(ns, int):
        raise TypeError(f"format_go_duration_ns expects int, not {type(ns).__name__}")
    if not MIN_DURATION_NS <= ns <= MAX_DURATION_NS:
        raise ValueError(f"duration {ns}ns is outside Go's int64 range")
    magnitude = -ns if ns < 0 else ns
    if magnitude < SECOND:
        # Below one second a smaller unit keeps the leading digit non-zero.
        if magnitude == 0:
            return "0s"
        if magnitude < MICROSECOND:
            prec, unit = 0, "ns"
        elif magnitude < MILLISECOND:
            prec, unit = 3, "µs"  # U+00B5, as Go prints it
        else:
            prec, unit = 6, "ms"
        frac, whole = _fmt_frac(magnitude, prec)
        text = f"{whole}{frac}{unit}"
    else:
        frac, seconds = _fmt_frac(magnitude, 9)
        text = f"{seconds % 60}{frac}s"
        minutes = seconds // 60
        if minutes > 0:
            text = f"{minutes % 60}m{text}"
            hours = minutes // 60
            if hours > 0:  # Go stops at hours: days vary in length
                text = f"{hours}h{text}"
    return "-" + text if ns < 0 else text


def format_go_duration(seconds: float) -> str:
    """Go `Duration.String()` of `seconds` (rounded to whole nanoseconds): 300 -> `5m0s`, 0.3 -> `300ms`."""
    if not math.isfinite(seconds):
        raise ValueError(f"duration {seconds!r} is not finite")
    return format_go_duration_ns(round(seconds * SECOND))
