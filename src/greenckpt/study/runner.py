"""Running a study: every run through the energy-aware runtime, journalled, resumable.

Why the runtime's library call per run (:func:`greenckpt.runtime.run`): each run must go
through the energy-aware runtime exactly as a user's job would (policy, settings, accounting,
report), with the run's options typed (:class:`~greenckpt.runtime.NodeOptions`), not flags
composed as strings; the application is still a process of its own, so a run that crashes
does not take the study with it (a run the runtime refuses is a failed run, its one line in
``output.log``). Why a journal: a study takes long; ``runs.jsonl`` gets one line per
finished run, appended and synced, so an interrupted study resumes with the runs that are
missing, and a study directory can never mix the runs of two different study files
(``study.json`` holds the file's SHA-256 and the design).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import signal
import statistics
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any

from greenckpt.ckpt.comm import find_mpiexec
from greenckpt.errors import GreenckptError
from greenckpt.report.job_files import write_job_files
from greenckpt.report.job_text import render_job_text
from greenckpt.report.run_files import write_report_safely
from greenckpt.report.run_text import render_run_text
from greenckpt.runtime.job_report import JobReport
from greenckpt.runtime.job_run import JobOutcome
from greenckpt.runtime.job_run import run as run_under_runtime
from greenckpt.runtime.node_options import NodeOptions
from greenckpt.study.checks import app_result
from greenckpt.study.design import Run, runs
from greenckpt.study.lever_factors import lever_options
from greenckpt.study.spec import SETTINGS_FACTORS, Study, StudyError, parse_ckp
from greenckpt.units import parse_duration, parse_frequency, parse_power

__all__ = ["Interrupted", "expand_command", "metrics_of", "run_study", "study_identity"]

JOURNAL = "runs.jsonl"
IDENTITY = "study.json"


class Interrupted(GreenckptError):  # noqa: N818 - a stop asked for, not an error
    """Ctrl-C (or SIGTERM) stopped the study; the finished runs are kept."""


def study_identity(study: Study, repeats: int) -> dict[str, Any]:
    """What ``study.json`` holds: the study file's digest and the design."""
    digest = hashlib.sha256(study.path.read_bytes()).hexdigest()
    return {
        "format": "greenckpt-study",
        "format_version": 1,
        "study_file": str(study.path),
        "sha256": digest,
        "name": study.name,
        "mirrors": study.mirrors,
        "repeats": repeats,
        "seed": study.seed,
        "order": study.order,
        "scale": study.scale,
        "factors": {k: [_json(v) for v in levels] for k, levels in study.factors.items()},
        "baseline": {k: _json(v) for k, v in study.baseline.items()},
    }


def _json(value: object) -> object:
    return value if isinstance(value, str | int | float) else str(value)


def _claim(directory: Path, identity: dict[str, Any], *, grow: bool = False) -> None:
    """Make ``directory`` this study's, or check that it already is (StudyError if not);
    ``grow``: more repeats than before are allowed (the adaptive mode adds blocks; in blocks
    the design of fewer repeats is the start of the design of more)."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / IDENTITY
    if path.exists():
        old = json.loads(path.read_text())
        if old.get("sha256") != identity["sha256"]:
            raise StudyError(
                f"{directory} was made by another study file (sha256 {str(old.get('sha256'))[:12]}"
                f"...): use another -o DIR"
            )
        more = grow and int(old.get("repeats") or 0) < identity["repeats"]
        if more and old.get("scale") == identity["scale"]:
            _write_identity(path, identity)
            return
        if old.get("repeats") != identity["repeats"] or old.get("scale") != identity["scale"]:
            raise StudyError(
                f"{directory} holds this study with repeats={old.get('repeats')} and "
                f"scale={old.get('scale')}: give the same, or use another -o DIR"
            )
        return
    _write_identity(path, identity)


def _write_identity(path: Path, identity: dict[str, Any]) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(identity, indent=2) + "\n")
    os.replace(tmp, path)


def finished_runs(directory: Path) -> list[dict[str, Any]]:
    """The journal's lines (a last line cut short by a crash is ignored)."""
    path = directory / JOURNAL
    if not path.exists():
        return []
    out = []
    for line in path.read_text().splitlines():
        with contextlib.suppress(json.JSONDecodeError):
            out.append(json.loads(line))
    return out


