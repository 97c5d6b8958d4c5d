"""``greenckpt simulate``: Monte Carlo runs of the planned settings and the governor baselines,
printed next to the analytic model so the two can be compared state by state.
"""

from __future__ import annotations

import argparse
import math
from typing import Any

from rich.table import Table

from greenckpt import units
from greenckpt.cli.args import add_scenario_arguments, positive_float, scenario_from_args
from greenckpt.cli.argtypes import non_negative_int, positive_int, unit_type
from greenckpt.cli.commands import command_help
from greenckpt.cli.console import make_console
from greenckpt.cli.plan_cmd import header
from greenckpt.errors import InvalidValueError
from greenckpt.files import read_regular
from greenckpt.jsonout import dumps
from greenckpt.model import epe, sojourn_times
from greenckpt.optimize import Choice, plan
from greenckpt.report.plan_report import power_source
from greenckpt.sim import (
    Estimate,
    Exponential,
    FailureProcess,
    SimResult,
    Trace,
    Weibull,
    simulate_basic_unit,
)


def register(sub: Any) -> None:
    """Add the ``simulate`` sub-command."""
    p = sub.add_parser(
        "simulate",
        help=command_help("simulate"),
        description="Plan as `greenckpt plan` does, then simulate the chosen settings and each "
        "evaluable governor baseline with random (or replayed) failures, and print the model's "
        "expectations next to the simulated ones with confidence intervals.",
    )
    add_scenario_arguments(p)
    p.add_argument(
        "--units",
        type=positive_int,
        default=1_000_000,
        help="basic units to simulate per configuration (default 1000000)",
    )
    p.add_argument(
        "--seed", type=non_negative_int, default=1, help="random seed (default 1; runs repeat)"
    )
    p.add_argument(
        "--failures",
        choices=("exponential", "weibull"),
        default="exponential",
        help="inter-failure distribution with the given MTBF (default exponential, as the model)",
    )
    p.add_argument(
        "--weibull-shape",
        type=positive_float,
        default=0.7,
        help="Weibull shape k (default 0.7; k < 1: failures cluster; k = 1: exponential)",
    )
    p.add_argument(
        "--trace",
        help="replay failure times from FILE: one time per line, seconds since job start "
        "(overrides --failures; the MTBF flags still set the model's rate)",
    )
    p.add_argument(
        "--confidence",
        type=unit_type(units.parse_fraction),
        default=0.95,
        help="confidence level of the intervals (default 95%%)",
    )
    p.set_defaults(run=run)


