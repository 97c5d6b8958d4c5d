"""``greenckpt levels``: expected time and energy of multilevel checkpointing, and its optimum.

The levels (FTI's L1 local, L2 partner copy, L3 Reed-Solomon, L4 parallel file system, or any
subset) come from a small TOML file, quantities with units::

    app_power = "300W"

    [[level]]
    name = "L1 local"
    ckpt_time = "5s"
    restart_time = "5s"
    mtbf = "6h"          # mean time between failures that need this level to recover
    ckpt_power = "300W"
    restart_power = "290W"

``--intervals 3min,5min,7min,11min`` evaluates an FTI-style configuration (wu2018's
``ckp(3,5,7,11)``), as does ``--fti-config config.fti`` (its ``ckpt_l1..ckpt_l4``; all 0,
the config of a code that calls FTI_Checkpoint itself, is no schedule: only a note says so); the
optimized nested schedule is always computed and compared with it, on ``--quantum``'s grid.
``--write-config fti|scr|veloc`` writes it in that library's configuration language
(:mod:`greenckpt.optimize.native_config`).
"""

from __future__ import annotations

import argparse
import math
import os
import stat
import sys
from typing import Any

from rich.table import Table

from greenckpt import units
from greenckpt.cli.commands import command_help
from greenckpt.cli.console import make_console
from greenckpt.durable import write_atomic
from greenckpt.errors import InvalidValueError
from greenckpt.files import read_regular
from greenckpt.jsonout import dumps
from greenckpt.model import (
    Level,
    MultilevelExpectation,
    MultilevelPlan,
    expected_multilevel,
    fti_schedule,
    optimize_multilevel,
)
from greenckpt.optimize import native_config as native
from greenckpt.optimize.levels_file import load_levels

MAX_FTI_CONFIG_BYTES = 1 << 20
"""A config.fti is a few dozen lines; anything longer is not one."""


def register(sub: Any) -> None:
    """Add the ``levels`` sub-command."""
    p = sub.add_parser(
        "levels",
        help=command_help("levels"),
        description="Expected time and energy of multilevel checkpointing (exact model, "
        "docs/model.md section 5) for FTI-style per-level intervals, and the nested schedule "
        "that minimises EPE (or time).",
    )
    p.add_argument("--config", required=True, help="TOML file describing the levels")
    p.add_argument(
        "--intervals",
        help="comma-separated compute time between checkpoints of each level, lowest level "
        "first, e.g. 3min,5min,7min,11min",
    )
    p.add_argument(
        "--fti-config",
        metavar="CONFIG.FTI",
        help="evaluate this FTI config's ckpt_l1..ckpt_l4 (as --intervals does; all 0, an "
        "application that calls FTI_Checkpoint itself, has nothing to evaluate); with "
        "--write-config fti, the file whose ckpt_lN keys are updated (all else kept)",
    )
    p.add_argument(
        "--quantum",
        help="time grid the intervals, given and optimised, are multiples of (default: 1s "
        "for --intervals and a continuous optimum; FTI counts minutes: 1min)",
    )
    p.add_argument("--objective", choices=("energy", "time"), default="energy")
    p.add_argument("--json", action="store_true", help="print JSON instead of tables")
    add_native_arguments(p)
    p.set_defaults(run=run)


def add_native_arguments(p: argparse.ArgumentParser) -> None:
    """``--write-config`` and ``--output``, shared with ``greenckpt plan``."""
    p.add_argument(
        "--write-config",
        choices=native.FORMATS,
        help="write the chosen intervals as FTI's config.fti ckpt_lN keys (whole minutes), "
        "SCR's configuration or VeloC's (docs/user-guide.md)",
    )
    p.add_argument(
        "-o",
        "--output",
        metavar="FILE",
        help="file --write-config writes, atomically (default: print the configuration only)",
    )


def read_fti_config(path: str) -> tuple[str, list[int]]:
    """The text of a config.fti and its ckpt_l1..ckpt_l4 (one-line errors)."""
    try:
        text = read_regular(path, limit=MAX_FTI_CONFIG_BYTES).decode("utf-8")
    except OSError as exc:
        raise InvalidValueError(
            f"--fti-config: cannot read {path!r}: {exc.strerror or exc}"
        ) from None
    except UnicodeDecodeError:
        raise InvalidValueError(f"--fti-config: {path!r} is not UTF-8 text") from None
    return text, native.parse_fti(text, path)


