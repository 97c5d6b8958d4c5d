"""Tests for greenckpt.units: exact parsing, strict errors, format -> parse round trips."""

from __future__ import annotations

import math
from collections.abc import Callable

import pytest
from hypothesis import given
from hypothesis import strategies as st

from greenckpt.units import (
    UnitError,
    format_duration,
    format_energy,
    format_frequency,
    format_percent,
    format_power,
    format_size,
    parse_duration,
    parse_energy,
    parse_fraction,
    parse_frequency,
    parse_power,
    parse_rate,
    parse_size,
    size_is_decimal,
)

Parser = Callable[..., float]
Formatter = Callable[[float], str]

KiB = 1024.0
MiB = 1024.0**2
GiB = 1024.0**3
TiB = 1024.0**4
PiB = 1024.0**5
MINUTE, HOUR, DAY, WEEK = 60.0, 3600.0, 86400.0, 604800.0

ALL_PARSERS: list[Parser] = [
    parse_size,
    parse_duration,
    parse_frequency,
    parse_power,
    parse_energy,
    parse_rate,
    parse_fraction,
]

# A valid positive example for each parser, used to build signed / zero variants.
UNIT_FOR: dict[Parser, str] = {
    parse_size: "GiB",
    parse_duration: "h",
    parse_frequency: "GHz",
    parse_power: "W",
    parse_energy: "kJ",
    parse_rate: "/h",
    parse_fraction: "%",
}


def assert_unit_error(parser: Parser, text: str, *, contains: str | None = None) -> str:
    """``parser(text)`` raises UnitError with a one-line message quoting ``text``."""
    with pytest.raises(UnitError) as info:
        parser(text)
    message = str(info.value)
    assert len(message.splitlines()) == 1, message
    assert "\n" not in message and "\r" not in message
    assert repr(text) in message, message
    if contains is not None:
        assert contains in message, message
    return message


# ------------------------------------------------------------------------------------
# Exact values
# ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("1B", 1.0),
        ("512 B", 512.0),
        ("1kB", 1e3),
        ("1KB", 1e3),
        ("1kb", 1e3),
        ("1MB", 1e6),
        ("1GB", 1e9),
        ("1TB", 1e12),
        ("1PB", 1e15),
        ("1KiB", KiB),
        ("1kib", KiB),
        ("1MiB", MiB),
        ("1.5 MiB", 1.5 * MiB),
        ("64GiB", 64 * GiB),
        ("64 GiB", 64 * GiB),
        ("64gib", 64 * GiB),
        ("64 GIB", 64 * GiB),
        ("1TiB", TiB),
        ("2 PiB", 2 * PiB),
        ("1.1kB", 1100.0),  # decimal arithmetic: not 1100.0000000000002
        ("1.5e3B", 1500.0),
        ("1.5E3 b", 1500.0),
        (".5KiB", 512.0),
        ("+4 MB", 4e6),
        ("  8GB  ", 8e9),
    ],
)
def test_parse_size_exact(text: str, expected: float) -> None:
    assert parse_size(text) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("1ns", 1e-9),
        ("1us", 1e-6),
        ("1\u00b5s", 1e-6),  # micro sign
        ("1\u03bcs", 1e-6),  # Greek mu
        ("250 ms", 0.25),
        ("1s", 1.0),
        ("1sec", 1.0),
        ("1.5e3s", 1500.0),
        ("3600 S", 3600.0),
        ("90min", 90 * MINUTE),
        ("90m", 90 * MINUTE),
        ("14h", 14 * HOUR),
        ("14 hr", 14 * HOUR),
        ("14H", 14 * HOUR),
        ("2d", 2 * DAY),
        ("1 day", DAY),
        ("3days", 3 * DAY),
        ("1w", WEEK),
        ("1 week", WEEK),
        ("2weeks", 2 * WEEK),
        ("0.1h", 360.0),
        ("1h30min", HOUR + 30 * MINUTE),
        ("1h 30min", HOUR + 30 * MINUTE),
        ("1d12h", DAY + 12 * HOUR),
        ("1m30s", 90.0),
        ("1w2d3h4min5s", WEEK + 2 * DAY + 3 * HOUR + 4 * MINUTE + 5),
        ("1.5h30min", 2 * HOUR),
    ],
)
def test_parse_duration_exact(text: str, expected: float) -> None:
    assert parse_duration(text) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("50Hz", 50.0),
        ("50 hz", 50.0),
        ("1kHz", 1e3),
        ("1KHZ", 1e3),
        ("800MHz", 800e6),
        ("800 mhz", 800e6),
        ("2.1GHz", 2.1e9),
        ("2.1 ghz", 2.1e9),
    ],
)
def test_parse_frequency_exact(text: str, expected: float) -> None:
    assert parse_frequency(text) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("250mW", 0.25),
        ("250mw", 0.25),
        ("471.1W", 471.1),
        ("471.1 w", 471.1),
        ("1.2kW", 1200.0),
        ("1.2kw", 1200.0),
        ("1.2KW", 1200.0),
        ("3MW", 3e6),
        ("3Mw", 3e6),
    ],
)
def test_parse_power_exact(text: str, expected: float) -> None:
    assert parse_power(text) == expected


