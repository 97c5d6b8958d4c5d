"""The study report: one self-contained HTML page a person reads.

Why self-contained: the page is mailed, archived beside the runs and opened years later, so
it holds its plots (inline SVG drawn with matplotlib) and no script, font or link to fetch.
Every energy and power figure is labelled measured or estimated; everything taken from files
is escaped.
"""

from __future__ import annotations

import html
import io
import json
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

__all__ = ["render"]

_CSS = """
body{font-family:system-ui,sans-serif;max-width:1100px;margin:2em auto;color:#222}
h1{font-size:1.6em}h2{margin-top:1.6em;border-bottom:1px solid #ccc}
table{border-collapse:collapse;font-size:.9em}td,th{border:1px solid #ccc;padding:3px 7px}
th{background:#f3f3f3}td.n{text-align:right}.warn{color:#a33}.note{color:#555;font-size:.9em}
figure{margin:1em 0}figcaption{font-size:.9em;color:#444}
"""
_KIND_COLOURS = {
    "compute": "#9db4cf",
    "checkpoint": "#d9822b",
    "restart": "#b33",
    "flush": "#e6b35a",
    "rework": "#8e6bb8",
    "lost": "#777",
}


def _e(text: object) -> str:
    return html.escape(str(text), quote=True)


def _svg(fig: Any) -> str:
    buf = io.StringIO()
    fig.savefig(buf, format="svg", bbox_inches="tight")
    plt.close(fig)
    text = buf.getvalue()
    return text[text.index("<svg") :]


def _fmt(est: dict[str, Any] | None, digits: int = 3) -> str:
    if not est:
        return "–"
    text = f"{est['median']:.{digits}g}"
    if est.get("low") is not None:
        text += f" [{est['low']:.{digits}g}, {est['high']:.{digits}g}]"
    return text


def _fmt_pct(sav: dict[str, Any] | None) -> str:
    if not sav:
        return "–"
    text = f"{sav['pct']:+.1f} %"
    if sav.get("low") is not None:
        text += f" [{sav['low']:+.1f}, {sav['high']:+.1f}]"
    if sav.get("undecided"):
        text = f'<span class="warn" title="the interval contains 0">{text} ≈ 0</span>'
    return text


def _table(summary: dict[str, Any]) -> str:
    rows = [
        "<table id='cells'><tr><th>cell</th><th>power</th><th>runs</th><th>time s</th>"
        "<th>energy J</th><th>mean power W</th><th>EPE W</th><th>Δ time</th><th>Δ energy</th>"
        "<th>Δ power</th><th>Δ EPE</th></tr>"
    ]
    for c in summary["cells"]:
        m, s = c["metrics"], c["eq2_pct"]
        base = " (baseline)" if c["is_baseline"] else ""
        failed = f" + {c['failed_runs']} failed" if c["failed_runs"] else ""
        rows.append(
            f"<tr class='cell'><td>{_e(c['cell'])}{base}</td><td>{_e(c['power_source'])}</td>"
            f"<td class='n'>{c['runs']}{failed}</td>"
            + "".join(
                f"<td class='n'>{_fmt(m.get(k))}</td>"
                for k in ("seconds", "energy_j", "mean_power_w", "epe_w")
            )
            + "".join(
                f"<td class='n'>{_fmt_pct(s.get(k))}</td>"
                for k in ("seconds", "energy_j", "mean_power_w", "epe_w")
            )
            + "</tr>"
        )
    rows.append("</table>")
    return "\n".join(rows)


def _labels(summary: dict[str, Any]) -> list[str]:
    return [f"{c['cell']} ({c['power_source']})" for c in summary["cells"]]


def _energy_stack(summary: dict[str, Any]) -> str:
    cells = summary["cells"]
    kinds = sorted({k for c in cells for k in c["energy_by_kind_j"]})
    fig, ax = plt.subplots(figsize=(9, 0.5 + 0.45 * len(cells)))
    left = [0.0] * len(cells)
    for kind in kinds:
        widths = [c["energy_by_kind_j"].get(kind, 0.0) for c in cells]
        ax.barh(_labels(summary), widths, left=left, label=kind, color=_KIND_COLOURS.get(kind))
        left = [a + b for a, b in zip(left, widths, strict=True)]
    ax.set_xlabel(f"energy per phase kind, J (median per kind; {', '.join(summary['sources'])})")
    ax.legend(fontsize=8, loc="lower right")
    ax.invert_yaxis()
    return _svg(fig)


def _bars(summary: dict[str, Any], key: str, xlabel: str, *, savings: bool) -> str | None:
    rows = []
    for c, label in zip(summary["cells"], _labels(summary), strict=True):
        entry = (c["eq2_pct"] if savings else c["metrics"]).get(key)
        if entry:
            value = entry["pct"] if savings else entry["median"]
            low, high = entry.get("low"), entry.get("high")
            err = (value - low, high - value) if low is not None else (0.0, 0.0)
            rows.append((label, value, err))
    if not rows:
        return None
    fig, ax = plt.subplots(figsize=(9, 0.5 + 0.45 * len(rows)))
    ax.barh([r[0] for r in rows], [r[1] for r in rows], color="#5a8dbf",
            xerr=[[r[2][0] for r in rows], [r[2][1] for r in rows]], capsize=3)  # fmt: skip
    if savings:
        ax.axvline(0, color="#333", linewidth=0.8)
    ax.set_xlabel(xlabel)
    ax.invert_yaxis()
    return _svg(fig)


