"""What a study's numbers may claim: its noise, results that contradict physics, and what each
injected failure did.

Why: a study on a shared machine can report a checkpointing run 30 % cheaper than the same run
without checkpoints, with an interval that excludes 0 — impossible, since it did strictly more
work. So (1) the run-to-run spread is measured from the study's own runs (the baseline cell's
runs, and the paired log-ratios of every compared cell) and turned into the smallest effect
this study can resolve; (2) a cell that does at least its baseline's work (the same run plus
checkpoints or injected failures) and comes out cheaper beyond the noise, or a cell that
changes only how checkpoints are written and saves more than its baseline spent outside
compute, is flagged implausible with its likely causes, never presented as a saving; (3)
each run with an injected failure says what it did: a restart from which level, a checkpoint
rejected by its digest, a result changed (its digest differs from the failure-free runs'), or
no effect.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np

from greenckpt.study.stats import resolvable_pct

__all__ = [
    "CHECKED",
    "IO_FACTORS",
    "MORE_WORK_FACTORS",
    "app_result",
    "conclusions",
    "failure_outcomes",
    "implausible",
    "io_only",
    "more_work",
    "noise",
    "outside_compute_pct",
]

CHECKED = ("seconds", "cpu_s", "energy_j")
"""The figures that cannot fall when a run does more work (mean power and EPE may)."""
MORE_WORK_FACTORS = ("checkpoint", "failure")
"""Factors whose level other than "none" adds work to a run that is otherwise the same."""
IO_FACTORS = ("codec", "io_processes", "target")
"""Factors that change only how checkpoints are written: the compute phases stay the same, so
a cell differing from its baseline only in these can save at most what the baseline spent
outside its compute phases."""


def app_result(run_dir: Path) -> dict[str, Any] | None:
    """The application's result (its last JSON line with a ``digest`` in ``output.log``: the
    example applications print one) and the checkpoints its restart passed over (``skipped``
    lines); None when the run printed none."""
    path = run_dir / "output.log"
    if not path.exists():
        return None
    result: dict[str, Any] | None = None
    skipped: list[str] = []
    for line in path.read_text(errors="replace").splitlines():
        text = line.strip()
        if text.startswith("{") and '"digest"' in text:
            try:
                doc = json.loads(text)
            except json.JSONDecodeError:
                continue
            if isinstance(doc, dict):
                result = doc
        elif "  skipped " in line:
            skipped.append(line.split("skipped ", 1)[1].strip())
    if result is None:
        return None
    keep = ("digest", "restored", "checkpoints", "bitflips", "failed_checkpoints")
    return {k: result.get(k) for k in keep} | {"skipped": skipped}


def more_work(factors: dict[str, Any], baseline: dict[str, Any]) -> bool:
    """Whether a cell is its baseline cell plus checkpoints or injected failures: every factor
    in which they differ is one of :data:`MORE_WORK_FACTORS`, "none" in the baseline."""
    differ = [k for k, v in factors.items() if k in baseline and str(baseline[k]) != str(v)]
    return bool(differ) and all(
        k in MORE_WORK_FACTORS and str(baseline[k]) == "none" for k in differ
    )


def io_only(factors: dict[str, Any], baseline: dict[str, Any]) -> bool:
    """Whether a cell differs from its baseline cell only in :data:`IO_FACTORS`."""
    differ = [k for k, v in factors.items() if k in baseline and str(baseline[k]) != str(v)]
    return bool(differ) and all(k in IO_FACTORS for k in differ)


def outside_compute_pct(base_runs: list[dict[str, Any]], metric: str) -> float | None:
    """The largest share, in %, of ``metric`` that the baseline's runs spent outside their
    compute phases (checkpoints, restarts, flushes...): what an I/O-only change can save at
    most. Seconds' shares stand for CPU-seconds; None without phase figures."""
    key = "energy_j" if metric == "energy_j" else "seconds"
    shares = []
    for r in base_runs:
        kinds = r["metrics"].get("by_kind") or {}
        total = sum(float(v.get(key) or 0.0) for v in kinds.values())
        if total > 0 and "compute" in kinds:
            shares.append((total - float(kinds["compute"].get(key) or 0.0)) / total * 100)
    return max(shares) if shares else None


def _logs(runs: Iterable[dict[str, Any]], metric: str) -> np.ndarray:
    values = [r["metrics"].get(metric) for r in runs]
    logs: np.ndarray = np.log([float(v) for v in values if v is not None and v > 0])
    return logs


