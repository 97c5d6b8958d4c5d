"""Figures of a profile, in the shapes of saito2013 (energy-aware checkpoint/restart I/O).

Why: a profile is a table of a few hundred numbers; whether the optimizer's choice is sound is
easier to judge from the trends the paper argues from (its Figures 1-4 and 8, and an energy
heat map). Every figure says where its power came from, and a synthetic profile's say
SYNTHETIC. Figures are drawn on the Agg canvas directly (no pyplot global state). The figures,
their conventions and why: docs/design/reports.md, "Profile figures".
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from matplotlib import colormaps
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.typing import ColorType

from greenckpt.errors import InvalidValueError
from greenckpt.optimize.profile_data import (
    OPERATIONS,
    Operation,
    Profile,
    ProfilePoint,
)
from greenckpt.profile.labels import power_label

VALID_FORMATS = ("png", "svg", "pdf")
"""File formats :func:`plot_profile` can write."""

BYTES_PER_MB = 1e6
BYTES_PER_GB = 1e9

FIGURE_NAMES = (
    "throughput-vs-frequency",
    "power-vs-frequency",
    "throughput-vs-processes",
    "power-vs-processes",
    "energy-per-mb",
    "energy-heatmap",
)
"""File stems :func:`plot_profile` writes, in order (one file per stem per format)."""

_PANEL_SIZE = (5.5, 4.2)

Variant = tuple[str | None, bool | None, str | None, int | None]


@dataclass(frozen=True)
class _Metric:
    """A quantity plotted on y: its axis label, value and spread (same unit) of a point."""

    name: str
    label: str
    value: Callable[[ProfilePoint], float]
    spread: Callable[[ProfilePoint], float | None]


def _scaled(v: float | None, scale: float) -> float | None:
    return None if v is None else v / scale


_THROUGHPUT = _Metric(
    "throughput",
    "throughput (MB/s, logical)",
    lambda p: p.throughput / BYTES_PER_MB,
    lambda p: _scaled(p.throughput_spread, BYTES_PER_MB),
)
_POWER = _Metric("power", "mean node power (W)", lambda p: p.power, lambda p: p.power_spread)


@dataclass(frozen=True)
class _View:
    """The points drawn (one per op, setting and process count) and the text around them."""

    profile: Profile
    points: tuple[ProfilePoint, ...]
    scope: str
    footer: str

    def for_op(self, op: Operation) -> tuple[ProfilePoint, ...]:
        return tuple(p for p in self.points if p.op == op)

    @property
    def ops(self) -> tuple[Operation, ...]:
        return tuple(op for op in OPERATIONS if self.for_op(op))

    def title(self, text: str) -> str:
        prefix = "SYNTHETIC — " if _is_synthetic(self.profile) else ""
        return f"{prefix}{text}{self.scope}"


def plot_profile(
    profile: Profile, out_dir: str | Path, formats: Sequence[str] = ("png", "svg")
) -> list[Path]:
    """Write the profile's figures into ``out_dir``; return the files written.

    One file per figure of :data:`FIGURE_NAMES` per format, named ``<figure>.<format>``, in
    that order (figure by figure, formats in the order given). ``formats`` are names from
    :data:`VALID_FORMATS` (case-insensitive; duplicates ignored); anything else raises
    :class:`ValueError` before anything is written. ``out_dir`` is created if missing.
    """
    fmts = _check_formats(formats)
    view = _view(profile)
    figures = (
        ("throughput-vs-frequency", _vs_setting_figure(view, _THROUGHPUT)),
        ("power-vs-frequency", _vs_setting_figure(view, _POWER)),
        ("throughput-vs-processes", _vs_processes_figure(view, _THROUGHPUT)),
        ("power-vs-processes", _vs_processes_figure(view, _POWER)),
        ("energy-per-mb", _energy_bars_figure(view)),
        ("energy-heatmap", _heatmap_figure(view)),
    )
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths: list[Path] = []
    for stem, fig in figures:
        paths.extend(_save(fig, out / stem, fmts, power_label(profile)))
    return paths


def _is_synthetic(profile: Profile) -> bool:
    return profile.synthetic or "synthetic" in profile.power_sources


def _check_formats(formats: Sequence[str]) -> tuple[str, ...]:
    if isinstance(formats, str):
        formats = (formats,)
    fmts = tuple(dict.fromkeys(str(f).lower().lstrip(".") for f in formats))
    bad = [f for f in fmts if f not in VALID_FORMATS]
    if bad or not fmts:
        got = ", ".join(map(repr, bad)) if bad else "none"
        raise InvalidValueError(f"plot formats must be among {', '.join(VALID_FORMATS)}; got {got}")
    return fmts


# --- which points are drawn -------------------------------------------------------------------


def _variant(p: ProfilePoint) -> Variant:
    return (p.codec, p.cstates, p.layout, p.block_size)


def _variant_preference(v: Variant) -> tuple[bool, str, int, str, int]:
    codec, cstates, layout, block = v
    cstate_rank = 0 if cstates is None else (1 if cstates else 2)
    return (codec is not None, codec or "", cstate_rank, layout or "", block or 0)


def _describe_variant(v: Variant) -> str:
    codec, cstates, layout, block = v
    parts = [f"codec {codec}" if codec else "uncompressed"]
    parts.append(
        "C-states as found" if cstates is None else f"C-states {'on' if cstates else 'off'}"
    )
    if layout:
        parts.append(layout.replace("_", " "))
    if block:
        parts.append(f"block {_bytes_text(block)}")
    return ", ".join(parts)


def _bytes_text(n: float) -> str:
    for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= size:
            return f"{n / size:g} {unit}"
    return f"{n:g} B"


def _view(profile: Profile) -> _View:
    sized = profile.at_size(max(profile.sizes)) if len(profile.sizes) > 1 else profile
    scope = ""
    if len(profile.sizes) > 1:
        listed = ", ".join(_bytes_text(s) for s in profile.sizes)
        scope = f" (size {_bytes_text(max(profile.sizes))}, largest of {listed})"
    counts = Counter(_variant(p) for p in sized.points)
    variant = min(counts, key=lambda v: (-counts[v], _variant_preference(v)))
    cells: dict[tuple[str, str, int], ProfilePoint] = {}
    for p in sized.points:
        if _variant(p) == variant:
            cells.setdefault((p.op, p.setting_key, p.processes), p)
    notes = [power_label(profile)]
    if len(counts) > 1:
        notes.append(f"variant shown: {_describe_variant(variant)} (1 of {len(counts)} in file)")
    unreliable = sum(not p.reliable for p in cells.values())
    if unreliable:
        notes.append(f"{unreliable} point(s) rest on degraded power readings")
    host = profile.machine.get("hostname")
    storage = profile.storage.get("key") or profile.storage.get("kind")
    notes.extend(str(x) for x in (host, storage) if x)
    return _View(profile, tuple(cells.values()), scope, " · ".join(notes))


def _setting_order(p: ProfilePoint) -> tuple[int, float, str]:
    if p.frequency is not None:
        return (0, p.frequency, "")
    if p.governor is not None:
        return (1, 0.0, p.governor)
    return (2, 0.0, "")


def _settings(points: Sequence[ProfilePoint]) -> list[ProfilePoint]:
    """One representative point per CPU setting, frequencies ascending, then the rest."""
    first: dict[str, ProfilePoint] = {}
    for p in points:
        first.setdefault(p.setting_key, p)
    return sorted(first.values(), key=_setting_order)


def _at_most_processes(points: Sequence[ProfilePoint], setting_key: str) -> ProfilePoint | None:
    same = [p for p in points if p.setting_key == setting_key]
    return max(same, key=lambda p: p.processes) if same else None


# --- figure plumbing --------------------------------------------------------------------------


def _figure(view: _View, panels: int, title: str) -> tuple[Figure, list[Axes]]:
    fig = Figure(figsize=(_PANEL_SIZE[0] * panels + 1.5, _PANEL_SIZE[1]), layout="constrained")
    FigureCanvasAgg(fig)
    axes = [fig.add_subplot(1, panels, i + 1) for i in range(panels)]
    fig.suptitle(view.title(title))
    fig.supxlabel(view.footer, fontsize="small", color="dimgray")
    return fig, axes


def _save(fig: Figure, stem: Path, formats: Sequence[str], label: str) -> list[Path]:
    title = fig.get_suptitle()
    paths = []
    for fmt in formats:
        path = stem.with_name(f"{stem.name}.{fmt}")
        fig.savefig(path, format=fmt, dpi=120, metadata=_metadata(fmt, title, label))
        paths.append(path)
    return paths


def _metadata(fmt: str, title: str, label: str) -> dict[str, str | None]:
    """File metadata: the title and the power label; no date, so reruns give the same files."""
    if fmt == "pdf":
        return {"Title": title, "Subject": label, "CreationDate": None}
    if fmt == "svg":
        return {"Title": title, "Description": label, "Date": None}
    return {"Title": title, "Description": label}


def _colors(n: int, cmap: str) -> list[tuple[float, float, float, float]]:
    cm = colormaps[cmap]
    return [cm(0.15 + 0.7 * i / max(n - 1, 1)) for i in range(n)]


def _errors(points: Sequence[ProfilePoint], metric: _Metric) -> list[float] | None:
    spreads = [metric.spread(p) for p in points]
    if all(s is None for s in spreads):
        return None
    return [s or 0.0 for s in spreads]


# --- throughput / power against the CPU setting (Figures 1 and 2) -----------------------------


def _setting_positions(settings: Sequence[ProfilePoint]) -> dict[str, float]:
    """x of each setting: GHz for fixed frequencies, then evenly spaced category slots."""
    ghz = [p.frequency / 1e9 for p in settings if p.frequency is not None]
    step = (max(ghz) - min(ghz)) / (len(ghz) - 1) if len(ghz) > 1 else 0.3
    start = max(ghz) if ghz else -step
    pos: dict[str, float] = {}
    slot = 0
    for p in settings:
        if p.frequency is not None:
            pos[p.setting_key] = p.frequency / 1e9
        else:
            slot += 1
            pos[p.setting_key] = start + step * slot
    return pos


def _vs_setting_panel(ax: Axes, points: Sequence[ProfilePoint], metric: _Metric) -> None:
    settings = _settings(points)
    pos = _setting_positions(settings)
    counts = sorted({p.processes for p in points})
    for n, color in zip(counts, _colors(len(counts), "viridis"), strict=True):
        mine = sorted((p for p in points if p.processes == n), key=_setting_order)
        fixed = [p for p in mine if p.frequency is not None]
        other = [p for p in mine if p.frequency is None]
        if fixed:
            ax.errorbar(
                [pos[p.setting_key] for p in fixed],
                [metric.value(p) for p in fixed],
                yerr=_errors(fixed, metric),
                fmt="-o",
                ms=4,
                capsize=2,
                color=color,
                label=f"{n}",
            )
        if other:
            ax.errorbar(
                [pos[p.setting_key] for p in other],
                [metric.value(p) for p in other],
                yerr=_errors(other, metric),
                fmt="o",
                ms=7,
                mfc="none",
                capsize=2,
                color=color,
                label=None if fixed else f"{n}",
            )
    _setting_axis(ax, settings, pos)
    ax.set_ylabel(metric.label)
    ax.grid(alpha=0.3)


def _setting_axis(ax: Axes, settings: Sequence[ProfilePoint], pos: dict[str, float]) -> None:
    fixed = [p for p in settings if p.frequency is not None]
    other = [p for p in settings if p.frequency is None]
    ax.set_xticks(
        [pos[p.setting_key] for p in settings],
        [f"{p.frequency / 1e9:.2f}" if p.frequency else p.setting_label for p in settings],
    )
    if fixed and other:
        ax.axvline((pos[fixed[-1].setting_key] + pos[other[0].setting_key]) / 2, ls="--", c="gray")
        ax.set_xlabel("CPU frequency (GHz) │ right of the dashed line: governors (hollow)")
    elif fixed:
        ax.set_xlabel("CPU frequency (GHz)")
    else:
        ax.set_xlabel("CPU setting (frequency not fixed)")
        lo, hi = min(pos.values()), max(pos.values())
        ax.set_xlim(lo - 0.5 * max(hi - lo, 0.3), hi + 0.5 * max(hi - lo, 0.3))


def _vs_setting_figure(view: _View, metric: _Metric) -> Figure:
    fig, axes = _figure(view, len(view.ops), f"I/O {metric.name} against the CPU setting")
    for ax, op in zip(axes, view.ops, strict=True):
        _vs_setting_panel(ax, view.for_op(op), metric)
        ax.set_title(op)
    fig.legend(*axes[0].get_legend_handles_labels(), loc="outside right upper", title="processes")
    return fig


# --- throughput / power against the number of processes (Figures 3 and 4) ---------------------


@dataclass(frozen=True)
class _Style:
    """How one CPU setting's line looks: fixed frequencies solid, the others dashed/hollow."""

    color: ColorType
    fixed: bool