def _append(directory: Path, doc: dict[str, Any]) -> None:
    with open(directory / JOURNAL, "a", encoding="utf-8") as f:
        f.write(json.dumps(doc) + "\n")
        f.flush()
        os.fsync(f.fileno())


def expand_command(study: Study, run: Run, run_dir: Path) -> list[str]:
    """The application's command for ``run``, placeholders replaced (``{checkpoint_args}`` and
    ``{failure_args}`` standing alone expand to zero or more arguments)."""
    levels = {**_defaults(), **run.levels}
    size = float(levels["size"]) * study.scale  # type: ignore[arg-type]
    lists = {
        "{checkpoint_args}": _checkpoint_args(study, str(levels["checkpoint"]), run_dir),
        "{failure_args}": _failure_args(str(levels["failure"])),
    }
    target = str(levels["target"]).replace("{run_dir}", str(run_dir))
    values = {
        "target": target,
        "python": sys.executable,
        "mpiexec": find_mpiexec() or "mpiexec",
        "run_dir": str(run_dir),
        "size": f"{size:g}",
    }
    out: list[str] = []
    for arg in study.command:
        if arg in lists:
            out.extend(lists[arg])
            continue
        text = arg
        for name, value in values.items():
            text = text.replace("{" + name + "}", value)
        out.append(text)
    return out


def _defaults() -> dict[str, object]:
    from greenckpt.study.spec import DEFAULTS  # noqa: PLC0415 - one table, one place

    return dict(DEFAULTS)


def _checkpoint_args(study: Study, level: str, run_dir: Path) -> list[str]:
    if level == "none":
        return ["--no-checkpoint"]
    ckp = parse_ckp(level)
    if ckp is None:  # "app": the command's own checkpoint options
        return []
    lines = ["# written by greenckpt study: " + level]
    for number, units in enumerate(ckp, 1):
        if units > 0:
            lines += [f"[checkpoint.l{number}]", f'every = "{units * study.time_unit_s:g}s"', ""]
    path = run_dir / "levels.toml"
    path.write_text("\n".join(lines) + "\n")
    return ["--config", str(path)]


def _failure_args(level: str) -> list[str]:
    if level.startswith("bitflip@"):
        pos, every = level[len("bitflip@") :].rstrip("s").split("/")
        return ["--bitflip", f"{pos}/{every}s"]
    return []


def runtime_options(study: Study, run: Run) -> tuple[NodeOptions, int | None]:
    """The runtime's options for ``run`` (the study's [run] options and the run's policy; a
    settings factor makes it ``fixed``) and the emulated nodes (None: this node)."""
    levels = {**_defaults(), **run.levels}
    fixed = [f for f in SETTINGS_FACTORS if f in run.levels]
    given = study.run
    mtbf, power = given.get("node_mtbf"), given.get("app_power")
    frequency = run.levels.get("frequency")
    options = NodeOptions(
        policy="fixed" if fixed else str(levels["policy"]),
        profiles=tuple(str(Path(p).resolve()) for p in given.get("profile", [])),
        io_processes=None if "io_processes" not in fixed else int(str(run.levels["io_processes"])),
        frequency_hz=None if frequency is None else round(parse_frequency(str(frequency))),
        cstates=None if "cstates" not in fixed else run.levels["cstates"] == "on",
        app_power_w=None if power is None else parse_power(str(power)),
        rate_per_s=None if mtbf is None else 1.0 / parse_duration(str(mtbf)),  # one node's
        control=not given.get("no_control", False),
        **lever_options(run.levels),
    )
    nodes = given.get("nodes_emulated")
    return options, None if nodes is None else int(nodes)


