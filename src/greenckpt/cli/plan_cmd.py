"""``greenckpt plan``: choose checkpoint/restart settings and interval from a profile.

``--write-config fti|scr|veloc`` writes the chosen interval in that library's language, on its
grid (FTI whole minutes, the others whole seconds: the better neighbour by modelled EPE).
"""

from __future__ import annotations

import argparse
import math
from typing import Any

from rich.console import Console

from greenckpt.cli.args import Inputs, add_scenario_arguments, scenario_from_args
from greenckpt.cli.commands import command_help
from greenckpt.cli.console import make_console
from greenckpt.cli.levels_cmd import (
    add_native_arguments,
    emit_native,
    native_quantum,
    read_fti_config,
)
from greenckpt.errors import InvalidValueError
from greenckpt.jsonout import dumps
from greenckpt.model import epe
from greenckpt.optimize import Plan, ProfilePoint, pareto_front, plan
from greenckpt.optimize import native_config as native
from greenckpt.optimize.lever_fields import lever_fields_to_json, lever_labels
from greenckpt.optimize.setting import CpuSetting
from greenckpt.optimize.waiting import WAIT_MODES
from greenckpt.report.plan_report import plan_tables, plan_to_dict, power_source
from greenckpt.units import format_duration, format_power, format_size


def register(sub: Any) -> None:
    """Add the ``plan`` sub-command."""
    p = sub.add_parser(
        "plan",
        help=command_help("plan"),
        description="Choose the checkpoint and restart settings and the checkpoint interval "
        "that minimise the expected energy per unit of useful work (EPE), and compare them "
        "with the stock cpufreq governors.",
    )
    add_scenario_arguments(p)
    p.add_argument(
        "--waiting",
        choices=WAIT_MODES,
        default="polite",
        help="how the ranks that do no I/O wait during a phase: polite (greenckpt's "
        "checkpoint library, default) or spin (GREENCKPT_WAIT=spin, or a native code in its "
        "MPI's busy-polling waits); their power per rank comes from the profile",
    )
    p.add_argument(
        "--pareto", action="store_true", help="also print the runtime/energy Pareto front"
    )
    add_native_arguments(p)
    p.add_argument(
        "--fti-level",
        type=int,
        choices=(1, 2, 3, 4),
        default=None,
        help="with --write-config fti: the FTI level the single interval is written for "
        "(default 4, the parallel file system: the plan's model recovers every failure from "
        "the last checkpoint); the other ckpt_lN are written 0",
    )
    p.add_argument(
        "--fti-config",
        metavar="CONFIG.FTI",
        help="with --write-config fti: update ckpt_l1..ckpt_l4 of this config.fti, "
        "keeping every other line",
    )
    p.set_defaults(run=run)


def _on_grid(result: Plan, quantum: float) -> tuple[float, float]:
    """The plan's interval on the grid: the neighbouring multiple with the lower modelled
    EPE (EPE is unimodal in the interval), and that EPE."""
    b, scn = result.best, result.scenario
    n = b.T_A / quantum
    values = [
        (
            float(
                epe(
                    t,
                    b.T_C,
                    b.T_R,
                    scn.rate,
                    scn.app_power,
                    b.W_C,
                    b.W_R,
                    form=scn.form,
                )
            ),
            t,
        )
        for t in {max(1, math.floor(n)) * quantum, max(1, math.ceil(n)) * quantum}
    ]
    value, t = min(values)
    return t, value


def _native(ns: argparse.Namespace, result: Plan, source: str) -> dict[str, Any]:
    """Render (or update) the configuration and write it where --output says."""
    fti_text = read_fti_config(ns.fti_config)[0] if ns.fti_config else None
    if fti_text is not None and ns.write_config != "fti":
        raise InvalidValueError("--fti-config is updated only with --write-config fti")
    if ns.fti_level is not None and ns.write_config != "fti":
        raise InvalidValueError("--fti-level is an FTI level: give it with --write-config fti")
    fti_level = 4 if ns.fti_level is None else ns.fti_level
    interval, value = _on_grid(result, native_quantum(ns.write_config, None))
    chosen = [native.NativeLevel("checkpoint", interval, result.best.T_C)]
    slots = [fti_level - 1]
    if fti_text is not None:
        text = native.update_fti(fti_text, native.fti_minutes(chosen, slots), ns.fti_config)
    else:
        header = [
            f"greenckpt plan: checkpoint every {format_duration(result.best.T_A)} minimises "
            + (
                f"EPE; written as {interval / 60:g} min"
                if ns.write_config == "fti"
                else f"EPE; written as {interval:g} s"
            ),
            f"(modelled EPE {format_power(value)}, {source} power"
            + (f"; FTI level L{fti_level})" if ns.write_config == "fti" else ")"),
        ]
        text = native.render(ns.write_config, chosen, header, fti_levels=slots)
    written = emit_native(ns, text)
    written.update(interval_s=interval, epe_W=value)
    return written


