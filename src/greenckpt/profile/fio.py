"""Cross-check of greenckpt's I/O engine against fio, the reference I/O benchmark.

Why: the profiler reports the engine's throughput as *the* storage's throughput for a number
of processes. If the engine were much slower than fio doing the same work, a profile would
describe Python overhead rather than the storage, and every plan made from it would be wrong.
:func:`validate` runs both on the same directory with the same size S, block size and number
of processes, and reports engine/fio per case; the engine's target is 0.9× fio or better.

Each case is matched to fio's options (buffered writes with a final fsync and no
preallocation; reads with ``O_DIRECT`` where the engine uses it), runs of the two tools are
interleaved after ``os.sync()`` so neither pays for the other's writeback, and each case is the
median of the repetitions. docs/design/profiler.md gives the exact fio command lines and why.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import statistics
import subprocess
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from greenckpt.errors import GreenckptError, InvalidValueError
from greenckpt.io import remove_files, run_io
from greenckpt.optimize.profile_data import OPERATIONS, Operation
from greenckpt.units import format_size

__all__ = [
    "FIO_JOB_NAME",
    "TARGET_RATIO",
    "VALIDATION_COLUMNS",
    "FioError",
    "ValidationCase",
    "ValidationResult",
    "fio_available",
    "fio_command",
    "parse_fio_output",
    "run_fio",
    "validate",
]

TARGET_RATIO = 0.9
"""The engine should reach at least 0.9× fio's throughput on the same work."""
FIO_JOB_NAME = "greenckpt-fio"
"""fio's job name; its files are ``<name>.<job>.0`` in the directory."""
ENGINE_NAME = "greenckpt-check"
SPACE_MARGIN_BYTES = 64 * 1024 * 1024
SPACE_MARGIN_FRACTION = 0.05

Tool = Literal["fio", "engine"]


class FioError(GreenckptError, RuntimeError):
    """fio is missing, failed, or printed something that is not its JSON report."""


def fio_available() -> bool:
    """Whether an ``fio`` executable is on ``PATH``."""
    return shutil.which("fio") is not None


def fio_command(
    op: Operation,
    directory: str | os.PathLike[str],
    size: int,
    workers: int,
    block_size: int,
    fallocate: str = "none",
    *,
    direct: bool | None = None,
    name: str = FIO_JOB_NAME,
) -> list[str]:
    """The fio command line of one run (``size`` is the total over the ``workers`` jobs).

    ``direct`` defaults to True for reads (``--direct=1``) and False for writes (buffered,
    ``--end_fsync=1``).
    """
    if op not in ("write", "read"):
        raise InvalidValueError(f"op must be 'write' or 'read', got {op!r}")
    if workers < 1 or block_size < 1 or size < workers * block_size:
        raise InvalidValueError(
            f"need workers ≥ 1, block size ≥ 1 and size ≥ workers × block size; got size "
            f"{size} B, {workers} workers, block {block_size} B"
        )
    if direct is None:
        direct = op == "read"
    args = [
        "fio",
        f"--name={name}",
        f"--directory={os.fspath(directory)}",
        f"--rw={op}",
        f"--bs={block_size}",
        f"--size={size // workers}",
        f"--numjobs={workers}",
        "--ioengine=psync",
        f"--fallocate={fallocate}",
        "--group_reporting",
        "--output-format=json",
    ]
    if op == "write":
        args.append("--end_fsync=1")
    if direct:
        args.append("--direct=1")
    return args


