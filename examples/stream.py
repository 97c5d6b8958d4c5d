"""A STREAM-like memory-bandwidth benchmark over MPI, with greenckpt checkpoints.

wu2018 pairs the compute-bound heat code with STREAM, the memory-bound benchmark (McCalpin),
to see how checkpointing costs differ between the two kinds of application. Every rank owns
three float64 arrays ``a``, ``b`` and ``c`` of ``--elements`` values and, at each iteration,
runs STREAM's four kernels in STREAM's order, each timed on its own::

    copy   c = a               16 bytes per element
    scale  b = q * c           16
    add    c = a + b           24
    triad  a = b + q * c       24

Rates count STREAM's bytes (what the kernel must move), not the extra traffic of NumPy's
temporaries; rank 0 prints the best rate of each kernel in MB/s (10^6 B/s), summed over the
ranks. They are timings of this run on this machine, nothing more.

Why the values are made to evolve: a restart that restored the wrong iteration's arrays must
change the final digest. With ``q = 0.5`` the four kernels multiply ``a`` by exactly 1.25 per
iteration; an untimed fold ``a = fmod(a, 1024)`` keeps the values bounded (no overflow however
long the run), so every iteration leaves different bits while the arithmetic stays
deterministic element by element. Rank 0 gathers every rank's ``a``, ``b``, ``c`` in rank order
(``Gather``) and writes a JSON result with their xxh3_64 digest.

Checkpointing is as in ``heat2d.py``: the three arrays and ``state["it"]`` are protected, the
run recovers first, ``maybe_fail("compute", ...)`` lets a test kill a rank after an iteration,
and running the same command again resumes from the newest checkpoint that every rank can read.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager, redirect_stderr, redirect_stdout
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import xxhash

from greenckpt.ckpt.api import Checkpointer, CheckpointError, RecoveryError, RecoveryInfo
from greenckpt.ckpt.comm import Comm, world
from greenckpt.ckpt.inject import maybe_fail

PROG = "stream"
Q = 0.5
"""STREAM's scalar ``q`` (3.0 in STREAM; 0.5 here, see the module docstring)."""
WRAP = 1024.0
"""``a`` is folded into ``[0, WRAP)`` after each iteration."""
KERNELS = ("copy", "scale", "add", "triad")
BYTES_PER_ELEMENT = {"copy": 16, "scale": 16, "add": 24, "triad": 24}
"""Bytes a kernel moves per element: arrays read + arrays written, 8 bytes each."""

Array = npt.NDArray[np.float64]


# ------------------------------------------------------------------------------ command line


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    """The options; the checkpoint ones default to None so that only those given here
    override a TOML file or ``GREENCKPT_*`` variables (see :func:`checkpoint_settings`)."""
    p = argparse.ArgumentParser(
        prog=PROG, description="STREAM-like memory bandwidth benchmark with checkpoints."
    )
    p.add_argument(
        "--elements",
        type=int,
        default=2_000_000,
        help="float64 elements per array and rank (default 2000000: 16 MB per array)",
    )
    p.add_argument("--iterations", type=int, default=50, help="kernel rounds (default 50)")
    add_checkpoint_options(p, default_name="stream")
    p.add_argument("--result", type=Path, help="write the JSON result here (rank 0)")
    args = p.parse_args(argv)
    for name in ("elements", "iterations"):
        if getattr(args, name) <= 0:
            p.error(f"--{name} must be > 0, not {getattr(args, name)}")
    if args.ranks_per_node is not None and args.ranks_per_node <= 0:
        p.error(f"--ranks-per-node must be > 0, not {args.ranks_per_node}")
    return args


def add_checkpoint_options(p: argparse.ArgumentParser, *, default_name: str) -> None:
    """The checkpoint options shared by the examples."""
    g = p.add_argument_group("checkpointing")
    g.add_argument("--local-dir", help="node-local checkpoint directory (levels 1-3)")
    g.add_argument("--global-dir", help="global file system checkpoint directory (level 4)")
    g.add_argument(
        "--ranks-per-node",
        type=int,
        help="emulate nodes of N consecutive ranks, each with its own local subdirectory",
    )
    g.add_argument("--l1-every", help='level 1 interval: "10it", "5min" or "auto" (default 10it)')
    g.add_argument("--l4-every", help='level 4 interval: "50it", "1h" or "auto" (default 50it)')
    g.add_argument("--config", type=Path, help="checkpoint TOML file ([checkpoint] tables)")
    g.add_argument("--name", help=f"checkpoint job name (default {default_name})")
    p.set_defaults(default_name=default_name)


