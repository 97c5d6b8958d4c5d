"""Render a :class:`~greenckpt.optimize.Plan` as rich tables or as a JSON-ready dict.

Every power and energy figure is labelled with where its power came from: ``measured`` (a
meter), ``estimated`` (a power model) or ``synthetic`` (an example profile). EPE and energies
are always *modelled* (expectations over failures) from those powers and the given
application power, and say so. A phase's power is its point's plus the power of the ranks that
wait meanwhile (``R − n`` of them, per rank from the profile's waiting entries): both parts are
shown, with the waiting figure's own source and how it was found.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from rich import box
from rich.table import Table

from greenckpt.model import daly_interval, time_optimal_interval, young_interval
from greenckpt.optimize import Baseline, Choice, Plan, ProfilePoint
from greenckpt.optimize.profile_data import point_to_json
from greenckpt.optimize.setting import CpuSetting
from greenckpt.optimize.waiting import WaitingUse
from greenckpt.report.plan_levers import lever_table, levers_dict, shows_levers
from greenckpt.units import (
    format_duration,
    format_energy,
    format_percent,
    format_power,
    format_size,
)


def power_source(plan: Plan, points: Iterable[ProfilePoint] | None = None) -> str:
    """Provenance of the powers behind a figure: ``synthetic`` for a synthetic profile, else
    the sources of ``points`` (default: the chosen checkpoint and restart points, with the
    waiting power added to them when ranks wait), e.g. ``measured`` or
    ``estimated+measured``."""
    if plan.synthetic:
        return "synthetic"
    if points is None:
        return _sources(plan.best)
    return "+".join(sorted({p.power_source for p in points}))


def _sources(c: Choice) -> str:
    """The sources of a choice's phase powers: its points' and its waiting figures'."""
    found: set[str] = {c.write.power_source, c.read.power_source}
    for use in (c.write_waiting, c.read_waiting):
        if use.ranks and use.source is not None:
            found.add(use.source)
    return "+".join(sorted(found))


def _baseline_points(plan: Plan) -> list[ProfilePoint]:
    return [p for b in plan.baselines if b.choice for p in (b.choice.write, b.choice.read)]


def waiting_dict(use: WaitingUse) -> dict[str, Any]:
    """JSON-ready dict of the waiting power added to a phase."""
    return {
        "mode": use.mode,
        "waiting_ranks": use.ranks,
        "power_per_rank_W": use.per_rank,
        "power_W": use.power,
        "power_source": use.source,
        "exact": use.exact,
        "how": use.how,
    }


def _phase_dict(
    p: ProfilePoint, use: WaitingUse, phase_power: float, waiters: CpuSetting
) -> dict[str, Any]:
    return {
        **point_to_json(p),
        "waiting": waiting_dict(use),
        "waiting_setting": {
            "setting": waiters.key,
            "label": waiters.label,
            "per_core_split": waiters != p.setting,
        },
        "phase_power_W": phase_power,
        "energy_per_GB_J": phase_power / p.throughput * 1e9,
    }


def choice_dict(c: Choice) -> dict[str, Any]:
    """JSON-ready dict of a choice (SI units, names with unit suffixes). Each phase is its
    profile point, the waiting ranks' power added to it, and the phase's power
    (``phase_power_W``, what ``energy_per_GB_J`` and ``epe_W`` are computed from)."""
    return {
        "checkpoint": _phase_dict(c.write, c.write_waiting, c.W_C, c.write_waiting_setting),
        "restart": _phase_dict(c.read, c.read_waiting, c.W_R, c.read_waiting_setting),
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
            "wait_mode": scn.wait_mode,
            "form": scn.form,
            "max_slowdown": scn.max_slowdown,
            "power_cap_W": scn.power_cap,
            "baseline_interval": scn.baseline_interval,
            "work_s": scn.work,
        },
        "plan": choice_dict(plan.best),
        "fastest_time_factor": plan.fastest_time_factor,
        "reference_intervals_s": _reference_intervals(plan),
        "notes": list(plan.notes),
        "levers": levers_dict(plan),
        "frequency_only_plan": None,
        "baselines": [],
    }
    if scn.work is not None:
        out["plan"]["expected_runtime_s"] = scn.work * plan.best.time_factor
        out["plan"]["expected_energy_J_per_node"] = scn.work * plan.best.epe
        out["plan"]["expected_energy_J_job"] = scn.work * plan.best.epe * scn.nodes
    if plan.frequency_only is not None:
        out["frequency_only_plan"] = _comparison_dict(plan, plan.frequency_only)
    out["baselines"] = [_comparison_dict(plan, b) for b in plan.baselines]
    return out


