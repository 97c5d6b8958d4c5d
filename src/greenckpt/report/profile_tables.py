"""Profiles for the terminal: the points table, a profile's header, node comparisons and
the fio cross-check, as rich tables.

Why here and not in the CLI: ``greenckpt profile show``, the summary after a sweep and
``greenckpt demo`` print the same tables, and a Python user can print them too; every power
figure is printed next to its source (measured, estimated, SYNTHETIC).
"""

from __future__ import annotations

from collections.abc import Sequence

from rich import box
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from greenckpt import units
from greenckpt.optimize.lever_fields import lever_labels
from greenckpt.optimize.profile_data import POWER_SOURCES, Profile
from greenckpt.profile.fio import VALIDATION_COLUMNS, ValidationResult
from greenckpt.profile.labels import power_label, source_words
from greenckpt.profile.merge import COMPARISON_COLUMNS, Comparison

__all__ = [
    "comparison_table",
    "points_table",
    "render_comparison",
    "render_profile",
    "render_validation",
    "waiting_table",
]

BYTES_PER_MB = 1e6
BYTES_PER_GB = 1e9


def _plain(value: object) -> str:
    return escape(str(value))


def _status_line(profile: Profile) -> str:
    sweep = profile.sweep
    done = sweep.get("done")
    quick = sweep.get("quick")
    total = sweep.get("cells_total")
    cells = ""
    if isinstance(done, list) and isinstance(total, int):
        cells = f", {len(done)} of {total} cells measured"
        if isinstance(quick, list) and quick:
            cells += f" in full and {len(quick)} with a single quick run"
        mode = sweep.get("mode")
        if mode and mode != "full":
            cells += f" ({mode} mode)"
    if profile.status == "partial":
        return (
            f"[bold]status: PARTIAL[/]{cells} — continue it with greenckpt profile run "
            "… --resume (same options)"
        )
    return f"status: complete{cells}"


def _header(profile: Profile, path: str, console: Console) -> None:
    console.print(f"profile {_plain(path)}: {_status_line(profile)}", highlight=False)
    if profile.synthetic:
        console.print(
            "[bold yellow]SYNTHETIC profile[/]: its throughput and power are made up; nothing "
            "in it is a measurement.",
            highlight=False,
        )
    m, s = profile.machine, profile.storage
    host = m.get("hostname") or (", ".join(map(str, m["nodes"])) if "nodes" in m else "unknown")
    cpu = m.get("cpu_model") or "unknown CPU"
    cores = f", {m['cores']} logical CPUs" if m.get("cores") else ""
    storage = s.get("summary") or s.get("key") or "unknown"
    console.print(
        f"host {_plain(host)}: {_plain(cpu)}{_plain(cores)}; storage {_plain(storage)}",
        highlight=False,
    )
    made = [f"created {profile.created}"] if profile.created else []
    made += [f"by {profile.tool}"] if profile.tool else []
    if made:
        console.print(_plain(" ".join(made)), highlight=False)
    meters = ", ".join(profile.meters) or "none recorded"
    domains = ", ".join(profile.power_domains) or "none recorded"
    scope = profile.sweep.get("power_scope")
    scope_text = f" — {scope}" if scope else ""
    console.print(
        f"meters: {_plain(meters)}; power domains: {_plain(domains)}{_plain(scope_text)}",
        highlight=False,
    )
    if profile.idle_power is not None:
        spread = (
            f" ± {units.format_power(profile.idle_power_spread)}"
            if profile.idle_power_spread
            else ""
        )
        console.print(
            f"idle power: {units.format_power(profile.idle_power)}{spread} "
            f"({_plain(profile.idle_power_source)})",
            highlight=False,
        )
    else:
        console.print("idle power: not measured", highlight=False)
    if profile.note:
        console.print(f"note: {_plain(profile.note)}", highlight=False)


def _spread(value: float | None, scale: float) -> str:
    return "" if value is None else f"{value / scale:.1f}"


def _compact_table(title: str, caption: str | None = None) -> Table:
    """A table without vertical rules, so many narrow columns fit in 80 columns."""
    return Table(
        title=title,
        title_justify="left",
        caption=caption,
        caption_justify="left",
        box=box.SIMPLE_HEAD,
        show_edge=False,
        pad_edge=False,
        collapse_padding=True,
    )


