"""A 2-D heat-distribution solver over MPI that survives failures with greenckpt.

The application of wu2018's HDC and moran2018's SPMD heat example: a float64 grid split into
blocks of rows over the ranks, relaxed with the Jacobi 5-point stencil around fixed edges and a
fixed heat source, with halo rows swapped between neighbours before every update.

Why it is written this way: the run must end with the *same bits* whatever happened to it, so
that a restart can be verified by comparing one digest. Every cell is updated by the same
element-wise expression whatever the number of ranks, and no value depends on a reduction whose
order could vary, so the final field is identical after any number of kills and restarts. The
rank's rows and ``state["it"]`` are checkpointed; ``maybe_fail("compute", ...)`` lets a test
kill a rank, and running the same command again restarts from the newest checkpoint.

docs/design/apps.md has the details; run ``python -m greenckpt.apps.heat2d --help``
(``python examples/heat2d.py --help`` in a checkout); ``examples/README.md`` shows sessions.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from greenckpt.apps import common
from greenckpt.ckpt.comm import Comm

PROG = "heat2d"
HOT = 100.0
"""Temperature of the first row (the hot edge)."""
SOURCE = 75.0
"""Temperature of the fixed heat source in the middle of the plate."""
COLD = 0.0
"""Temperature of the other three edges and the initial interior."""

Field = npt.NDArray[np.float64]


# ------------------------------------------------------------------------------ command line


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    """The options; the checkpoint ones default to None so that only those given here
    override a TOML file or ``GREENCKPT_*`` variables (see
    :func:`greenckpt.apps.common.checkpoint_settings`)."""
    p = argparse.ArgumentParser(
        prog=PROG, description="2-D heat distribution (Jacobi) with multilevel checkpoints."
    )
    p.add_argument("--nx", type=int, default=256, help="grid rows (default 256)")
    p.add_argument("--ny", type=int, default=256, help="grid columns (default 256)")
    p.add_argument("--iterations", type=int, default=200, help="Jacobi sweeps (default 200)")
    common.add_checkpoint_options(p, default_name="heat")
    p.add_argument("--result", type=Path, help="write the JSON result here (rank 0)")
    return common.parse_checked(p, argv, ("nx", "ny", "iterations"))


# ------------------------------------------------------------------------------ the solver


class Grid:
    """This rank's rows of the plate, with one halo row above and one below.

    ``u[1:-1]`` are the rows ``first .. first + rows - 1`` of the global grid; ``u[0]`` and
    ``u[-1]`` are copies of the neighbours' rows (unused at the plate's top and bottom edges,
    whose rows are fixed). ``fixed`` marks the cells that never change and ``values`` holds
    their temperatures, so the boundary is re-imposed by one ``copyto`` per iteration.
    """

    def __init__(self, nx: int, ny: int, rank: int, size: int) -> None:
        base, extra = divmod(nx, size)
        self.rows = base + (1 if rank < extra else 0)
        self.first = rank * base + min(rank, extra)
        self.counts = [base + (1 if r < extra else 0) for r in range(size)]
        self.nx, self.ny = nx, ny
        self.u: Field = np.zeros((self.rows + 2, ny), dtype=np.float64)
        self._next: Field = np.empty((self.rows, ny), dtype=np.float64)
        i = np.arange(self.first, self.first + self.rows)[:, None]
        j = np.arange(ny)[None, :]
        edge = (i == 0) | (i == nx - 1) | (j == 0) | (j == ny - 1)
        source = (nx * 3 // 8 <= i) & (i < nx * 5 // 8) & (ny // 4 <= j) & (j < ny // 2)
        self.fixed = edge | source
        self.values: Field = np.where(source, SOURCE, np.where(i == 0, HOT, COLD))
        self.reset()

    def reset(self) -> None:
        """Put the plate back to its initial temperatures, in place (the protected rows stay
        the same array): what a run that starts afresh after unrestorable checkpoints needs,
        since a failed restore may have left part of a checkpoint in them."""
        self.u.fill(0.0)
        np.copyto(self.owned, self.values, where=self.fixed)

    @property
    def owned(self) -> Field:
        """This rank's rows (a C-contiguous view: what the checkpoints protect)."""
        return self.u[1:-1]

    def step(self) -> None:
        """One Jacobi sweep over the owned rows (the halos must be current).

        The sum is grouped the same way for every cell and every decomposition, so a cell's
        new value never depends on which rank computed it.
        """
        u, nxt = self.u, self._next
        nxt[:, 1:-1] = 0.25 * ((u[:-2, 1:-1] + u[2:, 1:-1]) + (u[1:-1, :-2] + u[1:-1, 2:]))
        nxt[:, 0] = u[1:-1, 0]
        nxt[:, -1] = u[1:-1, -1]
        np.copyto(nxt, self.values, where=self.fixed)
        self.owned[...] = nxt