def parse_fio_output(text: str, op: Operation) -> float:
    """Aggregate bytes/s of ``op`` from fio's JSON report (``--group_reporting``).

    fio sometimes prints notices before the JSON; parsing starts at the first line that opens
    an object. Raises :class:`FioError` (one line) when there is no valid report.
    """
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith("{")), None)
    if start is None:
        raise FioError(f"fio printed no JSON report: {_excerpt(text)}")
    try:
        doc = json.loads("\n".join(lines[start:]))
    except (json.JSONDecodeError, RecursionError):
        raise FioError(f"fio printed invalid JSON: {_excerpt(text)}") from None
    try:
        job = doc["jobs"][0]
        error = job.get("error", 0)
        bandwidth = job[op]["bw_bytes"]
    except (KeyError, IndexError, TypeError, AttributeError):
        raise FioError(f"fio's JSON has no jobs[0].{op}.bw_bytes: {_excerpt(text)}") from None
    if error:
        raise FioError(f"fio reports error {error} for the {op} job")
    if isinstance(bandwidth, bool) or not isinstance(bandwidth, int | float):
        raise FioError(f"fio's jobs[0].{op}.bw_bytes is not a number: {bandwidth!r}")
    value = float(bandwidth)
    if not math.isfinite(value) or value <= 0:
        raise FioError(
            f"fio reports {value} B/s for the {op} (a run too short to time? use a larger size)"
        )
    return value


def _excerpt(text: str, limit: int = 80) -> str:
    flat = " ".join(text.split())
    if not flat:
        return "(nothing)"
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def run_fio(
    op: Operation,
    directory: str | os.PathLike[str],
    size: int,
    workers: int,
    block_size: int,
    fallocate: str = "none",
    *,
    direct: bool | None = None,
    name: str = FIO_JOB_NAME,
    timeout_s: float | None = None,
) -> float:
    """Run fio once (see :func:`fio_command`) and return its aggregate bytes/s.

    A read reads the files a write with the same directory, name, size and workers left.
    Raises :class:`FioError` (one line) when fio is missing, exits non-zero, times out or
    prints no valid report; ``ValueError`` for bad arguments.
    """
    args = fio_command(
        op, directory, size, workers, block_size, fallocate, direct=direct, name=name
    )
    executable = shutil.which("fio")
    if executable is None:
        raise FioError("fio is not installed (apt-get install -y fio, dnf install fio)")
    try:
        proc = subprocess.run(
            [executable, *args[1:]],
            capture_output=True,
            text=True,
            check=False,
            timeout=timeout_s,
        )
    except subprocess.TimeoutExpired:
        raise FioError(f"fio {op} did not finish within {timeout_s} s") from None
    except OSError as exc:
        raise FioError(f"cannot run fio: {exc.strerror or exc}") from None
    if proc.returncode != 0:
        said = proc.stderr.strip().splitlines() or proc.stdout.strip().splitlines() or [""]
        raise FioError(f"fio {op} exited with code {proc.returncode}: {_excerpt(said[-1])}")
    return parse_fio_output(proc.stdout, op)


# --------------------------------------------------------------------------- validation

VALIDATION_COLUMNS: tuple[str, ...] = (
    "op",
    "n",
    "fio MB/s",
    "(min-max)",
    "engine MB/s",
    "(min-max)",
    "ratio",
    "target",
    "read method",
)
"""Header of :meth:`ValidationResult.rows`."""


