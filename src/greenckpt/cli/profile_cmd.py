"""``greenckpt profile``: measure a node's checkpoint I/O and power, and work with the results.

Why one command family: the planner is only as good as the profile it reads, and a profile is
made, inspected, exported, plotted, merged across nodes and cross-checked against fio by the
same person in the same session. The library (:mod:`greenckpt.profile`) does the work — a
profile run, with its checks, resume, meters and node session, is
:mod:`greenckpt.profile.run`, which ``greenckpt demo`` calls too; this module only parses the
flags (units at the edge, every value checked before anything starts), calls the library and
renders the results.

Actions::

    greenckpt profile run PATH -o OUT [grid and measuring options] [--resume | --force]
    greenckpt profile show FILE [--json]
    greenckpt profile csv FILE [-o OUT.csv]
    greenckpt profile plot FILE -o DIR [--format png,svg]
    greenckpt profile merge A.json B.json ... -o OUT [--names n1,n2,...] [--json]
    greenckpt profile compare A.json B.json ... [--threshold 10%] [--names ...] [--json]
    greenckpt profile validate PATH [--size 2GiB] [--processes 1,2,4] [--block-size 1MiB]
                                    [--repeats 3] [--json]

Bad input (a unit missing, a frequency the CPU does not offer, an existing output file, an
unknown meter, a malformed profile) stops the action before it changes anything, with one line
on stderr and exit status 2, as every greenckpt command does.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

from rich.markup import escape

from greenckpt import units
from greenckpt.cli.args import (
    add_hidden_alias,
    add_meter_arguments,
    meter_names,
    non_negative_int,
    positive_int,
    unit_type,
)
from greenckpt.cli.console import make_console
from greenckpt.errors import InvalidValueError
from greenckpt.io import DATA_KINDS, CodecError, IOJobError, parse_codec
from greenckpt.jsonout import dumps
from greenckpt.optimize.profile import (
    GOVERNORS,
    OPERATIONS,
    Operation,
    Profile,
    load_profile,
    profile_to_json,
)
from greenckpt.profile.adaptive import DEFAULT_MARGIN
from greenckpt.profile.export import profile_to_csv
from greenckpt.profile.fio import (
    TARGET_RATIO,
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
from greenckpt.profile.labels import power_label
from greenckpt.profile.merge import (
    DEFAULT_THRESHOLD,
    compare_profiles,
    merge_profiles,
)
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
from greenckpt.profile.store import check_writable_target, save_profile
from greenckpt.profile.sweep import CellChooser
from greenckpt.report.profile_progress import RichProgress, progress_sink, stop_progress
from greenckpt.report.profile_tables import (
    comparison_table,
    points_table,
    render_comparison,
    render_profile,
    render_validation,
)

__all__ = [  # the rendering names are report/'s, still importable from here
    "RichProgress",
    "build_spec",
    "comparison_table",
    "points_table",
    "progress_sink",
    "register",
    "render_profile",
    "render_validation",
    "run_profile",
    "settings_flags",
    "stop_progress",
]

T = TypeVar("T")

DEFAULT_MTBF = "24h"
VALIDATE_REPEATS = 3
EXIT_INTERRUPTED = 130
EXIT_FAILED = 1
CSTATE_WORDS: dict[str, bool | None] = {"asfound": None, "on": True, "off": False}
FLAG_OF = {
    "path": "PATH",
    "settings": "--frequencies/--governors",
    "processes": "--processes",
    "ops": "--ops",
    "sizes": "--size",
    "cstates": "--cstates",
    "codecs": "--codecs",
    "data": "--data",
    "block_size": "--block-size",
    "layout": "--layout",
    "read_method": "--read-method",
    "repetitions": "--repeats",
    "warmup": "--warmup",
    "idle_seconds": "--idle",
    "extra.meters": "--meters",
    "extra.rate_hz": "--rate",
    "extra.meter_csv": "--meter-csv",
    "extra.tdp_W": "--tdp",
    "extra.adaptive": "--adaptive and its scenario",
}
"""The flag behind each recorded sweep field (to say which option differs on --resume)."""
SPELLING = {"resume": "--resume", "force": "--force", **FLAG_OF}
"""How the library's messages name the choices and fields: by this command's flags."""
BYTES_PER_MB = 1e6
BYTES_PER_GB = 1e9


# --------------------------------------------------------------------------- flag types


def _items(text: str) -> list[str]:
    """The comma-separated items of ``text``; an empty text is an empty list."""
    if not text.strip():
        return []
    items = [item.strip() for item in text.split(",")]
    if not all(items):
        raise argparse.ArgumentTypeError(
            f"{text!r} has an empty item: separate values with single commas, e.g. 1,2,4"
        )
    return items


def _no_repeats(values: Sequence[T], text: str) -> None:
    if len(set(values)) != len(values):
        raise argparse.ArgumentTypeError(f"{text!r} lists a value twice")


def _whole_bytes(text: str) -> int:
    value = units.parse_size(text)
    if value != math.floor(value):
        raise units.UnitError(f"{text!r} is not a whole number of bytes")
    return int(value)


def _size(text: str) -> int:
    """One size with a unit, in whole bytes."""
    try:
        return _whole_bytes(text)
    except units.UnitError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _sizes(text: str) -> tuple[int, ...]:
    """Comma-separated sizes with units (``8MiB,2GiB``)."""
    try:
        return tuple(_whole_bytes(item) for item in _items(text))
    except units.UnitError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _counts(text: str) -> tuple[int, ...]:
    """Comma-separated process counts (``1,2,4``); empty is left to the sweep's check."""
    counts = tuple(positive_int(item) for item in _items(text))
    _no_repeats(counts, text)
    return counts


