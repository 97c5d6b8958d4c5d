"""Command-line arguments shared by several commands: units are parsed here, at the edge.

Every quantity flag requires a unit (``64GiB``, ``14h``, ``471.1W``); a bad value stops the
command with one line that names the flag and what would be valid. Shared here: the job
description of ``plan`` and ``simulate`` (:func:`add_scenario_arguments`), the meter flags of
every command that opens meters (:func:`add_meter_arguments`, :func:`open_meters`), and
hidden aliases (:func:`add_hidden_alias`) that keep an old spelling of a flag working when
one idea got one spelling across commands.
"""

from __future__ import annotations

import argparse
import math
import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from greenckpt import units
from greenckpt.cli.argtypes import add_hidden_alias, positive_int, unit_type
from greenckpt.errors import InvalidValueError
from greenckpt.model import INTERVAL_RULES, MODEL_FORMS
from greenckpt.optimize import Profile, Scenario, load_profile
from greenckpt.platform.meters import MeterOptions, Selection, select_meters
from greenckpt.platform.meters.base import MeterOption
from greenckpt.platform.meters.detect import check_names, declared_options
from greenckpt.platform.sampler import DEFAULT_RATE_HZ, MAX_RATE_HZ


def positive_float(text: str) -> float:
    """A finite number > 0 without a unit (dimensionless parameters such as a Weibull shape)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number: give e.g. 0.7") from None
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(f"{text!r} must be a finite number > 0")
    return value


def sampling_rate(text: str) -> float:
    """Samples per second: a frequency with a unit (``10Hz``) or a bare number of Hz."""
    try:
        value = float(text)
    except ValueError:
        try:
            value = units.parse_frequency(text)
        except units.UnitError as exc:
            raise argparse.ArgumentTypeError(f"{exc} (or a bare number of Hz)") from None
    if not (math.isfinite(value) and 0 < value <= MAX_RATE_HZ):
        raise argparse.ArgumentTypeError(
            f"{text!r} must be a sampling rate in (0, {MAX_RATE_HZ:g}] Hz"
        )
    return value


class _SizeWithEcho(argparse.Action):
    """Store a size in bytes in ``dest`` and, in ``dest_echo``, the size written in the
    family of units the user used (``64GB`` is echoed ``64 GB``, never ``59.6 GiB``)."""

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: str | Sequence[Any] | None,
        option_string: str | None = None,
    ) -> None:
        text = str(values)
        try:
            value = units.parse_size(text)
        except units.UnitError as exc:
            raise argparse.ArgumentError(self, str(exc)) from None
        setattr(namespace, self.dest, value)
        setattr(
            namespace,
            f"{self.dest}_echo",
            units.format_size(value, decimal=units.size_is_decimal(text)),
        )


def add_meter_arguments(
    p: argparse.ArgumentParser | argparse._ArgumentGroup,
    *,
    select: bool = True,
    rate: bool = True,
) -> None:
    """The flags of every command that opens meters: which meters, the external meter's log,
    the estimator's TDP and (``rate``) the sampling rate.

    Why shared: the meters' options (:class:`~greenckpt.platform.meters.MeterOptions`) are
    the same wherever meters are opened; a flag that exists in one command and not another
    left ``--meters csv`` asking for a log no flag could give. ``select=False`` (``probe``,
    which shows every meter) leaves out ``--meters``.
    """
    if select:
        p.add_argument(
            "--meters",
            default="auto",
            metavar="NAME,...",
            help="meters to use, e.g. rapl,ipmi or csv (default auto: the best available)",
        )
    for _, option in declared_options():  # each meter's flags (--meter-csv, --tdp, ...)
        if option.flag is not None:
            typed: dict[str, Any] = {} if option.parse is None else {"type": _flag_type(option)}
            p.add_argument(
                option.flag, dest=_dest(option), metavar=option.metavar, help=option.help, **typed
            )
    if rate:
        main = p.add_argument(
            "--rate",
            type=sampling_rate,
            default=DEFAULT_RATE_HZ,
            metavar="RATE",
            help=f"meter samples per second, e.g. 10Hz (default {DEFAULT_RATE_HZ:g}Hz)",
        )
        add_hidden_alias(p, main, "--rate-hz")


def _dest(option: MeterOption) -> str:
    """The namespace attribute of a meter's flag (``--meter-csv``: ``meter_csv``)."""
    assert option.flag is not None
    return option.flag.lstrip("-").replace("-", "_")


def _flag_type(option: MeterOption) -> Any:
    """An argparse ``type=`` for a meter's flag: its parser, a bad value a usage error."""
    parse = option.parse
    assert parse is not None

    def convert(text: str) -> object:
        try:
            return parse(text)
        except (units.UnitError, ValueError) as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    return convert


