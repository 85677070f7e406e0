"""Kubernetes `resource.Quantity`: parsing, canonical printing, comparison and exact arithmetic.

Upstream: apimachinery `pkg/api/resource/{quantity,amount,suffix}.go` (master); its int64 fast path and `inf.Dec`
slow path are reproduced on one exact representation.

Invariants: `Quantity.value` is an exact terminating-decimal `Fraction`; parsed values are rounded away from zero to
1n (a positive amount never parses as zero). A parsed BinarySI magnitude is capped at 2**63-1 (`maxAllowed`) and one
below 1 becomes DecimalSI; arithmetic never caps. Equality, ordering and hashing look at the value only. `str(q)` is
`Quantity.String()`: the cached input text where upstream caches it, else `CanonicalizeBytes`. Errors are
`QuantityError` with upstream's exact text. Deliberate difference: a magnitude of 10**1000 or more is rejected with
`ErrNumeric` (upstream keeps `1e2147483647` symbolically), and the int32 wrap of exponents near -2**31 is not kept.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from fractions import Fraction
from functools import total_ordering
from typing import Final

from evictd.core.decode import INT32_MAX
from evictd.core.errors import QuantityError

ERR_FORMAT_WRONG: Final = (
    "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"
)
ERR_NUMERIC: Final = "unable to parse numeric part of quantity"
ERR_SUFFIX: Final = "unable to parse quantity's suffix"

MAX_ALLOWED: Final = 2**63 - 1
"""Upstream `maxAllowed`: the cap applied to the magnitude of a parsed BinarySI quantity."""


class QuantityFormat(StrEnum):
    """How a quantity prints (upstream `resource.Format`)."""

    DECIMAL_EXPONENT = "DecimalExponent"
    BINARY_SI = "BinarySI"
    DECIMAL_SI = "DecimalSI"


_NANO: Final = 10**9
_MAX_MAGNITUDE_DIGITS: Final = 1000  # evictd's own bound: |value| < 10**1000 (see module docstring)
_STR_CHUNK: Final = 600  # below CPython's smallest possible int<->str digit limit (640)
_STR_CHUNK_LIMIT: Final = 10**_STR_CHUNK

_SUFFIX_CHARS: Final = frozenset("eEinumkKMGTP")
_DECIMAL_SUFFIXES: Final[dict[str, int]] = {
    "": 0, "n": -9, "u": -6, "m": -3, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18,
}
_BINARY_SUFFIXES: Final[dict[str, int]] = {"Ki": 10, "Mi": 20, "Gi": 30, "Ti": 40, "Pi": 50, "Ei": 60}
_DECIMAL_SUFFIX_BY_EXPONENT: Final[dict[int, str]] = {exp: s for s, exp in _DECIMAL_SUFFIXES.items()}
_BINARY_SUFFIX_BY_POWER: Final[dict[int, str]] = {exp // 10: s for s, exp in _BINARY_SUFFIXES.items()}


@total_ordering
@dataclass(frozen=True, slots=True, eq=False, repr=False)
class Quantity:
    """An exact Kubernetes quantity and the format it prints in. `verbatim` (set only by `parse`, where upstream
    `ParseQuantity` caches its input: `+1Ki`, `1.500`) is what `str()` returns as is; arithmetic never carries it."""

    value: Fraction
    format: QuantityFormat
    verbatim: str | None = field(default=None)

    def __post_init__(self) -> None:
        if not isinstance(self.value, Fraction):
            raise TypeError(f"Quantity.value must be a Fraction, not {type(self.value).__name__}")
        if not isinstance(self.format, QuantityFormat):
            raise TypeError(f"Quantity.format must be a QuantityFormat, not {type(self.format).__name__}")
        den = self.value.denominator
        if den != 1 and _NANO % den != 0:
            _decimal_places(self.value)  # raises unless the value is a terminating decimal

    # ----------------------------------------------------------------- construction

    @classmethod
    def parse(cls, text: str) -> Quantity:
        """Parse `text` exactly like upstream `resource.ParseQuantity`; QuantityError with upstream's reason
        (`ERR_FORMAT_WRONG`, `ERR_SUFFIX`, `ERR_NUMERIC`). Quirks kept: `.`, `+`, `Ki`, `m` parse as zero; `1.` and
        `.5` are numbers; suffix case matters (`1e3` DecimalExponent, `1E` exa)."""
        if not isinstance(text, str):
            raise TypeError(f"Quantity.parse expects str, not {type(text).__name__}")
        if not text:
            raise QuantityError(ERR_FORMAT_WRONG)
        if text == "0":
            return cls(Fraction(0), QuantityFormat.DECIMAL_SI, "0")

        # --- scan: [+-]? digits* (. digits*)? suffix-letters* [+-]? digits*   (upstream parseQuantityString)
        n = len(text)
        pos = 0
        negative = False
        if text[0] == "-" or text[0] == "+":
            negative = text[0] == "-"
            pos = 1
        start = pos
        while pos < n and "0" <= text[pos] <= "9":
            pos += 1
        whole = text[start:pos]
        frac = ""
        if pos < n and text[pos] == ".":
            pos += 1
            start = pos
            while pos < n and "0" <= text[pos] <= "9":
                pos += 1
            frac = text[start:pos]
        suffix_start = pos
        while pos < n and text[pos] in _SUFFIX_CHARS:
            pos += 1
        if pos < n and (text[pos] == "-" or text[pos] == "+"):
            pos += 1
        while pos < n and "0" <= text[pos] <= "9":
            pos += 1
        if pos != n:
            raise QuantityError(ERR_FORMAT_WRONG)

        interpreted = _interpret_suffix(text[suffix_start:])
        if interpreted is None:
            raise QuantityError(ERR_SUFFIX)
        base, exponent, fmt = interpreted

        num = whole.lstrip("0") or "0"  # upstream strips leading zeros; all-zero becomes "0"
        digits = (whole + frac).lstrip("0")  # significant digits; empty means the value is zero

        if base == 2:
            # Upstream fast path: integer mantissa, few digits, exact int64 product.
            if not frac and 14 - len(num) - 3 * (exponent // 10) >= 0:
                mantissa = int(num)
                value = Fraction(-mantissa << exponent if negative else mantissa << exponent)
                verbatim = text if mantissa & 7 else None  # upstream: exponent%10 == 0 && value&7 != 0
                return cls(value, fmt, verbatim)
            if not whole and not frac:
                raise QuantityError(ERR_NUMERIC)  # inf.Dec.SetString: no digits
            return cls._binary_slow_path(digits, len(frac), exponent, negative)

        scale = exponent - len(frac)  # value = int(whole + frac) * 10**scale
        if digits and len(digits) + scale > _MAX_MAGNITUDE_DIGITS:
            raise QuantityError(ERR_NUMERIC)
        if 18 - len(num) - len(frac) >= 0 and scale >= -9:
            # Upstream fast path (int64Amount): exact, no rounding needed at scale >= -9.
            shifted = num + frac
            mantissa = int(shifted)
            if negative:
                mantissa = -mantissa
            if mantissa == 0:
                value = Fraction(0)  # never build 10**scale for a zero (e.g. "0e2147483647")
            elif scale >= 0:
                value = Fraction(mantissa * _pow10(scale))
            else:
                value = Fraction(mantissa, _pow10(-scale))
            canonical = scale % 3 == 0 and not shifted.endswith("000") and shifted[0] != "0"
            return cls(value, fmt, text if canonical else None)
        if not whole and not frac:
            raise QuantityError(ERR_NUMERIC)  # inf.Dec.SetString: no digits
        if not digits:
            return cls(Fraction(0), fmt)
        magnitude = len(digits) + scale  # 10**(magnitude-1) <= |value| < 10**magnitude
        # Below 1n a value rounds away from zero to the minimum unit without building 10**-scale.
        nanos = 1 if magnitude <= -9 else _ceil_scaled(_digits_to_int(digits), scale + 9)
        return cls(Fraction(-nanos if negative else nanos, _NANO), fmt)

    @classmethod
    def _binary_slow_path(cls, digits: str, frac_len: int, exponent: int, negative: bool) -> Quantity:
        """Upstream's inf.Dec path for a binary suffix: round up to 1n, cap at MAX_ALLOWED, <1 -> DecimalSI."""
        fmt = QuantityFormat.BINARY_SI
        if not digits:
            return cls(Fraction(0), fmt)
        magnitude = len(digits) - frac_len  # 10**(magnitude-1) <= mantissa < 10**magnitude, before 2**exp
        if magnitude > 20:
            nanos = MAX_ALLOWED * _NANO  # >= 10**20 > 2**63 even before the binary factor
        elif magnitude + 19 <= -9:
            nanos = 1  # < 10**magnitude * 2**60 < 10**(magnitude+19) <= 1n
        else:
            numerator = (_digits_to_int(digits) << exponent) * _NANO
            denominator = _pow10(frac_len)
            nanos = -(-numerator // denominator)
            nanos = min(nanos, MAX_ALLOWED * _NANO)
        if nanos < _NANO:
            fmt = QuantityFormat.DECIMAL_SI
        return cls(Fraction(-nanos if negative else nanos, _NANO), fmt)

    @classmethod
    def from_int(cls, value: int, fmt: QuantityFormat) -> Quantity:
        """Upstream `resource.NewQuantity(value, format)` (Go takes an int64; larger ints stay exact)."""
        if not isinstance(value, int):
            raise TypeError(f"Quantity.from_int expects int, not {type(value).__name__}")
        return cls(Fraction(value), fmt)

    # ----------------------------------------------------------------- printing

    def __str__(self) -> str:
        """Upstream `Quantity.String()`: the cached parse text, else the canonical form."""
        if self.verbatim is not None:
            return self.verbatim
        return _canonical(self.value, self.format)

    def __repr__(self) -> str:
        return f"Quantity({str(self)!r}, value={self.value}, format={self.format.value})"

    # ----------------------------------------------------------------- numeric views

    def ceil_int(self) -> int:
        """Upstream `Quantity.Value()`: rounded up, away from zero, to an exact integer (Go's int64 saturates)."""
        num, den = self.value.numerator, self.value.denominator
        if den == 1:
            return num
        magnitude = -(-abs(num) // den)
        return magnitude if num > 0 else -magnitude

    def sign(self) -> int:
        """-1, 0 or 1 (upstream `Sign()`)."""
        num = self.value.numerator
        return (num > 0) - (num < 0)

    def cmp(self, other: Quantity | int) -> int:
        """Numeric comparison (upstream `Cmp` / `CmpInt64`): -1, 0 or 1."""
        rhs = other.value if isinstance(other, Quantity) else other
        return (self.value > rhs) - (self.value < rhs)

    # ----------------------------------------------------------------- comparisons (value only)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Quantity):
            return self.value == other.value
        if isinstance(other, int):
            return self.value == other
        return NotImplemented

    def __hash__(self) -> int:
        return hash(self.value)

    def __lt__(self, other: Quantity | int) -> bool:
        if isinstance(other, Quantity):
            return self.value < other.value
        if isinstance(other, int):
            return self.value < other
        return NotImplemented

    # ----------------------------------------------------------------- arithmetic (exact, never capped)

    def __add__(self, other: Quantity) -> Quantity:
        """Upstream `q.Add(y)`: keeps q's format, except that a zero q takes y's format."""
        if not isinstance(other, Quantity):
            return NotImplemented
        fmt = other.format if self.value == 0 else self.format
        return Quantity(self.value + other.value, fmt)

    def __sub__(self, other: Quantity) -> Quantity:
        """Upstream `q.Sub(y)`: keeps q's format, except that a zero q takes y's format."""
        if not isinstance(other, Quantity):
            return NotImplemented
        fmt = other.format if self.value == 0 else self.format
        return Quantity(self.value - other.value, fmt)

    def __neg__(self) -> Quantity:
        """Upstream `q.Neg()`: same format."""
        return Quantity(-self.value, self.format)


ZERO: Final = Quantity(Fraction(0), QuantityFormat.DECIMAL_SI)
"""Go's zero-value Quantity as the kubelet uses it (prints `0`)."""


# --------------------------------------------------------------------- helpers


def _interpret_suffix(suffix: str) -> tuple[int, int, QuantityFormat] | None:
    """Upstream `quantitySuffixer.interpret`: (base, exponent, format), or None when unknown."""
    exp = _DECIMAL_SUFFIXES.get(suffix)
    if exp is not None:
        return 10, exp, QuantityFormat.DECIMAL_SI
    exp = _BINARY_SUFFIXES.get(suffix)
    if exp is not None:
        return 2, exp, QuantityFormat.BINARY_SI
    if len(suffix) > 1 and (suffix[0] == "e" or suffix[0] == "E"):
        parsed = _parse_exponent(suffix[1:])
        if parsed is None:
            return None
        return 10, parsed, QuantityFormat.DECIMAL_EXPONENT
    return None


def _parse_exponent(text: str) -> int | None:
    """`strconv.ParseInt(text, 10, 64)` followed by upstream's [-(2**31-1), 2**31-1] bound; None on error."""
    body = text[1:] if text[:1] in ("+", "-") else text
    if not body or any(not "0" <= c <= "9" for c in body):
        return None
    body = body.lstrip("0") or "0"
    if len(body) > 10:
        return None
    value = int(body)
    if value > INT32_MAX:
        return None
    return -value if text[0] == "-" else value


def _pow10(exponent: int) -> int:
    """10**exponent for exponent >= 0, typed as int."""
    result: int = 10**exponent
    return result


def _ceil_scaled(mantissa: int, shift: int) -> int:
    """ceil(mantissa * 10**shift) for mantissa >= 0."""
    if shift >= 0:
        return mantissa * _pow10(shift)
    quotient, remainder = divmod(mantissa, _pow10(-shift))
    return quotient + (1 if remainder else 0)


def _decimal_places(value: Fraction) -> int:
    """Smallest k with 10**k * value whole; ValueError when its denominator has a prime factor but 2 and 5."""
    den = value.denominator
    twos = (den & -den).bit_length() - 1
    rest = den >> twos
    fives = 0
    while rest % 5 == 0:
        rest //= 5
        fives += 1
    if rest != 1:
        raise ValueError(f"Quantity.value {value} is not a terminating decimal")
    return max(twos, fives)


def _digits_to_int(digits: str) -> int:
    """int() of an ASCII digit string of any length (CPython limits int(str) on long strings)."""
    if len(digits) <= _STR_CHUNK:
        return int(digits)
    low = len(digits) // 2
    return _digits_to_int(digits[:-low]) * _pow10(low) + _digits_to_int(digits[-low:])


def _int_to_str(value: int) -> str:
    """str() of a non-negative int of any size (CPython limits str(int) on huge ints)."""
    if value < _STR_CHUNK_LIMIT:
        return str(value)
    low = value.bit_length() * 3 // 20  # about half the decimal digits
    high, rest = divmod(value, _pow10(low))
    return _int_to_str(high) + _int_to_str(rest).rjust(low, "0")


def _canonical(value: Fraction, fmt: QuantityFormat) -> str:
    """Upstream `CanonicalizeBytes` (with the no-suffix fallbacks to exponent form)."""
    num = value.numerator
    if num == 0:
        return "0"
    sign = "-" if num < 0 else ""
    magnitude = -num if num < 0 else num
    den = value.denominator

    if fmt is QuantityFormat.BINARY_SI:
        if den != 1 or magnitude < 1024:
            fmt = QuantityFormat.DECIMAL_SI  # |v| < 1024 or fractional: shown as DecimalSI
        else:
            power = ((magnitude & -magnitude).bit_length() - 1) // 10  # factors of 1024
            if power == 0:
                return sign + _int_to_str(magnitude)
            suffix = _BINARY_SUFFIX_BY_POWER.get(power)
            if suffix is not None:
                return sign + _int_to_str(magnitude >> (10 * power)) + suffix
            fmt = QuantityFormat.DECIMAL_EXPONENT  # beyond Ei: exact decimal exponent form

    # Mantissa and base-10 exponent, the exponent lowered to a multiple of 3 (AsCanonicalBytes).
    places = 9 if _NANO % den == 0 else _decimal_places(value)
    digits = _int_to_str(magnitude * (_pow10(places) // den))
    mantissa = digits.rstrip("0")
    exponent = len(digits) - len(mantissa) - places
    pad = exponent % 3
    if pad:
        mantissa += "0" * pad
        exponent -= pad

    if fmt is QuantityFormat.DECIMAL_SI:
        suffix = _DECIMAL_SUFFIX_BY_EXPONENT.get(exponent)
        if suffix is None:
            suffix = f"e{exponent}"  # no SI suffix (beyond E or below n): exponent form
    else:
        suffix = "" if exponent == 0 else f"e{exponent}"
    return sign + mantissa + suffix
