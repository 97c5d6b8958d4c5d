"""``greenckpt levels``: expected time and energy of multilevel checkpointing, and its optimum.

The levels (FTI's L1 local, L2 partner copy, L3 Reed-Solomon, L4 parallel file system, or any
subset) come from a small TOML file, quantities with units::

    app_power = "300W"

    [[level]]
    name = "L1 local"
    ckpt_time = "5s"
    restart_time = "5s"
    mtbf = "6h"          # mean time between failures that need this level to recover
    ckpt_power = "300W"
    restart_power = "290W"

``--intervals 3min,5min,7min,11min`` evaluates an FTI-style configuration (wu2018's
``ckp(3,5,7,11)``); the optimized nested schedule is always computed and compared with it.
"""

from __future__ import annotations

import argparse
import math
from typing import Any

from rich.table import Table

from greenckpt import units
from greenckpt.cli.commands import command_help
from greenckpt.cli.console import make_console
from greenckpt.errors import InvalidValueError
from greenckpt.jsonout import dumps
from greenckpt.model import (
    Level,
    MultilevelExpectation,
    expected_multilevel,
    fti_schedule,
    optimize_multilevel,
)
from greenckpt.optimize.levels_file import load_levels


def register(sub: Any) -> None:
    """Add the ``levels`` sub-command."""
    p = sub.add_parser(
        "levels",
        help=command_help("levels"),
        description="Expected time and energy of multilevel checkpointing (exact model, "
        "docs/model.md section 5) for FTI-style per-level intervals, and the nested schedule "
        "that minimises EPE (or time).",
    )
    p.add_argument("--config", required=True, help="TOML file describing the levels")
    p.add_argument(
        "--intervals",
        help="comma-separated compute time between checkpoints of each level, lowest level "
        "first, e.g. 3min,5min,7min,11min",
    )
    p.add_argument(
        "--quantum",
        default="1s",
        help="time grid the intervals are multiples of (default 1s; FTI counts minutes: 1min)",
    )
    p.add_argument("--objective", choices=("energy", "time"), default="energy")
    p.add_argument("--json", action="store_true", help="print JSON instead of tables")
    p.set_defaults(run=run)


def _intervals(text: str, n_levels: int) -> list[float]:
    parts = [p for p in text.split(",") if p.strip()]
    if len(parts) != n_levels:
        raise InvalidValueError(
            f"--intervals: give {n_levels} intervals (one per level, lowest first), "
            f"got {len(parts)}"
        )
    try:
        return [units.parse_duration(p) for p in parts]
    except units.UnitError as exc:
        raise InvalidValueError(f"--intervals: {exc}") from None


def _summary(
    levels: list[Level], e: MultilevelExpectation, intervals: list[float]
) -> dict[str, Any]:
    return {
        "intervals_s": intervals,
        "time_factor": e.time_factor,
        "overhead": e.time_factor - 1.0,
        "epe_W": e.epe,
        "per_useful_second": {
            "compute": e.compute / e.work,
            "checkpoint": {lv.name: c / e.work for lv, c in zip(levels, e.checkpoint, strict=True)},
            "restart": {lv.name: r / e.work for lv, r in zip(levels, e.restart, strict=True)},
        },
    }


def run(ns: argparse.Namespace) -> int:
    """Execute ``greenckpt levels``."""
    levels, app_power, source = load_levels(ns.config)
    total_rate = sum(lv.rate for lv in levels)
    slowest = max(levels, key=lambda lv: max(lv.ckpt_time, lv.restart_time))
    if total_rate * max(slowest.ckpt_time, slowest.restart_time) >= 1.0:
        raise InvalidValueError(
            f"failures of all levels together come every {units.format_duration(1 / total_rate)} "
            f"on average, but {slowest.name} takes "
            f"{units.format_duration(max(slowest.ckpt_time, slowest.restart_time))} to checkpoint "
            "or restart: no schedule makes progress; check the mtbf values"
        )
    try:
        quantum = units.parse_duration(ns.quantum)
    except units.UnitError as exc:
        raise InvalidValueError(f"--quantum: {exc}") from None
    results: list[tuple[str, MultilevelExpectation, list[float]]] = []
    if ns.intervals:
        given = _intervals(ns.intervals, len(levels))
        schedule = fti_schedule(given, quantum=quantum)
        results.append(("given", expected_multilevel(levels, schedule, app_power), given))
    best = optimize_multilevel(levels, app_power, objective=ns.objective)
    results.append(("optimised", best.expectation, list(best.intervals)))
    if ns.json:
        doc = {
            "power_source": source,
            "energy_figures": f"modelled expectations from the file's {source} powers",
            "levels": [lv.__dict__ for lv in levels],
            "app_power_W": app_power,
            "objective": ns.objective,
            "results": {name: _summary(levels, e, iv) for name, e, iv in results},
        }
        print(dumps(doc))
        return 0
    console = make_console()
    table = Table(
        title=f"Multilevel checkpointing, optimised for {ns.objective} (exact model; EPE "
        f"modelled from the file's {source} powers)",
        title_justify="left",
    )
    table.add_column("schedule")
    for lv in levels:
        table.add_column(f"{lv.name} every", justify="right")
    for col in ("overhead", "EPE", "EPE saved"):
        table.add_column(col, justify="right")
    base_epe = results[0][1].epe
    for name, e, iv in results:
        saved = (base_epe - e.epe) / base_epe
        table.add_row(
            name,
            *(units.format_duration(x) if math.isfinite(x) else "never" for x in iv),
            units.format_percent(e.time_factor - 1.0),
            units.format_power(e.epe),
            units.format_percent(saved) if name != results[0][0] else "—",
        )
    console.print(table)
    return 0
