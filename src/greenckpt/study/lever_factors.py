"""The levers beyond the core clock as study factors: their levels, what they ask of the node,
and the ``greenckpt run --policy fixed`` options each level becomes.

Why a module of its own: a study varies one setting at a time (issue 20), and issue 33's
levers — the uncore frequency, the package power limit, the per-core split's waiting-core
frequency, the GPU clocks and power limit — are settings like the CPU frequency: each a
factor applied with ``--policy fixed``, each level ``"as found"`` (the lever left alone, the
baseline Power-Check compares against) or a value. A node that lacks a lever refuses the
factor in one line with the platform's reason before anything runs, as for ``frequency``.
The format: docs/formats.md, "Study file".
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any

from greenckpt.errors import InvalidValueError
from greenckpt.units import parse_frequency, parse_power

__all__ = [
    "AS_FOUND",
    "LEVER_FACTORS",
    "LEVER_OF",
    "lever_level_ok",
    "lever_options",
    "lever_refusal",
]

AS_FOUND = "as found"
"""The level that leaves a lever as the node had it."""
LEVER_OF: dict[str, str] = {
    "uncore": "uncore frequency",
    "power_limit": "power limit",
    "waiting_frequency": "per-core split",
    "gpu_clocks": "gpu clocks",
    "gpu_power_limit": "gpu power limit",
}
"""Each lever factor and the lever it sets (``greenckpt probe``'s names)."""
LEVER_FACTORS: tuple[str, ...] = tuple(LEVER_OF)
RIGHT: dict[str, str] = {
    "uncore": 'a frequency such as "1.8GHz" or "as found"',
    "power_limit": 'a power such as "80W" or "as found"',
    "waiting_frequency": 'a frequency such as "1.2GHz" or "as found" (needs the frequency factor)',
    "gpu_clocks": 'memory:graphics MHz such as "877:1380" or "as found"',
    "gpu_power_limit": 'a power such as "200W" or "as found"',
}
"""What a level of each lever factor must be (for the one-line error)."""
_CLOCKS = re.compile(r"([1-9]\d{0,5}):([1-9]\d{0,5})")


def _value(factor: str, level: str) -> Any:
    """The option value of one level (None: as found); InvalidValueError if malformed."""
    if level == AS_FOUND:
        return None
    if factor == "gpu_clocks":
        match = _CLOCKS.fullmatch(level.replace(" ", ""))
        if match is None:
            raise InvalidValueError(f"{level!r} is not MEM:GR")
        return int(match[1]), int(match[2])
    if factor in ("uncore", "waiting_frequency"):
        hz = parse_frequency(level)
        if not hz > 0 or (factor == "uncore" and hz / 1000 != math.floor(hz / 1000)):
            raise InvalidValueError(f"{level!r} is not a whole number of kHz above 0")
        return round(hz / 1000) if factor == "uncore" else round(hz)
    watts = parse_power(level)
    if not watts > 0:
        raise InvalidValueError(f"{level!r} is not above 0 W")
    return watts


def lever_level_ok(factor: str, level: object) -> bool:
    """Whether ``level`` is a valid level of the lever factor ``factor``."""
    if not isinstance(level, str):
        return False
    try:
        _value(factor, level)
    except (ValueError, InvalidValueError):
        return False
    return True


def lever_options(levels: Mapping[str, object]) -> dict[str, Any]:
    """The :class:`~greenckpt.runtime.node_options.NodeOptions` fields of a run's lever
    levels (only the factors given; as found: None)."""
    out: dict[str, Any] = {}
    for factor in LEVER_FACTORS:
        if factor not in levels:
            continue
        value = _value(factor, str(levels[factor]))
        if factor == "uncore":
            out["uncore_khz"] = value
        elif factor == "power_limit":
            out["power_limit_w"] = value
        elif factor == "waiting_frequency":
            out["waiting_frequency_hz"] = value
        elif factor == "gpu_power_limit":
            out["gpu_power_limit_w"] = value
        else:
            out["gpu_memory_mhz"] = None if value is None else value[0]
            out["gpu_clock_mhz"] = None if value is None else value[1]
    return out


def lever_refusal(factors: Mapping[str, object]) -> tuple[str, str] | None:
    """``(factor, message)`` for the first lever factor this node cannot vary (absent, with
    the platform's reason), or for ``waiting_frequency`` without a ``frequency`` factor;
    None when every lever factor can run. Reads the node only when a lever factor is given."""
    wanted = [f for f in LEVER_FACTORS if f in factors]
    if not wanted:
        return None
    if "waiting_frequency" in factors and "frequency" not in factors:
        return (
            "waiting_frequency",
            "waiting_frequency is the per-core split's waiting cores: it needs a frequency "
            "factor for the I/O processes' cores",
        )
    from greenckpt.runtime.fixed_policy import absent_levers  # noqa: PLC0415 - reads the node

    absent = absent_levers(LEVER_OF[f] for f in wanted)
    for factor in wanted:
        reason = absent.get(LEVER_OF[factor])
        if reason is not None:
            return (
                factor,
                f"impossible level: this node has no {LEVER_OF[factor]} control ({reason}); "
                f"vary {factor} on a node that has it",
            )
    return None