def checkpoint_settings(args: argparse.Namespace, env: Mapping[str, str]) -> dict[str, Any]:
    """Keyword settings for :class:`Checkpointer` from the command line.

    Keywords beat the environment and the TOML file in greenckpt's precedence, so an option
    is passed only when it was given; the example's defaults (``10it`` / ``50it`` intervals,
    the job name) are filled in only where neither a TOML file nor a ``GREENCKPT_*`` variable
    could be configuring that setting instead, and a level's default interval only when its
    directory is set (``--local-dir`` alone gives level 1 only).
    """
    settings: dict[str, Any] = {}
    for key in ("local_dir", "global_dir", "ranks_per_node", "name"):
        value = getattr(args, key)
        if value is not None:
            settings[key] = value
    has_file = args.config is not None or "GREENCKPT_CONFIG" in env
    if "name" not in settings and not has_file and "GREENCKPT_NAME" not in env:
        settings["name"] = args.default_name
    for level, given, default, where in (
        (1, args.l1_every, "10it", "local_dir"),
        (4, args.l4_every, "50it", "global_dir"),
    ):
        from_env = any(f"GREENCKPT_L{level}_{k}" in env for k in ("EVERY", "ENABLED"))
        has_dir = getattr(args, where) is not None or f"GREENCKPT_{where.upper()}" in env
        use_default = given is None and has_dir and not has_file and not from_env
        every = default if use_default else given
        if every is not None:
            settings[f"l{level}"] = {"every": every}
    return settings


def say(message: str, *, rank: int) -> None:
    """One line on stderr, from rank 0 only (every rank meets the same errors)."""
    if rank == 0:
        print(f"{PROG}: {message}", file=sys.stderr, flush=True)


@contextmanager
def quiet(rank: int) -> Iterator[None]:
    """Silence ranks other than 0 (argparse's usage, help and errors: once, not per rank)."""
    if rank == 0:
        yield
        return
    with open(os.devnull, "w") as null, redirect_stdout(null), redirect_stderr(null):
        yield


def fail(message: str, *, rank: int, code: int) -> int:
    """Say ``error: message``; the exit status ``code``."""
    say(f"error: {message}", rank=rank)
    return code


def report_recovery(info: RecoveryInfo | None, *, rank: int) -> None:
    """Say on stderr what the restart restored and which newer checkpoints it passed over."""
    if info is None:
        say("no checkpoint: starting from the beginning", rank=rank)
        return
    say(
        f"restored checkpoint {info.id} (level {info.level}, iteration {info.iteration}) "
        f"in {info.seconds:.3f} s",
        rank=rank,
    )
    for reason in info.skipped:
        say(f"  skipped {reason}", rank=rank)
    if info.rebuilt:
        say(f"  rebuilt the files of ranks {list(info.rebuilt)} from redundancy", rank=rank)


def restored_json(info: RecoveryInfo | None) -> dict[str, int | None] | None:
    """The ``restored`` entry of the result."""
    if info is None:
        return None
    return {"id": info.id, "level": info.level, "iteration": info.iteration}


# ------------------------------------------------------------------------------ the benchmark


class Stream:
    """One rank's three arrays, the kernels, and the best time of each kernel so far."""

    def __init__(self, elements: int, rank: int) -> None:
        # Values differ between ranks and elements, so a restore into the wrong rank or a
        # shifted array would show in the digest.
        index = np.arange(rank * elements, (rank + 1) * elements, dtype=np.int64)
        self.a: Array = 1.0 + (index % 997).astype(np.float64) / 997.0
        self.b: Array = np.full(elements, 2.0)
        self.c: Array = np.zeros(elements)
        self.best = dict.fromkeys(KERNELS, math.inf)

    def iterate(self) -> None:
        """STREAM's four kernels, each timed, then the untimed fold that bounds ``a``."""
        a, b, c = self.a, self.b, self.c
        clock = time.perf_counter
        t0 = clock()
        np.copyto(c, a)
        t1 = clock()
        np.multiply(c, Q, out=b)
        t2 = clock()
        np.add(a, b, out=c)
        t3 = clock()
        np.multiply(c, Q, out=a)  # a = b + q*c in two passes: the same bits as one expression
        np.add(a, b, out=a)
        t4 = clock()
        np.fmod(a, WRAP, out=a)
        for kernel, seconds in zip(KERNELS, (t1 - t0, t2 - t1, t3 - t2, t4 - t3), strict=True):
            self.best[kernel] = min(self.best[kernel], seconds)

    def rates(self) -> dict[str, float | None]:
        """This rank's best rate of each kernel in B/s (None when no iteration ran)."""
        n = self.a.size
        return {
            k: None if math.isinf(t) or t <= 0 else BYTES_PER_ELEMENT[k] * n / t
            for k, t in self.best.items()
        }