def _durations(text: str) -> tuple[float, ...]:
    try:
        return tuple(units.parse_duration(item) for item in _items(text))
    except units.UnitError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _frequencies(text: str) -> str | tuple[int, ...]:
    """``all``, ``asfound`` or comma-separated frequencies with units (``1.2GHz,2.6GHz``)."""
    word = text.strip().lower()
    if word in ("all", "asfound"):
        return word
    try:
        return tuple(round(units.parse_frequency(item)) for item in _items(text))
    except units.UnitError as exc:
        raise argparse.ArgumentTypeError(f"{exc} (or all, or asfound)") from None


def _governors(text: str) -> tuple[str, ...]:
    """``none`` or comma-separated governor names."""
    if text.strip().lower() == "none":
        return ()
    names = tuple(_items(text))
    for name in names:
        if name not in GOVERNORS:
            raise argparse.ArgumentTypeError(
                f"unknown governor {name!r}: expected none or some of {', '.join(GOVERNORS)}"
            )
    _no_repeats(names, text)
    return names


def _operations(text: str) -> tuple[Operation, ...]:
    """Comma-separated operations, returned in the profile's order (write before read)."""
    names = _items(text)
    for name in names:
        if name not in OPERATIONS:
            raise argparse.ArgumentTypeError(
                f"unknown operation {name!r}: expected some of {', '.join(OPERATIONS)}"
            )
    _no_repeats(names, text)
    return tuple(op for op in OPERATIONS if op in names)


def _cstates(text: str) -> tuple[bool | None, ...]:
    """``asfound`` or comma-separated ``on``/``off`` (``asfound`` may be among them)."""
    words = [w.lower() for w in _items(text)] or ["asfound"]
    for word in words:
        if word not in CSTATE_WORDS:
            raise argparse.ArgumentTypeError(
                f"{word!r} is not a C-state setting: give asfound, or on and/or off (on,off)"
            )
    _no_repeats(words, text)
    return tuple(CSTATE_WORDS[w] for w in words)


def _codecs(text: str) -> tuple[str | None, ...]:
    """Comma-separated ``none`` and/or codecs (``zstd``, ``zstd:5``, ``lz4``, ``zlib:9``)."""
    labels: list[str | None] = []
    for word in _items(text) or ["none"]:
        try:
            spec = parse_codec(word)
        except CodecError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None
        labels.append(None if spec is None else spec.label)
    _no_repeats([str(label) for label in labels], text)
    return tuple(labels)


def _idle(text: str) -> float:
    """A duration with a unit, or a bare 0 (zero seconds needs no unit: it skips the idle
    measurement)."""
    try:
        if float(text) == 0:
            return 0.0
    except ValueError:
        pass
    try:
        return units.parse_duration(text, allow_zero=True)
    except units.UnitError as exc:
        raise argparse.ArgumentTypeError(f"{exc} (or 0 to skip)") from None


def _names(text: str) -> tuple[str, ...]:
    return tuple(_items(text))


def settings_flags(frequencies: Sequence[float], governors: Sequence[str]) -> list[str]:
    """The ``--frequencies``/``--governors`` flags that ask for these CPU settings (the
    inverse of their parsers), to show a sweep as a command a user can repeat."""
    return [
        "--frequencies",
        ",".join(f"{round(hz)}Hz" for hz in frequencies),
        "--governors",
        ",".join(governors) or "none",
    ]