def _run_once(
    study: Study, run: Run, run_dir: Path, environ: dict[str, str], log: IO[str], report: str
) -> int:
    """``run`` once under the runtime, its output in ``log`` and its report files in
    ``run_dir/report``; its exit status (2 when the runtime refused it, 1 when the runtime
    failed: the study goes on). KeyboardInterrupt when a signal stopped it."""

    def say(line: str) -> None:
        print(f"greenckpt run: {line}", file=log, flush=True)

    log.flush()
    try:
        options, nodes = runtime_options(study, run)
        outcome = run_under_runtime(
            expand_command(study, run, run_dir),
            nodes=nodes,
            options=options,
            report_dir=run_dir / report,
            environ=environ,
            stdout=log,
            stderr=log,
            say=say,
        )
    except (GreenckptError, ValueError, OSError) as exc:  # refused before it ran: one line
        say(f"error: {exc}")
        return 2
    except Exception as exc:  # a run that crashes must not end the study
        say(f"error: the runtime failed: {type(exc).__name__}: {exc}")
        return 1
    if outcome.signal is not None:  # Ctrl-C or SIGTERM: stop the study, keep what finished
        raise KeyboardInterrupt
    _write_files(outcome, log, say)
    return outcome.status


def _write_files(outcome: JobOutcome, log: IO[str], say: Callable[[str], None]) -> None:
    """The run's report: its table in the run's log, its files in its report folder."""
    directory = outcome.report_dir
    if isinstance(outcome.report, JobReport):
        print(render_job_text(outcome.report), file=log, flush=True)
        try:
            paths, problem = write_job_files(outcome.report, directory), None
        except OSError as exc:
            paths, problem = [], f"the job report could not be written to {directory}: {exc}"
    else:
        print(render_run_text(outcome.report), file=log, flush=True)
        paths, problem = write_report_safely(outcome.report, directory)
    if paths:
        print("report: " + ", ".join(str(p) for p in paths), file=log, flush=True)
    if problem is not None:
        say(f"error: {problem}")


def metrics_of(report_dir: Path) -> dict[str, Any] | None:
    """The run's figures from its report (a run report, or a job report for emulated nodes)."""
    for name in ("report.json", "job-report.json"):
        path = report_dir / name
        if path.exists():
            doc = json.loads(path.read_text())
            break
    else:
        return None
    total, epe = doc.get("total", {}), doc.get("epe", {})
    by_kind = {
        kind: {k: v.get(k) for k in ("count", "energy_j")}
        | {"seconds": v.get("seconds", v.get("node_seconds"))}
        for kind, v in doc.get("by_kind", {}).items()
    }
    records = doc.get("records", [])
    return {
        "seconds": total.get("seconds"),
        "energy_j": total.get("energy_j"),
        "mean_power_w": total.get("mean_power_w"),
        "power_source": total.get("source"),
        "cpu_s": (doc.get("cpu") or {}).get("total_s"),
        "epe_w": epe.get("observed_w"),
        "by_kind": by_kind,
        "bytes_written": sum(r.get("size", 0) for r in records if r.get("kind") == "checkpoint"),
        "bytes_read": sum(r.get("size", 0) for r in records if r.get("kind") == "restart"),
        "useful_compute_s": doc.get("useful_compute_s"),
    }


def combined(first: dict[str, Any] | None, second: dict[str, Any] | None) -> dict[str, Any] | None:
    """The metrics of a run killed and restarted: both parts summed (mean power and EPE from
    the sums); None unless both parts have a report of the same power source."""
    if first is None or second is None or first["power_source"] != second["power_source"]:
        return None
    out = dict(first)
    for key in ("seconds", "energy_j", "cpu_s", "useful_compute_s", "bytes_written", "bytes_read"):
        a, b = first.get(key), second.get(key)
        out[key] = None if a is None or b is None else a + b
    seconds, energy, useful = out["seconds"], out["energy_j"], out["useful_compute_s"]
    out["mean_power_w"] = energy / seconds if energy is not None and seconds else None
    out["epe_w"] = energy / useful if energy is not None and useful else None
    kinds: dict[str, dict[str, Any]] = {}
    for part in (first, second):
        for kind, v in (part.get("by_kind") or {}).items():
            into = kinds.setdefault(kind, {"count": 0, "energy_j": 0.0, "seconds": 0.0})
            for key in into:
                into[key] = None if into[key] is None or v.get(key) is None else into[key] + v[key]
    out["by_kind"] = kinds
    return out