def points_table(profile: Profile) -> Table:
    """The points, one row each, every power figure next to its source."""
    pts = profile.points
    show_cstates = any(p.cstates is not None for p in pts)
    show_codec = any(p.codec is not None for p in pts)
    # rows that differ only by a lever (uncore, power limit, GPU) must not look identical
    show_levers = any(lever_labels(p) for p in pts)
    sizes = {p.size for p in pts}
    show_size = len(sizes) > 1
    title = "Profile points"
    if not show_size and None not in sizes:
        title += f" (S = {units.format_size(next(iter(sizes)) or 0)} per run)"
    kinds = sorted({p.data for p in pts if p.data is not None})
    if show_codec and kinds:
        title += f", data written: {'+'.join(kinds)}"
    table = _compact_table(
        title,
        caption=f"{power_label(profile)}. MB = 1e6 B, GB = 1e9 B (logical bytes); ± is the "
        "spread (max − min) of the repetitions; ! marks power from degraded meter readings.",
    )
    table.add_column("op", no_wrap=True, min_width=5)
    table.add_column("setting", no_wrap=True)
    if show_cstates:
        table.add_column("C-states", no_wrap=True)
    if show_codec:
        table.add_column("codec")
    if show_levers:
        table.add_column("levers (else as found)")
    table.add_column("proc", justify="right", no_wrap=True, min_width=4)
    if show_size:
        table.add_column("size", justify="right", no_wrap=True)
    table.add_column("MB/s", justify="right", no_wrap=True)
    table.add_column("±", justify="right", no_wrap=True, style="dim")
    table.add_column("W", justify="right", no_wrap=True)
    table.add_column("±", justify="right", no_wrap=True, style="dim")
    table.add_column("J/GB", justify="right", no_wrap=True, min_width=5)
    table.add_column("reps", justify="right", no_wrap=True, min_width=4)
    table.add_column("source", no_wrap=True, min_width=9)
    table.add_column("!", no_wrap=True, min_width=1)
    for p in pts:
        row = [p.op, p.setting_label]
        if show_cstates:
            row.append("as found" if p.cstates is None else ("on" if p.cstates else "off"))
        if show_codec:
            ratio = f" {p.compression_ratio:.2f}x" if p.compression_ratio else ""
            row.append(f"{p.codec}{ratio}" if p.codec else "-")
        if show_levers:
            row.append(", ".join(lever_labels(p)) or "-")
        row.append(str(p.processes))
        if show_size:
            row.append(units.format_size(p.size) if p.size is not None else "-")
        row += [
            f"{p.throughput / BYTES_PER_MB:.1f}",
            _spread(p.throughput_spread, BYTES_PER_MB),
            f"{p.power:.1f}",
            _spread(p.power_spread, 1.0),
            f"{p.energy_per_byte * BYTES_PER_GB:.4g}",
            str(p.repetitions),
            p.power_source.upper() if p.power_source == "synthetic" else p.power_source,
            "" if p.reliable else "!",
        ]
        table.add_row(*(escape(c) for c in row))
    return table


_SOURCE_WORDS = {
    "measured": "measured",
    "estimated": "estimated",
    "synthetic": "SYNTHETIC",
}


def waiting_table(profile: Profile) -> Table:
    """The profile's waiting entries, one row each: what one waiting rank adds to the node's
    power at a CPU setting and wait mode, its spread, the CPU share it used and its source.

    Why shown: the planner adds ``(R − n)`` times this figure to every point's power, so a
    plan's choice of few writers rests on it as much as on the points (docs/model.md, 4).
    """
    entries = profile.waiting
    sources = [source_words(x) for x in POWER_SOURCES if x in {w.power_source for w in entries}]
    table = _compact_table(
        "Waiting ranks: power each adds to a phase",
        caption=f"power: {'; '.join(sources)}. per rank: (node power with k waiters − idle power "
        "at the same setting) / k, ± its spread over the window; a negative figure is noise "
        "around idle (planned as 0 W). CPU: CPU time per waiting rank, share of one core. ! "
        "marks degraded meter readings.",
    )
    table.add_column("setting", no_wrap=True)
    table.add_column("C-states", no_wrap=True)
    table.add_column("mode", no_wrap=True)
    table.add_column("k", justify="right", no_wrap=True)
    table.add_column("per rank", justify="right", no_wrap=True)
    table.add_column("±", justify="right", no_wrap=True, style="dim")
    table.add_column("CPU", justify="right", no_wrap=True)
    table.add_column("source", no_wrap=True, min_width=9)
    table.add_column("!", no_wrap=True, min_width=1)
    for w in entries:
        row = [
            w.setting_label,
            "as found" if w.cstates is None else ("on" if w.cstates else "off"),
            w.mode,
            str(w.ranks),
            units.format_power(w.power_per_rank),  # polite waiters: mW, not "0.00"
            "" if w.power_spread is None else units.format_power(w.power_spread),
            "-" if w.cpu_fraction is None else f"{w.cpu_fraction:.1%}",
            _SOURCE_WORDS[w.power_source],
            "" if w.reliable else "!",
        ]
        table.add_row(*(escape(c) for c in row))
    return table