def _setting_styles(settings: Sequence[ProfilePoint]) -> dict[str, _Style]:
    fixed = [p for p in settings if p.frequency is not None]
    styles = {
        p.setting_key: _Style(color, fixed=True)
        for p, color in zip(fixed, _colors(len(fixed), "plasma"), strict=True)
    }
    others = [p for p in settings if p.frequency is None]
    for i, p in enumerate(others):
        styles[p.setting_key] = _Style("black" if p.uncontrolled else f"C{i}", fixed=False)
    return styles


def _vs_processes_panel(ax: Axes, points: Sequence[ProfilePoint], metric: _Metric) -> None:
    settings = _settings(points)
    styles = _setting_styles(settings)
    for s in settings:
        mine = sorted((p for p in points if p.setting_key == s.setting_key), key=_n_processes)
        style = styles[s.setting_key]
        ax.errorbar(
            [p.processes for p in mine],
            [metric.value(p) for p in mine],
            yerr=_errors(mine, metric),
            ms=4,
            capsize=2,
            label=s.setting_label,
            color=style.color,
            fmt="-o" if style.fixed else "--s",
            mfc=None if style.fixed else "none",
        )
    counts = sorted({p.processes for p in points})
    ax.set_xscale("log", base=2)
    ax.set_xticks(counts, [str(n) for n in counts])
    ax.minorticks_off()
    ax.set_xlabel("concurrent I/O processes")
    ax.set_ylabel(metric.label)
    ax.grid(alpha=0.3)


