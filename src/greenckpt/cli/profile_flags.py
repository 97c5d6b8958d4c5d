"""The flag types of ``greenckpt profile``: units at the edge (sizes, durations,
frequencies, lists), every value checked while the command line is parsed, so a bad one stops
the command before anything starts.

Why a module of its own: ``profile run``, ``profile validate`` and ``greenckpt demo`` parse the
same kinds of value, and the parsers are the inverse of :func:`settings_flags`.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Sequence
from typing import TypeVar

from greenckpt import units
from greenckpt.cli.argtypes import positive_int
from greenckpt.io import CodecError, parse_codec
from greenckpt.optimize.profile_data import OPERATIONS, Operation
from greenckpt.optimize.setting import GOVERNORS

T = TypeVar("T")

DEFAULT_MTBF = "24h"
VALIDATE_REPEATS = 3
EXIT_INTERRUPTED = 130
EXIT_FAILED = 1
CSTATE_WORDS: dict[str, bool | None] = {"asfound": None, "on": True, "off": False}
FLAG_OF = {
    "path": "PATH",
    "settings": "--frequencies/--governors",
    "processes": "--processes",
    "ops": "--ops",
    "sizes": "--size",
    "cstates": "--cstates",
    "codecs": "--codecs",
    "data": "--data",
    "block_size": "--block-size",
    "layout": "--layout",
    "read_method": "--read-method",
    "repetitions": "--repeats",
    "warmup": "--warmup",
    "idle_seconds": "--idle",
    "waiting_seconds": "--waiting-seconds",
    "levers": "--uncore/--power-limit/--gpu-clocks/--gpu-power-limit",
    "extra.meters": "--meters",
    "extra.rate_hz": "--rate",
    "extra.meter_csv": "--meter-csv",
    "extra.tdp_W": "--tdp",
    "extra.adaptive": "--adaptive and its scenario",
}
"""The flag behind each recorded sweep field (to say which option differs on --resume)."""
SPELLING = {"resume": "--resume", "force": "--force", **FLAG_OF}
"""How the library's messages name the choices and fields: by this command's flags."""


# --------------------------------------------------------------------------- flag types


def _items(text: str) -> list[str]:
    """The comma-separated items of ``text``; an empty text is an empty list."""
    if not text.strip():
        return []
    items = [item.strip() for item in text.split(",")]
    if not all(items):
        raise argparse.ArgumentTypeError(
            f"{text!r} has an empty item: separate values with single commas, e.g. 1,2,4"
        )
    return items


def _no_repeats(values: Sequence[T], text: str) -> None:
    if len(set(values)) != len(values):
        raise argparse.ArgumentTypeError(f"{text!r} lists a value twice")


def _whole_bytes(text: str) -> int:
    value = units.parse_size(text)
    if value != math.floor(value):
        raise units.UnitError(f"{text!r} is not a whole number of bytes")
    return int(value)


def size_arg(text: str) -> int:
    """One size with a unit, in whole bytes."""
    try:
        return _whole_bytes(text)
    except units.UnitError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def sizes_arg(text: str) -> tuple[int, ...]:
    """Comma-separated sizes with units (``8MiB,2GiB``)."""
    try:
        return tuple(_whole_bytes(item) for item in _items(text))
    except units.UnitError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def counts_arg(text: str) -> tuple[int, ...]:
    """Comma-separated process counts (``1,2,4``); empty is left to the sweep's check."""
    counts = tuple(positive_int(item) for item in _items(text))
    _no_repeats(counts, text)
    return counts


def durations_arg(text: str) -> tuple[float, ...]:
    try:
        return tuple(units.parse_duration(item) for item in _items(text))
    except units.UnitError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def frequencies_arg(text: str) -> str | tuple[int, ...]:
    """``all``, ``asfound`` or comma-separated frequencies with units (``1.2GHz,2.6GHz``)."""
    word = text.strip().lower()
    if word in ("all", "asfound"):
        return word
    try:
        return tuple(round(units.parse_frequency(item)) for item in _items(text))
    except units.UnitError as exc:
        raise argparse.ArgumentTypeError(f"{exc} (or all, or asfound)") from None


def governors_arg(text: str) -> tuple[str, ...]:
    """``none`` or comma-separated governor names."""
    if text.strip().lower() == "none":
        return ()
    names = tuple(_items(text))
    for name in names:
        if name not in GOVERNORS:
            raise argparse.ArgumentTypeError(
                f"unknown governor {name!r}: expected none or some of {', '.join(GOVERNORS)}"
            )
    _no_repeats(names, text)
    return names


def operations_arg(text: str) -> tuple[Operation, ...]:
    """Comma-separated operations, returned in the profile's order (write before read)."""
    names = _items(text)
    for name in names:
        if name not in OPERATIONS:
            raise argparse.ArgumentTypeError(
                f"unknown operation {name!r}: expected some of {', '.join(OPERATIONS)}"
            )
    _no_repeats(names, text)
    return tuple(op for op in OPERATIONS if op in names)


