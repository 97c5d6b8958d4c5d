"""``greenckpt profile run``: its flags, and the run — the library's checks, resume and sweep
(:mod:`greenckpt.profile.run`), then the table, the fio cross-check and the plots.

Why apart from :mod:`greenckpt.cli.profile_cmd`: the run has most of the family's flags and the
only long-running action (interrupts, partial files); the other actions only load and show.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rich.markup import escape

from greenckpt import units
from greenckpt.ckpt.wait import complete
from greenckpt.cli.args import add_meter_arguments, meter_names
from greenckpt.cli.argtypes import add_hidden_alias, non_negative_int, positive_int, unit_type
from greenckpt.cli.console import make_console
from greenckpt.cli.profile_flags import (
    DEFAULT_MTBF,
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    SPELLING,
    VALIDATE_REPEATS,
    codecs_arg,
    counts_arg,
    cstates_arg,
    durations_arg,
    frequencies_arg,
    governors_arg,
    gpu_clocks_arg,
    idle_arg,
    operations_arg,
    size_arg,
    sizes_arg,
    uncore_arg,
    watts_arg,
)
from greenckpt.errors import InvalidValueError
from greenckpt.io import DATA_KINDS, IOJobError
from greenckpt.jsonout import dumps
from greenckpt.optimize.profile_data import (
    OPERATIONS,
    Profile,
    profile_to_json,
)
from greenckpt.profile.adaptive import DEFAULT_MARGIN
from greenckpt.profile.fio import (
    FioError,
    ValidationResult,
    fio_available,
    validate,
)
from greenckpt.profile.grid import (
    LAYOUTS,
    READ_METHODS,
    SweepSpec,
    default_process_counts,
)
from greenckpt.profile.lever_check import lever_axes
from greenckpt.profile.run import (
    AdaptiveRequest,
    MeterRequest,
    cells_kept,
    cpu_settings,
    file_identity,
    measure_profile,
    prepare_profile,
    sweep_extra,
)
from greenckpt.profile.sweep import CellChooser
from greenckpt.profile.waiting import DEFAULT_WAITING_SECONDS, WaitersError
from greenckpt.report.profile_progress import progress_sink, stop_progress
from greenckpt.report.profile_tables import (
    render_profile,
    render_validation,
)


def register_run(actions: Any) -> None:
    p = actions.add_parser(
        "run",
        help="sweep the storage holding PATH and write a profile",
        description="Measure write and read throughput and the node's power for every CPU "
        "setting, C-state setting, size and number of I/O processes asked for, on the storage "
        "holding the directory PATH. The profile file is rewritten after every finished cell, "
        "so a killed sweep keeps what it measured (continue it with --resume). Node settings "
        "are restored however the sweep ends.",
    )
    p.add_argument("path", metavar="PATH", help="directory on the storage to profile")
    p.add_argument("-o", "--output", required=True, metavar="OUT", help="profile file to write")
    grid = p.add_argument_group("grid")
    grid.add_argument(
        "--frequencies",
        type=frequencies_arg,
        metavar="HZ,...|all|asfound",
        help="CPU frequencies to fix, e.g. 1.2GHz,2.6GHz; 'all' (every offered frequency) or "
        "'asfound' (do not control the frequency). Default: every offered frequency, or as "
        "found on a node without cpufreq control",
    )
    grid.add_argument(
        "--governors",
        type=governors_arg,
        metavar="NAME,...|none",
        help="stock governors to measure as settings, e.g. performance,ondemand, or 'none' "
        "(needs frequency control). Default: those the node offers, none with asfound",
    )
    grid.add_argument(
        "--processes",
        type=counts_arg,
        metavar="N,...",
        help="numbers of concurrent I/O processes, e.g. 1,2,4 (default: 1, 2, 4, … up to "
        "twice the logical CPUs)",
    )
    grid.add_argument(
        "--ops",
        type=operations_arg,
        metavar="OP,...",
        default=OPERATIONS,
        help="operations to record: write,read (default both; reads need the writes' files)",
    )
    grid.add_argument(
        "--size",
        type=sizes_arg,
        metavar="SIZE,...",
        default=(2 << 30,),
        help="bytes moved per run, all processes together; a comma list sweeps sizes "
        "(default 2GiB)",
    )
    grid.add_argument(
        "--block-size", type=size_arg, default=1 << 20, help="bytes per I/O call (default 1MiB)"
    )
    grid.add_argument(
        "--layout",
        choices=LAYOUTS,
        default="file_per_process",
        help="one file per process (default) or one shared file at offsets",
    )
    grid.add_argument(
        "--read-method",
        choices=READ_METHODS,
        default="auto",
        help="how reads avoid the page cache (default auto)",
    )
    grid.add_argument(
        "--cstates",
        type=cstates_arg,
        metavar="asfound|on,off",
        default=(None,),
        help="C-states: 'asfound' (default, not controlled) or on,off to measure both",
    )
    grid.add_argument(
        "--codecs",
        type=codecs_arg,
        metavar="none,CODEC,...",
        default=(None,),
        help="compression to measure: none (default) and/or zstd[:1-22], lz4, zlib[:0-9], "
        "e.g. none,zstd,lz4",
    )
    grid.add_argument(
        "--data",
        choices=DATA_KINDS,
        help="what writes send: random (incompressible) or field (float64 simulation state); "
        "default field when a codec is measured, else random",
    )
    repeats = grid.add_argument(
        "--repeats",
        dest="repetitions",
        type=positive_int,
        default=3,
        help="measured runs per cell (default 3)",
    )
    add_hidden_alias(grid, repeats, "--repetitions")
    grid.add_argument(
        "--warmup", type=non_negative_int, default=1, help="discarded runs per cell (default 1)"
    )
    _lever_arguments(p)
    meas = p.add_argument_group("measuring")
    meas.add_argument(
        "--idle",
        type=idle_arg,
        default=5.0,
        help="how long to measure idle power first (default 5s; 0 to skip)",
    )
    meas.add_argument(
        "--waiting-seconds",
        type=idle_arg,
        default=DEFAULT_WAITING_SECONDS,
        metavar="DURATION",
        help="metered window of the waiting ranks' power, per CPU setting, C-state setting "
        "and wait mode (polite, spin), with one waiter per CPU; measured first, with the "
        f"idle power at each setting (default {DEFAULT_WAITING_SECONDS:g}s; 0 to skip)",
    )
    add_meter_arguments(meas)
    again = meas.add_mutually_exclusive_group()
    again.add_argument(
        "--resume",
        action="store_true",
        help="continue the partial profile in OUT (same options), measuring only what it lacks",
    )
    again.add_argument("--force", action="store_true", help="overwrite an existing OUT")
    adapt = p.add_argument_group("adaptive mode")
    adapt.add_argument(
        "--adaptive",
        action="store_true",
        help="measure only the cells that could change the planner's decision",
    )
    adapt.add_argument(
        "--ckpt-size",
        type=sizes_arg,
        metavar="SIZE,...",
        help="checkpoint sizes to decide for (default: the largest --size)",
    )
    adapt.add_argument(
        "--node-mtbf",
        "--mtbf",
        dest="mtbf",
        type=durations_arg,
        metavar="DURATION,...",
        action="append",
        help="MTBFs of ONE node to decide for, repeatable or a comma list (default "
        f"{DEFAULT_MTBF}); the job fails at nodes/MTBF (--mtbf is an alias of --node-mtbf)",
    )
    adapt.add_argument(
        "--nodes",
        type=positive_int,
        help="nodes of the job to decide for (default 1), as in greenckpt plan",
    )
    adapt.add_argument(
        "--app-power",
        type=unit_type(units.parse_power),
        help="application power to decide for (default: the largest power measured)",
    )
    adapt.add_argument(
        "--margin",
        type=unit_type(units.parse_fraction, allow_zero=True),
        help=f"optimism margin of the bound, e.g. 15%% (default {DEFAULT_MARGIN:.0%}%)",
    )
    after = p.add_argument_group("after the sweep")
    after.add_argument(
        "--validate",
        action="store_true",
        help="cross-check the I/O engine against fio at the sweep's size, block size and "
        "process counts",
    )
    after.add_argument("--plot", metavar="DIR", help="write the profile's figures into DIR")
    after.add_argument(
        "--json", action="store_true", help="print the profile as JSON instead of a table"
    )
    after.add_argument("--quiet", action="store_true", help="no progress on stderr")
    p.set_defaults(run=run_profile)


def _lever_arguments(p: argparse.ArgumentParser) -> None:
    """The axes of the levers beyond the core clock (each also measures the lever as found)."""
    levers = p.add_argument_group(
        "levers beyond the core clock",
        "each axis also measures the lever as found (the baselines and the frequency-only "
        "plan need it) and multiplies the cells of every fixed frequency; stock governors "
        "are measured with every lever as found. A lever this node lacks is refused, as is a "
        "value outside the range it reports, before anything is measured. With --adaptive "
        "the lever values are tried only at the cells the decision rests on",
    )
    levers.add_argument(
        "--uncore",
        type=uncore_arg,
        metavar="KHZ,...|all",
        help="uncore (memory/mesh) frequencies to pin on every package: kHz as sysfs has them "
        "(1800000) or with a unit (1.8GHz); 'all': 5 steps from the lowest to the highest "
        "the node allows",
    )
    levers.add_argument(
        "--power-limit",
        type=watts_arg,
        metavar="W,...",
        help="package RAPL power limits (long-term constraint of every package), watts, "
        "e.g. 120,150 or 120W",
    )
    levers.add_argument(
        "--gpu-clocks",
        type=gpu_clocks_arg,
        metavar="MEM:GR,...",
        help="GPU application clocks, memory:graphics MHz among those the GPUs support, "
        "e.g. 877:1410,877:1005 (every GPU of the node)",
    )
    levers.add_argument(
        "--gpu-power-limit",
        type=watts_arg,
        metavar="W,...",
        help="GPU power management limits in watts within the GPUs' constraints (every GPU)",
    )


# --------------------------------------------------------------------------- run


def _adaptive(ns: argparse.Namespace, sizes: Sequence[int]) -> AdaptiveRequest | None:
    """The adaptive mode asked for (None without --adaptive; its flags alone are refused)."""
    given = [
        flag
        for flag, value in (
            ("--ckpt-size", ns.ckpt_size),
            ("--mtbf", ns.mtbf),
            ("--app-power", ns.app_power),
            ("--margin", ns.margin),
            ("--nodes", ns.nodes),
        )
        if value is not None
    ]
    if not ns.adaptive:
        if given:
            raise InvalidValueError(
                f"{', '.join(given)}: used only with --adaptive (add it, or leave them out)"
            )
        return None
    return AdaptiveRequest(
        ckpt_sizes=tuple(ns.ckpt_size) if ns.ckpt_size is not None else (max(sizes, default=0),),
        mtbf_s=(
            tuple(m for group in ns.mtbf for m in group)
            if ns.mtbf is not None
            else (units.parse_duration(DEFAULT_MTBF),)
        ),
        app_power_w=ns.app_power,
        margin=DEFAULT_MARGIN if ns.margin is None else ns.margin,
        nodes=1 if ns.nodes is None else ns.nodes,  # --mtbf is one node's, as in plan
    )


def _meters(ns: argparse.Namespace) -> MeterRequest:
    """The meters the flags ask for, checked against each other before anything opens."""
    meter_names(ns)
    return MeterRequest(names=ns.meters, csv_path=ns.meter_csv, tdp_w=ns.tdp, rate_hz=ns.rate)


def _request(ns: argparse.Namespace) -> tuple[SweepSpec, MeterRequest, AdaptiveRequest | None]:
    """The library call's inputs from the parsed flags (raises on invalid values)."""
    processes = (
        ns.processes if ns.processes is not None else default_process_counts(os.cpu_count() or 1)
    )
    adaptive = _adaptive(ns, ns.size)
    meters = _meters(ns)
    spec = SweepSpec(
        path=os.path.abspath(ns.path),
        settings=cpu_settings(ns.frequencies, ns.governors),
        processes=tuple(processes),
        ops=ns.ops,
        sizes=ns.size,
        codecs=ns.codecs,
        data=ns.data or ("field" if any(ns.codecs) else "random"),
        cstates=ns.cstates,
        block_size=ns.block_size,
        layout=ns.layout,
        read_method=ns.read_method,
        repetitions=ns.repetitions,
        warmup=ns.warmup,
        idle_seconds=ns.idle,
        extra=sweep_extra(meters, adaptive),
        waiting_seconds=ns.waiting_seconds,
        levers=lever_axes(ns.uncore, ns.power_limit, ns.gpu_clocks, ns.gpu_power_limit),
    )
    spec.validate()
    return spec, meters, adaptive


