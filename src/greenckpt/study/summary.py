"""A study's numbers: every run, every cell's statistics, the savings against the baseline.

Why separate from the page: the same summary feeds ``summary.json``, the CSV files and the
HTML report (greenckpt.study.html), so a number in the page is the number in the files. Its
format: docs/formats.md ("Study summary"). A
cell's baseline is the cell with the same levels except the factors named in the study's
``baseline`` (e.g. the same policy and size with ``checkpoint = "none"``). Runs of different
power sources (measured, estimated) are summarised apart, never pooled.
"""

from __future__ import annotations

import csv
import json
import os
from collections.abc import Iterable
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np

from greenckpt.study import checks
from greenckpt.study.stats import (
    CELL_METHOD,
    PAIRED_METHOD,
    WELCH_METHOD,
    cell_estimate,
    eq2,
    mean_ci,
)

__all__ = ["MEASURED", "METRICS", "summarise", "write_report"]

METRICS = ("seconds", "cpu_s", "energy_j", "mean_power_w", "epe_w")
"""The figures summarised per cell and compared with the baseline (wu2018: runtime, energy,
power; saito2013: EPE; and the node's CPU-seconds, measured where energy is estimated)."""
MEASURED = ("seconds", "cpu_s")
"""Always measured: wall-clock seconds, and the node's busy CPU-seconds (/proc/stat). The
others are measured or estimated as the run's ``power_source`` says."""


def _journal(directory: Path) -> list[dict[str, Any]]:
    path = directory / "runs.jsonl"
    out = []
    for line in path.read_text().splitlines() if path.exists() else []:
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return out


def _baseline_cell(factors: dict[str, Any], baseline: dict[str, Any]) -> str:
    levels = {**factors, **{k: v for k, v in baseline.items() if k in factors}}
    return ",".join(f"{k}={_text(v)}" for k, v in levels.items()) or "all"


def _text(value: object) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


def _values(runs: Iterable[dict[str, Any]], metric: str) -> list[float]:
    return [float(r["metrics"][metric]) for r in runs if r["metrics"].get(metric) is not None]


def _pairs(
    runs: list[dict[str, Any]], base: list[dict[str, Any]], metric: str
) -> list[tuple[float, float]]:
    by_block = {r["block"]: r for r in base if r["metrics"].get(metric) is not None}
    return [
        (float(r["metrics"][metric]), float(by_block[r["block"]]["metrics"][metric]))
        for r in runs
        if r["metrics"].get(metric) is not None and r["block"] in by_block
    ]