def test_parse_power_milli_and_mega_differ() -> None:
    assert parse_power("1mW") == 1e-3
    assert parse_power("1MW") == 1e6


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("450J", 450.0),
        ("450 j", 450.0),
        ("1kJ", 1e3),
        ("1.23MJ", 1.23e6),
        ("2GJ", 2e9),
        ("1Wh", 3600.0),
        ("1 wh", 3600.0),
        ("3kWh", 3 * 3.6e6),
        ("3 kwh", 3 * 3.6e6),
        ("1MWh", 3.6e9),
    ],
)
def test_parse_energy_exact(text: str, expected: float) -> None:
    assert parse_energy(text) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("5%", 0.05),
        ("5 %", 0.05),
        ("12.5%", 0.125),
        ("0.05", 0.05),
        ("0.999", 0.999),
        ("100%", 1.0),
        ("150%", 1.5),
        ("1e-3", 1e-3),
    ],
)
def test_parse_fraction_exact(text: str, expected: float) -> None:
    assert parse_fraction(text) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("1/14h", 1 / (14 * HOUR)),
        ("1 / 14 h", 1 / (14 * HOUR)),
        ("2/h", 2 / HOUR),
        ("2/hour", 2 / HOUR),
        ("1.89474e-5/s", 1.89474e-5),
        ("3/d", 3 / DAY),
        ("1/1h30min", 1 / 5400),
        ("10/min", 10 / 60),
        ("1/500ms", 2.0),
    ],
)
def test_parse_rate_exact(text: str, expected: float) -> None:
    assert parse_rate(text) == pytest.approx(expected, rel=1e-15)


# ------------------------------------------------------------------------------------
# Zero and negative values: refused by default, allowed on request
# ------------------------------------------------------------------------------------


@pytest.mark.parametrize("parser", ALL_PARSERS)
def test_zero_refused_by_default_and_allowed_on_request(parser: Parser) -> None:
    text = "0" + UNIT_FOR[parser]
    assert_unit_error(parser, text, contains="zero")
    assert parser(text, allow_zero=True) == 0.0
    negative_zero = parser("-" + text, allow_zero=True)
    assert negative_zero == 0.0 and math.copysign(1.0, negative_zero) == 1.0


@pytest.mark.parametrize("parser", ALL_PARSERS)
def test_negative_refused_by_default_and_allowed_on_request(parser: Parser) -> None:
    text = "-3" + UNIT_FOR[parser]
    assert_unit_error(parser, text, contains="negative")
    assert parser(text, allow_negative=True) == -parser("3" + UNIT_FOR[parser])
    # allow_negative does not imply allow_zero
    assert_unit_error(parser, "0" + UNIT_FOR[parser], contains="zero")


def test_negative_compound_duration() -> None:
    assert parse_duration("-1h30min", allow_negative=True) == -5400.0


def test_error_messages_match_the_documented_style() -> None:
    with pytest.raises(UnitError) as info:
        parse_duration("14")
    assert str(info.value) == "'14' has no unit: give a duration such as 14h, 90min, 3600s or 2d"
    with pytest.raises(UnitError) as info:
        parse_size("64GiBs")
    assert str(info.value) == (
        "unknown size unit 'GiBs' in '64GiBs': use B, kB, MB, GB, TB, PB, KiB, MiB, GiB, TiB, PiB"
    )
    with pytest.raises(UnitError) as info:
        parse_duration("-3h")
    assert str(info.value) == "'-3h' is negative: a duration must be > 0"
    with pytest.raises(UnitError) as info:
        parse_duration("-3h", allow_zero=True)
    assert str(info.value) == "'-3h' is negative: a duration must be >= 0"


