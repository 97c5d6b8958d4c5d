"""``greenckpt study SPEC``: run a paper's experiment from a study file, then report it.

The whole file is checked before anything runs (one line, exit 2); the runs go through
``greenckpt run`` one by one, journalled in the study directory so that running the same
command again resumes; at the end the statistics and report.html are written
(greenckpt.study). Format and files: docs/formats.md ("Study file", "Study summary").

``--plan --effect 5%`` prints the repeats a study needs to resolve that effect, from measured
noise (``--noise-from`` an earlier study's folder, or a few runs of the baseline cell made
now); ``--until 5%`` is the adaptive mode: after the design's runs, whole blocks are added
until every interval's half-width is at most 5 % or ``--max-runs`` is spent.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from greenckpt.cli.argtypes import positive_int
from greenckpt.cli.commands import command_help


def register(sub: Any) -> None:
    """Add the ``study`` sub-command."""
    p = sub.add_parser(
        "study",
        help=command_help("study"),
        description="Run every cell of a study file's design (factors x levels x repeats) "
        "through greenckpt run, in a randomised order, resumable, and write report.html with "
        "each cell's figures and wu2018 Eq. 2 savings against the baseline, with 95 % "
        "t-intervals on log values, the study's noise, and implausible results flagged.",
    )
    p.add_argument("spec", type=Path, help="the study file (TOML; examples/studies/)")
    p.add_argument(
        "-o", "--output", type=Path, help="study directory (default ./greenckpt-study-NAME)"
    )
    p.add_argument("--scale", type=float, help="multiply the problem size ({size}) by this")
    p.add_argument("--repeats", type=positive_int, help="runs per cell (default: the file's)")
    p.add_argument("--dry-run", action="store_true", help="print the design and exit")
    p.add_argument("--report-only", action="store_true", help="re-analyse the runs done so far")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    g = p.add_argument_group("precision (docs/user-guide.md, 'How many repeats')")
    g.add_argument(
        "--plan",
        action="store_true",
        help="print the repeats needed to resolve --effect, from measured noise, and exit",
    )
    g.add_argument("--effect", help="with --plan: the smallest effect to resolve, e.g. 5%%")
    g.add_argument(
        "--noise-from",
        type=Path,
        metavar="DIR",
        help="with --plan: take the noise from an earlier study's folder instead of measuring it",
    )
    g.add_argument(
        "--noise-runs",
        type=positive_int,
        default=4,
        help="with --plan: runs of the baseline cell to measure the noise (default 4; kept in "
        "DIR/noise)",
    )
    g.add_argument(
        "--metric",
        default="seconds",
        help="the figure --plan and --until aim at: seconds (default), cpu_s or energy_j",
    )
    g.add_argument(
        "--until",
        metavar="HALF_WIDTH",
        help="adaptive: add blocks until every Eq. 2 interval's half-width is at most this "
        "(e.g. 5%%) or --max-runs is spent",
    )
    g.add_argument("--max-runs", type=positive_int, help="with --until: the run budget")
    p.set_defaults(run=run)


def run(ns: argparse.Namespace) -> int:
    """Execute ``greenckpt study``."""
    import dataclasses  # noqa: PLC0415

    from greenckpt.errors import InvalidValueError  # noqa: PLC0415
    from greenckpt.study import design, runner, spec  # noqa: PLC0415 - only for this command

    study = spec.load_study(ns.spec)
    if ns.scale is not None:
        if not ns.scale > 0:
            raise InvalidValueError(f"--scale must be a number > 0, got {ns.scale}")
        study = dataclasses.replace(study, scale=ns.scale)
    directory = ns.output or Path(f"greenckpt-study-{study.name}")
    if ns.plan:
        return _plan(ns, study, directory)
    _plan_flags_alone(ns)
    runs = design.runs(study, ns.repeats)
    if ns.dry_run:
        return _dry_run(study, runs, ns.repeats)
    if not ns.report_only:
        try:
            if ns.until is not None:
                _adaptive(ns, study, directory)
            else:
                runner.run_study(study, directory, repeats=ns.repeats)
        except runner.Interrupted:
            print(
                f"greenckpt study: interrupted; the finished runs are kept in {directory}: run "
                "the same command again to resume",
                file=sys.stderr,
            )
            return 130
    from greenckpt.study.summary import write_report  # noqa: PLC0415

    if not (directory / "runs.jsonl").exists():
        raise InvalidValueError(f"{directory} holds no runs of a study (no runs.jsonl)")
    page = write_report(directory)
    summary = json.loads((directory / "summary.json").read_text())
    if ns.json:
        print(json.dumps(summary, indent=2))
    else:
        for line in summary.get("conclusions", []):
            print(line)
        print(f"report: {page}")
    return 0


def _plan(ns: argparse.Namespace, study: Any, directory: Path) -> int:
    """``--plan``: the repeats needed for ``--effect`` from measured noise."""
    from greenckpt.errors import InvalidValueError  # noqa: PLC0415
    from greenckpt.study import plan  # noqa: PLC0415

    if ns.effect is None:
        raise InvalidValueError("--plan needs --effect, the smallest effect to resolve: e.g. 5%")
    effect = plan.effect_of(ns.effect)
    metric = plan.check_metric(ns.metric)
    if ns.noise_from is not None:
        noise = plan.noise_from(ns.noise_from, metric)
    else:
        say = _say
        noise = plan.measure_noise(study, directory / "noise", ns.noise_runs, metric, say)
    for line in plan.plan_lines(study, noise, effect, metric, ns.repeats or study.repeats):
        print(line)
    return 0


def _say(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def _adaptive(ns: argparse.Namespace, study: Any, directory: Path) -> None:
    """``--until``: the design's runs, then one block more at a time until every compared
    cell's Eq. 2 interval of ``--metric`` has a half-width of at most the target, or the next
    block would pass ``--max-runs``."""
    from greenckpt.errors import InvalidValueError  # noqa: PLC0415
    from greenckpt.study import design, plan, runner  # noqa: PLC0415
    from greenckpt.study.summary import summarise  # noqa: PLC0415

    target = plan.effect_of(ns.until, flag="--until")
    metric = plan.check_metric(ns.metric)
    if study.order != "blocks":
        raise InvalidValueError("--until adds whole blocks: the study's order must be blocks")
    cells = len(design.cells(study))
    budget = ns.max_runs or 10 * cells * study.repeats
    repeats = ns.repeats or study.repeats
    if (directory / "study.json").exists():
        done = json.loads((directory / "study.json").read_text()).get("repeats") or 0
        repeats = max(repeats, int(done))
    while True:
        runner.run_study(study, directory, repeats=repeats, grow=True)
        summary = summarise(directory)
        widths = [
            (c["cell"], (c["eq2_pct"].get(metric) or {}).get("half_width_pct"))
            for c in summary["cells"]
            if not c["is_baseline"]
        ]
        wide = [(cell, w) for cell, w in widths if w is None or w > target]
        if not wide:
            _say(f"--until: every interval's half-width is <= {target:g} % at {repeats} repeats")
            return
        if (repeats + 1) * cells > budget:
            worst = max((w or float("inf")) for _, w in wide)
            _say(
                f"--until: the run budget ({budget} runs) is spent at {repeats} repeats; "
                f"{len(wide)} intervals are still wider than ±{target:g} % (widest ±{worst:.1f} %)"
            )
            return
        repeats += 1
        _say(f"--until: {len(wide)} intervals wider than ±{target:g} %: adding block {repeats}")


def _plan_flags_alone(ns: argparse.Namespace) -> None:
    from greenckpt.errors import InvalidValueError  # noqa: PLC0415

    for flag, value in (("--effect", ns.effect), ("--noise-from", ns.noise_from)):
        if value is not None:
            raise InvalidValueError(f"{flag} goes with --plan (greenckpt study SPEC --plan ...)")
    if ns.max_runs is not None and ns.until is None:
        raise InvalidValueError("--max-runs goes with --until (the adaptive mode's budget)")
    if ns.until is not None:  # checked before anything runs
        from greenckpt.study import plan  # noqa: PLC0415

        plan.effect_of(ns.until, flag="--until")
        plan.check_metric(ns.metric)


def _dry_run(study: Any, runs: list[Any], repeats: int | None) -> int:
    from greenckpt.study import design  # noqa: PLC0415

    cells = design.cells(study)
    repeats = repeats or study.repeats
    print(
        f"study {study.name}: {len(cells)} cells x {repeats} repeats = {len(runs)} runs, "
        f"order {study.order}"
    )
    for r in runs:
        print(f"  {r.id} block {r.block} {r.cell}")
    return 0