def summarise(directory: Path, baseline: dict[str, Any] | None = None) -> dict[str, Any]:
    """Every cell's estimates, Eq. 2 savings, physics checks and injected failures' outcomes,
    and the study's noise, from ``runs.jsonl`` (format: docs/formats.md, "Study summary")."""
    identity: dict[str, Any] = {}
    if (directory / "study.json").exists():
        identity = json.loads((directory / "study.json").read_text())
    baseline = identity.get("baseline", {}) if baseline is None else baseline
    paired_design = identity.get("order", "blocks") == "blocks"
    journal = _journal(directory)
    groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
    factors_of: dict[str, dict[str, Any]] = {}
    failed: dict[str, int] = {}
    for run in journal:
        factors_of[run["cell"]] = run.get("factors", {})
        if not run.get("ok") or not run.get("metrics"):
            failed[run["cell"]] = failed.get(run["cell"], 0) + 1
            continue
        source = str(run["metrics"].get("power_source"))
        groups.setdefault((run["cell"], source), []).append(run)
    outcomes = checks.failure_outcomes(journal, directory)
    cells = []
    paired_logs: dict[str, list[np.ndarray]] = {m: [] for m in METRICS}
    for (cell, source), runs in sorted(groups.items()):
        base_name = _baseline_cell(factors_of[cell], baseline) if baseline else None
        base_runs = groups.get((base_name, source), []) if base_name else []
        is_base = base_name == cell
        entry: dict[str, Any] = {
            "cell": cell,
            "factors": factors_of[cell],
            "power_source": source,
            "runs": len(runs),
            "failed_runs": failed.get(cell, 0),
            "baseline_cell": base_name,
            "is_baseline": is_base,
            "more_work_than_baseline": (
                not is_base and checks.more_work(factors_of[cell], baseline or {})
            ),
            "io_only_vs_baseline": not is_base and checks.io_only(factors_of[cell], baseline or {}),
            "metrics": {},
            "eq2_pct": {},
            "energy_by_kind_j": _by_kind(runs),
            "checkpoint_j_per_gb": _per_gb(runs, "checkpoint", "bytes_written"),
            "restart_j_per_gb": _per_gb(runs, "restart", "bytes_read"),
            "restarts": sum(
                int(((r["metrics"].get("by_kind") or {}).get("restart") or {}).get("count") or 0)
                for r in runs
            ),
        }
        for metric in METRICS:
            logs = _compare(entry, metric, runs, base_runs, paired_design)
            if logs is not None:
                paired_logs[metric].append(logs)
        _failures(entry, runs, outcomes)
        overhead = _overheads(runs)
        if overhead:
            entry["overhead_pct"] = mean_ci(list(overhead.values()))
        base_over = _overheads(base_runs)
        diffs = [v - base_over[b] for b, v in overhead.items() if b in base_over]
        if paired_design and diffs and not is_base:
            entry["overhead_vs_baseline_pp"] = mean_ci(diffs)
        if base_name and not base_runs and not is_base:
            entry["note"] = f"no {source} runs of its baseline cell {base_name}"
        entry["_runs"], entry["_base_runs"] = runs, base_runs
        cells.append(entry)
    n = int(identity.get("repeats") or max((c["runs"] for c in cells), default=0))
    baseline_groups = [c["_runs"] for c in cells if c["is_baseline"]]
    noise = {
        m: v
        for m in METRICS
        if (v := checks.noise(baseline_groups, paired_logs[m], m, n)) is not None
    }
    for entry in cells:
        runs, base_runs = entry.pop("_runs"), entry.pop("_base_runs")
        if entry["more_work_than_baseline"] or entry["io_only_vs_baseline"]:
            found = checks.implausible(entry, runs, base_runs, journal, noise)
            if found:
                entry["implausible"] = found
    sources = sorted({c["power_source"] for c in cells})
    summary: dict[str, Any] = {
        "format": "greenckpt-study-summary",
        "format_version": 2,
        "study": identity,
        "runs": len(journal),
        "failed_runs": sum(failed.values()),
        "sources": sources,
        "measured": _measured(sources),
        "statistics": {
            "level": 0.95,
            "cell": CELL_METHOD,
            "eq2": PAIRED_METHOD if paired_design else WELCH_METHOD,
            "undecided": "the interval contains 0: not distinguishable from the baseline",
        },
        "noise": noise,
        "cells": cells,
    }
    summary["conclusions"] = checks.conclusions(summary)
    return summary


def _compare(
    entry: dict[str, Any],
    metric: str,
    runs: list[dict[str, Any]],
    base_runs: list[dict[str, Any]],
    paired_design: bool,
) -> np.ndarray | None:
    """Fill ``entry``'s estimate and Eq. 2 of ``metric``; its paired log-ratios (for the
    study's noise), if any."""
    values = _values(runs, metric)
    if values:
        entry["metrics"][metric] = asdict(cell_estimate(values))
    base_values = _values(base_runs, metric)
    if not values or not base_values or entry["is_baseline"]:
        return None
    pairs = _pairs(runs, base_runs, metric) if paired_design else None
    try:
        saving = eq2(values, base_values, pairs=pairs)
    except ValueError:
        return None
    entry["eq2_pct"][metric] = {
        **asdict(saving),
        "undecided": saving.undecided,
        "half_width_pct": saving.half_width_pct,
    }
    if pairs and len(pairs) >= 2 and all(a > 0 and b > 0 for a, b in pairs):
        return np.log([a / b for a, b in pairs])
    return None


def _overheads(runs: list[dict[str, Any]]) -> dict[int, float]:
    """Each run's time outside useful compute (checkpoints, restarts, rework...) in % of its
    useful compute time, by block: measured within the run, so the machine's load between
    runs cancels."""
    out = {}
    for r in runs:
        seconds, useful = r["metrics"].get("seconds"), r["metrics"].get("useful_compute_s")
        if seconds and useful:
            out[int(r.get("block", 0))] = (float(seconds) / float(useful) - 1.0) * 100.0
    return out


