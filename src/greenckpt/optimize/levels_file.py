"""The levels file of ``greenckpt levels``: a multilevel scenario written with units.

Why here and not in the CLI: a Python user plans a multilevel scenario from the same file
(``load_levels`` then :func:`greenckpt.model.optimize_multilevel`), and a file format is
library work. The format (one ``[[level]]`` table per level, quantities as strings with units,
``power_source`` saying where the powers come from) is in docs/formats.md.
"""

from __future__ import annotations

import tomllib
from typing import Any

from greenckpt import units
from greenckpt.errors import InvalidValueError
from greenckpt.files import read_regular
from greenckpt.model import Level
from greenckpt.optimize.profile_data import POWER_SOURCES

__all__ = ["MAX_LEVELS_FILE_BYTES", "load_levels"]

MAX_LEVELS_FILE_BYTES = 1 << 20
"""A levels file describes a handful of levels; anything longer is not one."""


def _quantity(table: dict[str, Any], key: str, where: str, parse: Any) -> float:
    value = table.get(key)
    if not isinstance(value, str):
        raise InvalidValueError(
            f"{where}.{key}: expected a quantity with a unit as a string, got {value!r}"
        )
    try:
        return float(parse(value))
    except units.UnitError as exc:
        raise InvalidValueError(f"{where}.{key}: {exc}") from None


def load_levels(path: str) -> tuple[list[Level], float, str]:
    """Read the levels, the application power and the powers' source from a TOML file
    (errors name the field)."""
    try:
        doc = tomllib.loads(read_regular(path, limit=MAX_LEVELS_FILE_BYTES).decode("utf-8"))
    except OSError as exc:  # a FIFO or a directory too: never wait on one
        raise InvalidValueError(
            f"cannot read levels file {path!r}: {exc.strerror or exc}"
        ) from None
    except UnicodeDecodeError:
        raise InvalidValueError(f"levels file {path!r} is not UTF-8 text") from None
    except tomllib.TOMLDecodeError as exc:
        raise InvalidValueError(f"{path}: not valid TOML ({exc})") from None
    except RecursionError:  # tomllib recurses once per nested array or inline table
        raise InvalidValueError(
            f"{path}: arrays or tables nested too deeply for a levels file"
        ) from None
    app_power = _quantity(doc, "app_power", path, units.parse_power)
    source = doc.get("power_source")
    if source not in POWER_SOURCES:
        raise InvalidValueError(
            f"{path}.power_source: say where the powers come from: one of "
            f"{', '.join(POWER_SOURCES)}, got {source!r}"
        )
    raw = doc.get("level")
    if not isinstance(raw, list) or not raw:
        raise InvalidValueError(f"{path}: give at least one [[level]] table")
    levels = []
    for i, table in enumerate(raw):
        where = f"{path}: level[{i}]"
        if not isinstance(table, dict):
            raise InvalidValueError(f"{where}: expected a table")
        mtbf = table.get("mtbf")
        rate = 0.0
        if mtbf != "never":
            rate = 1.0 / _quantity(table, "mtbf", where, units.parse_duration)
        levels.append(
            Level(
                name=str(table.get("name", f"L{i + 1}")),
                ckpt_time=_quantity(table, "ckpt_time", where, units.parse_duration),
                restart_time=_quantity(table, "restart_time", where, units.parse_duration),
                rate=rate,
                ckpt_power=_quantity(table, "ckpt_power", where, units.parse_power),
                restart_power=_quantity(table, "restart_power", where, units.parse_power),
            )
        )
    return levels, app_power, str(source)
