"""A profile from a CSV table: a paper's or a vendor's numbers typed in, or an exported profile.

Why: the planner needs a profile, and the first one a user has is often not a measurement of
their own node but a table — saito2013's figures, a device's data sheet, a colleague's runs.
This reads a CSV with a header line: the short form ``op, setting, processes, MB/s, W`` (the
setting a frequency such as ``2.1GHz`` or ``2100000000``, or a governor name) with optional
``codec``, ``cstates`` and ``size``, or what ``greenckpt profile csv`` exports
(docs/formats.md). Every bad row is one line naming the CSV line; the profile says it was
imported and that greenckpt did not measure it (its power source is the one the user states).
"""

from __future__ import annotations

import csv
import io
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from greenckpt.errors import InvalidValueError
from greenckpt.optimize.profile_data import POWER_SOURCES, profile_from_json
from greenckpt.optimize.setting import GOVERNORS
from greenckpt.units import UnitError, parse_frequency, parse_size

__all__ = ["CsvImportError", "import_profile"]

_ALIASES: dict[str, tuple[str, ...]] = {
    "op": ("op", "operation"),
    "setting": ("setting", "frequency", "frequency_hz", "governor"),
    "processes": ("processes", "procs", "io_processes"),
    "mbps": ("mb/s", "mbps", "throughput_mbps", "throughput_bps"),
    "watts": ("w", "watts", "power_w"),
}
_OPS = {"write": "write", "read": "read", "checkpoint": "write", "restart": "read"}
_LEVERS: dict[str, bool] = {
    "uncore_khz": True,
    "power_limit_w": False,
    "gpu_clock_mhz": True,
    "gpu_memory_mhz": True,
    "gpu_power_limit_w": False,
}
"""The export's lever columns (lower case) and whether each is a whole number; the JSON key
is the export's spelling (:data:`greenckpt.profile.export.CSV_COLUMNS`)."""
_LEVER_KEYS = {
    "uncore_khz": "uncore_khz",
    "power_limit_w": "power_limit_W",
    "gpu_clock_mhz": "gpu_clock_MHz",
    "gpu_memory_mhz": "gpu_memory_MHz",
    "gpu_power_limit_w": "gpu_power_limit_W",
}


class CsvImportError(InvalidValueError):
    """A CSV that cannot become a profile: one line naming the file and line."""


@dataclass(frozen=True)
class _Columns:
    op: str
    setting: list[str]
    processes: str
    rate: str
    watts: str
    optional: dict[str, str]


def _columns(header: list[str], where: str) -> _Columns:
    lower = {h.strip().lower(): h for h in header}
    found: dict[str, Any] = {}
    for name, aliases in _ALIASES.items():
        hits = [lower[a] for a in aliases if a in lower]
        if not hits:
            raise CsvImportError(
                f"{where}:1: no {name} column; the header needs op, setting (a frequency or a "
                "governor), processes, MB/s and W (or the columns of greenckpt profile csv)"
            )
        found[name] = hits if name == "setting" else hits[0]
    names: tuple[str, ...] = ("codec", "cstates", "size", "size_bytes", *_LEVERS)
    optional: dict[str, str] = {k: lower[k] for k in names if k in lower}
    return _Columns(found["op"], found["setting"], found["processes"], found["mbps"],
                    found["watts"], optional)  # fmt: skip


def _setting(row: Mapping[str, str], cols: _Columns) -> tuple[float | None, str | None]:
    """(frequency in Hz, governor) from the setting column(s); (None, None): as found."""
    values = {c.strip().lower(): (row.get(c) or "").strip() for c in cols.setting}
    if values.get("governor"):
        return None, values["governor"]
    if values.get("frequency_hz"):
        return float(values["frequency_hz"]), None
    return _setting_text(next((v for v in values.values() if v), ""))


def _setting_text(text: str) -> tuple[float | None, str | None]:
    if text.startswith("governor:"):
        return None, text.split(":", 1)[1]
    if text in GOVERNORS:
        return None, text
    if text in ("", "uncontrolled"):
        return None, None
    if text.replace(".", "", 1).isdigit():
        number = float(text)
        return (number * 1e9 if number < 100 else number), None  # 2.1 -> GHz; 2100000000 -> Hz
    return parse_frequency(text), None