def _read_trace(path: str) -> Trace:
    try:
        text = read_regular(path).decode("utf-8")
    except OSError as exc:  # a FIFO or a directory too: never wait on one
        raise InvalidValueError(f"cannot read trace file {path!r}: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise InvalidValueError(f"trace file {path!r} is not UTF-8 text") from None
    return Trace.from_text(text, path)


def _process(ns: argparse.Namespace, rate: float) -> tuple[FailureProcess, str]:
    if ns.trace:
        return _read_trace(ns.trace), f"replayed trace {ns.trace}"
    if ns.failures == "weibull":
        return Weibull(ns.weibull_shape, 1.0 / rate), f"Weibull (shape {ns.weibull_shape:g})"
    return Exponential(rate), "exponential"


def _simulate(
    c: Choice, app_power: float, process: FailureProcess, ns: argparse.Namespace
) -> SimResult:
    return simulate_basic_unit(
        c.T_A,
        c.T_C,
        c.T_R,
        process,
        W_A=app_power,
        W_C=c.W_C,
        W_R=c.W_R,
        units=ns.units,
        seed=ns.seed,
        confidence=ns.confidence,
    )


def _rows(
    c: Choice, sim: SimResult, rate: float, app_power: float
) -> list[tuple[str, float, float, Estimate]]:
    """(quantity, exact model, paper's printed model, simulated) for one configuration.

    Both model columns are computed here, whatever ``--form`` the planner used, so the exact
    column is always the one the simulation is compared with.
    """
    args = (c.T_A, c.T_C, c.T_R, rate)
    powers = (app_power, c.W_C, c.W_R)
    exact = sojourn_times(*args, form="exact")
    paper = sojourn_times(*args, form="saito2013")
    return [
        ("compute s/unit", float(exact.A), float(paper.A), sim.A),
        ("checkpoint s/unit", float(exact.C), float(paper.C), sim.C),
        ("restart s/unit", float(exact.R), float(paper.R), sim.R),
        ("total s/unit", float(exact.total), float(paper.total), sim.total),
        (
            "EPE W",
            float(epe(*args, *powers)),
            float(epe(*args, *powers, form="saito2013")),
            sim.epe,
        ),
    ]


def _z(est: Estimate, model: float) -> float:
    """Distance of the simulated mean from the model in standard errors (NaN when the
    simulation gave no usable spread: no sample, or a state no failure reached)."""
    if not (math.isfinite(est.stderr) and est.stderr > 0):
        return math.nan
    return (est.mean - model) / est.stderr


def run(ns: argparse.Namespace) -> int:
    """Execute ``greenckpt simulate``."""
    if not 0 < ns.confidence < 1:
        raise InvalidValueError(
            f"--confidence must be between 0% and 100% (exclusive), got {ns.confidence:.4g}"
        )
    inputs = scenario_from_args(ns)
    scn = inputs.scenario
    result = plan(inputs.profile, scn)
    process, process_text = _process(ns, scn.rate)
    configs = [("plan", result.best)] + [
        (b.name, b.choice) for b in result.baselines if b.choice is not None
    ]
    sims = [(name, c, _simulate(c, scn.app_power, process, ns)) for name, c in configs]
    src = power_source(result, [p for _, c, _ in sims for p in (c.write, c.read)])
    model_note = (
        "the model assumes exponential failures; other processes are expected to differ"
        if process_text != "exponential"
        else "model and simulation share the failure law: z = (simulated − model)/stderr is "
        "a standard normal draw, |z| > 2 in about 1 row in 20 by chance (rows of one "
        "configuration share their failures and move together)"
    )
    if ns.json:
        doc: dict[str, Any] = {
            "failures": process_text,
            "seed": ns.seed,
            "confidence": ns.confidence,
            "power_source": src,
            "energy_figures": f"modelled from {src} profile power (simulated times × powers)",
            "note": model_note,
            "configurations": [],
        }
        for name, c, sim in sims:
            entry: dict[str, Any] = {"name": name, "units": sim.units, "failures": sim.failures}
            for label, exact, paper, est in _rows(c, sim, scn.rate, scn.app_power):
                entry[label] = {
                    "model_exact": exact,
                    "model_saito2013": paper,
                    "simulated": est.mean,
                    "ci": [est.ci_low, est.ci_high],
                    "in_ci": est.contains(exact),
                    "z": _z(est, exact),
                }
            doc["configurations"].append(entry)
        print(dumps(doc))
        return 0
    console = make_console()
    header(inputs, console)
    console.print(
        f"failures: {process_text}; seed {ns.seed}; {ns.confidence:.1%} intervals; {model_note}. "
        f"Energy figures are modelled from {src} power.",
        highlight=False,
    )
    for name, c, sim in sims:
        table = Table(
            title=f"{name}: ckpt {c.write.setting_label}/{c.write.processes}p, restart "
            f"{c.read.setting_label}/{c.read.processes}p, interval "
            f"{units.format_duration(c.T_A)} — {sim.units:,} units, {sim.failures:,} failures",
            title_justify="left",
        )
        for col in (
            "quantity",
            "model (exact)",
            "model (saito2013)",
            "simulated",
            "interval",
            "z",
        ):
            table.add_column(col, justify="left" if col == "quantity" else "right")
        for label, exact, paper, est in _rows(c, sim, scn.rate, scn.app_power):
            table.add_row(
                label,
                f"{exact:.6g}",
                f"{paper:.6g}",
                f"{est.mean:.6g}",
                f"[{est.ci_low:.6g}, {est.ci_high:.6g}]",
                "—" if math.isnan(_z(est, exact)) else f"{_z(est, exact):+.2f}",
            )
        console.print(table)
    return 0