def cstates_arg(text: str) -> tuple[bool | None, ...]:
    """``asfound`` or comma-separated ``on``/``off`` (``asfound`` may be among them)."""
    words = [w.lower() for w in _items(text)] or ["asfound"]
    for word in words:
        if word not in CSTATE_WORDS:
            raise argparse.ArgumentTypeError(
                f"{word!r} is not a C-state setting: give asfound, or on and/or off (on,off)"
            )
    _no_repeats(words, text)
    return tuple(CSTATE_WORDS[w] for w in words)


def codecs_arg(text: str) -> tuple[str | None, ...]:
    """Comma-separated ``none`` and/or codecs (``zstd``, ``zstd:5``, ``lz4``, ``zlib:9``)."""
    labels: list[str | None] = []
    for word in _items(text) or ["none"]:
        try:
            spec = parse_codec(word)
        except CodecError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None
        labels.append(None if spec is None else spec.label)
    _no_repeats([str(label) for label in labels], text)
    return tuple(labels)


def idle_arg(text: str) -> float:
    """A duration with a unit, or a bare 0 (zero seconds needs no unit: it skips the idle
    measurement)."""
    try:
        if float(text) == 0:
            return 0.0
    except ValueError:
        pass
    try:
        return units.parse_duration(text, allow_zero=True)
    except units.UnitError as exc:
        raise argparse.ArgumentTypeError(f"{exc} (or 0 to skip)") from None


def _bare_number(text: str) -> float | None:
    """``text`` as a plain number (no unit), or None when it is something else."""
    try:
        value = float(text)
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def uncore_arg(text: str) -> str | tuple[int, ...]:
    """``all``, or comma-separated uncore frequencies: bare numbers in kHz (as sysfs has
    them, ``1800000``) or with a unit (``1.8GHz``), each a whole number of kHz above 0."""
    if text.strip().lower() == "all":
        return "all"
    values: list[int] = []
    for item in _items(text):
        bare = _bare_number(item)
        try:
            khz = bare if bare is not None else units.parse_frequency(item) / 1000.0
        except units.UnitError as exc:
            raise argparse.ArgumentTypeError(
                f"{exc} (give kHz, e.g. 1800000, a frequency with a unit, e.g. 1.8GHz, or all)"
            ) from None
        if khz <= 0 or khz != math.floor(khz):
            raise argparse.ArgumentTypeError(
                f"{item!r} is not a whole, positive number of kHz (e.g. 1800000 or 1.8GHz)"
            )
        values.append(int(khz))
    if not values:
        raise argparse.ArgumentTypeError("give uncore frequencies (e.g. 1.2GHz,2.0GHz) or all")
    _no_repeats(values, text)
    return tuple(values)


def watts_arg(text: str) -> tuple[float, ...]:
    """Comma-separated power limits: bare numbers in watts (``150``) or with a unit
    (``150W``, ``0.2kW``), each above 0."""
    values: list[float] = []
    for item in _items(text):
        bare = _bare_number(item)
        try:
            watts = bare if bare is not None else units.parse_power(item)
        except units.UnitError as exc:
            raise argparse.ArgumentTypeError(f"{exc} (give watts, e.g. 150 or 150W)") from None
        if watts <= 0:
            raise argparse.ArgumentTypeError(f"{item!r}: a power limit must be above 0 W")
        values.append(watts)
    if not values:
        raise argparse.ArgumentTypeError("give power limits in watts, e.g. 120,150")
    _no_repeats(values, text)
    return tuple(values)


def gpu_clocks_arg(text: str) -> tuple[tuple[int, int], ...]:
    """Comma-separated ``MEM:GR`` pairs of GPU application clocks in MHz (``877:1410``):
    memory clock first, graphics clock second, as NVML takes them."""
    pairs: list[tuple[int, int]] = []
    for item in _items(text):
        parts = [part.strip().removesuffix("MHz").strip() for part in item.split(":")]
        if len(parts) != 2 or not all(part.isdigit() and int(part) > 0 for part in parts):
            raise argparse.ArgumentTypeError(
                f"{item!r} is not MEM:GR, a memory and a graphics clock in whole MHz above 0 "
                "(e.g. 877:1410)"
            )
        pairs.append((int(parts[0]), int(parts[1])))
    if not pairs:
        raise argparse.ArgumentTypeError("give GPU clock pairs MEM:GR in MHz, e.g. 877:1410")
    _no_repeats(pairs, text)
    return tuple(pairs)


def names_arg(text: str) -> tuple[str, ...]:
    return tuple(_items(text))


def settings_flags(frequencies: Sequence[float], governors: Sequence[str]) -> list[str]:
    """The ``--frequencies``/``--governors`` flags that ask for these CPU settings (the
    inverse of their parsers), to show a sweep as a command a user can repeat."""
    return [
        "--frequencies",
        ",".join(f"{round(hz)}Hz" for hz in frequencies),
        "--governors",
        ",".join(governors) or "none",
    ]
