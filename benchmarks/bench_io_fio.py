"""greenckpt's I/O engine against fio: same size, block size and processes; target ratio ≥ 0.9.

Run: ``python benchmarks/bench_io_fio.py [--size 256MiB] [--repeats 3] [--dir /scratch]``.
Not a test: nothing here asserts a time; it prints engine/fio throughput ratios.

Why: the profiler reports the engine's throughput as *the* storage's throughput for a number
of processes. If the engine were much slower than fio doing the same work, the profile would
describe Python overhead rather than the storage. fio is the reference tool, so the cases are
matched to its options:

* write: ``fio --rw=write --bs=1M --size=S/n --numjobs=n --end_fsync=1 --ioengine=psync``
  (buffered writes, each job fsyncs its file at the end) vs ``run_io("write", ...)`` with
  file per process (each worker fsyncs its file and the directory).
* read: ``fio --rw=read --direct=1 ...`` on the files its write left vs ``run_io("read",
  ...)`` on the files the engine's write left (``read_method`` is printed; ``o_direct`` is the
  matching case).

fio's ``--fallocate`` defaults to ``native``, which preallocates every file *before* its clock
starts; the engine (like a checkpoint) allocates blocks while writing, so this script passes
``--fallocate=none`` unless told otherwise (``--fallocate native`` shows fio's default).
fio's write runtime includes the end fsync (checked: its bandwidth drops with
``--end_fsync=1``), so both sides include durability.

Runs are interleaved (for every repeat, every n: fio and engine, in alternating order, write
then read) and each cell is the median over repeats; ``ratio`` is engine/fio of the medians,
``best`` of the fastest runs. Both are printed because on a VM a write's final fsync is
bimodal (a flush on the host sometimes adds ~0.3 s to either tool), which can move a median
of few runs; the min–max spans show when that happened. Every run starts after ``os.sync()``,
so neither tool pays for the other's writeback or file deletion (without it, write medians on
this VM swung from 0.46 to 1.68). On a VM guest that hands freed memory back to its host,
reporting is held off for the run where possible (``--page-reporting``, see
``bench_ckpt_io.py``). The engine starts writeback every 8 MiB while it writes
(:mod:`greenckpt.io.writeback`); fio's command does not (``--end_fsync=1`` only), so
engine writes may exceed fio's. Needs fio (``apt-get install -y fio``);
without it the script says so and exits 0.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

import _pagereport
from greenckpt.io import remove_files, run_io
from greenckpt.platform.root import PlatformError
from greenckpt.profile.fio import run_fio

MiB = 1024 * 1024
UNITS = {"k": 1024, "m": MiB, "g": 1024 * MiB}


def parse_size(text: str) -> int:
    """``256MiB``, ``256M``, ``1g`` or a byte count."""
    t = text.strip().lower().removesuffix("ib").removesuffix("b")
    if t and t[-1] in UNITS:
        return int(float(t[:-1]) * UNITS[t[-1]])
    return int(t)


def engine(op: str, directory: Path, size: int, workers: int, block_size: int) -> tuple[float, str]:
    """Aggregate bytes/s of the engine for one run, and the read method it used."""
    result = run_io(
        op,  # type: ignore[arg-type]
        directory,
        total_bytes=size,
        workers=workers,
        block_size=block_size,
        layout="file_per_process",
        keep=True,
    )
    return result.throughput, result.read_method or "-"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--size", default="256MiB", help="total bytes S (default 256MiB)")
    parser.add_argument("--block-size", default="1MiB")
    parser.add_argument("--workers", default="1,2,4", help="comma-separated process counts")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--dir", default=None, help="directory on the storage to test")
    parser.add_argument(
        "--fallocate",
        default="none",
        help="fio --fallocate (default none: blocks allocated while writing, as the engine "
        "and a checkpoint do; fio's own default 'native' preallocates outside its timer)",
    )
    _pagereport.add_argument(parser)
    args = parser.parse_args(argv)
    if shutil.which("fio") is None:
        print("fio is not installed: apt-get update && apt-get install -y fio (or dnf/brew)")
        return 0
    size, block = parse_size(args.size), parse_size(args.block_size)
    counts = [int(n) for n in args.workers.split(",")]
    try:
        with _pagereport.page_reporting(args.page_reporting) as memory_note:
            print(f"memory: {memory_note}", flush=True)
            return measure(args, size, block, counts)
    except PlatformError as exc:
        print(f"bench_io_fio.py: error: {exc} (or --page-reporting keep)", file=sys.stderr)
        return 2


def measure(args: argparse.Namespace, size: int, block: int, counts: list[int]) -> int:
    """The interleaved runs and the table."""
    cases = [(op, n) for n in counts for op in ("write", "read")]
    samples: dict[tuple[str, str, int], list[float]] = {}
    methods: dict[int, str] = {}
    with tempfile.TemporaryDirectory(prefix="bench-io-", dir=args.dir) as tmp:
        fio_dir, eng_dir = Path(tmp, "fio"), Path(tmp, "engine")
        fio_dir.mkdir()
        eng_dir.mkdir()
        for rep in range(args.repeats):
            for n in counts:
                order = ("fio", "engine") if (rep + n) % 2 == 0 else ("engine", "fio")
                for tool in order:
                    for op in ("write", "read"):
                        # Start every run with no dirty pages or pending deletions of the
                        # previous one, so neither tool pays for the other's writeback.
                        os.sync()
                        if tool == "fio":
                            value = run_fio(op, fio_dir, size, n, block, args.fallocate)
                        else:
                            value, methods[n] = engine(op, eng_dir, size, n, block)
                        samples.setdefault((tool, op, n), []).append(value)
                    used = fio_dir if tool == "fio" else eng_dir
                    remove_files(str(p) for p in used.iterdir())
    print(
        f"S = {size} B, block = {block} B, fio --fallocate={args.fallocate}, "
        f"median of {args.repeats} interleaved runs"
    )
    print(
        f"{'op':<6}{'n':>3}{'fio MB/s':>10}{'(min-max)':>12}{'engine MB/s':>13}{'(min-max)':>12}"
        f"{'ratio':>7}{'best':>6}  read method"
    )
    for op, n in cases:
        fs, es = samples[("fio", op, n)], samples[("engine", op, n)]
        f, e = statistics.median(fs), statistics.median(es)
        method = methods.get(n, "-") if op == "read" else "-"
        print(
            f"{op:<6}{n:>3}{f / 1e6:>10.0f}{_span(fs):>12}{e / 1e6:>13.0f}{_span(es):>12}"
            f"{e / f:>7.2f}{max(es) / max(fs):>6.2f}  {method}"
        )
    return 0


def _span(values: list[float]) -> str:
    return f"{min(values) / 1e6:.0f}-{max(values) / 1e6:.0f}"


if __name__ == "__main__":
    sys.exit(main())