def _point(row: Mapping[str, str], cols: _Columns, source: str) -> dict[str, Any]:
    op = _OPS.get((row.get(cols.op) or "").strip().lower())
    if op is None:
        raise InvalidValueError(f"operation {row.get(cols.op)!r} is not write or read")
    frequency, governor = _setting(row, cols)
    if governor is not None and governor not in GOVERNORS:
        raise InvalidValueError(f"governor {governor!r} is not one of {', '.join(GOVERNORS)}")
    processes = int((row.get(cols.processes) or "").strip())
    if processes < 1:
        raise InvalidValueError(f"processes must be >= 1, got {processes}")
    rate = float((row.get(cols.rate) or "").strip())
    throughput = rate if cols.rate.strip().lower() == "throughput_bps" else rate * 1e6
    watts = float((row.get(cols.watts) or "").strip())
    if not (throughput > 0 and watts > 0):
        raise InvalidValueError("MB/s and W must be numbers > 0")
    point: dict[str, Any] = {
        "op": op,
        "frequency_hz": frequency,
        "governor": governor,
        "processes": processes,
        "throughput_Bps": throughput,
        "power_W": watts,
        "power_source": source,
        "repetitions": 1,
    }
    codec = (row.get(cols.optional.get("codec", "")) or "").strip()
    point["codec"] = None if codec in ("", "none") else codec
    cstates = (row.get(cols.optional.get("cstates", "")) or "").strip().lower()
    point["cstates"] = {"": None, "true": True, "on": True, "false": False, "off": False}[cstates]
    size_col = cols.optional.get("size") or cols.optional.get("size_bytes")
    size = (row.get(size_col or "") or "").strip()
    if size:
        point["size_bytes"] = (
            int(float(size)) if size.replace(".", "", 1).isdigit() else int(parse_size(size))
        )
    for column, whole in _LEVERS.items():  # empty: the lever was left as found
        text = (row.get(cols.optional.get(column, "")) or "").strip()
        if text:
            point[_LEVER_KEYS[column]] = int(text) if whole else float(text)
    return point


def import_profile(
    path: str | Path, *, device: str | None = None, note: str = "", power_source: str = "measured"
) -> dict[str, Any]:
    """The profile (as JSON data, checked by the profile loader) the CSV at ``path`` holds."""
    path = Path(path)
    if power_source not in POWER_SOURCES:
        raise CsvImportError(
            f"power source must be one of {', '.join(POWER_SOURCES)}, got {power_source!r}"
        )
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise CsvImportError(
            f"cannot read {path}: {getattr(exc, 'strerror', None) or exc}"
        ) from None
    reader = csv.DictReader(io.StringIO(text))
    if not reader.fieldnames:
        raise CsvImportError(f"{path}:1: empty file; the first line is the header")
    cols = _columns(list(reader.fieldnames), str(path))
    points: list[dict[str, Any]] = []
    seen: dict[tuple[Any, ...], int] = {}
    for row in reader:
        line = reader.line_num
        try:
            point = _point(row, cols, power_source)
        except (ValueError, KeyError, UnitError) as exc:
            raise CsvImportError(f"{path}:{line}: {exc}") from None
        key = (point["op"], point["frequency_hz"], point["governor"], point["processes"],
               point["codec"], point["cstates"], point.get("size_bytes"),
               *(point.get(k) for k in _LEVER_KEYS.values()))  # fmt: skip
        if key in seen:
            raise CsvImportError(f"{path}:{line}: the same setting as line {seen[key]}")
        seen[key] = line
        points.append(point)
    if not points:
        raise CsvImportError(f"{path}: no rows after the header")
    name = device or path.stem
    doc = {
        "format": "greenckpt-profile",
        "format_version": 2,
        "synthetic": power_source == "synthetic",
        "note": (
            f"imported from CSV {path.name} by greenckpt profile import: the values as given, "
            f"not measured by greenckpt (power: {power_source} as stated by the user)"
            + (f"; {note}" if note else "")
        ),
        "tool": "greenckpt profile import",
        "machine": {"hostname": name},
        "storage": {"key": f"imported:{name}", "kind": "imported", "path": None},
        "meters": [],
        "points": points,
    }
    profile_from_json(doc)  # the loader's checks: a profile it writes must load
    return doc
