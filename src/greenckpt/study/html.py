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
th{background:#f3f3f3}td.n{text-align:right}.warn{color:#a33}.bad{color:#fff;background:#a33}.note{color:#555;font-size:.9em}
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
    text = f"{est.get('mean', est['median']):.{digits}g}"
    if est.get("low") is not None:
        text += f" [{est['low']:.{digits}g}, {est['high']:.{digits}g}]"
    return text


def _fmt_pct(sav: dict[str, Any] | None, implausible: dict[str, Any] | None = None) -> str:
    if not sav:
        return "–"
    text = f"{sav['pct']:+.1f} %"
    if sav.get("low") is not None:
        text += f" [{sav['low']:+.1f}, {sav['high']:+.1f}]"
    if implausible:
        why = implausible["why"] + "; likely: " + "; ".join(implausible["likely_causes"])
        return f'<span class="bad" title="{_e(why)}">{text} IMPLAUSIBLE</span>'
    if sav.get("undecided"):
        text = f'<span class="warn" title="the interval contains 0">{text} ≈ 0</span>'
    return text


def _table(
    summary: dict[str, Any],
    keys: tuple[str, ...],
    heads: tuple[str, ...],
    tid: str,
    *,
    overhead: bool = False,
) -> str:
    """One table of the cells: each figure's estimate, then each one's Eq. 2 against the
    baseline (flagged when implausible or undecided); ``overhead``: a last column with the time
    outside useful compute, measured within each run."""
    cols = "".join(f"<th>{_e(h)}</th>" for h in heads)
    last = (
        "<th>outside useful compute, % of it (within each run); Δ: points vs the baseline</th>"
        if overhead
        else ""
    )
    deltas = "".join(f"<th>Δ {_e(h.rsplit(' ', 1)[0])}</th>" for h in heads)
    head = f"<tr><th>cell</th><th>power</th><th>runs</th>{cols}{deltas}{last}</tr>"
    rows = [f"<table id='{tid}'>{head}"]
    for c in summary["cells"]:
        m, s, bad = c["metrics"], c["eq2_pct"], c.get("implausible", {})
        base = " (baseline)" if c["is_baseline"] else ""
        failed = f" + {c['failed_runs']} failed" if c["failed_runs"] else ""
        rows.append(
            f"<tr class='cell'><td>{_e(c['cell'])}{base}</td><td>{_e(c['power_source'])}</td>"
            f"<td class='n'>{c['runs']}{failed}</td>"
            + "".join(f"<td class='n'>{_fmt(m.get(k))}</td>" for k in keys)
            + "".join(f"<td class='n'>{_fmt_pct(s.get(k), bad.get(k))}</td>" for k in keys)
            + (f"<td class='n'>{_fmt_overhead(c)}</td>" if overhead else "")
            + "</tr>"
        )
    rows.append("</table>")
    return "\n".join(rows)


def _fmt_overhead(c: dict[str, Any]) -> str:
    est, diff = c.get("overhead_pct"), c.get("overhead_vs_baseline_pp")
    if not est:
        return "–"
    if est.get("low") is None:
        return f"{est['mean']:.1f} %"
    text = f"{est['mean']:.1f} % [{est['low']:.1f}, {est['high']:.1f}]"
    if diff and diff.get("low") is not None:
        text += f"; Δ {diff['mean']:+.1f} pt [{diff['low']:+.1f}, {diff['high']:+.1f}]"
    return text


def _failures(summary: dict[str, Any]) -> str | None:
    """What each injected failure did, run by run."""
    rows = [
        f"<tr><td>{_e(c['cell'])}</td><td>{_e(r['run'])}</td><td>{_e(r['outcome'])}</td>"
        f"<td>{_e(r['summary'])}</td></tr>"
        for c in summary["cells"]
        for r in (c.get("failures") or {}).get("runs", [])
    ]
    if not rows:
        return None
    head = "<tr><th>cell</th><th>run</th><th>outcome</th><th>what the failure did</th></tr>"
    return f"<table id='failures'>{head}{''.join(rows)}</table>"


def _noise(summary: dict[str, Any]) -> str:
    """The study's noise and the smallest effect it can resolve, per figure."""
    measured = summary.get("measured", {})
    items = []
    for metric, nz in summary.get("noise", {}).items():
        if metric not in ("seconds", "cpu_s", "energy_j"):
            continue
        kind = str(measured.get(metric, "?")).split(" ")[0]
        values = ", ".join(f"{v:.3g}" for v in nz["baseline_values"])
        cv = nz.get("baseline_cv_pct")
        spread = f"±{cv:.1f} %" if cv is not None else "–"
        res = nz.get("resolvable_pct")
        items.append(
            f"<li>{_e(metric)} ({_e(kind)}): baseline runs {_e(values)} — run-to-run spread "
            f"{spread}; with {nz['n']} repeats this study resolves effects of about "
            f"<b>±{res:.1f} %</b> ({_e(nz['resolvable_from'])})</li>"
            if res is not None
            else f"<li>{_e(metric)}: baseline runs {_e(values)}, spread {spread}</li>"
        )
    if not items:
        return "<p class='warn'>No noise estimate: the baseline has fewer than 2 runs.</p>"
    return "<ul id='noise'>" + "".join(items) + "</ul>"


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
    if kinds:
        ax.legend(fontsize=8, loc="lower right")
    ax.invert_yaxis()
    return _svg(fig)


def _bars(summary: dict[str, Any], key: str, xlabel: str, *, savings: bool) -> str | None:
    rows = []
    for c, label in zip(summary["cells"], _labels(summary), strict=True):
        entry = (c["eq2_pct"] if savings else c["metrics"]).get(key)
        if entry:
            value = entry["pct"] if savings else entry.get("mean", entry["median"])
            low, high = entry.get("low"), entry.get("high")
            err = (value - low, high - value) if low is not None else (0.0, 0.0)
            bad = savings and key in c.get("implausible", {})
            rows.append((label + (" IMPLAUSIBLE" if bad else ""), value, err, bad))
    if not rows:
        return None
    fig, ax = plt.subplots(figsize=(9, 0.5 + 0.45 * len(rows)))
    colours = ["#a33" if r[3] else "#5a8dbf" for r in rows]
    ax.barh([r[0] for r in rows], [r[1] for r in rows], color=colours,
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
    measured_power = summary["sources"] == ["measured"]
    if estimated:
        parts.append(
            "<p class='warn'>Power on this machine is ESTIMATED from CPU utilisation (no energy "
            "counter): the measured figures — wall-clock time and the node's busy CPU-seconds "
            "(/proc/stat) — come first; read the energy and power figures after them as orders "
            "of magnitude.</p>"
        )
    stats = summary.get("statistics", {})
    parts += [
        "<p class='note'>How to read this: each cell's figure is the "
        f"{_e(stats.get('cell', 'geometric mean'))} (its median is in summary.json); Δ is "
        "wu2018's Eq. 2, (cell − baseline) / baseline × 100, estimated as "
        f"{_e(stats.get('eq2', ''))}. A Δ marked ≈ 0 has an interval containing 0 (not "
        "distinguishable from the baseline); a Δ marked IMPLAUSIBLE is a cell that does at least "
        "its baseline's work (plus checkpoints or injected failures) yet came out cheaper beyond "
        "the noise — not a saving (hover for the likely causes). Measured and estimated runs are "
        "never pooled.</p>",
        "<h2>Noise: what this study can resolve</h2>",
        _noise(summary),
        "<h2>Conclusions</h2><ul id='conclusions'>"
        + "".join(
            f"<li>{_e(line)}</li>"
            for line in summary.get("conclusions", [])
            if not line.startswith("noise (")  # the section above says it
        )
        + "</ul>",
    ]
    energy = ("energy J", "mean power W", "EPE W")
    power_table = _table(summary, ("energy_j", "mean_power_w", "epe_w"), energy, "energy")
    time_table = _table(
        summary, ("seconds", "cpu_s"), ("time s", "node CPU-s s"), "cells", overhead=True
    )
    power_head = f"<h2>Energy and power ({_e(sources)})</h2>"
    if measured_power:
        parts += [power_head, power_table, "<h2>Time and CPU-seconds (measured)</h2>", time_table]
    else:
        parts += ["<h2>Time and CPU-seconds (measured)</h2>", time_table, power_head, power_table]
    failures = _failures(summary)
    if failures:
        parts += ["<h2>What each injected failure did</h2>", failures]
    lead = "energy_j" if measured_power else "cpu_s"
    lead_label = "energy" if measured_power else "node CPU-seconds (measured)"
    delta = f"Δ energy, % of the baseline ({sources})"
    epe = f"EPE, W = J per second of useful work ({sources})"
    figures = [
        (f"Δ {lead_label} vs the baseline (wu2018 Eq. 2), with 95 % intervals",
         _bars(summary, lead, f"Δ {lead_label}, % of the baseline", savings=True)),
        ("Energy per phase, stacked per cell", _energy_stack(summary)),
        (f"Energy vs the baseline (wu2018 Eq. 2), with 95 % intervals ({sources})",
         None if measured_power else _bars(summary, "energy_j", delta, savings=True)),
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
    """Energy per GB of checkpoint writes and restart reads (saito2013 Fig. 8 style); the
    restart reads are shown whenever a failure was injected, each cell whose failures caused
    no restart marked so."""
    labels = _labels(summary)
    injected = [bool(c.get("failures")) for c in summary["cells"]]
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
    series = [
        (n, col, rows)
        for n, col, rows in series
        if any(v for _, v in rows) or (n == "restart read" and any(injected))
    ]
    if not series:
        return None
    fig, ax = plt.subplots(figsize=(9, 0.5 + 0.45 * len(labels) * len(series)))
    height = 0.8 / len(series)
    for i, (name, colour, rows) in enumerate(series):
        ys = [j + i * height for j in range(len(rows))]
        ax.barh(ys, [v or 0.0 for _, v in rows], height=height, color=colour, label=name)
        if name != "restart read":
            continue
        for y, (_, v), failed in zip(ys, rows, injected, strict=True):
            if failed and not v:
                ax.text(0, y, " failures injected, no restart (nothing read back)",
                        va="center", fontsize=7, color=colour)  # fmt: skip
    ax.set_yticks([j + height * (len(series) - 1) / 2 for j in range(len(labels))], labels)
    ax.set_xlabel(f"energy per GB moved, J/GB ({', '.join(summary['sources'])})")
    ax.legend(fontsize=8, loc="lower right")
    ax.invert_yaxis()
    return _svg(fig)
