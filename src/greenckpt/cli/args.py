"""Command-line arguments shared by ``plan`` and ``simulate``: units are parsed here, at the edge.

Every quantity flag requires a unit (``64GiB``, ``14h``, ``471.1W``); a bad value stops the
command with one line that names the flag and what would be valid.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable
from dataclasses import dataclass

from greenckpt import units
from greenckpt.model import INTERVAL_RULES, MODEL_FORMS
from greenckpt.optimize import Profile, Scenario, load_profile


def unit_type(parse: Callable[[str], float], *, allow_zero: bool = False) -> Callable[[str], float]:
    """An argparse ``type=`` that parses a quantity and reports a bad one as a usage error."""

    def convert(text: str) -> float:
        try:
            if allow_zero:
                return parse(text, allow_zero=True)  # type: ignore[call-arg]
            return parse(text)
        except units.UnitError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    convert.__name__ = parse.__name__.removeprefix("parse_")
    return convert


MAX_COUNT = 10**9


def _int_in(text: str, low: int) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer: give e.g. 4") from None
    if not low <= value <= MAX_COUNT:
        raise argparse.ArgumentTypeError(
            f"{text!r} must be an integer from {low} to {MAX_COUNT:.0e}"
        )
    return value


def positive_int(text: str) -> int:
    """An integer from 1 to 10⁹ (process, node and unit counts)."""
    return _int_in(text, 1)


def non_negative_int(text: str) -> int:
    """An integer from 0 to 10⁹ (random seeds)."""
    return _int_in(text, 0)


def positive_float(text: str) -> float:
    """A finite number > 0 without a unit (dimensionless parameters such as a Weibull shape)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number: give e.g. 0.7") from None
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(f"{text!r} must be a finite number > 0")
    return value


def add_scenario_arguments(p: argparse.ArgumentParser) -> None:
    """Flags that describe the job: profile, checkpoint size, failures, application power."""
    p.add_argument("--profile", required=True, help="profile JSON file (see docs/formats.md)")
    p.add_argument(
        "--ckpt-size",
        required=True,
        type=unit_type(units.parse_size),
        help="checkpoint size per node, e.g. 64GiB",
    )
    fail = p.add_mutually_exclusive_group(required=True)
    fail.add_argument(
        "--mtbf",
        type=unit_type(units.parse_duration),
        help="mean time between failures of ONE node, e.g. 14h (the job's rate is nodes/MTBF)",
    )
    fail.add_argument(
        "--job-mtbf",
        type=unit_type(units.parse_duration),
        help="mean time between failures of the whole job, e.g. 30min",
    )
    p.add_argument("--nodes", type=positive_int, default=1, help="nodes in the job (default 1)")
    p.add_argument(
        "--app-power",
        required=True,
        type=unit_type(units.parse_power),
        help="node power while the application computes (W_A), e.g. 471.1W",
    )
    p.add_argument(
        "--app-processes",
        type=positive_int,
        help="the application's processes per node, at which the governor baselines write "
        "and read (default: the profile's core count, else its largest process count)",
    )
    p.add_argument(
        "--form",
        choices=MODEL_FORMS,
        default="exact",
        help="per-state model: exact Markov expectations (default) or the formulas as printed "
        "in saito2013",
    )
    p.add_argument(
        "--max-slowdown",
        type=unit_type(units.parse_fraction, allow_zero=True),
        help="largest accepted expected slowdown against the fastest plan, e.g. 5%%",
    )
    p.add_argument(
        "--power-cap",
        type=unit_type(units.parse_power),
        help="do not use settings whose node power exceeds this, e.g. 400W",
    )
    p.add_argument(
        "--baseline-interval",
        choices=INTERVAL_RULES,
        default="young",
        help="interval rule the governor baselines use (default young, as in saito2013)",
    )
    p.add_argument(
        "--work",
        type=unit_type(units.parse_duration),
        help="useful compute time of the whole job, e.g. 7d, to report total runtime and energy",
    )
    p.add_argument("--json", action="store_true", help="print JSON instead of tables")


@dataclass(frozen=True)
class Inputs:
    """The parsed job description: a profile, a scenario and where the profile came from."""

    profile: Profile
    profile_path: str
    scenario: Scenario
    mtbf_text: str


def scenario_from_args(ns: argparse.Namespace) -> Inputs:
    """Load the profile and build the :class:`Scenario` from parsed flags."""
    if ns.mtbf is not None:
        rate = ns.nodes / ns.mtbf
        if not math.isfinite(rate):
            raise ValueError(f"--mtbf {ns.mtbf:g} s is too short to be a failure rate")
        mtbf_text = (
            f"{units.format_duration(1 / rate)} (job: {ns.nodes} node(s) × "
            f"{units.format_duration(ns.mtbf)})"
        )
    else:
        rate = 1.0 / ns.job_mtbf
        if not math.isfinite(rate):
            raise ValueError(f"--job-mtbf {ns.job_mtbf:g} s is too short to be a failure rate")
        mtbf_text = f"{units.format_duration(ns.job_mtbf)} (job)"
    scenario = Scenario(
        ckpt_size=ns.ckpt_size,
        rate=rate,
        app_power=ns.app_power,
        app_processes=ns.app_processes,
        form=ns.form,
        max_slowdown=ns.max_slowdown,
        power_cap=ns.power_cap,
        baseline_interval=ns.baseline_interval,
        work=ns.work,
        nodes=ns.nodes,
    )
    return Inputs(load_profile(ns.profile), ns.profile, scenario, mtbf_text)
