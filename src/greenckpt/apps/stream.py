"""A STREAM-like memory-bandwidth benchmark over MPI, with greenckpt checkpoints.

wu2018 pairs the compute-bound heat code with STREAM, the memory-bound benchmark (McCalpin), to
see how checkpointing costs differ between the two kinds of application. Every rank runs
STREAM's copy, scale, add and triad kernels on three float64 arrays, each timed on its own;
rates count STREAM's bytes, and are timings of this run on this machine, nothing more.

Why the values are made to evolve: a restart that restored the wrong iteration's arrays must
change the final digest, so each iteration multiplies ``a`` by exactly 1.25 and an untimed
``fmod`` keeps it bounded: every iteration leaves different bits, deterministically.
Checkpointing is as in ``heat2d.py``. docs/design/apps.md has the kernels and the details.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import numpy.typing as npt

from greenckpt.apps import common
from greenckpt.ckpt.comm import Comm

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
    override a TOML file or ``GREENCKPT_*`` variables (see
    :func:`greenckpt.apps.common.checkpoint_settings`)."""
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
    common.add_checkpoint_options(p, default_name="stream")
    p.add_argument("--result", type=Path, help="write the JSON result here (rank 0)")
    return common.parse_checked(p, argv, ("elements", "iterations"))


# ------------------------------------------------------------------------------ the benchmark


class Stream:
    """One rank's three arrays, the kernels, and the best time of each kernel so far."""

    def __init__(self, elements: int, rank: int) -> None:
        self._rank = rank
        self.a: Array = np.empty(elements)
        self.b: Array = np.empty(elements)
        self.c: Array = np.empty(elements)
        self.reset()
        self.best = dict.fromkeys(KERNELS, math.inf)

    def reset(self) -> None:
        """The arrays' initial values, written in place (the protected arrays stay the same
        objects): for a run that starts afresh after unrestorable checkpoints, whose failed
        restore may have left part of a checkpoint in them."""
        # Values differ between ranks and elements, so a restore into the wrong rank or a
        # shifted array would show in the digest.
        n = self.a.size
        index = np.arange(self._rank * n, (self._rank + 1) * n, dtype=np.int64)
        np.copyto(self.a, 1.0 + (index % 997).astype(np.float64) / 997.0)
        self.b.fill(2.0)
        self.c.fill(0.0)

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
    return common.run_app(PROG, argv, parse_args, benchmark)


def benchmark(args: argparse.Namespace, comm: Comm) -> int:
    """:func:`main` once the options are parsed (an ``AppError`` is reported there)."""
    rank, size = comm.rank, comm.size
    args.elements = max(1, round(args.elements * args.size_factor))
    ck = common.open_checkpointer(args, comm)
    stream = Stream(args.elements, rank)
    ck.protect("a", stream.a)
    ck.protect("b", stream.b)
    ck.protect("c", stream.c)
    flips = None if args.bitflip is None else (args.bitflip, stream.a)
    outcome = common.run_iterations(
        ck, args.iterations, stream.iterate, prog=PROG, rank=rank, reset=stream.reset, flips=flips
    )

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
            "digest": common.digest(full),
            **outcome.json(),
            "bandwidth_MBps": rates,
        }
        common.write_result(result, args.result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
