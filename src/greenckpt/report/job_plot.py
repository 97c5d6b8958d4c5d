"""A job report drawn as power over time: the job's sum, and every node within its envelope.

Why two panels: the job's sum is N times a node's power, so on one axis the nodes would be a
flat line at the bottom. The top panel is the sum over nodes (what the site pays for); the
bottom one the min/max envelope across nodes with the outlier node (mean power farthest from
the nodes' median, chosen by :mod:`greenckpt.runtime.job_report`; none below three nodes,
where no node stands out from the others) drawn and named in the legend, so a reader finds the
node that behaved differently. Job compute, checkpoints (hatched per level, as in the node
plot), restarts and flushes are shaded. Titles and axes say where the power came from
(measured, estimated) and SYNTHETIC for a fake platform. matplotlib is imported only when a
figure is drawn.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from greenckpt.errors import InvalidValueError
from greenckpt.report.run_plot import LEVEL_HATCHES, power_limits
from greenckpt.runtime.job_report import JobReport

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

__all__ = ["job_figure", "plot_job"]

_SHADED = {
    "compute": "tab:green",
    "checkpoint": "tab:blue",
    "restart": "tab:red",
    "flush": "tab:purple",
}
"""Job phases shaded behind the power, in the node plot's colours (start-up, teardown and
lost work are the unshaded rest)."""
_ALPHA = {"compute": 0.08}
"""Compute is most of a run: shaded faintly so the checkpoints stand out on it."""
_MAX_SPANS = 2000
"""Job phases shaded at most (beyond that they would be sub-pixel; the CSV has them all)."""


def plot_job(report: JobReport, path: str | os.PathLike[str]) -> Path:
    """Draw ``report``'s power over time (:func:`job_figure`) as PNG or SVG by the suffix."""
    target = Path(path)
    suffix = target.suffix.lower()
    if suffix not in (".png", ".svg"):
        raise InvalidValueError(f"plot to a .png or .svg file, not {target.name!r}")
    from matplotlib.backends.backend_agg import FigureCanvasAgg  # noqa: PLC0415 - slow import
    from matplotlib.backends.backend_svg import FigureCanvasSVG  # noqa: PLC0415

    fig = job_figure(report)
    canvas = FigureCanvasAgg(fig) if suffix == ".png" else FigureCanvasSVG(fig)
    target.parent.mkdir(parents=True, exist_ok=True)
    canvas.print_figure(str(target), format=suffix[1:])
    return target


def job_figure(report: JobReport) -> Figure:
    """The job's power over time as a matplotlib figure; InvalidValueError when the report
    has no power series (no node sent one)."""
    from matplotlib.figure import Figure  # noqa: PLC0415 - only when plotting

    doc = report.doc
    series = doc.get("series")
    if not series or not series.get("t_s"):
        raise InvalidValueError("the job report has no power series to plot: no node sent one")
    source = series.get("source") or "source unknown"
    t = [float(x) for x in series["t_s"]]
    fig = Figure(figsize=(10, 6.5), layout="constrained")
    top, bottom = fig.subplots(2, 1, sharex=True)
    total = _values(series["sum_w"])
    (line,) = top.plot(t, total, color="black", linewidth=1.2, label=f"job sum ({source})")
    top.set_ylabel(f"job power (W, {source})")
    top.set_ylim(*power_limits(total))
    top.legend(handles=[line, *_shade(top, doc["phases"])], loc="best", fontsize=8)
    _nodes_panel(bottom, series, source)
    _shade(bottom, doc["phases"])
    bottom.set_xlabel("time since the job started (s)")
    job = doc["job"]
    title = f"Job {job['id']}: power over time, {series['nodes']} node(s) (power {source})"
    if doc.get("synthetic"):
        title = "SYNTHETIC (fake platform on some node): " + title
    fig.suptitle(title, fontsize=9)
    return fig


def _nodes_panel(ax: Axes, series: Mapping[str, Any], source: str) -> None:
    """The min/max envelope across nodes and the outlier node, named in the legend."""
    t = [float(x) for x in series["t_s"]]
    low, high = _values(series["min_w"]), _values(series["max_w"])
    if series.get("outlier_node") is None:  # one or two nodes: none stands out from others
        (line,) = ax.plot(t, high, color="tab:red", linewidth=1.0, label="highest node")
        handles: list[Any] = [line]
        if series["nodes"] > 1:
            handles.append(
                ax.fill_between(
                    t, low, high, color="tab:gray", alpha=0.35, linewidth=0, label="min-max"
                )
            )
        ax.set_ylabel(f"node power (W, {source})")
        ax.set_ylim(*power_limits([*low, *high]))
        ax.legend(handles=handles, loc="best", fontsize=8)
        return
    outlier = _values(series["outlier_w"])
    band = ax.fill_between(
        t, low, high, color="tab:gray", alpha=0.35, linewidth=0, label="min-max across nodes"
    )
    node = series["outlier_node"]
    (line,) = ax.plot(
        t,
        outlier,
        color="tab:red",
        linewidth=1.0,
        label=f"node {node}: the outlier (mean power farthest from the nodes' median)",
    )
    ax.set_ylabel(f"node power (W, {source})")
    ax.set_ylim(*power_limits([*low, *high, *outlier]))
    ax.legend(handles=[band, line], loc="best", fontsize=8)


def _shade(ax: Axes, phases: Sequence[Mapping[str, Any]]) -> list[Any]:
    """Shade the job's checkpoints, restarts and flushes; one legend patch per kind."""
    from matplotlib.patches import Patch  # noqa: PLC0415 - only when plotting

    kinds: dict[str, Patch] = {}
    spans = [p for p in phases if p["kind"] in _SHADED and p.get("start_s") is not None]
    for p in spans[:_MAX_SPANS]:
        kind = p["kind"]
        levels = p.get("levels") or []
        level = levels[0] if len(levels) == 1 else None
        hatch = LEVEL_HATCHES.get(level) if kind == "checkpoint" and level is not None else None
        color, alpha = _SHADED[kind], _ALPHA.get(kind, 0.2)
        ax.axvspan(p["start_s"], p["end_s"], color=color, alpha=alpha, linewidth=0, hatch=hatch)
        name = f"job {kind}" + (f" L{level}" if kind == "checkpoint" and level else "")
        kinds.setdefault(name, Patch(color=color, alpha=alpha, hatch=hatch, label=name))
    return [kinds[k] for k in sorted(kinds)]


def _values(column: Sequence[float | None]) -> list[float]:
    """A column of the series with its gaps (no node covered the point) as NaN."""
    return [math.nan if x is None else float(x) for x in column]