def _comparison_dict(plan: Plan, b: Baseline) -> dict[str, Any]:
    """A governor baseline or the frequency-only plan, with the plan's savings over it."""
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
    return entry


def _reference_intervals(plan: Plan) -> dict[str, float]:
    c = plan.best
    rate = plan.scenario.rate
    return {
        "chosen": c.T_A,
        "young": float(young_interval(c.T_C, rate)),
        "daly": float(daly_interval(c.T_C, rate)),
        "time_optimal": float(time_optimal_interval(c.T_C, rate)),
    }


_MODE_WORDS = {
    "polite": "waiting politely (sleeping between tests)",
    "spin": "spinning in MPI's waits",
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
        caption=f"power: the profile point's (I/O processes busy, other cores idle); waiting: "
        f"the other ranks of {plan.app_processes} per node, {_MODE_WORDS[plan.scenario.wait_mode]}"
        "; energy/GB: both",
        caption_justify="left",
    )
    for col in ("phase", "CPU", "I/O procs", "time", "power", "waiting", "energy/GB"):
        chosen.add_column(col)
    for phase, p, use, t, energy in (
        ("checkpoint", c.write, c.write_waiting, c.T_C, c.write_energy_per_gb),
        ("restart", c.read, c.read_waiting, c.T_R, c.read_energy_per_gb),
    ):
        chosen.add_row(
            phase,
            _setting(p),
            str(p.processes),
            format_duration(t),
            format_power(p.power),
            _waiting_cell(use),
            format_energy(energy),
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
    levers = [lever_table(plan)] if shows_levers(plan) else []
    return [chosen, waiting_table(c), *levers, exp, *_frequency_only_tables(plan), base, notes]


def _frequency_only_tables(plan: Plan) -> list[Table]:
    """The plan against the best plan without the levers (none when the profile has none)."""
    b = plan.frequency_only
    if b is None:
        return []
    table = Table(
        title="Against the frequency-only plan (every lever as found, no per-core split; "
        f"{power_source(plan, () if b.choice is None else (b.choice.write, b.choice.read))} "
        "power)",
        title_justify="left",
        box=box.SIMPLE_HEAD,
        pad_edge=False,
    )
    for col in ("plan", "T_C", "T_R", "T_A", "EPE", "EPE saved", "write J/GB saved"):
        table.add_column(col, no_wrap=True, justify="left" if col == "plan" else "right")
    table.add_column("read J/GB saved", no_wrap=True, justify="right")
    table.add_row(*_baseline_row(plan, b))
    if b.choice is not None:
        w, r = b.choice.write, b.choice.read
        how = (
            f"checkpoint {_setting(w)}, {w.processes} I/O processes; restart {_setting(r)}, "
            f"{r.processes} I/O processes"
        )
    else:
        how = f"not evaluable: {b.how}"
    notes = Table.grid(padding=(0, 1))
    notes.add_column()
    notes.add_column()
    notes.add_row("frequency-only:", how)
    return [table, notes]


def _waiting_cell(use: WaitingUse) -> str:
    if use.ranks == 0:
        return "none"
    if use.source is None:
        return "not measured"
    return f"+{format_power(use.power)}"


def waiting_line(use: WaitingUse) -> str:
    """The waiting power of one phase in words: ranks, mode, watts per rank and their source."""
    if use.ranks == 0:
        return f"no rank waits ({use.how.removeprefix('no rank waits ')})"
    return (
        f"{use.ranks} ranks wait ({use.mode}) × {format_power(use.per_rank)} per rank "
        f"= {format_power(use.power)}; {use.how}"
    )


def waiting_table(c: Choice) -> Table:
    """Where each phase's waiting power comes from (a grid of two lines)."""
    grid = Table.grid(padding=(0, 1))
    grid.add_column()
    grid.add_column()
    grid.add_row("waiting, checkpoint:", waiting_line(c.write_waiting))
    grid.add_row("waiting, restart:", waiting_line(c.read_waiting))
    return grid


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