def test_unit_error_is_a_value_error() -> None:
    assert issubclass(UnitError, ValueError)


# ------------------------------------------------------------------------------------
# Errors
# ------------------------------------------------------------------------------------

COMMON_BAD = [
    "",
    "   ",
    "nan",
    "NaN",
    "nan h",
    "inf",
    "-inf",
    "+Infinity",
    "abc",
    "GiB",
    "h",
    "1..5h",
    "1,5h",
    "1 2 3",
    "--1h",
    "1e",
    "0x10",
    "\u0663h",  # Arabic-Indic digit three: only ASCII digits are numbers
    "12\nh",
    "1h\x00",
]


@pytest.mark.parametrize("parser", ALL_PARSERS)
@pytest.mark.parametrize("text", COMMON_BAD)
def test_garbage_raises_one_line_unit_error(parser: Parser, text: str) -> None:
    assert_unit_error(parser, text)


@pytest.mark.parametrize("parser", [p for p in ALL_PARSERS if p is not parse_fraction])
@pytest.mark.parametrize("text", ["14", "1.5e3", "-2", "0", " 7 "])
def test_bare_number_is_refused(parser: Parser, text: str) -> None:
    assert_unit_error(parser, text, contains="no unit")


@pytest.mark.parametrize(
    ("parser", "text"),
    [
        (parse_size, "64GiBs"),
        (parse_size, "1Gb/s"),
        (parse_size, "1 bytes"),
        (parse_duration, "3 fortnights"),
        (parse_duration, "1h30"),
        (parse_duration, "5 mo"),
        (parse_frequency, "2 GHZs"),
        (parse_frequency, "100 rpm"),
        (parse_power, "450 J"),
        (parse_power, "1 GW"),
        (parse_power, "1 mJ"),
        (parse_energy, "1 W"),
        (parse_energy, "1 mJ"),
        (parse_energy, "1 mj"),
        (parse_fraction, "5 percent"),
        (parse_fraction, "5%%"),
        (parse_rate, "1/14 parsecs"),
        (parse_rate, "2/x"),
    ],
)
def test_unknown_unit(parser: Parser, text: str) -> None:
    assert_unit_error(parser, text)


@pytest.mark.parametrize(
    "text", ["1h2h", "30min1h", "1h-30min", "1h+30min", "1h30", "1s1ms1s", "1h 30min 20min"]
)
def test_bad_compound_durations(text: str) -> None:
    assert_unit_error(parse_duration, text)


@pytest.mark.parametrize("parser", [p for p in ALL_PARSERS if p is not parse_duration])
def test_compounds_only_for_durations(parser: Parser) -> None:
    unit = UNIT_FOR[parser]
    assert_unit_error(parser, f"1{unit}2{unit}")


@pytest.mark.parametrize(
    "text",
    ["1/0h", "1/-14h", "1/", "/h", "h/1", "1/2/h", "1h/h", "2h", "1/14", "x/h", "nan/h", "1/nan h"],
)
def test_bad_rates(text: str) -> None:
    assert_unit_error(parse_rate, text)


@pytest.mark.parametrize(
    ("parser", "text"),
    [
        (parse_duration, "1e400h"),
        (parse_size, "1e308PiB"),
        (parse_energy, "1e999999999999 MWh"),
        (parse_rate, "1e308/1e-30s"),
        (parse_fraction, "1e309"),
    ],
)
def test_overflow_is_too_large(parser: Parser, text: str) -> None:
    assert_unit_error(parser, text, contains="too large")


def test_underflow_to_zero_is_refused() -> None:
    assert_unit_error(parse_duration, "1e-400s", contains="too small")
    assert parse_duration("1e-400s", allow_zero=True) == 0.0


@pytest.mark.parametrize("parser", ALL_PARSERS)
@pytest.mark.parametrize("value", [14, 14.0, None, b"14h"])
def test_non_string_is_a_type_error(parser: Parser, value: object) -> None:
    with pytest.raises(TypeError):
        parser(value)