def _pooled(groups: Iterable[np.ndarray]) -> tuple[float | None, int]:
    """The pooled standard deviation of groups of log values (each about its own mean) and
    its degrees of freedom."""
    squares, df = 0.0, 0
    for g in groups:
        if g.size >= 2:
            squares += float(((g - g.mean()) ** 2).sum())
            df += g.size - 1
    return (math.sqrt(squares / df), df) if df else (None, 0)


def noise(
    baseline_groups: list[list[dict[str, Any]]],
    paired_logs: list[np.ndarray],
    metric: str,
    n: int,
) -> dict[str, Any] | None:
    """The run-to-run spread of ``metric``: the baseline cells' runs (pooled sd of their log
    values, as a percentage) and the compared cells' paired log-ratios (pooled), and the
    smallest effect ``n`` repeats resolve (the expected half-width of a 95 % interval: from the
    paired spread, or from √2 × the baseline's when there are no pairs)."""
    base_sd, base_df = _pooled(_logs(g, metric) for g in baseline_groups)
    pair_sd, pair_df = _pooled(paired_logs)
    if base_sd is None and pair_sd is None:
        return None
    values = [
        round(float(r["metrics"][metric]), 4)
        for g in baseline_groups
        for r in g
        if r["metrics"].get(metric) is not None
    ]
    sd = pair_sd if pair_sd is not None else math.sqrt(2.0) * (base_sd or 0.0)
    source = (
        f"paired log-ratios of the compared cells (pooled, {pair_df} df)"
        if pair_sd is not None
        else f"√2 × the baseline's run-to-run spread ({base_df} df): no pairs"
    )
    return {
        "baseline_values": values,
        "baseline_cv_pct": None if base_sd is None else round(math.expm1(base_sd) * 100, 2),
        "baseline_df": base_df,
        "paired_sd_log": None if pair_sd is None else round(pair_sd, 5),
        "paired_df": pair_df,
        "n": n,
        "resolvable_pct": None if (r := resolvable_pct(sd, n)) is None else round(r, 2),
        "resolvable_from": source,
    }


def _position(journal: list[dict[str, Any]]) -> dict[str, tuple[int, int]]:
    """Each run's (index in the study, index within its block), from the run ids' order."""
    order = sorted(journal, key=lambda r: str(r["run"]))
    within: dict[int, int] = {}
    out = {}
    for i, r in enumerate(order):
        block = int(r.get("block", 0))
        out[str(r["run"])] = (i, within.get(block, 0))
        within[block] = within.get(block, 0) + 1
    return out


def implausible(
    entry: dict[str, Any],
    runs: list[dict[str, Any]],
    base_runs: list[dict[str, Any]],
    journal: list[dict[str, Any]],
    noise_of: dict[str, Any],
) -> dict[str, Any]:
    """Each of :data:`CHECKED` whose Eq. 2 interval lies wholly below what physics allows, with
    why it cannot be a saving and the likely causes (noise, order, throttling or other load),
    each with its evidence. What physics allows: nothing below 0 for a cell that does at least
    its baseline's work (:func:`more_work`); no saving larger than the baseline's share outside
    compute for a cell that changes only how checkpoints are written (:func:`io_only`)."""
    out = {}
    base, cell = entry["baseline_cell"], entry["cell"]
    for metric in CHECKED:
        saving = entry["eq2_pct"].get(metric)
        if not saving or saving.get("high") is None:
            continue
        if entry.get("more_work_than_baseline"):
            limit = 0.0
            why = (
                f"{cell} does at least the work of {base} (plus checkpoints or injected "
                "failures), so it cannot cost less: this is not a saving"
            )
        elif entry.get("io_only_vs_baseline"):
            share = outside_compute_pct(base_runs, metric)
            if share is None:
                continue
            limit = share
            why = (
                f"{cell} differs from {base} only in how checkpoints are written, which can "
                f"save at most the {share:.1f} % of the baseline spent outside compute: a "
                "larger saving is not caused by it"
            )
        else:
            continue
        if saving["high"] >= -limit:
            continue
        causes = _causes(metric, saving, runs, base_runs, journal, noise_of.get(metric))
        out[metric] = {"why": why, "limit_pct": round(-limit, 2), "likely_causes": causes}
    return out


