"""Profile points as CSV, for spreadsheets, pandas, gnuplot and other people's plots.

Why a flat table: the JSON profile nests provenance around the points, which is right for the
optimizer and awkward for everyone else. The CSV has one row per point, a single header line
(no comment lines, so every CSV reader takes it as is), SI units in the column names, and an
empty cell for a value the profile does not have.

Why a ``synthetic`` column on every row: a row copied out of its file loses the file's
``synthetic: true``; repeating it per row means a made-up figure can never pass for a
measurement once it sits in someone's spreadsheet.
"""

from __future__ import annotations

import csv
import os
from collections.abc import Iterator
from pathlib import Path
from typing import TextIO

from greenckpt.optimize.profile_data import Profile, ProfilePoint

__all__ = ["CSV_COLUMNS", "point_row", "profile_rows", "profile_to_csv"]

CSV_COLUMNS: tuple[str, ...] = (
    "op",
    "setting",
    "setting_label",
    "frequency_hz",
    "governor",
    "processes",
    "codec",
    "compression_ratio",
    "data",
    "cstates",
    "uncore_khz",
    "power_limit_W",
    "gpu_memory_MHz",
    "gpu_clock_MHz",
    "gpu_power_limit_W",
    "size_bytes",
    "block_size_bytes",
    "layout",
    "read_method",
    "throughput_Bps",
    "throughput_spread_Bps",
    "power_W",
    "power_spread_W",
    "power_source",
    "energy_per_GB_J",
    "repetitions",
    "reliable",
    "synthetic",
)
"""The columns, in file order. ``setting`` is :attr:`ProfilePoint.setting_key`; the lever
columns (uncore frequency, package power limit, GPU clocks and power limit) are empty where the
lever was left as found."""


def _cell(value: str | float | bool | None) -> str:
    """CSV text of one value: empty for None, ``true``/``false``, round-trip floats."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return repr(value)
    return str(value)


def point_row(point: ProfilePoint, *, synthetic: bool) -> dict[str, str]:
    """One point as a CSV row (column → text); ``synthetic`` is the profile's flag."""
    values: dict[str, str | float | bool | None] = {
        "op": point.op,
        "setting": point.setting_key,
        "setting_label": point.setting_label,
        "frequency_hz": point.frequency,
        "governor": point.governor,
        "processes": point.processes,
        "codec": point.codec,
        "compression_ratio": point.compression_ratio,
        "data": point.data,
        "cstates": point.cstates,
        "uncore_khz": point.uncore_khz,
        "power_limit_W": point.power_limit_w,
        "gpu_memory_MHz": point.gpu_memory_mhz,
        "gpu_clock_MHz": point.gpu_clock_mhz,
        "gpu_power_limit_W": point.gpu_power_limit_w,
        "size_bytes": point.size,
        "block_size_bytes": point.block_size,
        "layout": point.layout,
        "read_method": point.read_method,
        "throughput_Bps": point.throughput,
        "throughput_spread_Bps": point.throughput_spread,
        "power_W": point.power,
        "power_spread_W": point.power_spread,
        "power_source": point.power_source,
        "energy_per_GB_J": point.energy_per_byte * 1e9,
        "repetitions": point.repetitions,
        "reliable": point.reliable,
        "synthetic": synthetic or point.power_source == "synthetic",
    }
    return {column: _cell(values[column]) for column in CSV_COLUMNS}


def profile_rows(profile: Profile) -> Iterator[dict[str, str]]:
    """The CSV rows of a profile's points, in file order."""
    for point in profile.points:
        yield point_row(point, synthetic=profile.synthetic)


def profile_to_csv(profile: Profile, stream_or_path: TextIO | str | os.PathLike[str]) -> int:
    """Write the profile's points as CSV (header line first); returns the number of rows.

    A path is written as UTF-8 (created or replaced); a stream is written to as it is (open it
    with ``newline=""`` as the csv module expects). Lines end with ``\\n``.
    """
    if isinstance(stream_or_path, str | os.PathLike):
        with Path(stream_or_path).open("w", encoding="utf-8", newline="") as stream:
            return _write(profile, stream)
    return _write(profile, stream_or_path)


def _write(profile: Profile, stream: TextIO) -> int:
    writer = csv.DictWriter(stream, fieldnames=CSV_COLUMNS, lineterminator="\n")
    writer.writeheader()
    count = 0
    for row in profile_rows(profile):
        writer.writerow(row)
        count += 1
    return count