@dataclass(frozen=True)
class ValidationCase:
    """One (operation, processes): both tools' runs and the engine/fio ratio of the medians."""

    op: Operation
    workers: int
    total_bytes: int
    """Bytes each run moved: S rounded down to whole blocks per process."""
    engine_runs: tuple[float, ...]
    """Bytes/s of every engine run, in run order."""
    fio_runs: tuple[float, ...]
    read_method: str | None
    """How the engine avoided the page cache (reads); ``None`` for writes."""
    fio_direct: bool
    """Whether fio used ``--direct=1``."""
    target: float = TARGET_RATIO

    @property
    def engine_median(self) -> float:
        return statistics.median(self.engine_runs)

    @property
    def fio_median(self) -> float:
        return statistics.median(self.fio_runs)

    @property
    def ratio(self) -> float:
        """Engine/fio of the medians."""
        return self.engine_median / self.fio_median

    @property
    def meets_target(self) -> bool:
        """Whether the engine reaches ``target``× fio (0.9× by default)."""
        return self.ratio >= self.target

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready figures (bytes/s)."""
        return {
            "op": self.op,
            "workers": self.workers,
            "total_bytes": self.total_bytes,
            "engine_median_Bps": self.engine_median,
            "engine_min_Bps": min(self.engine_runs),
            "engine_max_Bps": max(self.engine_runs),
            "engine_runs_Bps": list(self.engine_runs),
            "fio_median_Bps": self.fio_median,
            "fio_min_Bps": min(self.fio_runs),
            "fio_max_Bps": max(self.fio_runs),
            "fio_runs_Bps": list(self.fio_runs),
            "ratio": self.ratio,
            "target": self.target,
            "meets_target": self.meets_target,
            "read_method": self.read_method,
            "fio_direct": self.fio_direct,
        }


@dataclass(frozen=True)
class ValidationResult:
    """What :func:`validate` measured: one case per (operation, processes)."""

    directory: str
    size: int
    """The S asked for; each case's ``total_bytes`` is S rounded down to whole blocks per
    process."""
    block_size: int
    repeats: int
    fallocate: str
    cases: tuple[ValidationCase, ...]
    target: float = TARGET_RATIO

    @property
    def meets_target(self) -> bool:
        """Whether every case reaches the target ratio."""
        return all(c.meets_target for c in self.cases)

    def rows(self) -> list[tuple[str, ...]]:
        """Display rows under :data:`VALIDATION_COLUMNS` (MB/s = 1e6 B/s)."""
        return [
            (
                c.op,
                str(c.workers),
                f"{c.fio_median / 1e6:.0f}",
                _span(c.fio_runs),
                f"{c.engine_median / 1e6:.0f}",
                _span(c.engine_runs),
                f"{c.ratio:.2f}",
                "meets" if c.meets_target else f"below {c.target:g}×",
                c.read_method or "-",
            )
            for c in self.cases
        ]

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: the set-up and every case."""
        return {
            "directory": self.directory,
            "size_bytes": self.size,
            "block_size_bytes": self.block_size,
            "repeats": self.repeats,
            "fio_fallocate": self.fallocate,
            "target": self.target,
            "meets_target": self.meets_target,
            "cases": [c.to_dict() for c in self.cases],
        }


def _span(values: Sequence[float]) -> str:
    return f"{min(values) / 1e6:.0f}-{max(values) / 1e6:.0f}"


def _check_space(directory: str, size: int) -> None:
    """S for the engine's files plus S for fio's copy, plus a margin."""
    st = os.statvfs(directory)
    free = st.f_bavail * st.f_frsize
    need = 2 * size + max(SPACE_MARGIN_BYTES, int(2 * size * SPACE_MARGIN_FRACTION))
    if free < need:
        raise InvalidValueError(
            f"{directory} has {format_size(free)} free; checking with S = {format_size(size)} "
            f"needs {format_size(need)} (the engine's files, fio's copy and a margin): free "
            "space or choose a smaller size"
        )


def _engine_read_method(directory: str, block_size: int) -> str | None:
    """The read method the engine picks here for this block size (one tiny write + read)."""
    run_io(
        "write", directory, total_bytes=block_size, block_size=block_size, name="probe", keep=True
    )
    try:
        return run_io(
            "read", directory, total_bytes=block_size, block_size=block_size, name="probe"
        ).read_method
    finally:
        remove_files(str(p) for p in Path(directory).glob("probe.*"))


def _check_validate_args(counts: list[int], size: int, block_size: int, repeats: int) -> None:
    """Refuse bad arguments of :func:`validate` before anything is run or written."""
    if not counts or any(isinstance(n, bool) or n < 1 for n in counts):
        raise InvalidValueError(f"workers_list must be process counts ≥ 1, got {counts!r}")
    if len(set(counts)) != len(counts):
        raise InvalidValueError(f"workers_list repeats a process count: {counts!r}")
    if repeats < 1:
        raise InvalidValueError(f"repeats must be ≥ 1, got {repeats}")
    if block_size < 1:
        raise InvalidValueError(f"block size must be ≥ 1 byte, got {block_size}")
    if size < max(counts) * block_size:
        raise InvalidValueError(
            f"size {size} B is less than {max(counts)} processes × block size {block_size} B"
        )


