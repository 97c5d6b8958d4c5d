"""Checkpoint write and restart read throughput vs raw parallel I/O and fio; target ≥ 0.9×.

Run: ``python benchmarks/bench_ckpt_io.py [--size 512MiB] [--writers 1,2,4] [--repeats 15]
[--dir DIR] [--settle 0] [--busy N|cores] [--nodes one|per-rank] [--no-fio] [--json PATH]``.
Not a test: nothing here asserts a time; it prints the library's throughput over raw's and
fio's (median of per-repeat ratios) and PASS/FAIL against 0.9.

Why: a checkpoint library earns its place only if protecting the data (digests, manifest,
agreement, commit, verification on restart) costs little next to moving the bytes. So the
library's throughput is compared with the raw engine it is built on doing the same work with
the same writers, and with fio as the outside reference.

For each number of writers W, the same S bytes (S/W per writer, rounded down to whole 1 MiB
blocks, the block size the library's writes and reads use) are moved these ways:

* **library** — ``mpiexec -n W python _ckpt_worker.py io``: each rank protects a float64 array
  of S/W bytes of uniform random doubles (incompressible; codec none) and calls
  ``Checkpointer(local_dir=..., l1 enabled, keep=1).checkpoint(1)``; then it zeroes the array
  and a fresh Checkpointer calls ``recover()`` into it. Each call is timed from an MPI barrier
  to its return on every rank; the figure is ``S / (max end − min start)``. It covers
  everything the call does: digests, the write and its fsyncs, the allgather, the manifest and
  commit (write); the manifest, the agreement, the read and both digest checks (read).
  ``lib(own)`` is the same bytes over the slowest rank's own ``CheckpointInfo.seconds`` /
  ``RecoveryInfo.seconds`` (no barrier skew).
* **raw** — ``mpiexec -n W python _ckpt_worker.py raw``: the same ranks, holding the same
  arrays, write them with the I/O engine the library itself writes through (``run_chunks``:
  1 MiB blocks straight from the array, fsync of the file and its directory) and read them back
  into the zeroed arrays, timed the same way: what a rank does without a checkpoint library.
  So library/raw is the cost of protecting the data (digests, manifest, agreement, commit,
  verification), with processes, memory, launcher and clock identical on both sides. (The
  engine as the profiler runs it — its own processes, a small reused buffer — is compared
  with fio in ``bench_io_fio.py``.)
* **digest** — raw plus the one thing of the library that touches every byte: the digest.
  The write hashes each block as it hands it to the engine (``ConcatSource``) and the engine
  hashes each piece of the read as it lands (``digest=``), as the library does, with its
  default checksum; the read's digest must equal the write's. Its CPU over plain's is what
  checked integrity costs by itself on the machine (a pass over memory that a plain write
  does not make), and library over digest is what the rest of the library costs: manifest,
  agreement, commit. Not part of the verdict.
* **plain** — the same ranks and arrays, each written with ``ndarray.tofile`` + fsync of the
  file and its directory and read back with ``readinto``: the simplest writer a rank could use.
* **fio** — ``--numjobs=W --bs=1M --ioengine=psync --end_fsync=1 --fallocate=none`` writes,
  buffered reads (``--direct=0``, fio's default ``--invalidate=1``), where fio is installed.

Every operation of every tool starts right after ``os.sync()`` and a drop of the cached pages
of the tool's own files (the library's job drops them itself once every rank is ready, just
before its clock starts): ``fsync`` + ``posix_fadvise(DONTNEED)`` on each file, so every read,
the library's included, comes from the storage, and no write pays for the previous tool's
writeback. ``--cache-drop global`` uses ``echo 1 > /proc/sys/vm/drop_caches`` instead (root);
not the default because it also evicts the Python installation, which fio, started after the
drop, then re-reads before its clock starts. The method is printed. Process start-up
(``mpiexec``, fio's own) is outside every timer.

Free page reporting. On a VM guest with virtio-balloon free page reporting, memory the guest
frees (a dropped page cache) is handed back to the host, and the next I/O that needs it faults
it back in (:mod:`greenckpt.platform.pagereport` has the measurements): on the 2-CPU
Firecracker guest this was written on, which reports freed memory at once, the same 256 MiB
read ran at about 2.2 GB/s or about 0.6 GB/s for every tool, fio included, depending on
whether reporting ran in between. So by default (``--page-reporting auto``) the script holds
reporting off for the run where the kernel lets it (``min_free_ms`` raised to 60 s, root
only; restored at the end) and prints what it did; ``keep`` leaves it alone, ``hold`` fails
when it cannot hold. Holding does not undo what was reported before the run: the first use
of each such page faults it in from the host (about 10 µs of CPU per 4 KiB page here), and
in ``bench_peers.py`` which job met those faults moved its CPU-seconds up to sevenfold. So
where reporting is held, every job is preceded by touching and freeing 4 GiB of fresh memory
(``--back-memory GIB``; 0 turns it off), which the kernel hands out again first; the time it
took is printed. Two more things keep the comparison fair, with or without the hold:

* every tool runs while S bytes of application memory are resident — the library's and raw's
  ranks hold their arrays (random data before the write, zeroed before the read), and for fio
  this script holds one array of S bytes filled and zeroed at the same points (fio, being
  another process, reads into its own small buffer: it never touches S bytes of destination
  memory, the one asymmetry left);
* every tool reads as soon after its own write as it can (``--settle S`` makes each wait S
  seconds first), and the median gap from the end of the write to the start of the read is
  printed per tool.

The first round of every tool (``--warmup``, default 1) is not counted: the first I/O after
the script starts allocates memory the guest had handed back before reporting was held, and
ran at a third of the speed of the rest. The tools run interleaved: in every repeat, for
every W, each tool writes then reads, in an order that rotates between repeats; each cell is
the median over the repeats with its min–max span.

Ratios are paired: each repeat's library figure over the raw (fio) figure of the same repeat,
which ran within seconds of it; the ratio printed is the median of those per-repeat ratios,
and the verdict is PASS when all reach 0.9: library/raw, library/plain (the ``tofile`` writer)
and library/fio (without fio, the first two). Why paired: on a
VM guest the host's own I/O and caches drift over minutes and move every tool alike; a ratio of
two medians taken over the whole run keeps that drift as noise (run-to-run swings of ±0.04
were seen here at W=4), a per-repeat ratio divides it out. Next to each ratio a 90 % bootstrap
interval of its median (fixed seed) says how far another run's median may land; a PASS whose
interval reaches below 0.9 says so. The ratios of the medians are printed below the table for
comparison. Other work on the machine moves these figures too: run it on a quiet machine.

CPU-seconds. Every tool's write and read also reports its CPU-seconds per GB: user + system of
every rank (all its threads, and children it waited for), from ``getrusage`` around the timed
call in each rank, summed over the ranks; for fio, ``RUSAGE_CHILDREN`` of this script around
each fio run (its start-up included, a slight disadvantage to fio). A second table prints them
side by side with each tool's MB/s, and the library's CPU over each other tool's (median of
per-repeat ratios). On a real node CPU time is power, so a tool that moves bytes as fast but
burns more CPU is not as cheap.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

import numpy as np

import _pagereport
from _ckpt_worker import DROP_METHODS, drop_page_cache, random_array
from greenckpt.ckpt.comm import find_mpiexec
from greenckpt.io import DEFAULT_BLOCK_SIZE
from greenckpt.platform.root import PlatformError
from greenckpt.platform.storage import identify_storage
from greenckpt.profile.fio import FioError, fio_available, run_fio
from greenckpt.units import UnitError, format_size, parse_size

TARGET = 0.9
INTERVAL = 0.9
"""Coverage of the printed bootstrap interval of each median ratio."""
BOOTSTRAP = 4000
BENCH_DIR = Path(__file__).resolve().parent
WORKER = BENCH_DIR / "_ckpt_worker.py"
SRC = BENCH_DIR.parent / "src"
MiB = 1024 * 1024
SPACE_MARGIN = 256 * MiB
JOB_TIMEOUT_S = 900.0
BACK_DEFAULT = 4 << 30
"""``--back-memory``'s default where reporting is held: a few times a job's footprint (S of
arrays, S of page cache, the ranks' interpreters), touched in about 2 s here once backed."""
TOOLS = ("library", "raw", "digest", "plain", "fio")
OPS = ("write", "read")


class BenchError(RuntimeError):
    """A run failed; the message is one line."""


class _Parser(argparse.ArgumentParser):
    """argparse with one-line errors (exit 2)."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message}\n")


# --------------------------------------------------------------------------- helpers


def mpiexec() -> str | None:
    """The launcher next to this Python (a venv with the mpich wheel), else on PATH."""
    return find_mpiexec()


def clear(directory: Path) -> None:
    """Remove everything under ``directory`` (not the directory itself)."""
    for entry in directory.iterdir():
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry)
        else:
            entry.unlink()


NODE_LAYOUTS = ("one", "per-rank")
NODES_ENV = "BENCH_CKPT_NODES"
"""Tells ``_ckpt_worker.py`` how the library's ranks map to emulated nodes (``--nodes``)."""


def _worker_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GREENCKPT_")}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(SRC), env.get("PYTHONPATH")) if p)
    return env


def run_worker(launcher: str | None, ranks: int, args: Sequence[str]) -> dict[str, Any]:
    """Run ``_ckpt_worker.py args`` on ``ranks`` ranks; its ``RESULT`` line as a dict."""
    cmd = [sys.executable, str(WORKER), *args]
    if launcher is not None:
        cmd = [launcher, "-n", str(ranks), *cmd]
    try:
        proc = subprocess.run(
            cmd,
            capture_output=True,
            text=True,
            timeout=JOB_TIMEOUT_S,
            env=_worker_env(),
            check=False,
        )
    except subprocess.TimeoutExpired:
        raise BenchError(f"{args[0]} with {ranks} ranks took over {JOB_TIMEOUT_S:.0f} s") from None
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
    if proc.returncode != 0 or not lines:
        said = (proc.stderr.strip() or proc.stdout.strip() or "(nothing)").splitlines()[-1]
        raise BenchError(f"{args[0]} with {ranks} ranks exited {proc.returncode}: {said}")
    out: dict[str, Any] = json.loads(lines[-1].removeprefix("RESULT "))
    return out


def machine() -> dict[str, Any]:
    """What this ran on, for the header and the JSON."""
    cpu = "unknown"
    mem = 0
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            cpu = next(
                (ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")), cpu
            )
        with open("/proc/meminfo", encoding="ascii") as f:
            mem = next(int(ln.split()[1]) * 1024 for ln in f if ln.startswith("MemTotal"))
    except (OSError, StopIteration):
        pass
    return {
        "host": platform.node(),
        "kernel": platform.release(),
        "cpu": cpu,
        "cpus": os.cpu_count(),
        "memory_bytes": mem,
        "python": platform.python_version(),
        "numpy": np.__version__,
    }


def storage(directory: Path) -> str:
    try:
        info = identify_storage(directory)
    except PlatformError as exc:
        return f"unidentified ({exc})"
    return f"{info.key} ({info.mount.fstype} on {info.mount.source}, kind {info.kind})"


def fio_version() -> str | None:
    exe = shutil.which("fio")
    if exe is None:
        return None
    try:
        proc = subprocess.run([exe, "--version"], capture_output=True, text=True, check=False)
    except OSError:
        return None
    return proc.stdout.strip() or None


def _load(values: tuple[float, float, float]) -> str:
    return " / ".join(f"{v:.2f}" for v in values)


def _span(values: Sequence[float]) -> str:
    return f"{min(values) / 1e6:.0f}-{max(values) / 1e6:.0f}"


def paired_ratios(library: Sequence[float], other: Sequence[float]) -> list[float]:
    """library/other of each repeat: the two ran in the same round, seconds apart, so a
    drift of the machine (the host's own I/O, its page cache) that moves both divides out."""
    return [lib / x for lib, x in zip(library, other, strict=True)]


def median_interval(values: Sequence[float], level: float = INTERVAL) -> tuple[float, float]:
    """A bootstrap percentile interval of the median of ``values`` (fixed seed, so the same
    runs always print the same interval): how far another run's median may plausibly land."""
    rng = np.random.default_rng(0)
    data = np.asarray(values, dtype=float)
    picks = rng.integers(0, len(data), size=(BOOTSTRAP, len(data)))
    medians = np.median(data[picks], axis=1)
    tail = (1.0 - level) / 2.0
    low, high = np.quantile(medians, [tail, 1.0 - tail])
    return float(low), float(high)


# --------------------------------------------------------------------------- one run per tool


@dataclass(frozen=True)
class Run:
    """One tool's write and read of the same bytes."""

    write_bps: float
    read_bps: float
    gap_s: float
    """From the end of the write to the start of the read (the read's clock)."""
    cache_drop: str
    write_own_bps: float | None = None
    """Library only: bytes over the slowest rank's own CheckpointInfo / RecoveryInfo seconds."""
    read_own_bps: float | None = None
    write_cpu_s: float | None = None
    """User + system CPU-seconds of every rank (library, raw, digest, plain) or of fio and its
    jobs."""
    read_cpu_s: float | None = None


def _wait_until(deadline: float) -> None:
    time.sleep(max(0.0, deadline - time.monotonic()))


def job_run(
    mode: str,
    launcher: str | None,
    work: Path,
    writers: int,
    per_rank: int,
    tag: str,
    settle: float,
    drop: str,
) -> Run:
    """One job of ``writers`` ranks writing then reading: ``io`` checkpoints and recovers (a
    fresh Checkpointer) through the library, ``raw`` moves the same arrays with the engine,
    ``plain`` with ``ndarray.tofile`` + fsync and ``readinto``."""
    tool = "library" if mode == "io" else mode
    base = work / tool
    base.mkdir(exist_ok=True)
    seed = 1000 * writers
    try:
        out = run_worker(
            launcher,
            writers,
            [mode, str(base), tag, str(per_rank), str(seed), repr(settle), drop],
        )
    finally:
        clear(base)
    if not out.get("verified"):
        raise BenchError(f"{tool} read with {writers} ranks restored wrong data")
    logical, read_bytes = out["logical_bytes"], out["read_bytes"]
    return Run(
        write_bps=logical / out["write_wall_s"],
        read_bps=read_bytes / out["read_wall_s"],
        gap_s=out["gap_s"],
        cache_drop=str(out["cache_drop"]),
        write_own_bps=logical / out["write_own_s"] if mode == "io" else None,
        read_own_bps=read_bytes / out["read_own_s"] if mode == "io" else None,
        write_cpu_s=out["write_cpu_s"],
        read_cpu_s=out["read_cpu_s"],
    )


def children_cpu_s() -> float:
    """User + system CPU-seconds of this script's waited-for children (fio and its jobs)."""
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return kids.ru_utime + kids.ru_stime


def fio_run(work: Path, writers: int, total: int, block: int, settle: float, drop: str) -> Run:
    """fio writing and then reading ``total`` bytes with ``writers`` jobs (its gap includes
    fio's own start-up, which its clock does not)."""
    base = work / "fio"
    base.mkdir(exist_ok=True)
    state = random_array(total, writers)  # the application's memory, as a rank holds
    try:
        drop_page_cache(base, drop)
        cpu = children_cpu_s()
        w = run_fio("write", base, total, writers, block, "none", direct=False, timeout_s=600)
        end, w_cpu = time.monotonic(), children_cpu_s() - cpu
        state.fill(0.0)
        _wait_until(end + settle)
        method = drop_page_cache(base, drop)
        start, cpu = time.monotonic(), children_cpu_s()
        r = run_fio("read", base, total, writers, block, "none", direct=False, timeout_s=600)
        r_cpu = children_cpu_s() - cpu
    finally:
        clear(base)
    return Run(w, r, start - end, method, write_cpu_s=w_cpu, read_cpu_s=r_cpu)


# --------------------------------------------------------------------------- CPU-seconds


def cpu_table(
    tools: Sequence[str],
    counts: Sequence[int],
    samples: dict[tuple[str, str, int], list[float]],
    cpu: dict[tuple[str, str, int], list[float]],
) -> list[dict[str, Any]]:
    """Print MB/s and CPU-seconds per GB of every tool side by side, with the library's CPU
    over each other tool's and the digest tool's over plain's (medians of paired ratios);
    return the figures per case (op, W)."""
    others = [t for t in tools if t != "library"]
    print(
        "CPU-s/GB = user + system CPU-seconds per 1e9 bytes moved, of every rank and its "
        "threads and children (getrusage RUSAGE_SELF + RUSAGE_CHILDREN around each timed call; "
        "fio: RUSAGE_CHILDREN around fio, start-up included); medians; target lib/x <= 1.5"
    )
    floor = "digest" in tools and "plain" in tools
    head = f"{'op':<6}{'W':>3}" + "".join(f"{t + ' MB/s':>14}{'CPU-s/GB':>10}" for t in tools)
    head += "".join(f"{'cpu lib/' + t:>16}" for t in others)
    print(head + (f"{'digest/plain':>14}" if floor else ""))
    out: list[dict[str, Any]] = []
    for n in counts:
        for op in OPS:
            line, case = f"{op:<6}{n:>3}", {}
            for t in tools:
                mb = statistics.median(samples[(t, op, n)]) / 1e6
                per_gb = statistics.median(cpu[(t, op, n)])
                line += f"{mb:>14.0f}{per_gb:>10.2f}"
                case[f"{t}_cpu_s_per_GB_runs"] = cpu[(t, op, n)]
                case[f"{t}_cpu_s_per_GB"] = per_gb
            for t in others:
                ratio = statistics.median(paired_ratios(cpu[("library", op, n)], cpu[(t, op, n)]))
                case[f"library_over_{t}_cpu"] = ratio
                line += f"{ratio:>16.2f}"
            if floor:
                ratio = statistics.median(
                    paired_ratios(cpu[("digest", op, n)], cpu[("plain", op, n)])
                )
                case["digest_over_plain_cpu"] = ratio
                line += f"{ratio:>14.2f}"
            print(line)
            out.append(case)
    return out


# --------------------------------------------------------------------------- main


def parse_args(argv: list[str] | None) -> argparse.Namespace:  # noqa: PLR0915 — one add_argument per flag
    parser = _Parser(
        prog="bench_ckpt_io.py",
        description="Checkpoint write / restart read throughput vs raw engine and fio.",
    )
    parser.add_argument("--size", default="512MiB", help="total bytes S over all writers")
    parser.add_argument("--writers", default="1,2,4", help="comma-separated writer counts")
    parser.add_argument(
        "--repeats", type=int, default=15, help="interleaved runs per case (default 15)"
    )
    parser.add_argument(
        "--warmup",
        type=int,
        default=1,
        help="interleaved rounds of every tool run first and not counted (default 1)",
    )
    parser.add_argument(
        "--dir",
        default=None,
        help="directory on the storage to test (default $TMPDIR, else /var/tmp); a temporary "
        "directory is made inside and removed",
    )
    parser.add_argument(
        "--settle",
        type=float,
        default=0.0,
        help="seconds each tool waits between the end of its write and its read (default 0)",
    )
    parser.add_argument(
        "--cache-drop",
        choices=DROP_METHODS,
        default="fadvise",
        help="before each operation, drop the cached pages of the tool's files (fadvise, "
        "default) or the whole page cache (global: needs root)",
    )
    _pagereport.add_argument(parser)
    _pagereport.add_back_argument(parser, f"where reporting is held, {BACK_DEFAULT >> 30} GiB")
    parser.add_argument(
        "--busy",
        default="0",
        help="CPU-bound processes spinning beside every tool while it runs: N, or 'cores' for "
        "one per CPU (issue 19's 'under load' targets; default 0)",
    )
    parser.add_argument(
        "--nodes",
        choices=NODE_LAYOUTS,
        default="one",
        help="the library's ranks on one node (default: one directory, one manifest) or "
        "per-rank (ranks_per_node=1: every rank an emulated node of its own, with its own "
        "directory, manifest and commit, as on a cluster with one rank per node)",
    )
    parser.add_argument("--no-fio", action="store_true", help="skip fio even if installed")
    parser.add_argument("--json", default=None, metavar="PATH", help="also write results here")
    args = parser.parse_args(argv)
    _pagereport.check_back_argument(parser, args.back_memory)
    try:
        args.size_bytes = int(parse_size(args.size))
    except (UnitError, TypeError) as exc:
        parser.error(f"--size: {exc}")
    try:
        counts = [int(x) for x in args.writers.split(",")]
    except ValueError:
        parser.error(f"--writers must be comma-separated integers, not {args.writers!r}")
    if not counts or any(n < 1 for n in counts) or len(set(counts)) != len(counts):
        parser.error(f"--writers must be distinct counts >= 1, not {args.writers!r}")
    args.counts = counts
    if args.repeats < 1:
        parser.error(f"--repeats must be >= 1, not {args.repeats}")
    if args.warmup < 0:
        parser.error(f"--warmup must be >= 0, not {args.warmup}")
    if not 0.0 <= args.settle <= 600.0:
        parser.error(f"--settle must be between 0 and 600 seconds, not {args.settle}")
    block = DEFAULT_BLOCK_SIZE
    if args.size_bytes < max(counts) * block:
        parser.error(
            f"--size {args.size} is less than {max(counts)} writers x {format_size(block)} "
            "blocks; give a larger size or fewer writers"
        )
    default_dir = os.environ.get("TMPDIR") or (
        "/var/tmp" if os.path.isdir("/var/tmp") else tempfile.gettempdir()
    )
    directory = Path(args.dir or default_dir).resolve()
    if not directory.is_dir() or not os.access(directory, os.W_OK | os.X_OK):
        parser.error(f"--dir {directory} is not a writable directory")
    st = os.statvfs(directory)
    free = st.f_bavail * st.f_frsize
    need = 2 * args.size_bytes + SPACE_MARGIN
    if free < need:
        parser.error(
            f"--dir {directory} has {format_size(free)} free, this needs {format_size(need)}; "
            "give a smaller --size or another --dir"
        )
    try:
        if identify_storage(directory).kind == "memory":
            parser.error(
                f"--dir {directory} is RAM-backed: reads would measure memory; give a disk"
            )
    except PlatformError:
        pass
    args.directory = directory
    args.launcher = mpiexec()
    if args.launcher is None and max(counts) > 1:
        parser.error(
            "more than one writer needs mpiexec (pip install '.[mpi]'), or use --writers 1"
        )
    args.use_fio = fio_available() and not args.no_fio
    return args


@contextlib.contextmanager
def busy(count: int) -> Iterator[None]:
    """``count`` processes spinning at full speed (a CPU-bound load beside the tools), killed
    at the end whatever happens."""
    spinners = [
        subprocess.Popen([sys.executable, "-c", "while True: pass"], stdin=subprocess.DEVNULL)
        for _ in range(count)
    ]
    try:
        yield
    finally:
        for proc in spinners:
            proc.kill()
            proc.wait()


def busy_count(text: str) -> int:
    """``--busy``: N >= 0, or ``cores``."""
    if text == "cores":
        return os.cpu_count() or 1
    if text.isdigit():
        return int(text)
    raise SystemExit(f"bench_ckpt_io.py: error: --busy {text!r}: give a count >= 0 or 'cores'")


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    args.busy_n = busy_count(args.busy)
    os.environ[NODES_ENV] = args.nodes  # the workers inherit it
    try:
        with _pagereport.page_reporting(args.page_reporting) as memory_note, busy(args.busy_n):
            return measure(args, memory_note)
    except PlatformError as exc:
        print(f"bench_ckpt_io.py: error: {exc} (or --page-reporting keep)", file=sys.stderr)
        return 2


def measure(args: argparse.Namespace, memory_note: str) -> int:  # noqa: PLR0912, PLR0915 — the benchmark protocol, step by step
    """Run the interleaved repeats and print the table (reporting held as the caller chose)."""
    block = DEFAULT_BLOCK_SIZE
    tools = [t for t in TOOLS if t != "fio" or args.use_fio]
    per_rank = {n: args.size_bytes // n // block * block for n in args.counts}
    totals = {n: per_rank[n] * n for n in args.counts}
    samples: dict[tuple[str, str, int], list[float]] = {}
    own: dict[tuple[str, int], list[float]] = {}
    gaps: dict[tuple[str, int], list[float]] = {}
    cpu: dict[tuple[str, str, int], list[float]] = {}
    methods: set[str] = set()
    backed: list[float] = []

    info = machine()
    print(
        f"machine: {info['host']}, {info['cpu']}, {info['cpus']} CPUs, "
        f"{format_size(info['memory_bytes'])} RAM, Linux {info['kernel']}, "
        f"Python {info['python']}, NumPy {info['numpy']}"
    )
    print(f"storage: {args.directory} -> {storage(args.directory)}")
    print(f"memory: {memory_note}")
    back = _pagereport.back_bytes(args.back_memory, memory_note, BACK_DEFAULT)
    print(f"load beside the tools: {args.busy_n} CPU-bound process(es) spinning (--busy)")
    print(
        "library's nodes: "
        + (
            "one emulated node per rank (ranks_per_node=1: a directory, manifest and commit "
            "per rank)"
            if args.nodes == "per-rank"
            else "all ranks on one node (one directory and manifest)"
        )
        + " (--nodes); raw, digest, plain and fio write one file per writer in one directory"
    )
    print(
        f"launcher: {args.launcher or 'none (1 writer, plain python)'}; fio: "
        f"{fio_version() if args.use_fio else 'not used'}"
    )
    print(
        f"S = {format_size(args.size_bytes)} over W writers (S/W rounded down to whole "
        f"{format_size(block)} blocks), block {format_size(block)}, {args.warmup} uncounted "
        f"warm-up round(s), then {args.repeats} interleaved repeats, rotating tool order: "
        f"{', '.join(tools)}"
    )
    load_start = os.getloadavg()
    print(f"load average at start (1/5/15 min): {_load(load_start)}")
    sys.stdout.flush()

    try:
        with tempfile.TemporaryDirectory(prefix="bench-ckpt-io-", dir=args.directory) as tmp:
            work = Path(tmp)
            for rep in range(-args.warmup, args.repeats):
                for wi, n in enumerate(args.counts):
                    k = (rep + wi) % len(tools)
                    for tool in tools[k:] + tools[:k]:
                        if back:
                            backed.append(_pagereport.back_free_memory(back)[1])
                        if tool != "fio":
                            run = job_run(
                                "io" if tool == "library" else tool,
                                args.launcher,
                                work,
                                n,
                                per_rank[n],
                                f"job-{rep}-{n}",
                                args.settle,
                                args.cache_drop,
                            )
                            if tool == "library" and rep >= 0:
                                assert run.write_own_bps is not None
                                assert run.read_own_bps is not None
                                own.setdefault(("write", n), []).append(run.write_own_bps)
                                own.setdefault(("read", n), []).append(run.read_own_bps)
                        else:
                            run = fio_run(work, n, totals[n], block, args.settle, args.cache_drop)
                        if rep < 0:
                            continue  # a warm-up run: not counted
                        methods.add(run.cache_drop)
                        samples.setdefault((tool, "write", n), []).append(run.write_bps)
                        samples.setdefault((tool, "read", n), []).append(run.read_bps)
                        gaps.setdefault((tool, n), []).append(run.gap_s)
                        for op, cpu_s in (("write", run.write_cpu_s), ("read", run.read_cpu_s)):
                            if cpu_s is not None:
                                cpu.setdefault((tool, op, n), []).append(cpu_s / totals[n] * 1e9)
                done = "warm-up" if rep < 0 else f"repeat {rep + 1}/{args.repeats}"
                print(f"  {done} done", file=sys.stderr, flush=True)
    except (BenchError, FioError, OSError, ValueError, RuntimeError) as exc:
        print(f"bench_ckpt_io.py: {exc}", file=sys.stderr)
        return 1
    finally:
        os.sync()

    if backed:
        print(
            f"before every job {back / 2**30:.1f} GiB of free memory was touched and freed "
            f"(--back-memory): {min(backed):.1f}-{max(backed):.1f} s each"
        )
    load_end = os.getloadavg()
    print(
        f"load average at end: {_load(load_end)} (other work on this machine during the run "
        "moves the figures)"
    )
    print(
        f"page cache before every operation: os.sync() + {' / '.join(sorted(methods))}; reads "
        "buffered on every side (library: its own read; raw: read_method=cached; fio: --direct=0)"
    )
    print(f"MB/s = 1e6 B/s; median of {args.repeats}, (min-max); target library/x >= {TARGET}")
    head = (
        f"{'op':<6}{'W':>3}{'library':>9}{'(min-max)':>12}{'lib(own)':>9}"
        f"{'raw':>7}{'(min-max)':>12}"
    )
    if args.use_fio:
        head += f"{'fio':>7}{'(min-max)':>12}"
    head += f"{'lib/raw':>9}{'(90% CI)':>12}{'lib/plain':>10}{'(90% CI)':>12}"
    if args.use_fio:
        head += f"{'lib/fio':>9}{'(90% CI)':>12}"
    head += "  verdict"
    gap_note = "write->read gap s (median): " + "; ".join(
        f"W={n}: " + ", ".join(f"{t} {statistics.median(gaps[(t, n)]):.2f}" for t in tools)
        for n in args.counts
    )
    print(head)
    cases: list[dict[str, Any]] = []
    all_pass = True
    for n in args.counts:
        for op in OPS:
            lib, raw = samples[("library", op, n)], samples[("raw", op, n)]
            lm, rm = statistics.median(lib), statistics.median(raw)
            om = statistics.median(own[(op, n)])
            line = f"{op:<6}{n:>3}{lm / 1e6:>9.0f}{_span(lib):>12}{om / 1e6:>9.0f}"
            line += f"{rm / 1e6:>7.0f}{_span(raw):>12}"
            case: dict[str, Any] = {
                "op": op,
                "writers": n,
                "total_bytes": totals[n],
                "library_runs_Bps": lib,
                "library_median_Bps": lm,
                "library_own_runs_Bps": own[(op, n)],
                "library_own_median_Bps": om,
                "raw_runs_Bps": raw,
                "raw_median_Bps": rm,
                "library_over_raw_of_medians": lm / rm,
            }
            if op == "read":
                case["gap_s"] = {t: gaps[(t, n)] for t in tools}
            others = {"raw": raw, "plain": samples[("plain", op, n)]}
            if args.use_fio:
                fio = samples[("fio", op, n)]
                fm = statistics.median(fio)
                line += f"{fm / 1e6:>7.0f}{_span(fio):>12}"
                case.update(
                    fio_runs_Bps=fio, fio_median_Bps=fm, library_over_fio_of_medians=lm / fm
                )
                others["fio"] = fio
            failed, unsure = [], []
            for name, runs in others.items():
                ratios = paired_ratios(lib, runs)
                ratio = statistics.median(ratios)
                low, high = median_interval(ratios)
                case[f"library_over_{name}_runs"] = ratios
                case[f"library_over_{name}"] = ratio
                case[f"library_over_{name}_interval"] = [low, high]
                line += f"{ratio:>9.2f}{f'{low:.2f}-{high:.2f}':>12}"
                if ratio < TARGET:
                    failed.append(name)
                elif low < TARGET:
                    unsure.append(name)
            if failed:
                verdict = f"FAIL (< {TARGET} x {'+'.join(failed)})"
            elif unsure:
                verdict = f"PASS (interval reaches below {TARGET} x {'+'.join(unsure)})"
            else:
                verdict = "PASS"
            case["pass"] = not failed
            case["interval_clear"] = not failed and not unsure
            all_pass = all_pass and not failed
            print(line + "  " + verdict)
            cases.append(case)
    print(
        "lib(own): the same bytes over the slowest rank's own CheckpointInfo / RecoveryInfo "
        "seconds (no barrier skew); lib/x: median over the repeats of each repeat's "
        "library/x (the verdict); (90% CI): bootstrap interval of that median"
    )
    print(
        "ratios of the medians (for comparison): "
        + "; ".join(
            f"{c['op']}{c['writers']} raw {c['library_over_raw_of_medians']:.2f}"
            + (f" fio {c['library_over_fio_of_medians']:.2f}" if args.use_fio else "")
            for c in cases
        )
    )
    print(gap_note + f" (--settle {args.settle:g})")
    cpu_cases = cpu_table(tools, args.counts, samples, cpu)
    for case, extra in zip(cases, cpu_cases, strict=True):
        case.update(extra)
    print(f"overall: {'PASS' if all_pass else 'FAIL'}")
    if args.json is not None:
        doc = {
            "benchmark": "bench_ckpt_io",
            "machine": info,
            "directory": str(args.directory),
            "storage": storage(args.directory),
            "launcher": args.launcher,
            "fio": fio_version() if args.use_fio else None,
            "size_bytes": args.size_bytes,
            "block_size_bytes": block,
            "repeats": args.repeats,
            "warmup": args.warmup,
            "settle_s": args.settle,
            "cache_drop": sorted(methods),
            "page_reporting": memory_note,
            "busy_processes": args.busy_n,
            "back_memory_bytes": back,
            "back_memory_s": backed,
            "library_nodes": args.nodes,
            "load_average_start": list(load_start),
            "load_average_end": list(load_end),
            "target": TARGET,
            "pass": all_pass,
            "cases": cases,
        }
        Path(args.json).write_text(json.dumps(doc, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