def _n_processes(p: ProfilePoint) -> int:
    return p.processes


def _vs_processes_figure(view: _View, metric: _Metric) -> Figure:
    title = f"I/O {metric.name} against the number of I/O processes"
    fig, axes = _figure(view, len(view.ops), title)
    for ax, op in zip(axes, view.ops, strict=True):
        _vs_processes_panel(ax, view.for_op(op), metric)
        ax.set_title(op)
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="outside right upper", title="CPU setting")
    return fig


# --- energy per MB (Figure 8) -----------------------------------------------------------------


def _energy_cases(points: Sequence[ProfilePoint]) -> list[tuple[str, ProfilePoint]]:
    """(category, point) pairs of one op: the optimum and the untuned baselines."""
    cases = [("lowest energy", min(points, key=lambda p: p.energy_per_byte))]
    settings = _settings(points)
    fixed = [s for s in settings if s.frequency is not None]
    chosen = []
    if fixed:
        chosen.append(("max frequency", fixed[-1]))
        if len(fixed) > 1:
            chosen.append(("min frequency", fixed[0]))
    chosen.extend((s.setting_label, s) for s in settings if s.frequency is None)
    for name, s in chosen:
        p = _at_most_processes(points, s.setting_key)
        if p is not None:
            cases.append((name, p))
    return cases