def validate(
    directory: str | os.PathLike[str],
    size: int,
    workers_list: Sequence[int],
    block_size: int,
    repeats: int = 3,
    *,
    fallocate: str = "none",
    target: float = TARGET_RATIO,
    timeout_s: float | None = 600.0,
) -> ValidationResult:
    """Run fio and the engine interleaved on ``directory`` and compare their medians.

    For each repetition and each process count n in ``workers_list``: both tools (order
    alternating) write S bytes with n processes and read them back, each run after
    ``os.sync()``. S is rounded down to whole blocks per process (both tools move the same
    bytes). All files (the engine's and fio's) are in a temporary directory inside
    ``directory`` that is removed afterwards, also on failure. Raises ``ValueError`` for bad
    arguments or too little free space, :class:`FioError` when fio fails, and the engine's
    errors when it fails.
    """
    counts = list(workers_list)
    _check_validate_args(counts, size, block_size, repeats)
    if not fio_available():
        raise FioError("fio is not installed (apt-get install -y fio, dnf install fio)")
    root = os.path.abspath(os.fspath(directory))
    if not os.path.isdir(root):
        raise InvalidValueError(f"{root} is not a directory: give an existing directory to test")
    _check_space(root, size)

    sizes = {n: (size // n // block_size) * block_size * n for n in counts}
    samples: dict[tuple[Tool, Operation, int], list[float]] = {}
    methods: dict[int, set[str]] = {}
    work = tempfile.mkdtemp(prefix="greenckpt-fio-check-", dir=root)
    try:
        dirs: dict[Tool, str] = {tool: os.path.join(work, tool) for tool in ("fio", "engine")}
        for d in dirs.values():
            os.mkdir(d)
        engine_method = _engine_read_method(dirs["engine"], block_size)
        fio_direct = engine_method == "o_direct"
        for rep in range(repeats):
            for n in counts:
                order: tuple[Tool, Tool] = (
                    ("fio", "engine") if (rep + n) % 2 == 0 else ("engine", "fio")
                )
                for tool in order:
                    for op in OPERATIONS:
                        # No dirty pages or pending deletions of the previous run.
                        os.sync()
                        if tool == "fio":
                            value = run_fio(
                                op,
                                dirs["fio"],
                                sizes[n],
                                n,
                                block_size,
                                fallocate,
                                direct=fio_direct if op == "read" else False,
                                timeout_s=timeout_s,
                            )
                        else:
                            result = run_io(
                                op,
                                dirs["engine"],
                                total_bytes=sizes[n],
                                workers=n,
                                block_size=block_size,
                                layout="file_per_process",
                                name=ENGINE_NAME,
                                keep=True,
                            )
                            value = result.throughput
                            if result.read_method is not None:
                                methods.setdefault(n, set()).add(result.read_method)
                        samples.setdefault((tool, op, n), []).append(value)
                    used = dirs[tool]
                    remove_files(str(p) for p in Path(used).iterdir())
    finally:
        shutil.rmtree(work, ignore_errors=True)

    cases = tuple(
        ValidationCase(
            op=op,
            workers=n,
            total_bytes=sizes[n],
            engine_runs=tuple(samples[("engine", op, n)]),
            fio_runs=tuple(samples[("fio", op, n)]),
            read_method=("+".join(sorted(methods[n])) if op == "read" and n in methods else None),
            fio_direct=fio_direct and op == "read",
            target=target,
        )
        for n in counts
        for op in OPERATIONS
    )
    return ValidationResult(
        directory=root,
        size=size,
        block_size=block_size,
        repeats=repeats,
        fallocate=fallocate,
        cases=cases,
        target=target,
    )