def build_spec(ns: argparse.Namespace) -> tuple[SweepSpec, CellChooser | None]:
    """The sweep and its cell chooser from the parsed flags (raises on invalid values)."""
    spec, _, adaptive = _request(ns)
    return spec, None if adaptive is None else adaptive.chooser(spec)


def _note(line: str) -> None:
    print(line, file=sys.stderr)


def run_profile(ns: argparse.Namespace) -> int:
    """Execute ``greenckpt profile run``: the library's checks and sweep
    (:mod:`greenckpt.profile.run`), then the table, the fio cross-check and the plots."""
    spec, meters, adaptive = _request(ns)
    out = Path(ns.output)
    previous = prepare_profile(
        spec,
        out,
        resume=ns.resume,
        force=ns.force,
        spelling=SPELLING,
        note=None if ns.quiet else _note,
    )
    if previous is not None and previous.status == "complete":
        done = f"{out} is already complete ({len(previous.points)} points): nothing to resume"
        if ns.json:
            print(done, file=sys.stderr)
            print(dumps({**profile_to_json(previous), "file": str(out)}))
        else:
            print(done)
        return 0
    if ns.plot is not None and Path(ns.plot).exists() and not Path(ns.plot).is_dir():
        raise InvalidValueError(f"--plot {ns.plot}: it exists and is not a directory")
    final = _sweep(ns, spec, out, previous, meters, adaptive)
    if isinstance(final, int):
        return final
    validation, validation_note = _validate_after(spec, ns)
    plots = draw_profile(final, ns.plot) if ns.plot is not None else []
    _show_run(ns, final, out, validation, validation_note, plots)
    return 0