def _causes(
    metric: str,
    saving: dict[str, Any],
    runs: list[dict[str, Any]],
    base_runs: list[dict[str, Any]],
    journal: list[dict[str, Any]],
    noise: dict[str, Any] | None,
) -> list[str]:
    causes = []
    cv = (noise or {}).get("baseline_cv_pct")
    if saving["n"] < 5 or (cv is not None and 2 * cv >= abs(saving["pct"])):
        spread = f"the baseline's runs spread ±{cv:.1f} %" if cv is not None else "no spread"
        causes.append(f"noise: {saving['n']} pairs, {spread} ({metric})")
    pos = _position(journal)
    runs_by_block = {r["block"]: r for r in runs}
    earlier = [
        pos[str(b["run"])][1] < pos[str(runs_by_block[b["block"]]["run"])][1]
        for b in base_runs
        if b["block"] in runs_by_block
    ]
    seq = [(pos[str(r["run"])][0], r["metrics"].get(metric)) for r in journal if r.get("ok")]
    seq = [(i, float(v)) for i, v in seq if v is not None and v > 0]
    rho = _spearman(seq) if len(seq) >= 4 else 0.0
    if earlier and (all(earlier) or not any(earlier)):
        where = "before" if all(earlier) else "after"
        causes.append(
            f"order: the baseline ran {where} this cell in every block; the study's {metric} "
            f"has a rank correlation of {rho:+.2f} with the run order"
        )
    elif abs(rho) >= 0.5:
        causes.append(f"order: the study's {metric} drifted with the run order (ρ = {rho:+.2f})")
    load = _busy_ratio(runs), _busy_ratio(base_runs)
    if load[0] is not None and load[1] is not None and abs(load[0] / load[1] - 1) > 0.05:
        causes.append(
            f"throttling or other load: the node's busy CPU-seconds per second were {load[1]:.2f} "
            f"in the baseline's runs and {load[0]:.2f} in this cell's (the node's CPU-s count "
            "every process, other users' too)"
        )
    if not causes:
        causes.append("unexplained: read the runs' output.log and reports")
    return causes


def _busy_ratio(runs: list[dict[str, Any]]) -> float | None:
    pairs = [(r["metrics"].get("cpu_s"), r["metrics"].get("seconds")) for r in runs]
    ratios = [c / s for c, s in pairs if c is not None and s]
    return float(np.median(ratios)) if ratios else None


def _spearman(seq: list[tuple[int, float]]) -> float:
    x = np.argsort(np.argsort([i for i, _ in seq])).astype(float)
    y = np.argsort(np.argsort([v for _, v in seq])).astype(float)
    if x.std() == 0 or y.std() == 0:
        return 0.0
    return float(np.corrcoef(x, y)[0, 1])


def failure_outcomes(journal: list[dict[str, Any]], directory: Path) -> dict[str, dict[str, Any]]:
    """What the injected failure of each run did (by run id), for the runs whose ``failure``
    factor is not "none": its result compared with the failure-free runs' of the same size."""
    results = {
        str(r["run"]): r.get("app_result") or app_result(directory / "runs" / str(r["run"]))
        for r in journal
    }
    reference: dict[str, set[str]] = {}
    for r in journal:
        result = results[str(r["run"])]
        if str(r.get("factors", {}).get("failure", "none")) == "none" and r.get("ok") and result:
            reference.setdefault(str(r.get("factors", {}).get("size", "")), set()).add(
                str(result["digest"])
            )
    out = {}
    for r in journal:
        failure = str(r.get("factors", {}).get("failure", "none"))
        if failure != "none":
            ref = reference.get(str(r.get("factors", {}).get("size", "")), set())
            out[str(r["run"])] = _outcome(failure, results[str(r["run"])], ref)
    return out


def _outcome(failure: str, result: dict[str, Any] | None, reference: set[str]) -> dict[str, Any]:
    if result is None:
        return {"injected": failure, "outcome": "no result", "summary": "the run printed no result"}
    restored = result.get("restored") or None
    level = restored.get("level") if isinstance(restored, dict) else None
    skipped = list(result.get("skipped") or [])
    if len(reference) != 1:
        changed = None
        compared = "no single failure-free result to compare with"
    else:
        changed = result.get("digest") not in reference
        compared = (
            "result changed (digest differs from the failure-free runs')"
            if changed
            else ("result identical to the failure-free runs'")
        )
    parts = []
    if failure.startswith("bitflip@"):
        parts.append(f"{result.get('bitflips') or 0} bit flips injected in memory, none detected")
    if skipped:
        parts.append(f"a digest check rejected {len(skipped)} checkpoint(s)")
    parts.append(f"restart from level {level}" if level is not None else "no restart")
    parts.append(compared)
    kind = "restart" if level is not None else "detected" if skipped else None
    if kind is None:
        kind = {True: "changed result", False: "no effect", None: "unknown"}[changed]
    return {
        "injected": failure,
        "outcome": kind,
        "detected": bool(skipped),
        "restart_level": level,
        "result_changed": changed,
        "bitflips": result.get("bitflips"),
        "summary": "; ".join(parts),
    }


