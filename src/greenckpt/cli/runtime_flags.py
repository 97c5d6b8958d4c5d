"""The runtime flags of ``greenckpt run`` and ``greenckpt agent``, and the typed options they
give (:class:`~greenckpt.runtime.node_options.NodeOptions`).

Why a module of their own: both commands take the same flags with one meaning (the profile,
the policy, the scenario the profile policy needs, control and meters), and both turn them into
the same typed options — the job's leader hands its agents those options, not its flags.
"""

from __future__ import annotations

import argparse
import math
from dataclasses import dataclass
from typing import Any

from greenckpt.cli.args import (
    add_failure_arguments,
    add_meter_arguments,
    meter_names,
    stated_failure_rate,
)
from greenckpt.cli.argtypes import positive_int, unit_type
from greenckpt.errors import InvalidValueError
from greenckpt.runtime.fixed_policy import FixedSettings
from greenckpt.runtime.node_options import NodeOptions
from greenckpt.runtime.policy import POLICY_NAMES
from greenckpt.units import UnitError, format_duration, parse_frequency, parse_power

__all__ = ["FailureRate", "add_runtime_arguments", "failure_rate", "node_options"]


def add_runtime_arguments(p: argparse.ArgumentParser) -> None:
    """Options of ``run``: profile, policy and the scenario the profile policy needs."""
    p.add_argument(
        "--profile",
        action="append",
        default=None,
        metavar="FILE",
        help="I/O profile (greenckpt profile run); repeatable, one per storage target (e.g. "
        "node-local and global): each phase is decided from the profile of the storage its "
        "path is on",
    )
    p.add_argument(
        "--policy",
        default="profile",
        choices=POLICY_NAMES,
        help="decision policy: the profile lookup (default), a governor baseline, defaults, "
        "or fixed (the settings given by --io-processes, --frequency, --cstates and the "
        "lever flags below)",
    )
    p.add_argument(
        "--io-processes",
        type=positive_int,
        default=None,
        help="with --policy fixed: I/O processes for every phase",
    )
    p.add_argument(
        "--frequency",
        type=unit_type(parse_frequency),
        default=None,
        help="with --policy fixed: CPU frequency for every phase, e.g. 1.4GHz",
    )
    p.add_argument(
        "--cstates",
        choices=("on", "off"),
        default=None,
        help="with --policy fixed: C-states enabled or disabled during every phase",
    )
    p.add_argument(
        "--waiting-frequency",
        type=unit_type(parse_frequency),
        default=None,
        metavar="HZ",
        help="with --policy fixed and --frequency: the per-core split, the waiting ranks' "
        "cores at this frequency (the I/O processes' cores at --frequency), e.g. 1.2GHz",
    )
    p.add_argument(
        "--uncore",
        type=uncore_khz_arg,
        default=None,
        metavar="KHZ",
        help="with --policy fixed: uncore frequency of every package during every phase, in "
        "kHz (1800000) or with a unit (1.8GHz)",
    )
    p.add_argument(
        "--power-limit",
        type=watts_arg,
        default=None,
        metavar="W",
        help="with --policy fixed: package long-term RAPL power limit during every phase, "
        "e.g. 120 or 120W",
    )
    p.add_argument(
        "--gpu-clocks",
        type=gpu_clocks_arg,
        default=None,
        metavar="MEM:GR",
        help="with --policy fixed: GPU application clocks (memory:graphics, MHz) during "
        "every phase, e.g. 877:1380",
    )
    p.add_argument(
        "--gpu-power-limit",
        type=watts_arg,
        default=None,
        metavar="W",
        help="with --policy fixed: GPU power limit during every phase, e.g. 200W",
    )
    add_failure_arguments(
        p,
        nodes_help="nodes in the job, with --node-mtbf (default 1); with both --node-mtbf and "
        "--job-mtbf, the nodes they must agree for",
    )
    p.add_argument(
        "--app-power",
        type=unit_type(parse_power),
        default=None,
        help="the application's node power while computing, e.g. 200W (profile policy)",
    )
    p.add_argument(
        "--app-processes",
        type=positive_int,
        default=None,
        help="the application's ranks per node: those not doing a phase's I/O wait through "
        "it (their power is added to the phase, profile policy), and the governor baselines "
        "write and read with all of them (default: the profile's core count, else its "
        "largest process count)",
    )
    p.add_argument(
        "--no-control",
        action="store_true",
        help="decide and account, but never change the node's frequency or C-states",
    )
    p.add_argument(
        "--require-control",
        action="store_true",
        help="refuse to run when another greenckpt session controls the node (by default "
        "the run goes on with control off and says which session has the node)",
    )
    add_meter_arguments(p)  # --meters, --meter-csv, --tdp, --rate (alias --rate-hz)


@dataclass(frozen=True)
class FailureRate:
    """The job's failure rate and how it was stated (``--node-mtbf`` × ``--nodes`` or
    ``--job-mtbf``, or both, agreeing)."""

    rate: float
    nodes: int | None
    node_mtbf: float | None
    text: str

    @property
    def job_mtbf(self) -> float:
        return 1.0 / self.rate

    def to_dict(self) -> dict[str, Any]:
        return {
            "rate_per_s": self.rate,
            "job_mtbf_s": self.job_mtbf,
            "node_mtbf_s": self.node_mtbf,
            "nodes": self.nodes,
            "source": "stated",
            "text": self.text,
        }