def gather(comm: Comm, stream: Stream) -> Array | None:
    """Every rank's ``a``, ``b``, ``c`` on rank 0 in rank order (one row per rank), else None.

    MPI (imported only when the job has several ranks) moves the arrays as raw buffers.
    """
    mine = np.concatenate([stream.a, stream.b, stream.c])
    if comm.size == 1:
        return mine[None, :]
    from mpi4py import MPI  # noqa: PLC0415 - only under an MPI launcher

    full = np.empty((comm.size, mine.size)) if comm.rank == 0 else None
    MPI.COMM_WORLD.Gather(mine, full, root=0)
    return full


def bandwidth(comm: Comm, stream: Stream) -> dict[str, float | None]:
    """Each kernel's best rate summed over the ranks, in MB/s (collective)."""
    everyone = comm.allgather(stream.rates())
    out: dict[str, float | None] = {}
    for k in KERNELS:
        rates = [r[k] for r in everyone]
        out[k] = None if any(r is None for r in rates) else sum(r or 0.0 for r in rates) / 1e6
    return out


# ------------------------------------------------------------------------------ main


def main(argv: Sequence[str] | None = None) -> int:
    """Recover, run the kernels with checkpoints, gather and write the result; the status."""
    comm = world()
    rank, size = comm.rank, comm.size
    with quiet(rank):
        args = parse_args(argv)
    try:
        ck = Checkpointer(args.config, comm=comm, **checkpoint_settings(args, os.environ))
    except ValueError as exc:  # ConfigError, StoreError: a bad setting or directory
        return fail(str(exc), rank=rank, code=2)

    stream = Stream(args.elements, rank)
    ck.protect("a", stream.a)
    ck.protect("b", stream.b)
    ck.protect("c", stream.c)
    ck.state["it"] = 0
    try:
        info = ck.recover()
    except RecoveryError as exc:
        return fail(f"{exc}; remove the checkpoints to start afresh", rank=rank, code=1)
    report_recovery(info, rank=rank)
    start: int = ck.state["it"]
    if start > args.iterations:  # the result would claim fewer iterations than its data had
        ck.finalize()
        message = f"the checkpoint is at iteration {start}, past --iterations {args.iterations}"
        return fail(message, rank=rank, code=2)

    failed = 0
    for it in range(start + 1, args.iterations + 1):
        stream.iterate()
        maybe_fail("compute", rank=rank, iteration=it)
        ck.state["it"] = it
        level = ck.need_checkpoint(it)
        if level is not None:
            try:
                ck.checkpoint(level, iteration=it)
            except CheckpointError as exc:  # on every rank; the older checkpoints are intact
                failed += 1
                say(f"warning: {exc}; computing on", rank=rank)
    ck.finalize()

    rates = bandwidth(comm, stream)
    full = gather(comm, stream)
    if full is not None:
        print(f"{'kernel':<8}{'best MB/s':>14}   ({size} ranks, {args.elements} elements each)")
        for k in KERNELS:
            rate = rates[k]
            print(f"{k:<8}{'-' if rate is None else f'{rate:14.1f}':>14}")
        result = {
            "iterations": args.iterations,
            "elements": args.elements,
            "ranks": size,
            "digest": xxhash.xxh3_64(full.tobytes()).hexdigest(),
            "restored": restored_json(info),
            "checkpoints": len(ck.history),
            "checkpointed": [{"iteration": c.iteration, "level": c.level} for c in ck.history],
            "failed_checkpoints": failed,
            "bandwidth_MBps": rates,
        }
        if args.result is not None:
            args.result.write_text(json.dumps(result, indent=2) + "\n")
        print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
