"""The levers beyond the core clock in the profile format: a point's lever fields and the
profile's ``levers`` metadata, read, checked, written and described.

Why apart from :mod:`greenckpt.optimize.profile_data`: issue 33 added five optional fields to
every point (uncore frequency, package power limit, GPU application clocks, GPU power limit;
``None`` = left as found) and an object saying which levers the node had. Their checks, JSON
names and labels are one concern, used by the profile format, the planner and the plan
report; keeping them here keeps the format module small. Old profiles have none of the fields
and load unchanged: every lever as found, no per-core split offered.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Protocol

from greenckpt.optimize.fields import ProfileError, number

__all__ = [
    "LEVER_ATTRS",
    "LEVER_JSON",
    "LEVER_NAMES",
    "PER_CORE_SPLIT",
    "LeverPoint",
    "lever_fields_from_json",
    "lever_fields_to_json",
    "lever_key",
    "lever_labels",
    "levers_as_found",
    "levers_from_json",
    "swept_levers",
]

LEVER_NAMES: tuple[str, ...] = (
    "cpu frequency",
    "uncore frequency",
    "per-core split",
    "power limit",
    "gpu clocks",
    "gpu power limit",
)
"""The lever names of the profile's ``levers`` metadata (those ``greenckpt probe`` and the
profiler report: :func:`greenckpt.platform.levers.node_levers`)."""

PER_CORE_SPLIT = "per-core split"
"""The metadata entry that lets the planner give the waiting ranks' cores their own frequency."""

LEVER_JSON: tuple[tuple[str, str, bool], ...] = (
    ("uncore_khz", "uncore_khz", True),
    ("power_limit_w", "power_limit_W", False),
    ("gpu_clock_mhz", "gpu_clock_MHz", True),
    ("gpu_memory_mhz", "gpu_memory_MHz", True),
    ("gpu_power_limit_w", "gpu_power_limit_W", False),
)
"""``(ProfilePoint attribute, JSON key, integer?)`` of each lever field, in file order."""


LEVER_ATTRS: tuple[tuple[str, str], ...] = (
    ("uncore frequency", "uncore_khz"),
    ("power limit", "power_limit_w"),
    ("gpu clocks", "gpu_clock_mhz"),
    ("gpu power limit", "gpu_power_limit_w"),
)
"""``(lever name, ProfilePoint attribute)`` of each lever a point can set (the split is not a
point's: the planner chooses it)."""


class LeverPoint(Protocol):
    """The lever fields of a profile point (``ProfilePoint`` is one)."""

    @property
    def uncore_khz(self) -> int | None: ...
    @property
    def power_limit_w(self) -> float | None: ...
    @property
    def gpu_clock_mhz(self) -> int | None: ...
    @property
    def gpu_memory_mhz(self) -> int | None: ...
    @property
    def gpu_power_limit_w(self) -> float | None: ...


def lever_fields_from_json(obj: Mapping[str, Any], path: str) -> dict[str, Any]:
    """The point's lever fields (attribute → value, ``None`` when absent or null), checked:
    frequencies are integers >= 1, limits finite numbers > 0, and the two GPU clocks come
    together (NVML sets application clocks as a pair)."""
    out: dict[str, Any] = {}
    for attr, key, integer in LEVER_JSON:
        value = obj.get(key)
        if value is None:
            out[attr] = None
        elif integer:
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ProfileError(f"{path}.{key}: expected an integer >= 1 or null, got {value!r}")
            out[attr] = value
        else:
            out[attr] = number(obj, key, path)
    if (out["gpu_clock_mhz"] is None) != (out["gpu_memory_mhz"] is None):
        raise ProfileError(
            f"{path}: give both gpu_clock_MHz and gpu_memory_MHz (GPU application clocks are "
            "set as a pair) or neither"
        )
    return out


def lever_fields_to_json(p: LeverPoint) -> dict[str, Any]:
    """The JSON keys of the levers a point set (none for a point with every lever as found,
    so files without lever axes are written as before)."""
    return {key: v for attr, key, _ in LEVER_JSON if (v := getattr(p, attr)) is not None}


def lever_key(p: LeverPoint) -> tuple[int | float | None, ...]:
    """The lever part of a point's cell key (two points differing only in uncore differ)."""
    return tuple(getattr(p, attr) for attr, _, _ in LEVER_JSON)


def levers_as_found(p: LeverPoint) -> bool:
    """True when the point left every lever beyond the core clock as found."""
    return all(v is None for v in lever_key(p))


def lever_labels(p: LeverPoint) -> list[str]:
    """The levers a point set, in words (``uncore 1.40 GHz``, ``package limit 120 W``, ...)."""
    parts = []
    if p.uncore_khz is not None:
        parts.append(f"uncore {p.uncore_khz / 1e6:.2f} GHz")
    if p.power_limit_w is not None:
        parts.append(f"package limit {p.power_limit_w:g} W")
    if p.gpu_clock_mhz is not None:
        parts.append(f"GPU clocks {p.gpu_memory_mhz}:{p.gpu_clock_mhz} MHz")
    if p.gpu_power_limit_w is not None:
        parts.append(f"GPU limit {p.gpu_power_limit_w:g} W")
    return parts


def levers_from_json(data: Mapping[str, Any]) -> dict[str, bool]:
    """The optional ``levers`` object (lever name → whether the node had it); empty when the
    profile predates it. An unknown name is refused: a misspelt ``per-core split`` would
    silently keep the planner from searching the split."""
    raw = data.get("levers")
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise ProfileError('profile.levers: expected an object such as {"uncore frequency": true}')
    for name, present in raw.items():
        if name not in LEVER_NAMES:
            raise ProfileError(
                f"profile.levers: unknown lever {name!r}: expected one of {', '.join(LEVER_NAMES)}"
            )
        if not isinstance(present, bool):
            raise ProfileError(f"profile.levers.{name}: expected true or false, got {present!r}")
    return dict(raw)


def swept_levers(points: Iterable[LeverPoint]) -> tuple[str, ...]:
    """The names of the levers some point sets (the profile's lever axes), in
    :data:`LEVER_ATTRS` order."""
    pts = list(points)
    return tuple(name for name, attr in LEVER_ATTRS if any(getattr(p, attr) for p in pts))