class Exchange:
    """Halo exchange and gathering: MPI when the job has several ranks, else nothing.

    mpi4py is imported only under MPI (through greenckpt's :func:`world`), so a single
    process needs no MPI library at all.
    """

    def __init__(self, comm: Comm) -> None:
        self.rank, self.size = comm.rank, comm.size
        self._mpi: Any = None
        if comm.size > 1:
            from mpi4py import MPI  # noqa: PLC0415 - only under an MPI launcher

            self._mpi = MPI

    def halos(self, grid: Grid) -> None:
        """Swap boundary rows with the ranks above and below (``Sendrecv``: no deadlock)."""
        if self._mpi is None:
            return
        mpi = self._mpi
        world_comm = mpi.COMM_WORLD
        up = self.rank - 1 if self.rank > 0 else mpi.PROC_NULL
        down = self.rank + 1 if self.rank < self.size - 1 else mpi.PROC_NULL
        u = grid.u
        world_comm.Sendrecv(u[1], dest=up, sendtag=0, recvbuf=u[-1], source=down, recvtag=0)
        world_comm.Sendrecv(u[-2], dest=down, sendtag=1, recvbuf=u[0], source=up, recvtag=1)

    def gather(self, grid: Grid) -> Field | None:
        """The whole field on rank 0 (rows in rank order), None on the other ranks."""
        if self._mpi is None:
            return grid.owned.copy()
        mpi = self._mpi
        full: Field | None = None
        recv: Any = None
        if self.rank == 0:
            full = np.empty((grid.nx, grid.ny), dtype=np.float64)
            counts = [n * grid.ny for n in grid.counts]
            displs = [int(d) for d in np.cumsum([0, *counts[:-1]])]
            recv = [full, counts, displs, mpi.DOUBLE]
        mpi.COMM_WORLD.Gatherv(grid.owned, recv, root=0)
        return full


# ------------------------------------------------------------------------------ main


def main(argv: Sequence[str] | None = None) -> int:
    """Recover, iterate with checkpoints, gather and write the result; the exit status."""
    return common.run_app(PROG, argv, parse_args, solve)


def solve(args: argparse.Namespace, comm: Comm) -> int:
    """:func:`main` once the options are parsed (an ``AppError`` is reported there)."""
    rank, size = comm.rank, comm.size
    if args.size_factor != 1.0:  # the cells (and the checkpoint bytes) times the factor
        scale = args.size_factor**0.5
        args.nx, args.ny = max(3, round(args.nx * scale)), max(3, round(args.ny * scale))
    if args.nx < size:
        message = f"--nx ({args.nx}) must be at least the number of ranks ({size})"
        raise common.AppError(message, code=2)
    ck = common.open_checkpointer(args, comm)
    grid = Grid(args.nx, args.ny, rank, size)
    exchange = Exchange(comm)
    ck.protect("u", grid.owned)

    def step() -> None:
        exchange.halos(grid)
        grid.step()

    flips = None if args.bitflip is None else (args.bitflip, grid.owned)
    outcome = common.run_iterations(
        ck, args.iterations, step, prog=PROG, rank=rank, reset=grid.reset, flips=flips
    )
    full = exchange.gather(grid)
    if full is not None:
        result = {
            "iterations": args.iterations,
            "nx": args.nx,
            "ny": args.ny,
            "ranks": size,
            "digest": common.digest(full),
            "sum": float(full.sum()),
            **outcome.json(),
        }
        common.write_result(result, args.result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
