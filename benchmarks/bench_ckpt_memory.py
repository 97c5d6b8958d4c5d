"""Peak memory of one checkpoint and one recovery beyond the protected data; target ≤ 64 MiB.

Run: ``python benchmarks/bench_ckpt_memory.py [--sizes 64MiB,256MiB,1GiB,2GiB]
[--codecs none,lz4,zstd] [--levels L1,L2,L3-xor,L3-rs2] [--ranks 4] [--dir DIR]
[--json PATH]``. Not a test: it prints measured overheads and PASS/FAIL against 64 MiB.

Why: the library promises never to copy the protected data (the write streams from the
arrays, the restart reads straight back into them), so what a checkpoint costs in memory must
not grow with the data. Each case therefore runs at several sizes: an overhead that grows
with the size is a copy somewhere, whatever its absolute value.

Each case (size × codec × checkpoint/recovery) is a fresh single process
(``_ckpt_worker.py``) that imports the library, allocates and touches one float64 array (a
smooth field rounded to 1e-3, so lz4 and zstd really compress), builds a Checkpointer (level
1, keep 1) and protects the array. It then resets the kernel's high-water mark of its resident
memory (``echo 5 > /proc/self/clear_refs``) and reads ``VmRSS`` — the baseline — then runs one
``checkpoint(1)``, or, in a second fresh process with a zeroed array, one ``recover()``, and
reads ``VmHWM``: overhead = peak − baseline. ``ru_maxrss`` (which cannot be reset: it also
holds any earlier peak) gives a second figure, and ``tracemalloc`` a third, of Python and NumPy
allocations only, from a repeat of the same call after the resident measurement (tracing costs
memory itself, so it never runs during it). Importing the library and building the
Checkpointer are per process, not per checkpoint: shown apart, not counted in the overhead.

Levels 2 and 3 (``--levels``: ``L2`` partner copy, ``L3-xor`` parity 1, ``L3-rs2`` parity 2)
move every byte between ranks as well: their case is an ``mpiexec`` job of ``--ranks`` ranks,
one emulated node each and each with an array of the given size, measured the same way on
every rank; the rank with the largest overhead counts. They have a third op, ``rebuild``: a
recovery after emulated node 1 lost its storage, whose files are rebuilt from the partner copy
or the group's parity while every rank reads its own. The promise is the same: memory beyond
the protected data that does not grow with them.

A case passes when its resident overhead (VmHWM) is ≤ 64 MiB. Memory is not noisy the way
time is, so each case runs once by default; with ``--repeats`` the worst run counts.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

from bench_ckpt_io import BenchError, _Parser, machine, mpiexec, run_worker, storage
from greenckpt.io import parse_codec
from greenckpt.io.codec import CodecError
from greenckpt.platform.root import PlatformError
from greenckpt.platform.storage import identify_storage
from greenckpt.units import UnitError, format_size, parse_size

MiB = 1024 * 1024
LIMIT = 64 * MiB
SPACE_MARGIN = 256 * MiB
MEMORY_MARGIN = 512 * MiB
OPS = ("checkpoint", "recovery")
LEVELS = ("L1", "L2", "L3-xor", "L3-rs2")
REBUILD = "rebuild"
WORKER_MODES = {"checkpoint": "mem-write", "recovery": "mem-read", REBUILD: "mem-rebuild"}


def ops_of(level: str) -> tuple[str, ...]:
    """What is measured for ``level``: a lost node's rebuild where the level can rebuild."""
    return OPS if level == "L1" else (*OPS, REBUILD)


def _check_levels(parser: argparse.ArgumentParser, args: argparse.Namespace) -> bool:
    """``--levels`` and ``--ranks`` checked (``args.level_list`` set): whether a level 2 or 3
    case (an ``mpiexec`` job) is among them."""
    levels = [text.strip() for text in args.levels.split(",")]
    unknown = [x for x in levels if x not in LEVELS]
    if unknown or len(set(levels)) != len(levels):
        parser.error(f"--levels {args.levels!r}: give each of {', '.join(LEVELS)} at most once")
    args.level_list = levels
    multi = any(x != "L1" for x in levels)
    if multi and args.ranks < 3:
        parser.error(f"--ranks must be >= 3 (level 3 with parity 2 needs 3), not {args.ranks}")
    if multi and mpiexec() is None:
        parser.error("levels 2 and 3 need mpiexec (pip install '.[mpi]'); or --levels L1")
    return multi