def _failures(
    entry: dict[str, Any], runs: list[dict[str, Any]], outcomes: dict[str, dict[str, Any]]
) -> None:
    """``entry["failures"]``: what each run's injected failure did, and how many did what."""
    ran = [outcomes[str(r["run"])] | {"run": r["run"]} for r in runs if str(r["run"]) in outcomes]
    if ran:
        kinds = [o["outcome"] for o in ran]
        entry["failures"] = {"runs": ran, "counts": {k: kinds.count(k) for k in sorted(set(kinds))}}


def _measured(sources: list[str]) -> dict[str, str]:
    """Which figures are measured and which estimated, by metric."""
    power = (
        "measured"
        if sources == ["measured"]
        else "estimated"
        if "measured" not in sources
        else "mixed"
    )
    return {
        "seconds": "measured (wall clock)",
        "cpu_s": "measured (the node's busy CPU-seconds, /proc/stat: every process on the node)",
        **{m: power for m in ("energy_j", "mean_power_w", "epe_w")},
    }


def _by_kind(runs: list[dict[str, Any]]) -> dict[str, float]:
    kinds = {k for r in runs for k in (r["metrics"].get("by_kind") or {})}
    out = {}
    for kind in sorted(kinds):
        values = [
            float(v["energy_j"])
            for r in runs
            if (v := (r["metrics"].get("by_kind") or {}).get(kind))
            and v.get("energy_j") is not None
        ]
        if values:
            out[kind] = float(np.median(values))
    return out


def _per_gb(runs: list[dict[str, Any]], kind: str, moved: str) -> float | None:
    """Median energy of the ``kind`` phases per GB they moved (``moved``: the metric)."""
    values = []
    for r in runs:
        phase = (r["metrics"].get("by_kind") or {}).get(kind) or {}
        count = r["metrics"].get(moved) or 0
        if phase.get("energy_j") is not None and count > 0:
            values.append(float(phase["energy_j"]) / (count / 1e9))
    return float(np.median(values)) if values else None


def _write_csvs(directory: Path, summary: dict[str, Any]) -> None:
    journal = _journal(directory)
    with open(directory / "runs.csv", "w", newline="") as f:
        w = csv.writer(f)
        factors = sorted({k for r in journal for k in r.get("factors", {})})
        w.writerow(["run", "cell", "block", "ok", *factors, "power_source", *METRICS, "cpu_s"])
        for r in journal:
            m = r.get("metrics") or {}
            w.writerow(
                [r["run"], r["cell"], r["block"], r.get("ok")]
                + [r.get("factors", {}).get(k) for k in factors]
                + [m.get("power_source"), *(m.get(k) for k in METRICS), m.get("cpu_s")]
            )
    with open(directory / "cells.csv", "w", newline="") as f:
        w = csv.writer(f)
        head = ["cell", "power_source", "runs", "failed_runs"]
        for metric in METRICS:
            head += [f"{metric}_median", f"{metric}_gmean", f"{metric}_low", f"{metric}_high"]
            head += [f"{metric}_eq2_pct", f"{metric}_eq2_low", f"{metric}_eq2_high"]
            head += [f"{metric}_implausible"]
        w.writerow(head)
        for c in summary["cells"]:
            row = [c["cell"], c["power_source"], c["runs"], c["failed_runs"]]
            for metric in METRICS:
                est = c["metrics"].get(metric, {})
                sav = c["eq2_pct"].get(metric, {})
                row += [est.get("median"), est.get("mean"), est.get("low"), est.get("high")]
                row += [sav.get("pct"), sav.get("low"), sav.get("high")]
                row += [metric in c.get("implausible", {})]
            w.writerow(row)


def write_report(directory: Path, baseline: dict[str, Any] | None = None) -> Path:
    """Write summary.json, cells.csv, runs.csv and report.html into ``directory``; the
    report's path."""
    from greenckpt.study.html import render  # noqa: PLC0415 - matplotlib only here

    summary = summarise(directory, baseline)
    tmp = directory / "summary.json.tmp"
    tmp.write_text(json.dumps(summary, indent=2) + "\n")
    os.replace(tmp, directory / "summary.json")
    _write_csvs(directory, summary)
    page = directory / "report.html"
    tmp = directory / "report.html.tmp"
    tmp.write_text(render(directory, summary), encoding="utf-8")
    os.replace(tmp, page)
    return page