def _energy_bars_figure(view: _View) -> Figure:
    fig, (ax,) = _figure(view, 1, "Energy per MB of checkpoint I/O (Figure 8 shape)")
    fig.set_size_inches(_PANEL_SIZE[0] * 1.6 + 1.5, _PANEL_SIZE[1] + 0.8)
    per_op = {op: _energy_cases(view.for_op(op)) for op in view.ops}
    categories = list(dict.fromkeys(name for cases in per_op.values() for name, _ in cases))
    width = 0.8 / len(categories)
    for i, name in enumerate(categories):
        xs, ys, notes = [], [], []
        for g, op in enumerate(view.ops):
            hit = [p for n, p in per_op[op] if n == name]
            if hit:
                xs.append(g - 0.4 + width * (i + 0.5))
                ys.append(hit[0].energy_per_byte * BYTES_PER_MB)
                notes.append(f"{hit[0].setting_label}, {hit[0].processes}p")
        bars = ax.bar(xs, ys, width * 0.92, label=name, color=f"C{i}")
        ax.bar_label(bars, [f"{y:.3g} J\n{t}" for y, t in zip(ys, notes, strict=True)], fontsize=7)
    ax.set_xticks(range(len(view.ops)), list(view.ops))
    ax.set_ylabel("energy per MB (J/MB, 1 MB = 1e6 B)")
    ax.margins(y=0.2)
    ax.grid(axis="y", alpha=0.3)
    ax.legend(fontsize="small", loc="upper left")
    return fig


