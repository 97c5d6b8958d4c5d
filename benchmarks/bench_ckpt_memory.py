"""Peak memory of one checkpoint and one recovery beyond the protected data; target ≤ 64 MiB.

Run: ``python benchmarks/bench_ckpt_memory.py [--sizes 64MiB,256MiB,1GiB,2GiB]
[--codecs none,lz4,zstd] [--dir DIR] [--json PATH]``. Not a test: it prints measured
overheads and PASS/FAIL against 64 MiB.

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

from bench_ckpt_io import BenchError, _Parser, machine, run_worker, storage
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


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = _Parser(
        prog="bench_ckpt_memory.py",
        description="Peak memory of a checkpoint and a recovery beyond the protected data.",
    )
    parser.add_argument(
        "--sizes", default="64MiB,256MiB,1GiB,2GiB", help="comma-separated data sizes"
    )
    parser.add_argument("--codecs", default="none,lz4,zstd", help="comma-separated codecs")
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
    default_dir = os.environ.get("TMPDIR") or (
        "/var/tmp" if os.path.isdir("/var/tmp") else tempfile.gettempdir()
    )
    directory = Path(args.dir or default_dir).resolve()
    if not directory.is_dir() or not os.access(directory, os.W_OK | os.X_OK):
        parser.error(f"--dir {directory} is not a writable directory")
    biggest = max(sizes)
    st = os.statvfs(directory)
    free = st.f_bavail * st.f_frsize
    need = 2 * biggest + SPACE_MARGIN  # keep 1: the traced repeat commits before removing
    if free < need:
        parser.error(
            f"--dir {directory} has {format_size(free)} free, {format_size(biggest)} needs "
            f"{format_size(need)}; give smaller --sizes or another --dir"
        )
    available = _mem_available()
    if available is not None and available < biggest + MEMORY_MARGIN:
        parser.error(
            f"{format_size(biggest)} of data needs {format_size(biggest + MEMORY_MARGIN)} of "
            f"memory, {format_size(available)} is available; give smaller --sizes"
        )
    try:
        ram = identify_storage(directory).kind == "memory"
    except PlatformError:
        ram = False
    if ram and available is not None and available < 3 * biggest + MEMORY_MARGIN:
        parser.error(f"--dir {directory} is RAM-backed and too small; give a disk directory")
    args.directory = directory
    return args


def _mem_available() -> int | None:
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            return next(int(ln.split()[1]) * 1024 for ln in f if ln.startswith("MemAvailable"))
    except (OSError, StopIteration):
        return None


def run_case(work: Path, size: int, codec: str, trace: bool, tag: str) -> dict[str, Any]:
    """Checkpoint in one fresh process, recover in another; both workers' figures."""
    seed = 7
    base = work / tag
    base.mkdir()
    args = [str(base), "mem", str(size), codec, str(seed), "1" if trace else "0"]
    try:
        written = run_worker(None, 1, ["mem-write", *args])
        read = run_worker(None, 1, ["mem-read", *args])
    finally:
        for entry in sorted(base.rglob("*"), reverse=True):
            if entry.is_dir() and not entry.is_symlink():
                entry.rmdir()
            else:
                entry.unlink()
        base.rmdir()
    if not read.get("verified"):
        raise BenchError(f"recovery of {format_size(size)} with codec {codec} gave wrong data")
    return {"checkpoint": written, "recovery": read}


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
        f"{', '.join(args.codec_list)}; one process per case and op; "
        f"{args.repeats} run(s) per case, worst counts; limit {format_size(LIMIT)}"
    )
    sys.stdout.flush()
    runs: dict[tuple[int, str, str], list[dict[str, Any]]] = {}
    try:
        with tempfile.TemporaryDirectory(prefix="bench-ckpt-mem-", dir=args.directory) as tmp:
            for rep in range(args.repeats):
                for size in args.size_list:
                    for codec in args.codec_list:
                        tag = f"case-{rep}-{size}-{codec.replace(':', '-')}"
                        out = run_case(Path(tmp), size, codec, trace, tag)
                        for op in OPS:
                            runs.setdefault((size, codec, op), []).append(out[op])
                        print(f"  {format_size(size)} {codec} done", file=sys.stderr, flush=True)
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
        f"{'size':>8} {'codec':<7}{'op':<11}{'baseline':>9}{'VmHWM+':>8}{'maxrss+':>8}"
        f"{'traced':>8}{'import':>8}{'stored':>8}  verdict"
    )
    cases: list[dict[str, Any]] = []
    all_pass = True
    for size in args.size_list:
        for codec in args.codec_list:
            for op in OPS:
                rs = runs[(size, codec, op)]
                worst = max(rs, key=lambda r: int(r["overhead_hwm"]))
                over = max(int(r["overhead_hwm"]) for r in rs)
                over_maxrss = max(int(r["overhead_maxrss"]) for r in rs)
                traced_all = [
                    r["tracemalloc_peak"] for r in rs if r["tracemalloc_peak"] is not None
                ]
                traced = max(traced_all) if traced_all else None
                written = runs[(size, codec, "checkpoint")][0]
                ratio = written["logical_bytes"] / max(1, written["stored_bytes"])
                ok = over <= LIMIT
                all_pass = all_pass and ok
                print(
                    f"{format_size(size):>8} {codec:<7}{op:<11}"
                    f"{_mib(worst['baseline_rss']):>9}{_mib(over):>8}{_mib(over_maxrss):>8}"
                    f"{_mib(traced):>8}{_mib(worst['import_bytes']):>8}"
                    f"{ratio:>7.2f}x  {'PASS' if ok else 'FAIL'}"
                )
                cases.append(
                    {
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
        "stored: logical/stored bytes of the checkpoint"
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