@pytest.mark.parametrize("parser", ALL_PARSERS)
@given(text=st.text(max_size=30))
def test_arbitrary_text_gives_float_or_unit_error(parser: Parser, text: str) -> None:
    try:
        value = parser(text)
    except UnitError as error:
        message = str(error)
        assert len(message.splitlines()) == 1
        assert repr(text) in message
    else:
        assert math.isfinite(value) and value > 0


# ------------------------------------------------------------------------------------
# Parsing repr(float) with a unit is exact (correctly rounded)
# ------------------------------------------------------------------------------------

positive_floats = st.floats(
    min_value=1e-300, max_value=1e300, allow_nan=False, allow_infinity=False
)


@given(x=positive_floats)
def test_parse_si_unit_is_exact(x: float) -> None:
    assert parse_size(f"{x!r}B") == x
    assert parse_duration(f"{x!r}s") == x
    assert parse_duration(f"{x!r} s") == x
    assert parse_frequency(f"{x!r}Hz") == x
    assert parse_power(f"{x!r}W") == x
    assert parse_energy(f"{x!r}J") == x
    if x < 1:  # a bare fraction of 1 or more is refused (it is a percentage without its %)
        assert parse_fraction(f"{x!r}") == x
    assert parse_rate(f"{x!r}/s") == x


@given(x=st.floats(min_value=1e-290, max_value=1e290))
def test_scaled_units_are_close(x: float) -> None:
    assert parse_duration(f"{x!r}h") == pytest.approx(x * 3600, rel=1e-15)
    assert parse_size(f"{x!r}GiB") == pytest.approx(x * GiB, rel=1e-15)
    assert parse_rate(f"{x!r}/h") == pytest.approx(x / 3600, rel=1e-15)
    assert parse_fraction(f"{x!r}%") == pytest.approx(x / 100, rel=1e-15)


# ------------------------------------------------------------------------------------
# Formatting
# ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("formatter", "value", "expected"),
    [
        (format_size, 64 * GiB, "64 GiB"),
        (format_size, 1.5 * MiB, "1.5 MiB"),
        (format_size, 512.0, "512 B"),
        (format_size, 1000 * KiB, "1000 KiB"),
        (format_size, 1023.9 * KiB, "1 MiB"),  # rounding reaches the next unit
        (format_size, 1.234 * TiB, "1.23 TiB"),
        (format_size, 0.0, "0 B"),
        (format_duration, 14 * HOUR, "14.0 h"),
        (format_duration, 3 * MINUTE, "3.00 min"),
        (format_duration, 0.25, "250 ms"),
        (format_duration, 2 * DAY, "2.00 d"),
        (format_duration, 250e-6, "250 \u00b5s"),
        (format_duration, 5e-9, "5.00 ns"),
        (format_duration, 0.9997, "1.00 s"),
        (format_duration, 59.99, "1.00 min"),
        (format_duration, 9.996, "10.0 s"),
        (format_duration, 30 * DAY, "30.0 d"),
        (format_duration, -HOUR, "-1.00 h"),
        (format_duration, 0.0, "0.00 s"),
        (format_frequency, 2.1e9, "2.10 GHz"),
        (format_frequency, 800e6, "800 MHz"),
        (format_frequency, 50.0, "50.0 Hz"),
        (format_power, 471.1, "471.1 W"),
        (format_power, 1200.0, "1.20 kW"),
        (format_power, 0.25, "250.0 mW"),
        (format_power, 3e6, "3.00 MW"),
        (format_energy, 1.23e6, "1.23 MJ"),
        (format_energy, 450.0, "450 J"),
        (format_energy, 2e9, "2.00 GJ"),
        (format_percent, 0.041, "4.10 %"),
        (format_percent, 1.0, "100 %"),
        (format_percent, 0.5, "50.0 %"),
    ],
)
def test_format_examples(formatter: Formatter, value: float, expected: str) -> None:
    assert formatter(value) == expected


@pytest.mark.parametrize(
    "formatter",
    [format_size, format_duration, format_frequency, format_power, format_energy, format_percent],
)
@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf])
def test_format_non_finite_does_not_raise(formatter: Formatter, value: float) -> None:
    assert formatter(value).startswith(str(value))


