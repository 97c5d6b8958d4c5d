"""Render a :class:`~greenckpt.optimize.Plan` as rich tables or as a JSON-ready dict.

Every power and energy figure is labelled with where its power came from: ``measured`` (a
meter), ``estimated`` (a power model) or ``synthetic`` (an example profile). EPE and energies
are always *modelled* (expectations over failures) from those powers and the given
application power, and say so.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from rich import box
from rich.table import Table

from greenckpt.model import daly_interval, time_optimal_interval, young_interval
from greenckpt.optimize import Baseline, Choice, Plan, ProfilePoint
from greenckpt.optimize.profile import point_to_json
from greenckpt.units import (
    format_duration,
    format_energy,
    format_percent,
    format_power,
    format_size,
)


def power_source(plan: Plan, points: Iterable[ProfilePoint] | None = None) -> str:
    """Provenance of the powers behind a figure: ``synthetic`` for a synthetic profile, else
    the sources of ``points`` (default: the chosen checkpoint and restart points), e.g.
    ``measured`` or ``estimated+measured``."""
    if plan.synthetic:
        return "synthetic"
    pts = (plan.best.write, plan.best.read) if points is None else points
    return "+".join(sorted({p.power_source for p in pts}))


def _baseline_points(plan: Plan) -> list[ProfilePoint]:
    return [p for b in plan.baselines if b.choice for p in (b.choice.write, b.choice.read)]


def _point_dict(p: ProfilePoint) -> dict[str, Any]:
    return {**point_to_json(p), "energy_per_GB_J": p.energy_per_byte * 1e9}


def choice_dict(c: Choice) -> dict[str, Any]:
    """JSON-ready dict of a choice (SI units, names with unit suffixes)."""
    return {
        "checkpoint": _point_dict(c.write),
        "restart": _point_dict(c.read),
        "interval_s": c.T_A,
        "T_C_s": c.T_C,
        "T_R_s": c.T_R,
        "expected_time_per_unit_s": {
            "compute": float(c.times.A),
            "checkpoint": float(c.times.C),
            "restart": float(c.times.R),
            "total": float(c.times.total),
        },
        "epe_W": c.epe,
        "time_factor": c.time_factor,
        "overhead": c.overhead,
    }


def plan_to_dict(plan: Plan, *, profile_path: str | None = None) -> dict[str, Any]:
    """The whole plan as a JSON-ready dict."""
    scn = plan.scenario
    source = power_source(plan)
    out: dict[str, Any] = {
        "profile": profile_path,
        "profile_synthetic": plan.synthetic,
        "power_source": source,
        "energy_figures": f"modelled expectations from {source} profile power and the given W_A",
        "inputs": {
            "ckpt_size_B": scn.ckpt_size,
            "failure_rate_per_s": scn.rate,
            "mtbf_s": 1.0 / scn.rate,
            "nodes": scn.nodes,
            "app_power_W": scn.app_power,
            "app_processes": plan.app_processes,
            "form": scn.form,
            "max_slowdown": scn.max_slowdown,
            "power_cap_W": scn.power_cap,
            "baseline_interval": scn.baseline_interval,
            "work_s": scn.work,
        },
        "plan": choice_dict(plan.best),
        "fastest_time_factor": plan.fastest_time_factor,
        "reference_intervals_s": _reference_intervals(plan),
        "baselines": [],
    }
    if scn.work is not None:
        out["plan"]["expected_runtime_s"] = scn.work * plan.best.time_factor
        out["plan"]["expected_energy_J_per_node"] = scn.work * plan.best.epe
        out["plan"]["expected_energy_J_job"] = scn.work * plan.best.epe * scn.nodes
    for b in plan.baselines:
        entry: dict[str, Any] = {"name": b.name, "how": b.how, "evaluable": b.choice is not None}
        if b.choice is not None:
            entry.update(choice_dict(b.choice))
            entry["power_source"] = power_source(plan, (b.choice.write, b.choice.read))
            s = plan.savings(b)
            assert s is not None
            entry["savings"] = {
                "epe": s.epe,
                "write_energy_per_GB": s.write_energy_per_gb,
                "read_energy_per_GB": s.read_energy_per_gb,
                "time_factor": s.time_factor,
            }
        out["baselines"].append(entry)
    return out


def _reference_intervals(plan: Plan) -> dict[str, float]:
    c = plan.best
    rate = plan.scenario.rate
    return {
        "chosen": c.T_A,
        "young": float(young_interval(c.T_C, rate)),
        "daly": float(daly_interval(c.T_C, rate)),
        "time_optimal": float(time_optimal_interval(c.T_C, rate)),
    }


def _setting(p: ProfilePoint) -> str:
    codec = f", {p.codec}" if p.codec else ""
    cst = "" if p.cstates is None else (", C-states on" if p.cstates else ", C-states off")
    return f"{p.setting_label}{codec}{cst}"


def plan_tables(plan: Plan, *, size_text: str | None = None) -> list[Table]:
    """Tables for the terminal: chosen settings, expectations, baselines and savings.

    ``size_text``: the checkpoint size as the user wrote it (``64 GB``), so the table echoes
    their units; default: binary units.
    """
    src = power_source(plan)
    c = plan.best
    size = plan.scenario.ckpt_size
    chosen = Table(
        title=f"Chosen settings for {size_text or format_size(size)} per node ({src} power)",
        title_justify="left",
    )
    for col in ("phase", "CPU", "I/O procs", "time", "power", "energy/GB"):
        chosen.add_column(col)
    for phase, p, t in (("checkpoint", c.write, c.T_C), ("restart", c.read, c.T_R)):
        chosen.add_row(
            phase,
            _setting(p),
            str(p.processes),
            format_duration(t),
            format_power(p.power),
            format_energy(p.energy_per_byte * 1e9),
        )
    refs = _reference_intervals(plan)
    exp = Table(
        title=f"Expectations per basic unit (model: {plan.scenario.form})", title_justify="left"
    )
    exp.add_column("quantity")
    exp.add_column("value")
    exp.add_row("interval T_A (EPE-optimal)", format_duration(c.T_A))
    exp.add_row(
        "  for reference",
        f"time-optimal {format_duration(refs['time_optimal'])}, Young "
        f"{format_duration(refs['young'])}, Daly {format_duration(refs['daly'])}",
    )
    exp.add_row(
        "time computing / checkpointing / restarting",
        " / ".join(format_duration(float(x)) for x in (c.times.A, c.times.C, c.times.R)),
    )
    exp.add_row("overhead over failure-free run", format_percent(c.overhead))
    exp.add_row(f"EPE (modelled, {src} power)", format_power(c.epe))
    if plan.scenario.work is not None:
        w = plan.scenario.work
        exp.add_row("expected runtime of the job", format_duration(w * c.time_factor))
        exp.add_row(f"expected energy per node (modelled, {src})", format_energy(w * c.epe))
    base = Table(
        title=f"Against the stock governors at {plan.app_processes} I/O processes, "
        f"{plan.scenario.baseline_interval} interval "
        f"({power_source(plan, _baseline_points(plan)) or 'no'} power)",
        title_justify="left",
        caption="saved: (baseline − plan)/baseline, positive when the plan uses less",
        caption_justify="left",
        box=box.SIMPLE_HEAD,
        pad_edge=False,
    )
    for col in (
        "governor",
        "T_C",
        "T_R",
        "T_A",
        "EPE",
        "EPE saved",
        "write J/GB saved",
        "read J/GB saved",
    ):
        base.add_column(col, no_wrap=True, justify="left" if col == "governor" else "right")
    notes = Table.grid(padding=(0, 1))
    notes.add_column()
    notes.add_column()
    for b in plan.baselines:
        base.add_row(*_baseline_row(plan, b))
        notes.add_row(f"{b.name}:", b.how)
    return [chosen, exp, base, notes]


def _baseline_row(plan: Plan, b: Baseline) -> list[str]:
    if b.choice is None:
        return [b.name, "—", "—", "—", "—", "not evaluable", "—", "—"]
    s = plan.savings(b)
    assert s is not None
    bc = b.choice
    return [
        b.name,
        format_duration(bc.T_C),
        format_duration(bc.T_R),
        format_duration(bc.T_A),
        format_power(bc.epe),
        format_percent(s.epe),
        format_percent(s.write_energy_per_gb),
        format_percent(s.read_energy_per_gb),
    ]