def meter_options(ns: argparse.Namespace) -> MeterOptions:
    """The :class:`MeterOptions` the meter flags ask for (each meter's declared options)."""
    values: dict[str, object] = {}
    for _, option in declared_options():
        value = None if option.flag is None else getattr(ns, _dest(option), None)
        if value is not None:
            values[option.name] = os.path.abspath(str(value)) if option.path else value
    return MeterOptions.from_values(values)


def meter_names(ns: argparse.Namespace) -> list[str]:
    """The meters to open, checked against the other meter flags before anything opens.

    A given ``--meter-csv`` makes the csv meter one that must open (an unreadable log stops
    the command instead of being listed as unavailable and ignored); a flag no selected meter
    reads is refused rather than silently dropped.
    """
    names = check_names([n for n in str(getattr(ns, "meters", "auto")).split(",") if n.strip()])
    names = names or ["auto"]
    csv = getattr(ns, "meter_csv", None)
    if "csv" in names and csv is None:
        raise InvalidValueError(
            "--meters csv reads an external meter's log: give it with --meter-csv FILE "
            "(a timestamp,watts CSV, see docs/formats.md)"
        )
    if csv is not None:
        if "csv" not in names and "auto" not in names:
            raise InvalidValueError(
                f"--meter-csv is read only by the csv meter: add csv to --meters "
                f"(e.g. --meters {','.join([*names, 'csv'])})"
            )
        if not os.path.isfile(csv):
            raise InvalidValueError(
                f"--meter-csv {csv!r} is not an existing file: give the meter's log"
            )
        if "csv" not in names:
            names.append("csv")
    if getattr(ns, "tdp", None) is not None and not {"estimator", "auto"} & set(names):
        raise InvalidValueError(
            "--tdp sets the utilisation estimator's TDP, but --meters leaves the estimator "
            "out: add estimator (or auto) to --meters, or drop --tdp"
        )
    for meter, option in declared_options():
        given = option.flag is not None and getattr(ns, _dest(option), None) is not None
        if given and not {meter, "auto"} & set(names):
            raise InvalidValueError(
                f"{option.flag} is read only by the {meter} meter: add {meter} (or auto) to "
                f"--meters, or drop {option.flag}"
            )
    return names


def open_meters(ns: argparse.Namespace) -> Selection:
    """Open the meters the flags ask for (use as a context manager; the caller closes them)."""
    return select_meters(meter_names(ns), options=meter_options(ns))


MTBF_TOLERANCE = 0.01
"""How far (relative) a stated job MTBF may be from node MTBF / nodes and still agree: the
two are usually rounded when written (``14h`` over 3 nodes is ``4h40min``)."""


def add_failure_arguments(p: argparse.ArgumentParser, *, nodes_help: str) -> None:
    """``--node-mtbf`` (alias ``--mtbf``), ``--job-mtbf`` and ``--nodes``: the failure rate of
    every command that takes one, with one meaning everywhere (:func:`stated_failure_rate`).

    Why one place: ``--mtbf`` once meant one node's MTBF in ``plan`` and the job's in ``run``.
    Both flags may be given; they must then agree (:func:`check_mtbf_agreement`), never one
    silently dropped.
    """
    p.add_argument(
        "--node-mtbf",
        "--mtbf",
        dest="mtbf",
        type=unit_type(units.parse_duration),
        default=None,
        metavar="DURATION",
        help="mean time between failures of ONE node, e.g. 14h: the job fails at "
        "nodes/MTBF (--mtbf is an alias of --node-mtbf)",
    )
    p.add_argument(
        "--job-mtbf",
        type=unit_type(units.parse_duration),
        default=None,
        metavar="DURATION",
        help="mean time between failures of the whole job, e.g. 30min (its nodes included); "
        "given with --node-mtbf it must equal node MTBF / nodes (within 1%%)",
    )
    p.add_argument("--nodes", type=positive_int, default=None, help=nodes_help)


def check_mtbf_agreement(ns: argparse.Namespace) -> None:
    """Both ``--node-mtbf`` and ``--job-mtbf`` given: they must agree (job = node / nodes,
    within :data:`MTBF_TOLERANCE`), or one line names both values and what they imply."""
    if ns.mtbf is None or ns.job_mtbf is None:
        return
    nodes = 1 if ns.nodes is None else ns.nodes
    implied = ns.mtbf / nodes
    if abs(implied - ns.job_mtbf) <= MTBF_TOLERANCE * ns.job_mtbf:
        return
    node, job = units.format_duration(ns.mtbf), units.format_duration(ns.job_mtbf)
    raise InvalidValueError(
        f"--node-mtbf {node} and --job-mtbf {job} disagree: {nodes} node(s) failing every "
        f"{node} make a job MTBF of {units.format_duration(implied)}, and a job MTBF of {job} "
        f"means {ns.mtbf / ns.job_mtbf:.3g} node(s) of that MTBF; give one of the two, or "
        "values that agree (job = node / nodes, within 1%) with --nodes"
    )