def _sweep(
    ns: argparse.Namespace,
    spec: SweepSpec,
    out: Path,
    previous: Profile | None,
    meters: MeterRequest,
    adaptive: AdaptiveRequest | None,
) -> Profile | int:
    """The sweep with its progress shown; an interrupt or a failed sweep is said (with the
    cells the file keeps) and becomes the exit status."""
    before = file_identity(out)
    progress = progress_sink(quiet=ns.quiet or ns.json)
    if spec.waiting_seconds > 0 and not (ns.quiet or ns.json):
        configs = len(spec.settings) * len(spec.cstates)
        print(
            f"first the waiting ranks' power: {configs} CPU setting(s), each idle then polite "
            f"then spinning waiters, {spec.waiting_seconds:g} s apiece (--waiting-seconds; "
            "0 skips it)",
            file=sys.stderr,
        )
    try:
        return measure_profile(
            spec,
            out,
            previous=previous,
            meters=meters,
            chooser=None if adaptive is None else adaptive.chooser(spec),
            progress=progress,
            wait_loop=complete,  # the checkpoint library's own wait (greenckpt.profile.waiting)
        )
    except KeyboardInterrupt:
        stop_progress(progress)
        kept = cells_kept(out, before, resumed=previous is not None)
        if kept:
            print(
                f"interrupted: the profile in {out} keeps {kept} finished cells; "
                "rerun with --resume",
                file=sys.stderr,
            )
        else:
            print(
                f"interrupted before the first cell finished: {out} was not written",
                file=sys.stderr,
            )
        return EXIT_INTERRUPTED
    except (IOJobError, WaitersError, OSError) as exc:
        stop_progress(progress)
        kept = cells_kept(out, before, resumed=previous is not None)
        where = f"; {out} keeps {kept} finished cells (--resume)" if kept else ""
        print(f"greenckpt profile run: error: the sweep failed: {exc}{where}", file=sys.stderr)
        return EXIT_FAILED
    finally:
        stop_progress(progress)


