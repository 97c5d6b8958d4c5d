"""The levers beyond the core clock in a plan's output: what the plan chose for each, or why
it has no value (absent on the node, not in the profile, left as found).

Why apart from :mod:`greenckpt.report.plan_report`: issue 33's levers (uncore frequency,
package power limit, the waiting ranks' own frequency, GPU clocks and power limit) each have a
value per phase *or* a reason for having none, and the table and the JSON must say the same
thing: a lever the profile does not have is reported absent or not recorded, never guessed.
"""

from __future__ import annotations

from typing import Any

from rich.table import Table

from greenckpt.optimize import Choice, Plan, ProfilePoint
from greenckpt.optimize.lever_fields import PER_CORE_SPLIT
from greenckpt.optimize.setting import CpuSetting

__all__ = ["LEVER_ROWS", "lever_state", "lever_table", "levers_dict", "shows_levers"]

LEVER_ROWS: tuple[str, ...] = (
    "uncore frequency",
    "power limit",
    PER_CORE_SPLIT,
    "gpu clocks",
    "gpu power limit",
)
"""The levers a plan reports, in table order."""


def _point_value(name: str, p: ProfilePoint) -> str | None:
    """The lever's value a point sets, in words, or None when the point leaves it as found."""
    if name == "uncore frequency" and p.uncore_khz is not None:
        return f"{p.uncore_khz / 1e6:.2f} GHz"
    if name == "power limit" and p.power_limit_w is not None:
        return f"package {p.power_limit_w:g} W"
    if name == "gpu clocks" and p.gpu_clock_mhz is not None:
        return f"memory {p.gpu_memory_mhz} MHz, graphics {p.gpu_clock_mhz} MHz"
    if name == "gpu power limit" and p.gpu_power_limit_w is not None:
        return f"{p.gpu_power_limit_w:g} W"
    return None


def lever_state(plan: Plan, name: str) -> str:
    """Whether the profile has the lever: ``absent`` (the node lacked it), ``not recorded``
    (the profile neither says nor sweeps it), ``swept`` or ``present, not swept``."""
    present = plan.levers.get(name)
    swept = plan.split_searched if name == PER_CORE_SPLIT else name in plan.swept_levers
    if present is False:
        return "absent"
    if swept:
        return "swept"
    return "present, not swept" if present else "not recorded"


def _value(plan: Plan, name: str, p: ProfilePoint, split: CpuSetting | None) -> str:
    """One phase's value of a lever, or why it has none."""
    if name == PER_CORE_SPLIT:
        chosen = None if split is None else f"waiting ranks at {split.label}"
    else:
        chosen = _point_value(name, p)
    if chosen is not None:
        return chosen
    state = lever_state(plan, name)
    if state == "absent":
        return "absent on the node"
    if state == "not recorded":
        return "not in the profile"
    if name == PER_CORE_SPLIT:
        return f"no split (waiting ranks at {p.setting_label})"
    return "as found" + (" (not swept)" if state == "present, not swept" else "")


def _phase_values(plan: Plan, c: Choice, name: str) -> tuple[str, str]:
    return (
        _value(plan, name, c.write, c.write_split),
        _value(plan, name, c.read, c.read_split),
    )


def shows_levers(plan: Plan) -> bool:
    """True when the profile says anything about the levers (its metadata, a lever axis or
    the split); a profile from before them gets the tables it always got."""
    return bool(plan.levers or plan.swept_levers or plan.split_searched)


def lever_table(plan: Plan) -> Table:
    """The chosen value of each lever per phase, with whether the profile has it."""
    table = Table(
        title="Levers beyond the core clock (chosen per phase)",
        title_justify="left",
        caption="absent: the node had no such control (profile levers); not in the profile: "
        "the profile neither records nor sweeps it; as found: left as the node had it",
        caption_justify="left",
    )
    for col in ("lever", "in the profile", "checkpoint", "restart"):
        table.add_column(col)
    for name in LEVER_ROWS:
        table.add_row(name, lever_state(plan, name), *_phase_values(plan, plan.best, name))
    return table


def _raw(name: str, p: ProfilePoint, split: CpuSetting | None) -> Any:
    """The machine-readable value of a lever in a phase (None: not set)."""
    if name == PER_CORE_SPLIT:
        return None if split is None else {"key": split.key, "frequency_hz": split.hz}
    if name == "gpu clocks":
        if p.gpu_clock_mhz is None:
            return None
        return {"memory_MHz": p.gpu_memory_mhz, "graphics_MHz": p.gpu_clock_mhz}
    attr = {
        "uncore frequency": "uncore_khz",
        "power limit": "power_limit_w",
        "gpu power limit": "gpu_power_limit_w",
    }
    return getattr(p, attr[name])


def levers_dict(plan: Plan) -> dict[str, Any]:
    """JSON-ready levers of the plan: per lever, what the profile says of it and each phase's
    value (null when left as found, absent or not in the profile) with its words."""
    c = plan.best
    out: dict[str, Any] = {}
    for name in LEVER_ROWS:
        ckpt, restart = _phase_values(plan, c, name)
        out[name] = {
            "node_has_it": plan.levers.get(name),
            "in_profile": lever_state(plan, name),
            "checkpoint": _raw(name, c.write, c.write_split),
            "restart": _raw(name, c.read, c.read_split),
            "checkpoint_text": ckpt,
            "restart_text": restart,
        }
    return out
