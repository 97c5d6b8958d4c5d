"""``greenckpt study --plan``: how many repeats a study needs, from measured noise.

Why measured: the repeats that resolve an effect depend on the machine's run-to-run spread,
which no one can guess (±12 % on a shared 2-core VM, under 1 % on a quiet node). The noise
comes either from an earlier study's results (``--noise-from DIR``: its paired log-ratios when
it was run in blocks, else its baseline's spread) or from a short measurement made by
``--plan`` itself: a few runs of the baseline cell, kept (and resumed) in ``DIR/noise``. The
plan says which, and says the assumption it makes for the latter: two independent runs differ
by √2 × the run-to-run spread (blocks cancel slow drift, so this may overstate the paired
noise of a study run in blocks).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from pathlib import Path

import numpy as np

from greenckpt.errors import InvalidValueError
from greenckpt.study import design
from greenckpt.study.spec import Study
from greenckpt.study.stats import repeats_needed, resolvable_pct

__all__ = ["PLAN_METRICS", "Noise", "measure_noise", "noise_from", "plan_lines"]

PLAN_METRICS = ("seconds", "cpu_s", "energy_j")


@dataclasses.dataclass(frozen=True)
class Noise:
    """The spread of the paired log-ratios (``sd_log``) and where it comes from."""

    sd_log: float
    source: str
    values: tuple[float, ...] = ()
    mean_seconds: float | None = None


def _baseline_levels(study: Study) -> dict[str, object]:
    """The baseline cell's levels: the study's baseline, the first level of any other factor."""
    return {k: study.baseline.get(k, levels[0]) for k, levels in study.factors.items()}


def measure_noise(
    study: Study,
    directory: Path,
    runs: int,
    metric: str,
    say: Callable[[str], None],
) -> Noise:
    """Run the baseline cell ``runs`` times in ``directory`` (resumable) and return the noise of
    ``metric`` from their spread (sd of the log values × √2 for a pair)."""
    from greenckpt.study.runner import run_study  # noqa: PLC0415 - subprocesses only here

    levels = _baseline_levels(study)
    one = dataclasses.replace(
        study, factors={k: (v,) for k, v in levels.items()}, repeats=runs, order="blocks"
    )
    cell = design.cell_label(levels)
    say(f"measuring the noise: {runs} runs of the baseline cell {cell} in {directory}")
    journal = run_study(one, directory, repeats=runs, say=say)
    values = [
        float(r["metrics"][metric])
        for r in journal
        if r.get("ok") and r.get("metrics") and (r["metrics"].get(metric) or 0) > 0
    ]
    if len(values) < 2:
        raise InvalidValueError(
            f"the noise measurement in {directory} has {len(values)} good runs of {metric}: "
            "need at least 2 (see its runs/*/output.log)"
        )
    sd = float(np.log(values).std(ddof=1))
    seconds = [float(r["metrics"]["seconds"]) for r in journal if r.get("ok") and r.get("metrics")]
    return Noise(
        math.sqrt(2.0) * sd,
        f"measured now: {len(values)} runs of the baseline cell {cell} in {directory} "
        f"(run-to-run spread ±{math.expm1(sd) * 100:.1f} %; a pair of runs is assumed to differ "
        "by √2 × that — blocks cancel slow drift, so this may overstate the paired noise)",
        tuple(values),
        float(np.mean(seconds)) if seconds else None,
    )


def noise_from(directory: Path, metric: str) -> Noise:
    """The noise of ``metric`` in an earlier study's results folder (its summary's noise)."""
    from greenckpt.study.summary import summarise  # noqa: PLC0415 - only for --noise-from

    if not (directory / "runs.jsonl").is_file():
        raise InvalidValueError(
            f"--noise-from {directory}: no runs.jsonl there; give the folder of an earlier "
            "greenckpt study (its -o DIR)"
        )
    summary = summarise(directory)
    nz = summary.get("noise", {}).get(metric)
    if not nz:
        raise InvalidValueError(
            f"--noise-from {directory}: no noise of {metric} there (its baseline needs at "
            "least 2 good runs)"
        )
    seconds = [
        c["metrics"]["seconds"]["median"] for c in summary["cells"] if "seconds" in c["metrics"]
    ]
    mean_s = float(np.mean(seconds)) if seconds else None
    if nz.get("paired_sd_log") is not None:
        return Noise(
            float(nz["paired_sd_log"]),
            f"from {directory}: the paired log-ratios of its compared cells "
            f"({nz['paired_df']} degrees of freedom)",
            tuple(nz.get("baseline_values", ())),
            mean_s,
        )
    sd = math.log1p(float(nz["baseline_cv_pct"]) / 100.0)
    return Noise(
        math.sqrt(2.0) * sd,
        f"from {directory}: its baseline's run-to-run spread (±{nz['baseline_cv_pct']:.1f} %), "
        "× √2 for a pair of runs",
        tuple(nz.get("baseline_values", ())),
        mean_s,
    )


def plan_lines(
    study: Study, noise: Noise, effect_pct: float, metric: str, repeats: int
) -> list[str]:
    """What ``--plan`` prints: the noise and its source, the repeats that reach the target,
    and what the file's repeats resolve."""
    cells = len(design.cells(study))
    label = {"seconds": "time", "cpu_s": "node CPU-s", "energy_j": "energy"}[metric]
    values = ", ".join(f"{v:.4g}" for v in noise.values)
    lines = [
        f"study {study.name}: {cells} cells, {repeats} repeats in the file or --repeats",
        f"noise of {label} ({metric}): {noise.source}",
    ]
    if values:
        lines.append(f"  the baseline's {metric}: {values}")
    lines.append(f"  spread of a cell's paired log-ratio: sd {noise.sd_log:.4f}")
    for what, power in (("half-width of its 95 % interval <= ", None), ("80 % power at ", 0.8)):
        n = repeats_needed(noise.sd_log, effect_pct, power=power)
        if n is None:
            lines.append(f"to reach {what}{effect_pct:g} %: more than 10000 repeats per cell")
            continue
        time = ""
        if noise.mean_seconds:
            minutes = n * cells * noise.mean_seconds / 60
            time = f", about {minutes:.0f} min at {noise.mean_seconds:.1f} s a run"
        goal = (
            f"an interval half-width <= {effect_pct:g} % (an effect of {effect_pct:g} % then "
            "excludes 0)"
            if power is None
            else f"an 80 % chance that a true {effect_pct:g} % effect is declared"
        )
        lines.append(f"for {goal}: {n} repeats per cell = {n * cells} runs{time}")
    now = resolvable_pct(noise.sd_log, repeats)
    if now is not None:
        lines.append(f"at {repeats} repeats this study resolves effects of about ±{now:.1f} %")
    n = repeats_needed(noise.sd_log, effect_pct)
    if n is not None:
        lines.append(f"run it with: greenckpt study {study.path} --repeats {n}")
    return lines


def effect_of(text: str, *, flag: str = "--effect") -> float:
    """``--effect`` (or ``flag``): a percentage > 0 such as ``5%``, in percent
    (InvalidValueError, one line, if not)."""
    from greenckpt.units import parse_fraction  # noqa: PLC0415

    try:
        value = parse_fraction(text)
    except ValueError as exc:
        if "bare number" in str(exc):
            message = f"a bare number: write {text.strip()}% for {text.strip()} percent"
        else:
            message = f"must be a percentage > 0, e.g. {flag} 5%"
        raise InvalidValueError(f"{flag} {text}: {message}") from None
    if value >= 10:
        raise InvalidValueError(f"{flag} {text}: at most 1000 %, e.g. {flag} 5%")
    return value * 100.0


def check_metric(metric: str) -> str:
    """``--metric``: one of :data:`PLAN_METRICS`."""
    if metric not in PLAN_METRICS:
        raise InvalidValueError(f"--metric {metric}: use one of {', '.join(PLAN_METRICS)}")
    return metric
