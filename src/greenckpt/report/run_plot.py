"""A run report drawn as node power over time, every phase shaded, as PNG or SVG.

Why no label on each phase: a run has a checkpoint every few seconds, and one label per span
overlapped into an unreadable strip; each kind of phase (and each checkpoint level, by its
hatching) gets one legend entry instead, outside the plotting area. The title and legend say
where the power came from (measured, estimated) and SYNTHETIC for a fake platform. matplotlib
is imported only when a figure is drawn (it is slow to import).
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from greenckpt.errors import InvalidValueError
from greenckpt.phases import IO_KINDS, RUN_KINDS, RunKind
from greenckpt.runtime.run_report import RunReport

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure
    from matplotlib.patches import Patch

__all__ = ["LEVEL_HATCHES", "plot_run", "power_limits", "run_figure"]

LEVEL_HATCHES: dict[int, str] = {2: "..", 3: "xx", 4: "//"}
"""Hatching per checkpoint level (level 1 plain), to tell levels apart without labels."""

_COLORS: dict[str, str] = {
    "compute": "tab:green",
    "rework": "tab:orange",
    "lost": "tab:gray",
    "checkpoint": "tab:blue",
    "restart": "tab:red",
    "flush": "tab:purple",
    "startup": "tab:olive",
    "teardown": "tab:brown",
}


def plot_run(report: RunReport, path: str | os.PathLike[str]) -> Path:
    """Draw ``report``'s node power over the run with the phases shaded (see
    :func:`run_figure`); PNG or SVG by the file's suffix. Return the path."""
    target = Path(path)
    suffix = target.suffix.lower()
    if suffix not in (".png", ".svg"):
        raise InvalidValueError(f"plot to a .png or .svg file, not {target.name!r}")
    import matplotlib as mpl  # noqa: PLC0415 - only when plotting (slow import)
    from matplotlib.backends.backend_agg import FigureCanvasAgg  # noqa: PLC0415
    from matplotlib.backends.backend_svg import FigureCanvasSVG  # noqa: PLC0415

    # Text stays text in SVG files (searchable, and the labels can be checked).
    with mpl.rc_context({"svg.fonttype": "none"}):
        fig = run_figure(report)
        canvas = FigureCanvasAgg(fig) if suffix == ".png" else FigureCanvasSVG(fig)
        target.parent.mkdir(parents=True, exist_ok=True)
        canvas.print_figure(str(target), format=suffix[1:])
    return target


def run_figure(report: RunReport) -> Figure:
    """Node power over the run (the sampled trace, or each record's mean power without one)
    with every phase shaded, as a matplotlib figure. The y axis leaves room above the highest
    and below the lowest power (:func:`power_limits`), so a flat trace never lies on the
    frame."""
    from matplotlib.figure import Figure  # noqa: PLC0415 - only when plotting

    fig = Figure(figsize=(10, 4.5), layout="constrained")
    ax = fig.add_subplot()
    source = report.source_label(report.power_source)
    handles, drawn = _draw_power(ax, report)
    handles.extend(_shade_phases(ax, report))
    ax.set_xlabel("time since the run started (s)")
    ax.set_ylabel(f"node power (W, {source})")
    ax.set_ylim(*power_limits(drawn))
    title = "Node power over the run"
    if report.synthetic:
        title = "SYNTHETIC (fake platform): " + title
    if report.policy:
        title += f", policy {report.policy}"
    title += f" (power {source}"
    title += f": {report.power_scope})" if report.power_scope else ")"
    ax.set_title(title, fontsize=9)
    fig.legend(handles=handles, loc="outside lower center", ncols=min(len(handles), 5), fontsize=8)
    return fig


def _draw_power(ax: Axes, report: RunReport) -> tuple[list[Any], list[float]]:
    """The power line (the trace, else each record's mean); its legend handle and values."""
    if report.trace is not None and report.trace.t_s:
        trace = report.trace
        # watts[i] is the mean over (t[i-1], t[i]]: the first interval starts at 0.
        (line,) = ax.step(
            (0.0, *trace.t_s),
            (trace.watts[0], *trace.watts),
            where="pre",
            color="black",
            linewidth=1.0,
            label=f"node power ({report.source_label(trace.source)})",
        )
        return [line], list(trace.watts)
    xs: list[float] = []
    ys: list[float] = []
    for r in report.records:
        if r.background or r.mean_power_w is None:
            continue
        xs += [r.start_s, r.end_s, math.nan]
        ys += [r.mean_power_w, r.mean_power_w, math.nan]
    source = report.source_label(report.power_source)
    (line,) = ax.plot(
        xs, ys, color="black", linewidth=1.5, label=f"mean power per phase ({source})"
    )
    return [line], ys


def _shade_phases(ax: Axes, report: RunReport) -> list[Patch]:
    """Shade every record's span; one legend patch per (kind, level, background)."""
    from matplotlib.patches import Patch  # noqa: PLC0415 - only when plotting

    entries: dict[tuple[RunKind, int | None, bool], Patch] = {}
    for r in report.records:
        level = r.level if r.kind in IO_KINDS else None
        style = _shade(r.kind, level, r.background)
        ax.axvspan(r.start_s, r.end_s, linewidth=0, **style)
        key = (r.kind, level, r.background)
        if key not in entries:
            label = r.kind + (f" L{level}" if level else "")
            label += " (background)" if r.background else ""
            entries[key] = Patch(label=label, **style)
    order = {k: i for i, k in enumerate(RUN_KINDS)}
    return [entries[k] for k in sorted(entries, key=lambda k: (order[k[0]], k[1] or 0, k[2]))]


def power_limits(watts: Iterable[float]) -> tuple[float, float]:
    """The y limits of a power plot: room above the highest value and below the lowest.

    The axis starts at 0 W (so that a difference in power is not magnified), unless the
    lowest value is within the margin of 0, where it starts below it; the margin is 10 % of
    the range of the values, at least 5 % of the largest and at least 0.5 W, so a flat trace
    (range 0) is drawn inside the frame, not on it. No finite value: (0, 1).
    """
    finite = [w for w in watts if math.isfinite(w)]
    if not finite:
        return 0.0, 1.0
    low, high = min(finite), max(finite)
    margin = max(0.1 * (high - low), 0.05 * max(abs(low), abs(high)), 0.5)
    return min(0.0, low - margin), high + margin


def _shade(kind: str, level: int | None, background: bool) -> dict[str, Any]:
    """How a span of ``kind`` at ``level`` is shaded (and drawn in the legend)."""
    return {
        "facecolor": _COLORS[kind],
        "edgecolor": _COLORS[kind],
        "alpha": 0.15 if background else 0.3,
        "hatch": LEVEL_HATCHES.get(level or 0),
    }