LABELS = {
    "seconds": "time",
    "cpu_s": "node CPU-s",
    "energy_j": "energy",
    "mean_power_w": "mean power",
    "epe_w": "EPE",
}


def conclusions(summary: dict[str, Any]) -> list[str]:
    """What the study can and cannot conclude, one line each: its noise, then every compared
    cell's measured figures (time, CPU-seconds) before its energy (labelled as measured or
    estimated), and what its injected failures did."""
    lines = []
    measured = summary.get("measured", {})
    for metric in ("seconds", "cpu_s", "energy_j"):
        nz = summary.get("noise", {}).get(metric)
        if nz and nz.get("resolvable_pct") is not None:
            cv = nz.get("baseline_cv_pct")
            spread = f"the baseline's runs spread ±{cv:.1f} %, " if cv is not None else ""
            lines.append(
                f"noise ({LABELS[metric]}, {_kind(measured, metric)}): {spread}so "
                f"{nz['n']} repeats resolve effects of about ±{nz['resolvable_pct']:.1f} % only"
            )
    for c in summary.get("cells", []):
        if c["is_baseline"]:
            continue
        parts = [
            _verdict(metric, saving, _kind(measured, metric))
            for metric in ("seconds", "cpu_s", "energy_j")
            if (saving := c["eq2_pct"].get(metric))
        ]
        over = c.get("overhead_pct")
        if over and over.get("low") is not None and over["mean"] > 0.05:
            parts.append(
                f"within each run (measured): {over['mean']:.1f} % [{over['low']:.1f}, "
                f"{over['high']:.1f}] of its useful compute time went to checkpoints and other "
                "non-compute phases" + _overhead_vs(c.get("overhead_vs_baseline_pp"))
            )
        if parts:
            line = f"{c['cell']} vs {c['baseline_cell']}: " + "; ".join(parts)
            found = c.get("implausible", {})
            if found:
                first = next(iter(found.values()))
                causes = "; ".join(first["likely_causes"])
                rule = (
                    "it does at least the baseline's work, so this is not a saving"
                    if first["limit_pct"] == 0
                    else "it changes only how checkpoints are written, which can save at most "
                    f"{-first['limit_pct']:.1f} % (the baseline's share outside compute)"
                )
                line += f" — IMPLAUSIBLE: {rule}; likely {causes}"
            lines.append(line)
        failures = c.get("failures")
        if failures:
            counts = ", ".join(f"{k}: {v}" for k, v in failures["counts"].items())
            first = failures["runs"][0]["summary"]
            lines.append(f"{c['cell']}: injected {failures['runs'][0]['injected']} — {counts} "
                         f"of {len(failures['runs'])} runs (e.g. {first})")  # fmt: skip
    return lines


def _overhead_vs(diff: dict[str, Any] | None) -> str:
    if not diff or diff.get("low") is None:
        return ""
    verdict = " ≈ 0 (undecided)" if diff["low"] <= 0 <= diff["high"] else ""
    return (
        f", {diff['mean']:+.1f} points [{diff['low']:+.1f}, {diff['high']:+.1f}] against the "
        f"baseline's in the same block{verdict}"
    )


def _kind(measured: dict[str, str], metric: str) -> str:
    return str(measured.get(metric, "?")).split(" ")[0]


def _verdict(metric: str, saving: dict[str, Any], kind: str) -> str:
    label = f"{LABELS[metric]} ({kind})"
    if saving.get("low") is None:
        return f"{label} {saving['pct']:+.1f} %, no interval"
    span = f"{saving['pct']:+.1f} % [{saving['low']:+.1f}, {saving['high']:+.1f}]"
    return f"{label} {span}" + (" ≈ 0 (undecided)" if saving.get("undecided") else "")
