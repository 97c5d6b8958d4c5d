"""``greenckpt plan``: choose checkpoint/restart settings and interval from a profile."""

from __future__ import annotations

import argparse
from typing import Any

from rich.console import Console

from greenckpt.cli.args import Inputs, add_scenario_arguments, scenario_from_args
from greenckpt.cli.commands import command_help
from greenckpt.cli.console import make_console
from greenckpt.jsonout import dumps
from greenckpt.optimize import pareto_front, plan
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
        "--pareto", action="store_true", help="also print the runtime/energy Pareto front"
    )
    p.set_defaults(run=run)


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
    if ns.json:
        doc = plan_to_dict(result, profile_path=inputs.profile_path)
        if ns.pareto:
            doc["pareto_front"] = [
                {
                    "time_factor": f.time_factor,
                    "epe_W": f.epe,
                    "interval_s": f.T_A,
                    "checkpoint": {
                        "setting": f.write.setting_label,
                        "processes": f.write.processes,
                    },
                    "restart": {"setting": f.read.setting_label, "processes": f.read.processes},
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
                f"{format_duration(f.T_A)}  ckpt {f.write.setting_label}/{f.write.processes}p  "
                f"restart {f.read.setting_label}/{f.read.processes}p",
                highlight=False,
            )
    return 0