def add_scenario_arguments(p: argparse.ArgumentParser) -> None:
    """Flags that describe the job: profile, checkpoint size, failures, application power."""
    p.add_argument("--profile", required=True, help="profile JSON file (see docs/formats.md)")
    p.add_argument(
        "--ckpt-size",
        required=True,
        action=_SizeWithEcho,
        help="checkpoint size per node, e.g. 64GiB or 64GB",
    )
    add_failure_arguments(
        p,
        nodes_help="nodes in the job (default 1): with --node-mtbf the job fails at "
        "nodes/MTBF; with --job-mtbf alone it scales the job's total energy (needs --work)",
    )
    p.add_argument(
        "--app-power",
        required=True,
        type=unit_type(units.parse_power),
        help="node power while the application computes (W_A), e.g. 471.1W",
    )
    p.add_argument(
        "--app-processes",
        type=positive_int,
        help="the application's processes per node (R): a plan with n I/O processes has R - n "
        "ranks waiting (see --waiting), and the governor baselines write and read with all R "
        "(default: the profile's core count, else its largest process count)",
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
    ckpt_size_text: str = ""
    """The checkpoint size as echoed to the user, in the units they wrote it in."""


def stated_failure_rate(ns: argparse.Namespace) -> tuple[float, int]:
    """The job's failure rate (1/s) and its nodes from ``--node-mtbf`` × ``--nodes`` (one
    node's MTBF: the job fails ``nodes`` times as often) or ``--job-mtbf`` (the whole job's);
    both given, they must agree and the job's is used. One of them is given. The one
    computation of ``greenckpt plan``/``simulate`` and ``run``; what ``--nodes`` may mean
    beside ``--job-mtbf`` alone is each command's to check."""
    check_mtbf_agreement(ns)
    nodes = 1 if ns.nodes is None else ns.nodes
    if ns.job_mtbf is not None:
        rate, flag = 1.0 / ns.job_mtbf, f"--job-mtbf {ns.job_mtbf:g} s"
    elif ns.mtbf is not None:
        rate, flag = nodes / ns.mtbf, f"--node-mtbf {ns.mtbf:g} s"
    else:
        raise InvalidValueError(
            "give the failure rate: --node-mtbf DURATION (one node's MTBF, e.g. 14h, with "
            "--nodes N) or --job-mtbf DURATION (the whole job's, e.g. 30min)"
        )
    if not math.isfinite(rate):
        raise InvalidValueError(f"{flag} is too short to be a failure rate")
    return rate, nodes


def scenario_from_args(ns: argparse.Namespace) -> Inputs:
    """Load the profile and build the :class:`Scenario` from parsed flags.

    ``--node-mtbf`` is the MTBF of one node and the job fails at ``nodes/MTBF``; ``--job-mtbf``
    is the whole job's (both: they must agree). With ``--job-mtbf`` alone, ``--nodes`` cannot
    change the failure rate, so it is honoured only where it means something — the job's total
    energy, which needs ``--work`` — and said so in the echo; without ``--work`` it would be
    dropped silently, so it is refused.
    """
    rate, nodes = stated_failure_rate(ns)
    per_node = f"{nodes} node(s) × {units.format_duration(ns.mtbf or 0.0)} per node"
    if ns.job_mtbf is None:
        mtbf_text = f"{units.format_duration(1 / rate)} (job: {per_node})"
    elif ns.mtbf is not None:
        mtbf_text = (
            f"{units.format_duration(ns.job_mtbf)} (whole job, --job-mtbf; agrees with {per_node})"
        )
    else:
        mtbf_text = f"{units.format_duration(ns.job_mtbf)} (whole job, --job-mtbf)"
        if ns.nodes is not None:
            if ns.work is None:
                raise InvalidValueError(
                    f"--nodes {ns.nodes} with --job-mtbf: the job's MTBF already counts its "
                    "nodes, so --nodes would only scale the job's total energy, which needs "
                    "--work; give --work, or give the MTBF of one node with --node-mtbf and "
                    "--nodes"
                )
            mtbf_text = (
                f"{units.format_duration(ns.job_mtbf)} (whole job of {nodes} node(s), "
                "--job-mtbf; --nodes scales the job's energy only)"
            )
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
        nodes=nodes,
        wait_mode=getattr(ns, "waiting", "polite"),  # greenckpt plan --waiting
    )
    echo = getattr(ns, "ckpt_size_echo", None) or units.format_size(ns.ckpt_size)
    return Inputs(load_profile(ns.profile), ns.profile, scenario, mtbf_text, echo)