def parse_args(argv: list[str] | None) -> argparse.Namespace:  # noqa: PLR0915 — one add_argument per flag
    parser = _Parser(
        prog="bench_ckpt_memory.py",
        description="Peak memory of a checkpoint and a recovery beyond the protected data.",
    )
    parser.add_argument(
        "--sizes", default="64MiB,256MiB,1GiB,2GiB", help="comma-separated data sizes"
    )
    parser.add_argument("--codecs", default="none,lz4,zstd", help="comma-separated codecs")
    parser.add_argument(
        "--levels",
        default=",".join(LEVELS),
        help=f"comma-separated levels among {', '.join(LEVELS)} (levels 2 and 3 run --ranks "
        "ranks, one emulated node each)",
    )
    parser.add_argument(
        "--ranks", type=int, default=4, help="ranks of a level 2 or 3 case (>= 3; default 4)"
    )
    parser.add_argument("--repeats", type=int, default=1, help="runs per case (worst counts)")
    parser.add_argument(
        "--dir",
        default=None,
        help="directory for the checkpoints (default $TMPDIR, else /var/tmp); a temporary "
        "directory is made inside and removed",
    )
    parser.add_argument("--no-tracemalloc", action="store_true", help="skip the third view")
    parser.add_argument("--json", default=None, metavar="PATH", help="also write results here")
    args = parser.parse_args(argv)
    sizes: list[int] = []
    for text in args.sizes.split(","):
        try:
            size = int(parse_size(text))
        except (UnitError, TypeError) as exc:
            parser.error(f"--sizes: {exc}")
        if size < 8 or size % 8:
            parser.error(f"--sizes: {text!r} is not a whole number of float64 values (x 8 B)")
        sizes.append(size)
    if len(set(sizes)) != len(sizes):
        parser.error(f"--sizes repeats a size: {args.sizes!r}")
    args.size_list = sizes
    codecs: list[str] = []
    for text in args.codecs.split(","):
        try:
            spec = parse_codec(text)
        except CodecError as exc:
            parser.error(f"--codecs: {exc}")
        codecs.append("none" if spec is None else spec.label)
    args.codec_list = codecs
    if args.repeats < 1:
        parser.error(f"--repeats must be >= 1, not {args.repeats}")
    multi = _check_levels(parser, args)
    copies = args.ranks if multi else 1  # processes, each with its own array
    default_dir = os.environ.get("TMPDIR") or (
        "/var/tmp" if os.path.isdir("/var/tmp") else tempfile.gettempdir()
    )
    directory = Path(args.dir or default_dir).resolve()
    if not directory.is_dir() or not os.access(directory, os.W_OK | os.X_OK):
        parser.error(f"--dir {directory} is not a writable directory")
    biggest = max(sizes)
    st = os.statvfs(directory)
    free = st.f_bavail * st.f_frsize
    # keep 1: the traced repeat commits before removing; a level 2 or 3 checkpoint stores at
    # most twice the data (a partner copy, or parity 2 over groups of 4)
    need = 2 * (2 if multi else 1) * copies * biggest + SPACE_MARGIN
    if free < need:
        parser.error(
            f"--dir {directory} has {format_size(free)} free, {format_size(biggest)} needs "
            f"{format_size(need)}; give smaller --sizes or another --dir"
        )
    available = _mem_available()
    if available is not None and available < copies * biggest + MEMORY_MARGIN:
        parser.error(
            f"{copies} x {format_size(biggest)} of data needs "
            f"{format_size(copies * biggest + MEMORY_MARGIN)} of memory, "
            f"{format_size(available)} is available; give smaller --sizes or fewer --ranks"
        )
    try:
        ram = identify_storage(directory).kind == "memory"
    except PlatformError:
        ram = False
    if ram and available is not None and available < 3 * copies * biggest + MEMORY_MARGIN:
        parser.error(f"--dir {directory} is RAM-backed and too small; give a disk directory")
    args.directory = directory
    return args


def _mem_available() -> int | None:
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            return next(int(ln.split()[1]) * 1024 for ln in f if ln.startswith("MemAvailable"))
    except (OSError, StopIteration):
        return None


def run_case(
    work: Path, size: int, codec: str, trace: bool, tag: str, level: str, ranks: int
) -> dict[str, Any]:
    """Checkpoint in one fresh job, recover in another (and rebuild a lost node in a third,
    levels 2 and 3); every job's figures by op."""
    seed = 7
    base = work / tag
    base.mkdir()
    args = [str(base), "mem", str(size), codec, str(seed), "1" if trace else "0", level]
    launcher, n = (None, 1) if level == "L1" else (mpiexec(), ranks)
    out: dict[str, Any] = {}
    try:
        for op in ops_of(level):
            out[op] = run_worker(launcher, n, [WORKER_MODES[op], *args])
    finally:
        for entry in sorted(base.rglob("*"), reverse=True):
            if entry.is_dir() and not entry.is_symlink():
                entry.rmdir()
            else:
                entry.unlink()
        base.rmdir()
    for op in ops_of(level)[1:]:
        if not out[op].get("verified"):
            raise BenchError(
                f"{op} of {format_size(size)} ({level}, codec {codec}) gave wrong data"
            )
    if REBUILD in out and not out[REBUILD].get("rebuilt"):
        raise BenchError(f"the {level} recovery after a lost node rebuilt nothing")
    return out