def native_quantum(fmt: str, given: str | None) -> float:
    """The grid for ``--write-config fmt``: ``--quantum`` if given and on the format's grid."""
    step = native.quantum_of(fmt)  # type: ignore[arg-type]
    if given is None:
        return step
    q = parse_quantum(given)
    n = round(q / step)
    if n < 1 or abs(n * step - q) > 1e-9 * q:
        raise InvalidValueError(
            f"--quantum {given}: {fmt} takes whole {'minutes' if step == 60 else 'seconds'}; "
            f"give a multiple of {units.format_duration(step)}"
        )
    return q


def parse_quantum(text: str) -> float:
    """``--quantum`` in seconds."""
    try:
        q = units.parse_duration(text)
    except units.UnitError as exc:
        raise InvalidValueError(f"--quantum: {exc}") from None
    if not (math.isfinite(q) and q > 0):
        raise InvalidValueError(f"--quantum: give a duration > 0, got {text!r}")
    return q


def emit_native(ns: argparse.Namespace, text: str) -> dict[str, Any]:
    """Write ``text`` to ``--output`` atomically (keeping an existing file's permissions) and
    say what was written, for the JSON document."""
    if ns.output:
        try:
            mode = stat.S_IMODE(os.stat(ns.output).st_mode)
        except OSError:
            mode = 0o644
        try:
            write_atomic(ns.output, text, mode=mode)
        except OSError as exc:
            raise InvalidValueError(
                f"--output {ns.output}: cannot write there ({exc.strerror or exc}); give a "
                "file in a writable directory"
            ) from None
    return {"format": ns.write_config, "path": ns.output, "text": text}


def _intervals(text: str, n_levels: int) -> list[float]:
    parts = [p for p in text.split(",") if p.strip()]
    if len(parts) != n_levels:
        raise InvalidValueError(
            f"--intervals: give {n_levels} intervals (one per level, lowest first), "
            f"got {len(parts)}"
        )
    try:
        return [units.parse_duration(p) for p in parts]
    except units.UnitError as exc:
        raise InvalidValueError(f"--intervals: {exc}") from None


def _summary(
    levels: list[Level], e: MultilevelExpectation, intervals: list[float]
) -> dict[str, Any]:
    return {
        "intervals_s": intervals,
        "time_factor": e.time_factor,
        "overhead": e.time_factor - 1.0,
        "epe_W": e.epe,
        "per_useful_second": {
            "compute": e.compute / e.work,
            "checkpoint": {lv.name: c / e.work for lv, c in zip(levels, e.checkpoint, strict=True)},
            "restart": {lv.name: r / e.work for lv, r in zip(levels, e.restart, strict=True)},
        },
    }


def _check_progress(levels: list[Level]) -> None:
    total_rate = sum(lv.rate for lv in levels)
    slowest = max(levels, key=lambda lv: max(lv.ckpt_time, lv.restart_time))
    if total_rate * max(slowest.ckpt_time, slowest.restart_time) >= 1.0:
        raise InvalidValueError(
            f"failures of all levels together come every {units.format_duration(1 / total_rate)} "
            f"on average, but {slowest.name} takes "
            f"{units.format_duration(max(slowest.ckpt_time, slowest.restart_time))} to checkpoint "
            "or restart: no schedule makes progress; check the mtbf values"
        )


def _given(
    ns: argparse.Namespace, levels: list[Level]
) -> tuple[list[float] | None, float, str | None]:
    """The schedule to evaluate (None: none given, or a config.fti whose ckpt_lN are all 0),
    its quantum (``--intervals``'s, or FTI's minutes) and the config.fti's text."""
    if ns.intervals and ns.fti_config:
        raise InvalidValueError("give --intervals or --fti-config, not both")
    if ns.intervals:
        quantum = parse_quantum(ns.quantum) if ns.quantum else 1.0
        return _intervals(ns.intervals, len(levels)), quantum, None
    if ns.fti_config:
        text, minutes = read_fti_config(ns.fti_config)
        intervals = native.fti_intervals(minutes, len(levels), ns.fti_config)
        return (None if native.checkpoints_itself(minutes) else intervals), 60.0, text
    return None, 1.0, None


def self_checkpointing_note(path: str) -> str:
    """Why a config.fti whose ckpt_lN are all 0 has no schedule to evaluate."""
    return (
        f"--fti-config {path}: every ckpt_lN is 0 (FTI_Snapshot takes no checkpoint: the "
        "application calls FTI_Checkpoint itself), so it has no schedule to evaluate; only "
        "the optimised one is shown"
    )