# --- energy heatmap ---------------------------------------------------------------------------


def _energy_grid(
    view: _View, op: Operation
) -> tuple[list[str], list[int], np.ma.MaskedArray[tuple[int, int], np.dtype[np.float64]]]:
    """J/GB of one op over every setting and process count of the view (unmeasured: masked)."""
    points = view.for_op(op)
    settings = _settings(view.points)
    counts = sorted({p.processes for p in view.points})
    grid = np.full((len(settings), len(counts)), np.nan)
    row = {s.setting_key: i for i, s in enumerate(settings)}
    for p in points:
        grid[row[p.setting_key], counts.index(p.processes)] = p.energy_per_byte * BYTES_PER_GB
    return [s.setting_label for s in settings], counts, np.ma.masked_invalid(grid)


def _cell_text(v: float) -> str:
    return f"{v:.0f}" if v >= 100 else f"{v:.3g}"


def _heatmap_panel(fig: Figure, ax: Axes, view: _View, op: Operation) -> None:
    rows, cols, grid = _energy_grid(view, op)
    image = ax.imshow(grid, aspect="auto", cmap="viridis", origin="lower")
    fig.colorbar(image, ax=ax, label="J/GB (1 GB = 1e9 B)")
    lo, hi = float(grid.min()), float(grid.max())
    for (r, c), v in np.ndenumerate(grid.filled(np.nan)):
        if not math.isnan(v):
            light = hi > lo and (v - lo) / (hi - lo) > 0.6
            color = "black" if light else "white"
            weight = "bold" if v == lo else "normal"
            ax.text(
                c,
                r,
                _cell_text(v),
                ha="center",
                va="center",
                fontsize=7,
                color=color,
                fontweight=weight,
            )
    ax.set_xticks(range(len(cols)), [str(n) for n in cols])
    ax.set_yticks(range(len(rows)), rows)
    ax.set_xlabel("concurrent I/O processes")
    ax.set_ylabel("CPU setting")


def _heatmap_figure(view: _View) -> Figure:
    fig, axes = _figure(view, len(view.ops), "Energy per GB over CPU setting × I/O processes")
    for ax, op in zip(axes, view.ops, strict=True):
        _heatmap_panel(fig, ax, view, op)
        ax.set_title(op)
    return fig
