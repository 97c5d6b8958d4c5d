"""Parse and format physical quantities at the edges of greenckpt.

Inside greenckpt every quantity is a plain SI ``float``: bytes, seconds, hertz, watts, joules,
fractions (``1.0`` is 100 %) and rates in 1/s. Units exist only where people meet the program:
command-line flags, configuration files and reports. Converting here, at the edge, means the
models never see a string, never guess a unit and never mix MiB with MB.

Parsing is strict on purpose: a bare ``14`` for an interval could be seconds or hours, so every
parser except :func:`parse_fraction` requires a unit, and zero or negative values are refused
unless the caller opts in. Every failure raises :class:`UnitError` with a one-line message the
CLI prints as is. The ``format_*`` functions print what the parsers accept, so a value in a
report can be pasted back into a flag. docs/design/units.md has the design.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from decimal import Context, Decimal

from greenckpt.errors import GreenckptError, InvalidTypeError

__all__ = [
    "UnitError",
    "format_duration",
    "format_energy",
    "format_frequency",
    "format_percent",
    "format_power",
    "format_size",
    "parse_duration",
    "parse_energy",
    "parse_fraction",
    "parse_frequency",
    "parse_power",
    "parse_rate",
    "parse_size",
    "size_is_decimal",
]


class UnitError(GreenckptError, ValueError):
    """A quantity could not be parsed.

    The message is a single line that quotes the offending text (as ``repr``,
    so control characters cannot break the line) and says what would be valid.
    """


# --------------------------------------------------------------------------------------------
# Tables: one _Kind per quantity, mapping every accepted spelling to its SI factor.
# --------------------------------------------------------------------------------------------

_D = Decimal

#: Exact decimal arithmetic with no traps: an overflow becomes Infinity and is then
#: reported as "too large" instead of escaping as a decimal exception.
_CTX = Context(prec=40, traps=[])

#: A decimal number with optional sign, fraction and exponent (ASCII digits only).
_NUMBER = r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?"
#: One ``number unit`` pair; the unit is whatever follows up to a digit, space, sign or '/'.
#: Inside a value only spaces and tabs may separate things ("64 GiB", "1h 30min").
_TERM = re.compile(rf"[ \t]*(?P<num>{_NUMBER})[ \t]*(?P<unit>[^\s0-9.+\-/]*)")
_BLANK = " \t"
_BARE_NUMBER = re.compile(_NUMBER)
_NON_FINITE = re.compile(r"[+-]?(?:nan|inf)", re.IGNORECASE)


@dataclass(frozen=True)
class _Kind:
    """How to read one kind of quantity.

    ``units`` maps each accepted spelling to its SI factor; when
    ``case_insensitive`` is set its keys are lower-case and lookups fold case.
    ``bare`` is the factor of a number given without a unit (``None``: a unit is
    required). ``compound`` allows several terms that add up (``1h30min``).
    """

    name: str
    article: str
    examples: str
    valid: str
    units: Mapping[str, Decimal]
    case_insensitive: bool = False
    compound: bool = False
    bare: Decimal | None = None

    @property
    def noun(self) -> str:
        return f"{self.article} {self.name}"

    def factor(self, unit: str) -> Decimal | None:
        return self.units.get(unit.lower() if self.case_insensitive else unit)


def _expand(
    prefixes: Mapping[str, Decimal], bases: Mapping[str, Decimal], *, fold_case: bool = False
) -> dict[str, Decimal]:
    """Every ``prefix + base`` spelling with its factor, lower-cased if ``fold_case``."""
    table: dict[str, Decimal] = {}
    for prefix, prefix_factor in prefixes.items():
        for base, base_factor in bases.items():
            spelling = (prefix + base).lower() if fold_case else prefix + base
            factor = prefix_factor * base_factor
            if table.setdefault(spelling, factor) != factor:  # pragma: no cover - table bug
                raise AssertionError(f"ambiguous unit spelling {spelling!r}")
    return table


_SI = {
    "n": _D("1e-9"),
    "u": _D("1e-6"),
    "m": _D("1e-3"),
    "": _D(1),
    "k": _D(1000),
    "K": _D(1000),  # common misspelling of kilo, unambiguous
    "M": _D("1e6"),
    "G": _D("1e9"),
    "T": _D("1e12"),
    "P": _D("1e15"),
}
_BINARY = {p: _D(1024) ** n for n, p in enumerate(("Ki", "Mi", "Gi", "Ti", "Pi"), start=1)}


def _prefixes(*names: str) -> dict[str, Decimal]:
    return {name: _SI[name] for name in names}


_SECOND, _MINUTE, _HOUR, _DAY, _WEEK = _D(1), _D(60), _D(3600), _D(86400), _D(604800)
_DURATION_SPELLINGS: dict[str, Decimal] = {
    "ns": _D("1e-9"),
    "us": _D("1e-6"),
    "\u00b5s": _D("1e-6"),  # micro sign
    "\u03bcs": _D("1e-6"),  # Greek small mu
    "ms": _D("1e-3"),
    **dict.fromkeys(("s", "sec", "secs", "second", "seconds"), _SECOND),
    **dict.fromkeys(("m", "min", "mins", "minute", "minutes"), _MINUTE),
    **dict.fromkeys(("h", "hr", "hrs", "hour", "hours"), _HOUR),
    **dict.fromkeys(("d", "day", "days"), _DAY),
    **dict.fromkeys(("w", "week", "weeks"), _WEEK),
}

_SIZE = _Kind(
    name="size",
    article="a",
    examples="64GiB, 512MiB or 1.5TB",
    valid="B, kB, MB, GB, TB, PB, KiB, MiB, GiB, TiB, PiB",
    units=_expand(
        {**_prefixes("", "k", "M", "G", "T", "P"), **_BINARY}, {"B": _D(1)}, fold_case=True
    ),
    case_insensitive=True,
)
_DURATION = _Kind(
    name="duration",
    article="a",
    examples="14h, 90min, 3600s or 2d",
    valid="ns, us, ms, s, min, h, d, w (or a compound such as 1h30min)",
    units=_expand({"": _D(1)}, _DURATION_SPELLINGS, fold_case=True),
    case_insensitive=True,
    compound=True,
)
_FREQUENCY = _Kind(
    name="frequency",
    article="a",
    examples="2.1GHz, 800MHz or 50Hz",
    valid="Hz, kHz, MHz, GHz",
    units=_expand(_prefixes("", "k", "M", "G"), {"Hz": _D(1)}, fold_case=True),
    case_insensitive=True,
)
# Case-sensitive: mW (milli) and MW (mega) differ by nine orders of magnitude.
_POWER = _Kind(
    name="power",
    article="a",
    examples="450W, 1.2kW or 250mW",
    valid="mW, W, kW, MW",
    units=_expand(_prefixes("m", "", "k", "K", "M"), {"W": _D(1), "w": _D(1)}),
)
_ENERGY = _Kind(
    name="energy",
    article="an",
    examples="1.5MJ, 3kWh or 450J",
    valid="J, kJ, MJ, GJ, Wh, kWh, MWh",
    units={
        **_expand(_prefixes("", "k", "K", "M", "G"), {"J": _D(1), "j": _D(1)}),
        **_expand(_prefixes("", "k", "K", "M"), {"Wh": _HOUR, "wh": _HOUR, "WH": _HOUR}),
    },
)
_FRACTION = _Kind(
    name="fraction",
    article="a",
    examples="5%, 12.5% or 0.05",
    valid="% or no unit (0.05 means 5%)",
    units={"%": _D("0.01")},
    bare=_D(1),
)
#: A bare fraction must be smaller than this in magnitude: ``5`` would be 500 % and ``1``
#: 100 %, which is almost always a percentage typed without its sign.
_BARE_FRACTION_LIMIT = 1.0
# Only for messages: a rate is read by parse_rate, not from a unit table.
_RATE = _Kind(
    name="rate",
    article="a",
    examples="1/14h, 2/h or 1.9e-5/s",
    valid="<number>/<duration> such as 1/14h, or <number>/<unit> such as 2/h",
    units={},
)


# --------------------------------------------------------------------------------------------
# The shared parser.
# --------------------------------------------------------------------------------------------


def _require_str(text: object, kind: _Kind) -> str:
    if not isinstance(text, str):
        raise InvalidTypeError(
            f"{kind.name} must be given as a string such as {kind.examples}, "
            f"not {type(text).__name__}"
        )
    return text


def _not_a(kind: _Kind, shown: str, stripped: str) -> UnitError:
    """The error for text that is not even ``number unit``."""
    if not stripped:
        return UnitError(f"{shown!r} is empty: give {kind.noun} such as {kind.examples}")
    if _NON_FINITE.match(stripped):
        return UnitError(
            f"{shown!r} is not a finite number: give {kind.noun} such as {kind.examples}"
        )
    return UnitError(f"{shown!r} is not {kind.noun}: give {kind.noun} such as {kind.examples}")


def _read(text: str, kind: _Kind, shown: str) -> Decimal:
    """Read ``text`` as one (or, for compound kinds, several) ``number unit`` terms.

    Returns the exact value in SI units; ``shown`` is the text quoted in errors
    (the whole flag value when ``text`` is only part of it).
    """
    stripped = text.strip()
    terms: list[tuple[str, str]] = []
    pos = 0
    while pos < len(stripped) and (match := _TERM.match(stripped, pos)) is not None:
        terms.append((match["num"], match["unit"]))
        pos = match.end()
    if not terms or pos != len(stripped):
        raise _not_a(kind, shown, stripped)
    if len(terms) > 1 and not kind.compound:
        raise UnitError(
            f"{shown!r} is not {kind.noun}: give one number and unit such as {kind.examples}"
        )

    total = _D(0)
    previous: Decimal | None = None
    for index, (number, unit) in enumerate(terms):
        if index > 0 and number[0] in "+-":
            raise UnitError(
                f"{shown!r} has a sign inside a compound {kind.name}: "
                f"put it only in front, as in -1h30min"
            )
        factor = kind.factor(unit) if unit else kind.bare
        if factor is None and unit:
            raise UnitError(f"unknown {kind.name} unit {unit!r} in {shown!r}: use {kind.valid}")
        if factor is None:
            what = "has no unit" if len(terms) == 1 else f"has a number without a unit ({number!r})"
            raise UnitError(f"{shown!r} {what}: give {kind.noun} such as {kind.examples}")
        if previous is not None and factor >= previous:
            raise UnitError(
                f"{shown!r} repeats or misorders units: write a compound {kind.name} "
                f"from the largest unit to the smallest, as in 1h30min"
            )
        previous = factor
        magnitude = _CTX.create_decimal(number).copy_abs()
        total = _CTX.add(total, _CTX.multiply(magnitude, factor))
    return total.copy_negate() if terms[0][0].startswith("-") else total


def _checked(
    value: Decimal, kind: _Kind, shown: str, *, allow_zero: bool, allow_negative: bool
) -> float:
    """Round ``value`` to float and apply the finite / zero / sign rules."""
    result = float(value)
    if not math.isfinite(result):
        raise UnitError(
            f"{shown!r} is too large for a float: give {kind.noun} such as {kind.examples}"
        )
    if allow_negative:
        rule = "any finite number" if allow_zero else "non-zero"
    else:
        rule = ">= 0" if allow_zero else "> 0"
    if result == 0.0:
        if not allow_zero:
            why = "is zero" if value.is_zero() else "is too small for a float (rounds to zero)"
            raise UnitError(f"{shown!r} {why}: {kind.noun} must be {rule}")
        return 0.0  # never -0.0
    if result < 0 and not allow_negative:
        raise UnitError(f"{shown!r} is negative: {kind.noun} must be {rule}")
    return result


def _parse(text: str, kind: _Kind, *, allow_zero: bool, allow_negative: bool) -> float:
    text = _require_str(text, kind)
    value = _read(text, kind, text)
    return _checked(value, kind, text, allow_zero=allow_zero, allow_negative=allow_negative)


# --------------------------------------------------------------------------------------------
# Public parsers.
# --------------------------------------------------------------------------------------------


def parse_size(text: str, *, allow_zero: bool = False, allow_negative: bool = False) -> float:
    """Parse a data size such as ``"64GiB"`` or ``"1.5 TB"`` into bytes.

    Decimal units B, kB, MB, GB, TB, PB (powers of 1000) and binary units KiB,
    MiB, GiB, TiB, PiB (powers of 1024); case is ignored (``kb``, ``KB``,
    ``gib``). Checkpoint sizes are quoted both ways by vendors and tools, so
    the distinction is kept exact. A unit is required.
    """
    return _parse(text, _SIZE, allow_zero=allow_zero, allow_negative=allow_negative)


def parse_duration(text: str, *, allow_zero: bool = False, allow_negative: bool = False) -> float:
    """Parse a duration such as ``"14h"``, ``"90 min"`` or ``"1h30min"`` into seconds.

    Units (case ignored): ns; us or µs; ms; s, sec; min, m; h, hr; d, day(s);
    w, week(s). Compound durations add their terms, written from the largest
    unit to the smallest (``1d12h``, ``1h30min``); a sign may only lead the
    whole value. A unit is required: a bare ``14`` is ambiguous.
    """
    return _parse(text, _DURATION, allow_zero=allow_zero, allow_negative=allow_negative)


def parse_frequency(text: str, *, allow_zero: bool = False, allow_negative: bool = False) -> float:
    """Parse a frequency such as ``"2.1GHz"`` into hertz (Hz, kHz, MHz, GHz; case ignored)."""
    return _parse(text, _FREQUENCY, allow_zero=allow_zero, allow_negative=allow_negative)


def parse_power(text: str, *, allow_zero: bool = False, allow_negative: bool = False) -> float:
    """Parse a power such as ``"471.1W"`` or ``"1.2 kW"`` into watts.

    Units: mW, W, kW, MW. The prefix is case-sensitive, because ``mW`` and
    ``MW`` differ by a factor of 10**9; the unit letter may be lower-case
    (``kw``, ``mw`` is milliwatts). ``KW`` is read as kilowatts.
    """
    return _parse(text, _POWER, allow_zero=allow_zero, allow_negative=allow_negative)


def parse_energy(text: str, *, allow_zero: bool = False, allow_negative: bool = False) -> float:
    """Parse an energy such as ``"1.5MJ"`` or ``"3 kWh"`` into joules.

    Units: J, kJ, MJ, GJ, Wh, kWh, MWh (1 Wh = 3600 J). As for power, the
    prefix is case-sensitive and the unit letters may be lower-case.
    """
    return _parse(text, _ENERGY, allow_zero=allow_zero, allow_negative=allow_negative)


def parse_fraction(text: str, *, allow_zero: bool = False, allow_negative: bool = False) -> float:
    """Parse a fraction: ``"5%"`` or ``"0.05"`` both give ``0.05``.

    Unlike the other parsers a bare number is accepted, read as a fraction (not a
    percentage) — but only below 1 in magnitude. A bare ``5`` would be 500 % and a bare
    ``1`` 100 %; people who type them almost always mean 5 % and 1 %, and a slowdown
    limit or a threshold silently a hundred times too large gives a plausible-looking,
    wrong answer. So they are refused with a hint to write the ``%`` (``500%`` is
    accepted when it is meant).
    """
    text = _require_str(text, _FRACTION)
    value = _parse(text, _FRACTION, allow_zero=allow_zero, allow_negative=allow_negative)
    stripped = text.strip()
    if _BARE_NUMBER.fullmatch(stripped) and abs(value) >= _BARE_FRACTION_LIMIT:
        raise UnitError(
            f"{text!r} is a bare number, read as a fraction ({value:.6g} = "
            f"{format_percent(value)}): write {stripped}% for {stripped} percent, or "
            f"{format_percent(value).replace(' ', '')} if that is meant"
        )
    return value


def parse_rate(text: str, *, allow_zero: bool = False, allow_negative: bool = False) -> float:
    """Parse an event rate such as ``"1/14h"``, ``"2/h"`` or ``"1.9e-5/s"`` into 1/s.

    The form is ``<number>/<duration>`` (``1/14h``: one event per 14 hours;
    the duration may be compound) or ``<number>/<unit>`` (``2/h``: two per
    hour), with any duration unit accepted by :func:`parse_duration`. Failure
    rates are quoted as MTBFs by operators and as rates by models, so both
    spellings are one step from here.
    """
    text = _require_str(text, _RATE)
    stripped = text.strip()
    numerator, slash, denominator = (part.strip(_BLANK) for part in stripped.partition("/"))
    if not slash:
        if _BARE_NUMBER.fullmatch(stripped):
            raise UnitError(f"{text!r} has no unit: give {_RATE.noun} such as {_RATE.examples}")
        raise _not_a(_RATE, text, stripped)
    if not _BARE_NUMBER.fullmatch(numerator) or not denominator:
        raise _not_a(_RATE, text, stripped)

    if denominator[0] in "0123456789.+-":
        seconds = _read(denominator, _DURATION, text)
        if float(seconds) <= 0:
            raise UnitError(f"{text!r} divides by a duration that is not > 0: use e.g. 1/14h")
    else:
        factor = _DURATION.factor(denominator)
        if factor is None:
            raise UnitError(
                f"unknown duration unit {denominator!r} in {text!r}: use {_DURATION.valid}"
            )
        seconds = factor
    rate = _CTX.divide(_CTX.create_decimal(numerator), seconds)
    return _checked(rate, _RATE, text, allow_zero=allow_zero, allow_negative=allow_negative)


# --------------------------------------------------------------------------------------------
# Formatting for reports.
# --------------------------------------------------------------------------------------------


def _ladder(kind: _Kind, *names: str) -> tuple[tuple[str, float], ...]:
    """Display units, smallest first, with factors taken from the parse table.

    Taking the factors from the parser's own table guarantees that every
    formatted value parses back.
    """
    ladder = []
    for name in names:
        factor = kind.factor(name)
        if factor is None:  # pragma: no cover - table bug
            raise AssertionError(f"{name!r} is not a {kind.name} unit")
        ladder.append((name, float(factor)))
    return tuple(ladder)


_SIZE_LADDER = _ladder(_SIZE, "B", "KiB", "MiB", "GiB", "TiB", "PiB")
_DECIMAL_SIZE_LADDER = _ladder(_SIZE, "B", "kB", "MB", "GB", "TB", "PB")
_DURATION_LADDER = _ladder(_DURATION, "ns", "\u00b5s", "ms", "s", "min", "h", "d")
_FREQUENCY_LADDER = _ladder(_FREQUENCY, "Hz", "kHz", "MHz", "GHz")
_POWER_LADDER = _ladder(_POWER, "mW", "W", "kW", "MW")
_ENERGY_LADDER = _ladder(_ENERGY, "J", "kJ", "MJ", "GJ")
_PERCENT_LADDER = _ladder(_FRACTION, "%")

_SIGNIFICANT = 3
_REL_TOL = 1e-12  # slack for unit boundaries computed in binary floating point


def _digits(value: float, *, min_decimals: int, strip_zeros: bool) -> str:
    """``value`` with 3 significant digits (at least ``min_decimals`` decimals).

    Values below 1e-3 or from 1e15 up (only possible beyond the ends of a unit
    ladder) use exponent notation, which the parsers accept.
    """
    magnitude = abs(value)
    exponent = math.floor(math.log10(magnitude)) if magnitude else 0
    if magnitude and (exponent < -3 or exponent >= 15):
        text = f"{value:.{_SIGNIFICANT - 1}e}"
    else:
        decimals = max(min_decimals, _SIGNIFICANT - 1 - exponent)
        text = f"{value:.{decimals}f}"
        if abs(float(text)) >= 10.0 ** (exponent + 1):  # 9.996 rounded up to 10.00
            text = f"{value:.{max(min_decimals, decimals - 1)}f}"
    if strip_zeros:
        mantissa, e, rest = text.partition("e")
        if "." in mantissa:
            mantissa = mantissa.rstrip("0").rstrip(".")
        text = mantissa + e + rest
    return text


def _format(
    value: float,
    ladder: Sequence[tuple[str, float]],
    *,
    min_decimals: int = 0,
    strip_zeros: bool = False,
) -> str:
    """Format ``value`` (SI) in the largest unit of ``ladder`` in which it is >= 1."""
    base = next((name for name, factor in ladder if factor == 1.0), ladder[0][0])
    if not math.isfinite(value):
        return f"{value} {base}"
    if value == 0:
        return f"{_digits(0.0, min_decimals=min_decimals, strip_zeros=strip_zeros)} {base}"
    index = 0
    for i, (_, factor) in enumerate(ladder):
        if abs(value) >= factor * (1 - _REL_TOL):
            index = i
    while True:
        name, factor = ladder[index]
        text = _digits(value / factor, min_decimals=min_decimals, strip_zeros=strip_zeros)
        # Rounding may reach the next unit (999.7 ms -> "1000 ms"): move up and redo.
        if index + 1 < len(ladder):
            step = ladder[index + 1][1] / factor
            if abs(float(text)) >= step * (1 - _REL_TOL):
                index += 1
                continue
        return f"{text} {name}"


def format_size(size: float, *, decimal: bool = False) -> str:
    """Format bytes with binary units: ``"64 GiB"``, ``"1.5 MiB"``, ``"512 B"``.

    Three significant digits with trailing zeros dropped (sizes are usually
    round powers of two, and ``64 GiB`` reads better than ``64.0 GiB``); the
    relative error is at most 0.5 %. Units B to PiB; with ``decimal=True`` B, kB,
    MB, GB, TB, PB instead, to echo a size given in decimal units in its own
    units (``64GB`` is shown as ``64 GB``, not as ``59.6 GiB``).
    """
    return _format(size, _DECIMAL_SIZE_LADDER if decimal else _SIZE_LADDER, strip_zeros=True)


def size_is_decimal(text: str) -> bool:
    """Whether a size was written in decimal units (kB, MB, GB, …) rather than binary ones.

    Why: a report that echoes a user's ``64GB`` as ``59.6 GiB`` makes the user doubt the
    input was read right; echoes use the family the user wrote (:func:`format_size` with
    ``decimal=``). Plain bytes (``B``) and anything that is not a size count as binary,
    the default of reports.
    """
    match = _TERM.fullmatch(text.strip()) if isinstance(text, str) else None
    if match is None:
        return False
    unit = match["unit"].lower()
    return bool(unit) and unit != "b" and "i" not in unit and _SIZE.factor(unit) is not None


def format_duration(seconds: float) -> str:
    """Format seconds: ``"14.0 h"``, ``"3.00 min"``, ``"250 ms"``, ``"2.00 d"``.

    Three significant digits (at most 0.5 % relative error) in the largest of
    ns, µs, ms, s, min, h, d in which the value is at least 1; weeks are not
    used, as days compare more easily.
    """
    return _format(seconds, _DURATION_LADDER)


def format_frequency(hertz: float) -> str:
    """Format hertz: ``"2.10 GHz"``; three significant digits, Hz to GHz."""
    return _format(hertz, _FREQUENCY_LADDER)


def format_power(watts: float) -> str:
    """Format watts: ``"471.1 W"``, ``"1.20 kW"``, ``"250.0 mW"``.

    Three significant digits but never fewer than one decimal, so that the
    0.1 W resolution of node power meters survives in the watt range. Units mW
    to MW.
    """
    return _format(watts, _POWER_LADDER, min_decimals=1)


def format_energy(joules: float) -> str:
    """Format joules: ``"1.23 MJ"``, ``"450 J"``; three significant digits, J to GJ."""
    return _format(joules, _ENERGY_LADDER)


def format_percent(fraction: float) -> str:
    """Format a fraction as a percentage: ``0.041`` gives ``"4.10 %"``.

    Three significant digits; the output parses back with :func:`parse_fraction`.
    """
    return _format(fraction, _PERCENT_LADDER)