def _show_run(
    ns: argparse.Namespace,
    final: Profile,
    out: Path,
    validation: ValidationResult | None,
    validation_note: str | None,
    plots: list[Path],
) -> None:
    """The finished profile as JSON or tables, with the cross-check and the figures."""
    if ns.json:
        doc = profile_to_json(final)
        doc["file"] = str(out)
        doc["validation"] = None if validation is None else validation.to_dict()
        if validation_note:
            doc["validation_note"] = validation_note
        doc["plots"] = [str(p) for p in plots]
        print(dumps(doc))
        return
    console = make_console()
    render_profile(final, str(out), console)
    if validation is not None:
        render_validation(validation, console)
    if plots:
        console.print(f"figures written into {escape(ns.plot)}:", highlight=False)
    for path in plots:
        console.print(escape(str(path)), highlight=False)


def _validate_after(
    spec: SweepSpec, ns: argparse.Namespace
) -> tuple[ValidationResult | None, str | None]:
    """The fio cross-check after a sweep; a missing or failing fio is a note, not an error."""
    if not ns.validate:
        return None, None
    note = None
    if not fio_available():
        note = "fio is not installed, so the I/O engine was not cross-checked (--validate)"
    else:
        try:
            result = validate(
                spec.path, max(spec.sizes), spec.processes, spec.block_size, VALIDATE_REPEATS
            )
        except (FioError, IOJobError, ValueError, OSError) as exc:
            note = f"the fio cross-check did not run: {exc}"
        else:
            if not any(spec.codecs):
                return result, None
            note = "fio cannot compress: the cross-check compared uncompressed I/O only"
            print(f"note: {note}", file=sys.stderr)
            return result, note
    print(f"note: {note}", file=sys.stderr)
    return None, note


def draw_profile(
    profile: Profile, out: Path, formats: Sequence[str] = ("png", "svg")
) -> list[Path]:
    """:func:`greenckpt.report.profile_plots.plot_profile`, imported only when plots are asked for
    (matplotlib adds about 0.3 s to every start of the command line)."""
    from greenckpt.report.profile_plots import plot_profile as draw  # noqa: PLC0415 - see docstring

    return draw(profile, out, formats)