def _native_text(
    ns: argparse.Namespace,
    levels: list[Level],
    best: MultilevelPlan,
    fti_text: str | None,
    source: str,
) -> str:
    chosen = [
        native.NativeLevel(lv.name, iv, lv.ckpt_time)
        for lv, iv in zip(levels, best.intervals, strict=True)
    ]
    if ns.write_config == "fti" and fti_text is not None:
        return native.update_fti(fti_text, native.fti_minutes(chosen), ns.fti_config)
    e = best.expectation
    header = [
        f"greenckpt levels --config {ns.config}: the nested schedule minimising {ns.objective}",
        f"(modelled: overhead {units.format_percent(e.time_factor - 1.0)}, EPE "
        f"{units.format_power(e.epe)} from the levels file's {source} powers)",
    ]
    return native.render(ns.write_config, chosen, header)


def _evaluate_given(
    ns: argparse.Namespace, levels: list[Level], app_power: float
) -> tuple[list[tuple[str, MultilevelExpectation, list[float]]], str | None, str | None]:
    """The given schedule's result (none when none is given), the config.fti's text, and the
    note (said on stderr unless ``--json``) when that config has no schedule."""
    intervals, given_quantum, fti_text = _given(ns, levels)
    if intervals is not None:
        schedule = fti_schedule(intervals, quantum=given_quantum)
        expected = expected_multilevel(levels, schedule, app_power)
        return [("given", expected, intervals)], fti_text, None
    note = None
    if ns.fti_config:
        note = self_checkpointing_note(ns.fti_config)
        if not ns.json:
            print(f"greenckpt levels: {note}", file=sys.stderr, flush=True)
    return [], fti_text, note


def run(ns: argparse.Namespace) -> int:
    """Execute ``greenckpt levels``."""
    levels, app_power, source = load_levels(ns.config)
    _check_progress(levels)
    if ns.output and not ns.write_config:
        raise InvalidValueError("--output names the file --write-config writes: give both")
    if ns.write_config:
        quantum: float | None = native_quantum(ns.write_config, ns.quantum)
    else:
        quantum = parse_quantum(ns.quantum) if ns.quantum else None
    results, fti_text, note = _evaluate_given(ns, levels, app_power)
    best = optimize_multilevel(levels, app_power, objective=ns.objective, quantum=quantum)
    results.append(("optimised", best.expectation, list(best.intervals)))
    written = None
    if ns.write_config:
        written = emit_native(ns, _native_text(ns, levels, best, fti_text, source))
        if not ns.output and not ns.json:
            print(written["text"], end="")
            return 0
    if ns.json:
        doc = {
            "power_source": source,
            "energy_figures": f"modelled expectations from the file's {source} powers",
            "levels": [lv.__dict__ for lv in levels],
            "app_power_W": app_power,
            "objective": ns.objective,
            "results": {name: _summary(levels, e, iv) for name, e, iv in results},
        }
        if ns.fti_config:
            doc["given_from"] = ns.fti_config
        if note is not None:
            doc["given_note"] = note
        if written is not None:
            doc["native_config"] = written
        print(dumps(doc))
        return 0
    _print_table(ns, levels, results, source)
    if written is not None:
        make_console().print(
            f"wrote the optimised intervals as {ns.write_config} configuration to {ns.output}",
            highlight=False,
        )
    return 0


def _print_table(
    ns: argparse.Namespace,
    levels: list[Level],
    results: list[tuple[str, MultilevelExpectation, list[float]]],
    source: str,
) -> None:
    console = make_console()
    table = Table(
        title=f"Multilevel checkpointing, optimised for {ns.objective} (exact model; EPE "
        f"modelled from the file's {source} powers)",
        title_justify="left",
    )
    table.add_column("schedule")
    for lv in levels:
        table.add_column(f"{lv.name} every", justify="right")
    for col in ("overhead", "EPE", "EPE saved"):
        table.add_column(col, justify="right")
    base_epe = results[0][1].epe
    for name, e, iv in results:
        saved = (base_epe - e.epe) / base_epe
        table.add_row(
            name,
            *(units.format_duration(x) if math.isfinite(x) else "never" for x in iv),
            units.format_percent(e.time_factor - 1.0),
            units.format_power(e.epe),
            units.format_percent(saved) if name != results[0][0] else "—",
        )
    console.print(table)