ROUND_TRIPS: list[tuple[Formatter, Parser]] = [
    (format_size, parse_size),
    (format_duration, parse_duration),
    (format_frequency, parse_frequency),
    (format_power, parse_power),
    (format_energy, parse_energy),
    (format_percent, parse_fraction),
]

#: Three significant digits: relative error at most 0.5 % (plus float noise).
FORMAT_REL_TOL = 5e-3 + 1e-12


@pytest.mark.parametrize(("formatter", "parser"), ROUND_TRIPS)
@given(x=st.floats(min_value=1e-30, max_value=1e30, allow_nan=False, allow_infinity=False))
def test_format_parse_round_trip(formatter: Formatter, parser: Parser, x: float) -> None:
    text = formatter(x)
    assert "\n" not in text
    assert math.isclose(parser(text), x, rel_tol=FORMAT_REL_TOL), text


@pytest.mark.parametrize(("formatter", "parser"), ROUND_TRIPS)
@given(x=st.floats(min_value=1e-30, max_value=1e30))
def test_format_parse_round_trip_negative(formatter: Formatter, parser: Parser, x: float) -> None:
    assert math.isclose(parser(formatter(-x), allow_negative=True), -x, rel_tol=FORMAT_REL_TOL)


@pytest.mark.parametrize(("formatter", "parser"), ROUND_TRIPS)
def test_format_zero_parses_with_allow_zero(formatter: Formatter, parser: Parser) -> None:
    assert parser(formatter(0.0), allow_zero=True) == 0.0


@given(x=st.floats(min_value=1e-30, max_value=999 * DAY))
def test_format_uses_three_significant_digits(x: float) -> None:
    number = format_duration(x).split()[0]
    mantissa = number.partition("e")[0].replace("-", "").replace(".", "").lstrip("0")
    # 3 digits, or 4 when a value such as 9.996 rounds up to 10.0 (never more than 1 extra).
    assert 3 <= len(mantissa) <= 4 or mantissa == ""


# ------------------------------------------------------------------------------------
# Issue 18 item 11: no silent 500 %, sizes echoed in the user's units
# ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "hint"),
    [
        ("5", "(5 = 500 %): write 5% for 5 percent, or 500% if that is meant"),
        ("1", "(1 = 100 %): write 1% for 1 percent, or 100% if that is meant"),
        (" 12.5 ", "write 12.5% for 12.5 percent"),
        ("1e2", "write 1e2% for 1e2 percent"),
    ],
)
def test_bare_fraction_of_one_or_more_is_refused_with_a_hint(text: str, hint: str) -> None:
    with pytest.raises(UnitError) as info:
        parse_fraction(text)
    message = str(info.value)
    assert "is a bare number, read as a fraction" in message and hint in message
    assert repr(text) in message and "\n" not in message


def test_bare_negative_fraction_beyond_minus_one_is_refused_too() -> None:
    assert parse_fraction("-0.5", allow_negative=True) == -0.5
    with pytest.raises(UnitError, match="write -2% for -2 percent"):
        parse_fraction("-2", allow_negative=True)


def test_fraction_with_percent_sign_may_exceed_one() -> None:
    assert parse_fraction("500%") == 5.0
    assert parse_fraction("100 %") == 1.0


@pytest.mark.parametrize(
    ("text", "decimal"),
    [
        ("64GB", True),
        ("64 gb", True),
        ("1.5TB", True),
        ("500kB", True),
        ("64GiB", False),
        ("512MiB", False),
        ("4096B", False),
        ("not a size", False),
        ("64XB", False),
    ],
)
def test_size_is_decimal(text: str, decimal: bool) -> None:
    assert size_is_decimal(text) is decimal


@pytest.mark.parametrize(
    ("text", "shown"),
    [("64GB", "64 GB"), ("1.5TB", "1.5 TB"), ("500kB", "500 kB"), ("64GiB", "64 GiB")],
)
def test_size_echoed_in_its_own_family(text: str, shown: str) -> None:
    assert format_size(parse_size(text), decimal=size_is_decimal(text)) == shown


@given(x=st.floats(min_value=1e-30, max_value=1e30, allow_nan=False, allow_infinity=False))
def test_decimal_size_format_parses_back(x: float) -> None:
    text = format_size(x, decimal=True)
    assert "i" not in text
    assert math.isclose(parse_size(text), x, rel_tol=FORMAT_REL_TOL), text