def failure_rate(ns: argparse.Namespace) -> FailureRate | None:
    """The job's failure rate from ``--node-mtbf``/``--nodes`` or ``--job-mtbf`` (None: not
    given).

    ``--node-mtbf`` (alias ``--mtbf``) is one node's MTBF and the job fails ``nodes`` times as
    often; ``--job-mtbf`` is already the whole job's, so ``--nodes`` with it alone is refused
    rather than silently ignored. Both given: they must agree (node MTBF / nodes = job MTBF).
    """
    nodes: int | None = ns.nodes
    if ns.job_mtbf is not None and ns.mtbf is None and nodes is not None:
        raise InvalidValueError(
            f"--nodes {nodes} has no effect with --job-mtbf, which is already the whole "
            "job's MTBF: give --node-mtbf (the MTBF of one node) with --nodes, or --job-mtbf "
            "alone"
        )
    if ns.job_mtbf is None and ns.mtbf is None:
        if nodes is not None:
            raise InvalidValueError(
                f"--nodes {nodes} needs --mtbf/--node-mtbf (the MTBF of one node): the job's "
                "failure rate is nodes/MTBF"
            )
        return None
    rate, n = stated_failure_rate(ns)
    if rate <= 0:
        raise InvalidValueError(
            "the MTBF is too short or too long to be a failure rate: give e.g. 14h"
        )
    if ns.job_mtbf is not None and ns.mtbf is None:
        return FailureRate(rate, None, None, f"job MTBF {format_duration(ns.job_mtbf)} (stated)")
    per_node = f"{n} node(s) × MTBF {format_duration(ns.mtbf)} per node"
    if ns.job_mtbf is not None:
        text = f"job MTBF {format_duration(ns.job_mtbf)} (stated; agrees with {per_node})"
    else:
        text = f"job MTBF {format_duration(1.0 / rate)} ({per_node}, stated)"
    return FailureRate(rate, n, ns.mtbf, text)


def _bare(text: str) -> float | None:
    try:
        value = float(text)
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def uncore_khz_arg(text: str) -> int:
    """``--uncore``: kHz as sysfs has them (``1800000``) or a frequency with a unit."""
    bare = _bare(text.strip())
    try:
        khz = bare if bare is not None else parse_frequency(text) / 1000.0
    except UnitError as exc:
        raise argparse.ArgumentTypeError(f"{exc} (give kHz, e.g. 1800000, or 1.8GHz)") from None
    if khz <= 0 or khz != math.floor(khz):
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a whole, positive number of kHz (e.g. 1800000 or 1.8GHz)"
        )
    return int(khz)


def watts_arg(text: str) -> float:
    """``--power-limit``, ``--gpu-power-limit``: watts, bare (``120``) or with a unit."""
    bare = _bare(text.strip())
    try:
        watts = bare if bare is not None else parse_power(text)
    except UnitError as exc:
        raise argparse.ArgumentTypeError(f"{exc} (give watts, e.g. 120 or 120W)") from None
    if watts <= 0:
        raise argparse.ArgumentTypeError(f"{text!r}: a power limit must be above 0 W")
    return watts


def gpu_clocks_arg(text: str) -> tuple[int, int]:
    """``--gpu-clocks MEM:GR``: memory and graphics application clocks in whole MHz."""
    parts = [part.strip().removesuffix("MHz").strip() for part in text.split(":")]
    if len(parts) != 2 or not all(part.isdigit() and int(part) > 0 for part in parts):
        raise argparse.ArgumentTypeError(
            f"{text!r} is not MEM:GR, a memory and a graphics clock in whole MHz above 0 "
            "(e.g. 877:1380)"
        )
    return int(parts[0]), int(parts[1])


def fixed_settings(ns: argparse.Namespace) -> FixedSettings:
    """What ``--policy fixed`` applies, from ``--io-processes``, ``--frequency``, ``--cstates``
    and the lever flags (``--waiting-frequency``, ``--uncore``, ``--power-limit``,
    ``--gpu-clocks``, ``--gpu-power-limit``)."""
    clocks = getattr(ns, "gpu_clocks", None)
    waiting = getattr(ns, "waiting_frequency", None)
    return FixedSettings(
        io_processes=ns.io_processes,
        frequency_hz=None if ns.frequency is None else round(ns.frequency),
        cstates=None if ns.cstates is None else ns.cstates == "on",
        waiting_frequency_hz=None if waiting is None else round(waiting),
        uncore_khz=getattr(ns, "uncore", None),
        power_limit_w=getattr(ns, "power_limit", None),
        gpu_memory_mhz=None if clocks is None else clocks[0],
        gpu_clock_mhz=None if clocks is None else clocks[1],
        gpu_power_limit_w=getattr(ns, "gpu_power_limit", None),
    )


def node_options(ns: argparse.Namespace) -> NodeOptions:
    """The runtime flags of ``run`` as a node's typed options (what every node's agent
    builds its runtime from: :func:`~greenckpt.runtime.node_options.build_runtime`)."""
    rate = failure_rate(ns)
    fixed = fixed_settings(ns)
    return NodeOptions(
        policy=ns.policy,
        profiles=tuple(ns.profile or ()),
        io_processes=fixed.io_processes,
        frequency_hz=fixed.frequency_hz,
        cstates=fixed.cstates,
        waiting_frequency_hz=fixed.waiting_frequency_hz,
        uncore_khz=fixed.uncore_khz,
        power_limit_w=fixed.power_limit_w,
        gpu_memory_mhz=fixed.gpu_memory_mhz,
        gpu_clock_mhz=fixed.gpu_clock_mhz,
        gpu_power_limit_w=fixed.gpu_power_limit_w,
        app_power_w=ns.app_power,
        app_processes=ns.app_processes,
        rate_per_s=None if rate is None else rate.rate,
        control=not ns.no_control,
        require_control=ns.require_control,
        meters=tuple(meter_names(ns)),
        meter_csv=ns.meter_csv,
        tdp_w=ns.tdp,
        sample_rate_hz=ns.rate,
    )
