"""A 2-D heat-distribution solver over MPI that survives failures with greenckpt.

The application of wu2018's HDC and moran2018's SPMD heat example: a global ``NX x NY``
grid of float64 temperatures, split into blocks of consecutive rows (the first
``NX % ranks`` ranks take one row more), relaxed with the Jacobi 5-point stencil. The outer
ring of the grid is fixed (the first row is a hot edge, the others are cold) and so is a
rectangular heat source in the middle; every other cell becomes the mean of its four
neighbours at each iteration. Each rank keeps one halo row above and one below its block
and swaps them with its neighbours (``Sendrecv``) before every update.

Why it is written this way: the run must end with the *same bits* whatever happened to it,
so that a restart can be verified by comparing one digest. Every cell is updated by the same
element-wise NumPy expression whatever the number of ranks, and no value depends on a
reduction whose order could vary with timing, so the final field is identical after any
number of kills and restarts, and even between a single process and ``mpiexec -n 4``. Rank 0
gathers the field (``Gatherv``, rank order) and writes a JSON result with its xxh3_64 digest.

Checkpointing: the rank's own rows (not the halos, which are refreshed before every use) and
``state["it"]``, the number of completed iterations, are protected. The run first recovers
the newest checkpoint that every rank can read and verify, then iterates, asking
``need_checkpoint`` after each iteration. ``maybe_fail("compute", ...)`` lets a test kill a
rank after it computed a given iteration (``GREENCKPT_INJECT=kill@compute:rank=2,
iteration=120``); running the same command again restarts from the newest checkpoint.

Run ``python examples/heat2d.py --help``; ``examples/README.md`` shows complete sessions.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
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
    override a TOML file or ``GREENCKPT_*`` variables (see :func:`checkpoint_settings`)."""
    p = argparse.ArgumentParser(
        prog=PROG, description="2-D heat distribution (Jacobi) with multilevel checkpoints."
    )
    p.add_argument("--nx", type=int, default=256, help="grid rows (default 256)")
    p.add_argument("--ny", type=int, default=256, help="grid columns (default 256)")
    p.add_argument("--iterations", type=int, default=200, help="Jacobi sweeps (default 200)")
    add_checkpoint_options(p, default_name="heat")
    p.add_argument("--result", type=Path, help="write the JSON result here (rank 0)")
    args = p.parse_args(argv)
    for name in ("nx", "ny", "iterations"):
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
    comm = world()
    rank, size = comm.rank, comm.size
    with quiet(rank):
        args = parse_args(argv)
    if args.nx < size:
        message = f"--nx ({args.nx}) must be at least the number of ranks ({size})"
        return fail(message, rank=rank, code=2)
    try:
        ck = Checkpointer(args.config, comm=comm, **checkpoint_settings(args, os.environ))
    except ValueError as exc:  # ConfigError, StoreError: a bad setting or directory
        return fail(str(exc), rank=rank, code=2)

    grid = Grid(args.nx, args.ny, rank, size)
    exchange = Exchange(comm)
    ck.protect("u", grid.owned)
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
        exchange.halos(grid)
        grid.step()
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

    full = exchange.gather(grid)
    if full is not None:
        result = {
            "iterations": args.iterations,
            "nx": args.nx,
            "ny": args.ny,
            "ranks": size,
            "digest": xxhash.xxh3_64(full.tobytes()).hexdigest(),
            "sum": float(full.sum()),
            "restored": restored_json(info),
            "checkpoints": len(ck.history),
            "checkpointed": [{"iteration": c.iteration, "level": c.level} for c in ck.history],
            "failed_checkpoints": failed,
        }
        if args.result is not None:
            args.result.write_text(json.dumps(result, indent=2) + "\n")
        print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