def _mib(value: float | None) -> str:
    return "-" if value is None else f"{value / MiB:.1f}"


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    trace = not args.no_tracemalloc
    info = machine()
    print(
        f"machine: {info['host']}, {info['cpu']}, {info['cpus']} CPUs, "
        f"{format_size(info['memory_bytes'])} RAM, Linux {info['kernel']}, "
        f"Python {info['python']}, NumPy {info['numpy']}"
    )
    print(f"storage: {args.directory} -> {storage(args.directory)}")
    print(
        f"sizes: {', '.join(format_size(s) for s in args.size_list)}; codecs: "
        f"{', '.join(args.codec_list)}; levels: {', '.join(args.level_list)} (levels 2 and 3: "
        f"{args.ranks} ranks, one emulated node each, size per rank); one job per case and "
        f"op; {args.repeats} run(s) per case, worst counts; limit {format_size(LIMIT)} per "
        "process"
    )
    sys.stdout.flush()
    runs: dict[tuple[str, int, str, str], list[dict[str, Any]]] = {}
    try:
        with tempfile.TemporaryDirectory(prefix="bench-ckpt-mem-", dir=args.directory) as tmp:
            for rep in range(args.repeats):
                for level in args.level_list:
                    for size in args.size_list:
                        for codec in args.codec_list:
                            tag = f"case-{rep}-{level}-{size}-{codec.replace(':', '-')}"
                            out = run_case(Path(tmp), size, codec, trace, tag, level, args.ranks)
                            for op, result in out.items():
                                runs.setdefault((level, size, codec, op), []).append(result)
                            print(
                                f"  {level} {format_size(size)} {codec} done",
                                file=sys.stderr,
                                flush=True,
                            )
    except (BenchError, OSError) as exc:
        print(f"bench_ckpt_memory.py: {exc}", file=sys.stderr)
        return 1

    hwm_method = (
        "VmHWM reset by clear_refs"
        if all(r["hwm_reset"] for rs in runs.values() for r in rs)
        else "VmHWM NOT resettable here: overhead taken against the earlier peak"
    )
    print(f"overhead = peak - baseline ({hwm_method}); MiB = 2^20 B")
    print(
        f"{'level':<7}{'size':>8} {'codec':<7}{'op':<11}{'baseline':>9}{'VmHWM+':>8}"
        f"{'maxrss+':>8}{'traced':>8}{'import':>8}{'stored':>8}  verdict"
    )
    cases: list[dict[str, Any]] = []
    all_pass = True
    for (level, size, codec, op), rs in runs.items():
        worst = max(rs, key=lambda r: int(r["overhead_hwm"]))
        over = max(int(r["overhead_hwm"]) for r in rs)
        over_maxrss = max(int(r["overhead_maxrss"]) for r in rs)
        traced_all = [r["tracemalloc_peak"] for r in rs if r["tracemalloc_peak"] is not None]
        traced = max(traced_all) if traced_all else None
        written = runs[(level, size, codec, "checkpoint")][0]
        ratio = written["logical_bytes"] / max(1, written["stored_bytes"])
        ok = over <= LIMIT
        all_pass = all_pass and ok
        print(
            f"{level:<7}{format_size(size):>8} {codec:<7}{op:<11}"
            f"{_mib(worst['baseline_rss']):>9}{_mib(over):>8}{_mib(over_maxrss):>8}"
            f"{_mib(traced):>8}{_mib(worst['import_bytes']):>8}"
            f"{ratio:>7.2f}x  {'PASS' if ok else 'FAIL'}"
        )
        cases.append(
            {
                "level": level,
                "ranks": 1 if level == "L1" else args.ranks,
                "size_bytes": size,
                "codec": codec,
                "op": op,
                "overhead_hwm_bytes": over,
                "overhead_maxrss_bytes": over_maxrss,
                "tracemalloc_peak_bytes": traced,
                "compression_ratio": ratio,
                "pass": ok,
                "runs": rs,
            }
        )
    print(
        "baseline: resident MiB after import, allocation and Checkpointer set-up; VmHWM+ / "
        "maxrss+: peak resident growth during the call; traced: tracemalloc peak of the call; "
        "import: resident growth of importing greenckpt.ckpt (per process, not counted); "
        "stored: logical/stored bytes of the checkpoint; levels 2 and 3: the rank with the "
        "largest VmHWM+, and the largest of every other figure over the ranks"
    )
    print(f"overall: {'PASS' if all_pass else 'FAIL'} (limit {format_size(LIMIT)})")
    if args.json is not None:
        doc = {
            "benchmark": "bench_ckpt_memory",
            "machine": info,
            "directory": str(args.directory),
            "storage": storage(args.directory),
            "limit_bytes": LIMIT,
            "repeats": args.repeats,
            "pass": all_pass,
            "cases": cases,
        }
        Path(args.json).write_text(json.dumps(doc, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