def _front_phase(p: ProfilePoint, split: CpuSetting | None) -> dict[str, Any]:
    """One phase of a Pareto point in JSON: its setting, processes, the levers it sets and
    the waiters' own setting under the per-core split (null: none)."""
    return {
        "setting": p.setting_label,
        "processes": p.processes,
        **lever_fields_to_json(p),
        "waiting_setting": None if split is None else split.label,
    }


def _front_text(p: ProfilePoint, split: CpuSetting | None) -> str:
    """One phase of a Pareto point in words: ``1.80 GHz/4p, uncore 1.80 GHz, waiters 1.20 GHz``."""
    parts = [f"{p.setting_label}/{p.processes}p", *lever_labels(p)]
    if split is not None:
        parts.append(f"waiters {split.label}")
    return ", ".join(parts)


def header(inputs: Inputs, console: Console) -> None:
    """Inputs and provenance, printed above every table."""
    prof = inputs.profile
    scn = inputs.scenario
    if prof.synthetic:
        console.print(
            "[bold yellow]SYNTHETIC profile[/]: its throughput and power are made up for "
            "examples; nothing below is a measurement.",
            highlight=False,
        )
    size = inputs.ckpt_size_text or format_size(scn.ckpt_size)  # in the units the user wrote
    console.print(
        f"profile {inputs.profile_path} ({len(prof.points)} points, storage "
        f"{prof.storage.get('key', 'unknown')}); checkpoint {size} per node; "
        f"MTBF {inputs.mtbf_text}; W_A {format_power(scn.app_power)} (given)",
        highlight=False,
    )


def run(ns: argparse.Namespace) -> int:
    """Execute ``greenckpt plan``."""
    inputs = scenario_from_args(ns)
    result = plan(inputs.profile, inputs.scenario)
    front = pareto_front(inputs.profile, inputs.scenario) if ns.pareto else []
    if ns.output and not ns.write_config:
        raise InvalidValueError("--output names the file --write-config writes: give both")
    if (ns.fti_config or ns.fti_level is not None) and not ns.write_config:
        raise InvalidValueError(
            "--fti-config and --fti-level say how to write FTI's file: give --write-config fti"
        )
    written = _native(ns, result, power_source(result)) if ns.write_config else None
    if written is not None and not ns.output and not ns.json:
        print(written["text"], end="")
        return 0
    if ns.json:
        doc = plan_to_dict(result, profile_path=inputs.profile_path)
        if written is not None:
            doc["native_config"] = written
        if ns.pareto:
            doc["pareto_front"] = [
                {
                    "time_factor": f.time_factor,
                    "epe_W": f.epe,
                    "interval_s": f.T_A,
                    "checkpoint": _front_phase(f.write, f.write_split),
                    "restart": _front_phase(f.read, f.read_split),
                }
                for f in front
            ]
        print(dumps(doc))
        return 0
    console = make_console()
    header(inputs, console)
    for table in plan_tables(result, size_text=inputs.ckpt_size_text):
        console.print(table)
    if ns.pareto:
        src = power_source(result)
        console.print(f"Pareto front (expected time per useful second vs EPE, {src} power):")
        for f in front:
            console.print(
                f"  time ×{f.time_factor:.5f}  EPE {format_power(f.epe)}  interval "
                f"{format_duration(f.T_A)}  ckpt {_front_text(f.write, f.write_split)}  "
                f"restart {_front_text(f.read, f.read_split)}",
                highlight=False,
            )
    if written is not None:
        console.print(
            f"wrote the interval {format_duration(written['interval_s'])} as "
            f"{ns.write_config} configuration to {ns.output}",
            highlight=False,
        )
    return 0