def _power_traces(directory: Path, summary: dict[str, Any]) -> str | None:
    journal = [json.loads(x) for x in (directory / "runs.jsonl").read_text().splitlines() if x]
    shown = []
    for c in summary["cells"]:
        runs = [r for r in journal if r["cell"] == c["cell"] and r.get("ok")]
        target = (c["metrics"].get("energy_j") or {}).get("median")
        if not runs or target is None:
            continue
        run = min(runs, key=lambda r: abs((r["metrics"].get("energy_j") or 0) - target))
        path = directory / run["report"] / "report.json"
        if path.exists():
            shown.append((c, run, json.loads(path.read_text())))
    shown = [s for s in shown if (s[2].get("trace") or {}).get("t_s")]
    if not shown:
        return None
    fig, axes = plt.subplots(len(shown), 1, figsize=(9, 1.6 * len(shown) + 0.6), squeeze=False)
    for ax, (c, run, report) in zip(axes[:, 0], shown, strict=True):
        trace = report["trace"]
        ax.plot(trace["t_s"], trace["power_w"], linewidth=0.8, color="#333")
        for rec in report.get("records", []):
            if rec["kind"] != "compute":
                ax.axvspan(
                    rec["start_s"],
                    rec["end_s"],
                    color=_KIND_COLOURS.get(rec["kind"], "#ccc"),
                    alpha=0.5,
                )
        ax.set_title(f"{c['cell']} — run {run['run']}", fontsize=9, loc="left")
        ax.set_ylabel(f"W ({trace.get('source')})", fontsize=8)
    axes[-1, 0].set_xlabel("seconds since the run started (shaded: checkpoint, restart, rework...)")
    fig.tight_layout()
    return _svg(fig)


def render(directory: Path, summary: dict[str, Any]) -> str:
    """The report page for the study in ``directory`` (see the module docstring)."""
    study = summary.get("study", {})
    sources = ", ".join(summary["sources"]) or "none"
    estimated = "estimated" in summary["sources"]
    parts = [
        "<!DOCTYPE html><html><head><meta charset='utf-8'>",
        f"<title>greenckpt study {_e(study.get('name', directory.name))}</title>",
        f"<style>{_CSS}</style></head><body>",
        f"<h1>Study {_e(study.get('name', directory.name))}</h1>",
        f"<p>Mirrors: {_e(study.get('mirrors') or '–')}</p>",
        f"<p>Design: factors {_e(json.dumps(study.get('factors', {})))}, "
        f"{_e(study.get('repeats', '?'))} repeats, order {_e(study.get('order', '?'))}, "
        f"baseline {_e(json.dumps(study.get('baseline', {})))}; {summary['runs']} runs, "
        f"{summary['failed_runs']} failed. Power: <b>{_e(sources)}</b>.</p>",
    ]
    if estimated:
        parts.append(
            "<p class='warn'>Power on this machine is ESTIMATED from CPU utilisation (no energy "
            "counter): read the energy and power figures as orders of magnitude.</p>"
        )
    parts += [
        "<p class='note'>How to read this: each cell's median over its runs, with a 95 % "
        "percentile-bootstrap interval in brackets; Δ is wu2018's Eq. 2, (cell − baseline) / "
        "baseline × 100, of the medians, its interval paired by block where the runs were made "
        "in blocks; a Δ in red marked ≈ 0 has an interval containing 0 (not distinguishable "
        "from the baseline). Measured and estimated runs are never pooled.</p>",
        "<h2>Cells</h2>",
        _table(summary),
    ]
    delta = f"Δ energy, % of the baseline ({sources})"
    epe = f"EPE, W = J per second of useful work ({sources})"
    figures = [
        ("Energy per phase, stacked per cell", _energy_stack(summary)),
        ("Energy vs the baseline (wu2018 Eq. 2), with 95 % intervals",
         _bars(summary, "energy_j", delta, savings=True)),
        ("EPE per cell (saito2013 Fig. 7 style)", _bars(summary, "epe_w", epe, savings=False)),
        ("Energy per GB by operation (checkpoint write, restart read)", _per_gb(summary)),
        ("Power over time, one representative run per cell", _power_traces(directory, summary)),
    ]  # fmt: skip
    for caption, svg in figures:
        if svg:
            parts.append(f"<h2>{_e(caption)}</h2><figure class='plot'>{svg}</figure>")
    parts.append(
        "<p class='note'>Files beside this page: summary.json (every number above), cells.csv, "
        "runs.csv, runs.jsonl, runs/&lt;id&gt;/report/.</p></body></html>"
    )
    return "\n".join(parts)


def _per_gb(summary: dict[str, Any]) -> str | None:
    """Energy per GB of checkpoint writes and restart reads (saito2013 Fig. 8 style)."""
    labels = _labels(summary)
    series = [
        (
            name,
            colour,
            [(label, c.get(key)) for c, label in zip(summary["cells"], labels, strict=True)],
        )
        for name, key, colour in (
            ("checkpoint write", "checkpoint_j_per_gb", "#d9822b"),
            ("restart read", "restart_j_per_gb", "#b33"),
        )
    ]
    series = [(n, col, rows) for n, col, rows in series if any(v for _, v in rows)]
    if not series:
        return None
    fig, ax = plt.subplots(figsize=(9, 0.5 + 0.45 * len(labels) * len(series)))
    height = 0.8 / len(series)
    for i, (name, colour, rows) in enumerate(series):
        ys = [j + i * height for j in range(len(rows))]
        ax.barh(ys, [v or 0.0 for _, v in rows], height=height, color=colour, label=name)
    ax.set_yticks([j + height * (len(series) - 1) / 2 for j in range(len(labels))], labels)
    ax.set_xlabel(f"energy per GB moved, J/GB ({', '.join(summary['sources'])})")
    ax.legend(fontsize=8, loc="lower right")
    ax.invert_yaxis()
    return _svg(fig)
