"""The checks of a profile's JSON fields, shared by its points and its waiting entries.

Why apart from :mod:`greenckpt.optimize.profile_data`: the profile's points and its waiting-power
entries (:mod:`greenckpt.optimize.waiting`) are validated the same way — each check raises
:class:`ProfileError` naming the field by its JSON path and what would be valid — and both
modules use them without importing each other.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any, Literal, cast

from greenckpt.errors import GreenckptError
from greenckpt.optimize.setting import GOVERNORS

__all__ = [
    "POWER_SOURCES",
    "PowerSource",
    "ProfileError",
    "choice",
    "finite",
    "flag",
    "number",
    "optional_int",
    "optional_number",
    "optional_str",
    "setting_pair",
]

PowerSource = Literal["measured", "estimated", "synthetic"]
POWER_SOURCES: tuple[PowerSource, ...] = ("measured", "estimated", "synthetic")


class ProfileError(GreenckptError, ValueError):
    """A profile file or object is malformed; the message names the field and what is valid."""


def number(obj: Mapping[str, Any], key: str, path: str, *, positive: bool = True) -> float:
    """``obj[key]`` as a finite number, > 0 (``positive``) or >= 0."""
    value = obj.get(key)
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ProfileError(f"{path}.{key}: expected a number, got {value!r}")
    v = float(value)
    if not math.isfinite(v) or (positive and v <= 0) or v < 0:
        bound = "> 0" if positive else ">= 0"
        raise ProfileError(f"{path}.{key}: must be a finite number {bound}, got {value!r}")
    return v


def optional_number(obj: Mapping[str, Any], key: str, path: str) -> float | None:
    """``obj[key]`` as a finite number >= 0, or None when absent or null."""
    if obj.get(key) is None:
        return None
    return number(obj, key, path, positive=False)


def choice(obj: Mapping[str, Any], key: str, path: str, allowed: Sequence[str]) -> str:
    """``obj[key]``, one of ``allowed``."""
    value = obj.get(key)
    if value not in allowed:
        raise ProfileError(f"{path}.{key}: expected one of {', '.join(allowed)}, got {value!r}")
    return cast(str, value)


def optional_int(obj: Mapping[str, Any], key: str, path: str) -> int | None:
    """``obj[key]`` as an integer >= 1, or None when absent or null."""
    value = obj.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ProfileError(f"{path}.{key}: expected an integer >= 1 or null, got {value!r}")
    return value


def optional_str(obj: Mapping[str, Any], key: str, path: str) -> str | None:
    """``obj[key]`` as a non-empty string, or None when absent or null."""
    value = obj.get(key)
    if value is not None and not (isinstance(value, str) and value):
        raise ProfileError(f"{path}.{key}: expected a non-empty string or null, got {value!r}")
    return value


def flag(obj: Mapping[str, Any], key: str, path: str, *, default: bool) -> bool:
    """``obj[key]`` as true or false, ``default`` when absent."""
    value = obj.get(key, default)
    if not isinstance(value, bool):
        raise ProfileError(f"{path}.{key}: expected true or false, got {value!r}")
    return value


def finite(obj: Mapping[str, Any], key: str, path: str) -> float:
    """A finite number of either sign (a difference of two measured powers)."""
    value = obj.get(key)
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ProfileError(f"{path}.{key}: expected a finite number, got {value!r}")
    return float(value)


def setting_pair(obj: Mapping[str, Any], path: str) -> tuple[float | None, str | None]:
    """The ``frequency_hz``/``governor`` pair of an object, checked as a point's is."""
    frequency = None if obj.get("frequency_hz") is None else number(obj, "frequency_hz", path)
    governor = obj.get("governor")
    if governor is not None and governor not in GOVERNORS:
        raise ProfileError(
            f"{path}.governor: expected one of {', '.join(GOVERNORS)} or null, got {governor!r}"
        )
    if frequency is not None and governor is not None:
        raise ProfileError(
            f"{path}: give at most one of frequency_hz (a fixed CPU frequency) and governor"
        )
    return frequency, governor