# --------------------------------------------------------------------------- registration


def register(sub: Any) -> None:
    """Add the ``profile`` sub-command and its actions."""
    p = sub.add_parser(
        "profile",
        help="measure checkpoint I/O throughput and node power; show, export, plot, merge",
        description="The I/O+power profiler: sweep the storage holding a directory over CPU "
        "settings and numbers of I/O processes, and work with the profiles it writes.",
    )
    actions = p.add_subparsers(dest="action", required=True, metavar="ACTION")
    _register_run(actions)
    _register_show(actions)
    _register_csv(actions)
    _register_plot(actions)
    _register_merge(actions)
    _register_compare(actions)
    _register_validate(actions)


def _register_run(actions: Any) -> None:
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
        type=_frequencies,
        metavar="HZ,...|all|asfound",
        help="CPU frequencies to fix, e.g. 1.2GHz,2.6GHz; 'all' (every offered frequency) or "
        "'asfound' (do not control the frequency). Default: every offered frequency, or as "
        "found on a node without cpufreq control",
    )
    grid.add_argument(
        "--governors",
        type=_governors,
        metavar="NAME,...|none",
        help="stock governors to measure as settings, e.g. performance,ondemand, or 'none' "
        "(needs frequency control). Default: those the node offers, none with asfound",
    )
    grid.add_argument(
        "--processes",
        type=_counts,
        metavar="N,...",
        help="numbers of concurrent I/O processes, e.g. 1,2,4 (default: 1, 2, 4, … up to "
        "twice the logical CPUs)",
    )
    grid.add_argument(
        "--ops",
        type=_operations,
        metavar="OP,...",
        default=OPERATIONS,
        help="operations to record: write,read (default both; reads need the writes' files)",
    )
    grid.add_argument(
        "--size",
        type=_sizes,
        metavar="SIZE,...",
        default=(2 << 30,),
        help="bytes moved per run, all processes together; a comma list sweeps sizes "
        "(default 2GiB)",
    )
    grid.add_argument(
        "--block-size", type=_size, default=1 << 20, help="bytes per I/O call (default 1MiB)"
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
        type=_cstates,
        metavar="asfound|on,off",
        default=(None,),
        help="C-states: 'asfound' (default, not controlled) or on,off to measure both",
    )
    grid.add_argument(
        "--codecs",
        type=_codecs,
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
    meas = p.add_argument_group("measuring")
    meas.add_argument(
        "--idle",
        type=_idle,
        default=5.0,
        help="how long to measure idle power first (default 5s; 0 to skip)",
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
        type=_sizes,
        metavar="SIZE,...",
        help="checkpoint sizes to decide for (default: the largest --size)",
    )
    adapt.add_argument(
        "--mtbf",
        type=_durations,
        metavar="DURATION,...",
        action="append",
        help="MTBFs of ONE node to decide for, repeatable or a comma list (default "
        f"{DEFAULT_MTBF}); the job fails at nodes/MTBF",
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


def _register_show(actions: Any) -> None:
    p = actions.add_parser(
        "show",
        help="print a profile: provenance, power source and every point",
        description="Print a profile's provenance (machine, storage, meters, power domains, "
        "idle power) and a table of its points, each with its power source.",
    )
    p.add_argument("file", metavar="FILE", help="profile JSON file")
    p.add_argument("--json", action="store_true", help="print the profile as JSON")
    p.set_defaults(run=show_profile)


def _register_csv(actions: Any) -> None:
    p = actions.add_parser(
        "csv",
        help="export a profile's points as CSV",
        description="One CSV row per point, SI units in the column names (docs/formats.md).",
    )
    p.add_argument("file", metavar="FILE", help="profile JSON file")
    p.add_argument("-o", "--output", metavar="OUT.csv", help="file to write (default stdout)")
    p.set_defaults(run=csv_profile)


def _register_plot(actions: Any) -> None:
    p = actions.add_parser(
        "plot",
        help="draw a profile's figures (throughput/power vs frequency and processes, energy)",
        description="Write the profile's figures into DIR, one file per figure and format.",
    )
    p.add_argument("file", metavar="FILE", help="profile JSON file")
    p.add_argument("-o", "--output", required=True, metavar="DIR", help="directory to write")
    p.add_argument(
        "--format",
        type=_names,
        default=("png", "svg"),
        help="comma list of png, svg, pdf (default png,svg)",
    )
    p.set_defaults(run=plot_profile)


def _register_merge(actions: Any) -> None:
    p = actions.add_parser(
        "merge",
        help="merge several nodes' profiles of the same sweep into one (medians)",
        description="Merge profiles of the same sweep measured on several nodes: every figure "
        "is the median across nodes, its spread the range between nodes. Look at "
        "`greenckpt profile compare` first to find an odd node.",
    )
    p.add_argument("files", metavar="FILE", nargs="+", help="profile JSON files (two or more)")
    p.add_argument("-o", "--output", required=True, metavar="OUT", help="merged profile file")
    p.add_argument(
        "--names", type=_names, help="node names, comma list (default: each file's hostname)"
    )
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.set_defaults(run=merge_cmd)


def _register_compare(actions: Any) -> None:
    p = actions.add_parser(
        "compare",
        help="compare nodes' profiles point by point and flag outlier nodes",
        description="Each node's throughput and power relative to the median across nodes, "
        "at every point they all measured; figures off by more than the threshold are flagged.",
    )
    p.add_argument("files", metavar="FILE", nargs="+", help="profile JSON files (two or more)")
    p.add_argument(
        "--threshold",
        type=unit_type(units.parse_fraction),
        default=DEFAULT_THRESHOLD,
        help="flag figures off the median by more than this, e.g. 5%% "
        f"(default {DEFAULT_THRESHOLD:.0%}%)",
    )
    p.add_argument(
        "--names", type=_names, help="node names, comma list (default: each file's hostname)"
    )
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.set_defaults(run=compare_cmd)


def _register_validate(actions: Any) -> None:
    p = actions.add_parser(
        "validate",
        help="cross-check greenckpt's I/O engine against fio on PATH",
        description="Run fio and greenckpt's I/O engine on the same work (size, block size, "
        f"processes), interleaved, and report engine/fio; the target is {TARGET_RATIO:g}× or "
        "better. Needs fio.",
    )
    p.add_argument("path", metavar="PATH", help="directory on the storage to test")
    p.add_argument("--size", type=_size, default=2 << 30, help="bytes per run (default 2GiB)")
    p.add_argument(
        "--processes", type=_counts, default=(1, 2, 4), help="process counts (default 1,2,4)"
    )
    p.add_argument(
        "--block-size", type=_size, default=1 << 20, help="bytes per I/O call (default 1MiB)"
    )
    repeats = p.add_argument(
        "--repeats",
        type=positive_int,
        default=VALIDATE_REPEATS,
        help=f"repetitions of each case (default {VALIDATE_REPEATS})",
    )
    add_hidden_alias(p, repeats, "--repetitions")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.set_defaults(run=validate_cmd)


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

    before = file_identity(out)
    progress = progress_sink(quiet=ns.quiet or ns.json)
    try:
        final = measure_profile(
            spec,
            out,
            previous=previous,
            meters=meters,
            chooser=None if adaptive is None else adaptive.chooser(spec),
            progress=progress,
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
    except (IOJobError, OSError) as exc:
        stop_progress(progress)
        kept = cells_kept(out, before, resumed=previous is not None)
        where = f"; {out} keeps {kept} finished cells (--resume)" if kept else ""
        print(f"greenckpt profile run: error: the sweep failed: {exc}{where}", file=sys.stderr)
        return EXIT_FAILED
    finally:
        stop_progress(progress)

    validation, validation_note = _validate_after(spec, ns)
    plots = draw_profile(final, ns.plot) if ns.plot is not None else []
    if ns.json:
        doc = profile_to_json(final)
        doc["file"] = str(out)
        doc["validation"] = None if validation is None else validation.to_dict()
        if validation_note:
            doc["validation_note"] = validation_note
        doc["plots"] = [str(p) for p in plots]
        print(dumps(doc))
        return 0
    console = make_console()
    render_profile(final, str(out), console)
    if validation is not None:
        render_validation(validation, console)
    if plots:
        console.print(f"figures written into {escape(ns.plot)}:", highlight=False)
    for path in plots:
        console.print(escape(str(path)), highlight=False)
    return 0


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


# --------------------------------------------------------------------------- show


def show_profile(ns: argparse.Namespace) -> int:
    """Execute ``greenckpt profile show``."""
    profile = load_profile(ns.file)
    if ns.json:
        print(dumps(profile_to_json(profile)))
        return 0
    render_profile(profile, ns.file, make_console())
    return 0


# --------------------------------------------------------------------------- csv, plot


def _writing(what: str, target: str | os.PathLike[str], write: Callable[[], T]) -> T:
    """Run ``write``; an OS error (a full disk, a read-only directory) becomes one line."""
    try:
        return write()
    except OSError as exc:
        raise InvalidValueError(f"cannot write {what} {target}: {exc.strerror or exc}") from None


def csv_profile(ns: argparse.Namespace) -> int:
    """Execute ``greenckpt profile csv``."""
    profile = load_profile(ns.file)
    if ns.output is None:
        profile_to_csv(profile, sys.stdout)
        return 0
    check_writable_target(ns.output)
    rows = _writing("CSV", ns.output, lambda: profile_to_csv(profile, ns.output))
    print(f"wrote {rows} rows to {ns.output}")
    return 0


def draw_profile(
    profile: Profile, out: Path, formats: Sequence[str] = ("png", "svg")
) -> list[Path]:
    """:func:`greenckpt.report.profile_plots.plot_profile`, imported only when plots are asked for
    (matplotlib adds about 0.3 s to every start of the command line)."""
    from greenckpt.report.profile_plots import plot_profile as draw  # noqa: PLC0415 - see docstring

    return draw(profile, out, formats)


def plot_profile(ns: argparse.Namespace) -> int:
    """Execute ``greenckpt profile plot``."""
    profile = load_profile(ns.file)
    out = Path(ns.output)
    if out.exists() and not out.is_dir():
        raise InvalidValueError(f"-o {out}: it exists and is not a directory")
    for path in _writing("plots into", out, lambda: draw_profile(profile, out, ns.format)):
        print(path)
    return 0


# --------------------------------------------------------------------------- merge, compare


def _load_all(files: Sequence[str]) -> list[Profile]:
    return [load_profile(f) for f in files]


def merge_cmd(ns: argparse.Namespace) -> int:
    """Execute ``greenckpt profile merge``."""
    profiles = _load_all(ns.files)
    merged = merge_profiles(profiles, ns.names)
    check_writable_target(ns.output)
    _writing("profile", ns.output, lambda: save_profile(merged, ns.output))
    nodes = [str(n) for n in merged.machine.get("nodes", [])]
    # With two nodes the median is their mean and both would be flagged: say nothing then.
    odd = compare_profiles(profiles, ns.names).outlier_nodes if len(profiles) > 2 else []
    if ns.json:
        doc = {
            "file": str(ns.output),
            "profiles": list(ns.files),
            "nodes": nodes,
            "points": len(merged.points),
            "status": merged.status,
            "storage": merged.storage.get("key"),
            "synthetic": merged.synthetic,
            "power_sources": sorted(merged.power_sources),
            "power": power_label(merged),
            "outlier_threshold": DEFAULT_THRESHOLD,
            "outlier_nodes": list(odd),
        }
        print(dumps(doc))
        return 0
    print(
        f"merged {len(profiles)} profiles ({', '.join(nodes)}) into {ns.output}: "
        f"{len(merged.points)} points, medians across nodes; status {merged.status}; "
        f"storage {merged.storage.get('key', 'unknown')}; {power_label(merged)}"
    )
    if odd:
        print(
            f"nodes off the median by more than {DEFAULT_THRESHOLD:.0%} somewhere: "
            f"{', '.join(odd)} (see greenckpt profile compare)"
        )
    return 0


def compare_cmd(ns: argparse.Namespace) -> int:
    """Execute ``greenckpt profile compare``."""
    profiles = _load_all(ns.files)
    cmp = compare_profiles(profiles, ns.names, threshold=ns.threshold)
    if ns.json:
        print(dumps(cmp.to_dict()))
        return 0
    render_comparison(cmp, profiles, make_console())
    return 0


# --------------------------------------------------------------------------- validate


def validate_cmd(ns: argparse.Namespace) -> int:
    """Execute ``greenckpt profile validate``."""
    path = Path(ns.path)
    if not path.is_dir():
        raise InvalidValueError(f"{path} is not an existing directory: give the directory to test")
    try:
        result = validate(path, ns.size, ns.processes, ns.block_size, ns.repeats)
    except FioError as exc:
        raise InvalidValueError(str(exc)) from None
    except (IOJobError, OSError) as exc:
        raise InvalidValueError(f"the I/O failed: {exc}") from None
    if ns.json:
        print(dumps(result.to_dict()))
        return 0
    render_validation(result, make_console())
    return 0