def render_profile(profile: Profile, path: str, console: Console) -> None:
    """What ``greenckpt profile show`` prints (also the summary after a sweep): the header,
    the points and, when the profile measured them, the waiting ranks' power."""
    _header(profile, path, console)
    console.print(points_table(profile))
    if profile.waiting:
        console.print(waiting_table(profile))


def comparison_table(cmp: Comparison) -> Table:
    """One row per (point, node), flagged figures in bold red."""
    table = _compact_table(
        f"Nodes against the median across nodes (flag: more than {cmp.threshold:.0%} off)",
        caption="power figures as in each file (see greenckpt profile show for their source)",
    )
    for i, name in enumerate(COMPARISON_COLUMNS):
        table.add_column(name, justify="left" if i in (0, 1, 6) else "right")
    for row in cmp.rows():
        table.add_row(*(escape(c) for c in row), style="bold red" if row[-1] else None)
    return table


def render_comparison(cmp: Comparison, profiles: Sequence[Profile], console: Console) -> None:
    """What ``greenckpt profile compare`` prints: the sources, the table, a line per node and
    the verdict."""
    sources = sorted({power_label(p) for p in profiles})
    console.print(
        f"{len(profiles)} profiles ({escape(', '.join(cmp.names))}); {escape('; '.join(sources))}",
        highlight=False,
    )
    console.print(comparison_table(cmp))
    for s in cmp.summary():
        console.print(
            f"{escape(s.node)}: {s.outlier_points} of {s.points} points flagged; throughput "
            f"×{s.median_throughput_rel:.3f} of the median (lowest ×{s.min_throughput_rel:.3f}), "
            f"power ×{s.median_power_rel:.3f} (highest ×{s.max_power_rel:.3f})",
            highlight=False,
        )
    for node, label in cmp.missing:
        console.print(f"{escape(node)} lacks {escape(label)} (not compared)", highlight=False)
    if len(cmp.names) == 2 and cmp.outliers:
        console.print(
            "with two nodes the median is their mean, so both are flagged together: compare "
            "three or more to tell which one is off",
            highlight=False,
        )
    odd = cmp.outlier_nodes
    console.print(
        f"[bold red]outlier nodes: {escape(', '.join(odd))}[/]" if odd else "no outlier nodes",
        highlight=False,
    )


def render_validation(result: ValidationResult, console: Console) -> None:
    """The fio cross-check as a table, with a verdict line."""
    table = _compact_table(
        f"I/O engine vs fio on {escape(result.directory)} "
        f"(S = {units.format_size(result.size)}, block {units.format_size(result.block_size)}, "
        f"{result.repeats} repeat(s), medians)"
    )
    for i, name in enumerate(VALIDATION_COLUMNS):
        table.add_column(name, justify="left" if i in (0, 7, 8) else "right")
    for case, row in zip(result.cases, result.rows(), strict=True):
        table.add_row(*(escape(c) for c in row), style=None if case.meets_target else "bold red")
    console.print(table)
    if result.meets_target:
        console.print(
            f"the engine reaches {result.target:g}× fio or better in every case", highlight=False
        )
    else:
        console.print(
            f"[bold red]the engine is below {result.target:g}× fio in some cases[/]: the "
            "profile may describe the engine's overhead rather than the storage",
            highlight=False,
        )
