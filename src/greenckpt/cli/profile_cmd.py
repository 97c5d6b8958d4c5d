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
import json
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from greenckpt import units
from greenckpt.cli.argtypes import add_hidden_alias, positive_int, unit_type
from greenckpt.cli.commands import command_help
from greenckpt.cli.console import make_console
from greenckpt.cli.profile_flags import (
    VALIDATE_REPEATS,
    T,
    counts_arg,
    names_arg,
    settings_flags,
    size_arg,
)
from greenckpt.cli.profile_run_cmd import build_spec, draw_profile, register_run, run_profile
from greenckpt.errors import InvalidValueError
from greenckpt.io import IOJobError
from greenckpt.jsonout import dumps
from greenckpt.optimize.profile_data import (
    Profile,
    load_profile,
    profile_to_json,
)
from greenckpt.profile.export import profile_to_csv
from greenckpt.profile.fio import (
    TARGET_RATIO,
    FioError,
    validate,
)
from greenckpt.profile.labels import power_label
from greenckpt.profile.merge import (
    DEFAULT_THRESHOLD,
    compare_profiles,
    merge_profiles,
)
from greenckpt.profile.store import check_writable_target, save_profile
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


# --------------------------------------------------------------------------- registration


def register(sub: Any) -> None:
    """Add the ``profile`` sub-command and its actions."""
    p = sub.add_parser(
        "profile",
        help=command_help("profile"),
        description="The I/O+power profiler: sweep the storage holding a directory over CPU "
        "settings and numbers of I/O processes, and work with the profiles it writes.",
    )
    actions = p.add_subparsers(dest="action", required=True, metavar="ACTION")
    register_run(actions)
    _register_show(actions)
    _register_csv(actions)
    _register_plot(actions)
    _register_merge(actions)
    _register_compare(actions)
    _register_validate(actions)
    _register_import(actions)


def _register_import(actions: Any) -> None:
    p = actions.add_parser(
        "import",
        help="make a profile from a CSV table (a paper's, a vendor's, or a profile csv export)",
        description="Build a profile from a CSV with a header line: op (write/read), setting "
        "(a frequency such as 2.1GHz, or a governor), processes, MB/s, W, and optionally "
        "codec, cstates, size; or the columns greenckpt profile csv writes (docs/formats.md). "
        "The profile says it was imported, with the power source you state.",
    )
    p.add_argument("file", metavar="FILE.csv", help="the table to import")
    p.add_argument("-o", "--output", metavar="PROFILE.json", required=True, help="file to write")
    p.add_argument("--device", help="a name for the storage device (default: the file's name)")
    p.add_argument("--note", default="", help="free text kept in the profile's note")
    p.add_argument(
        "--power-source",
        choices=("measured", "estimated", "synthetic"),
        default="measured",
        help="how the W column was obtained (default measured: by whoever made the table)",
    )
    p.set_defaults(run=import_csv_profile)


def import_csv_profile(ns: argparse.Namespace) -> int:
    """Execute ``greenckpt profile import``."""
    from greenckpt.profile.import_csv import import_profile  # noqa: PLC0415 - only for import

    doc = import_profile(ns.file, device=ns.device, note=ns.note, power_source=ns.power_source)
    out = Path(ns.output)
    tmp = out.with_name(out.name + ".tmp")
    tmp.write_text(json.dumps(doc, indent=1) + "\n")
    os.replace(tmp, out)
    print(f"{out}: {len(doc['points'])} points imported from {ns.file}")
    return 0


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
        type=names_arg,
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
        "--names", type=names_arg, help="node names, comma list (default: each file's hostname)"
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
        "--names", type=names_arg, help="node names, comma list (default: each file's hostname)"
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
    p.add_argument("--size", type=size_arg, default=2 << 30, help="bytes per run (default 2GiB)")
    p.add_argument(
        "--processes", type=counts_arg, default=(1, 2, 4), help="process counts (default 1,2,4)"
    )
    p.add_argument(
        "--block-size", type=size_arg, default=1 << 20, help="bytes per I/O call (default 1MiB)"
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