def _one(study: Study, run: Run, directory: Path) -> dict[str, Any]:
    run_dir = directory / "runs" / run.id
    if run_dir.exists():  # a run interrupted before: redone from scratch
        shutil.rmtree(run_dir)
    run_dir.mkdir(parents=True)
    for folder in study.dirs:
        (run_dir / folder).mkdir(parents=True, exist_ok=True)
    target = str(run.levels.get("target", "{run_dir}/target"))
    if target.startswith("{run_dir}/"):  # a target inside the run: made, and removed with it
        Path(target.replace("{run_dir}", str(run_dir))).mkdir(parents=True, exist_ok=True)
    started = datetime.now(UTC).isoformat(timespec="seconds")
    t0 = time.monotonic()
    env: dict[str, str] = {}  # added to the application's environment
    codec = str(run.levels.get("codec", "app"))
    if codec != "app":  # the example applications' level 1 codec (the library's variable)
        env["GREENCKPT_L1_CODEC"] = codec
    failure = str(run.levels.get("failure", "none"))
    extra: dict[str, Any] = {}
    with open(run_dir / "output.log", "w") as log:
        if failure.startswith("kill@"):  # the planned kill, then one restart from checkpoints
            iteration = int(failure[len("kill@") : -len("it")])
            inject = {**env, "GREENCKPT_INJECT": f"kill@compute:rank=1,iteration={iteration}"}
            killed = _run_once(study, run, run_dir, inject, log, "report")
            code = _run_once(study, run, run_dir, env, log, "restart-report")
            metrics = combined(
                metrics_of(run_dir / "report"), metrics_of(run_dir / "restart-report")
            )
            extra = {
                "killed_exit_code": killed,
                "restart_report": str(Path("runs") / run.id / "restart-report"),
            }
        else:
            code = _run_once(study, run, run_dir, env, log, "report")
            metrics = metrics_of(run_dir / "report")
    return {
        **extra,
        "run": run.id,
        "cell": run.cell,
        "block": run.block,
        "repeat": run.repeat,
        "factors": {k: _json(v) for k, v in run.levels.items()},
        "ok": code == 0 and metrics is not None,
        "exit_code": code,
        "started_utc": started,
        "wall_s": time.monotonic() - t0,
        "report": str(Path("runs") / run.id / "report"),
        "metrics": metrics,
        "app_result": app_result(run_dir),
    }


def run_study(
    study: Study,
    directory: Path,
    *,
    repeats: int | None = None,
    say: Callable[[str], None] = lambda line: print(line, file=sys.stderr, flush=True),
    grow: bool = False,
) -> list[dict[str, Any]]:
    """Run every run of the design not yet in the journal; every journal line at the end
    (``grow``: the directory may hold the same study with fewer repeats, see :func:`_claim`)."""
    repeats = study.repeats if repeats is None else repeats
    _claim(directory, study_identity(study, repeats), grow=grow)
    design = runs(study, repeats)
    done = {doc["run"] for doc in finished_runs(directory)}
    todo = [run for run in design if run.id not in done]
    if done:
        say(f"resuming: {len(done)} of {len(design)} runs done, {len(todo)} to go")
    walls: list[float] = []
    previous = signal.signal(signal.SIGTERM, _raise_interrupt)
    try:
        for i, run in enumerate(todo, 1):
            eta = ""
            if walls:
                left = statistics.median(walls) * (len(todo) - i + 1)
                eta = f", about {_clock(left)} left"
            say(f"[{len(done) + i}/{len(design)}] {run.id} {run.cell}{eta}")
            doc = _one(study, run, directory)
            walls.append(doc["wall_s"])
            if not doc["ok"]:
                log = directory / "runs" / run.id / "output.log"
                say(f"  {run.id} failed (exit {doc['exit_code']}): see {log}")
            _append(directory, doc)
    except KeyboardInterrupt:
        raise Interrupted from None
    finally:
        signal.signal(signal.SIGTERM, previous)
    return finished_runs(directory)


def _raise_interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def _clock(seconds: float) -> str:
    minutes, secs = divmod(int(seconds + 0.5), 60)
    return f"{minutes}:{secs:02d}"
