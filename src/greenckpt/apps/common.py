"""What the example applications share: checkpoint options, messages, the checkpointed loop.

Why one module: :mod:`greenckpt.apps.heat2d` and :mod:`greenckpt.apps.stream` use the checkpoint
library the same way (protect the arrays and ``state["it"]``, ``recover()`` at start, compute,
``maybe_fail("compute", ...)``, ``checkpoint()`` when ``need_checkpoint(it)`` says so,
``finalize()``) and must look the same from outside: the same checkpoint options and defaults,
the same messages on stderr, the same exit statuses and the same checkpoint entries in their
JSON result, so that ``examples/README.md``, the tests and ``greenckpt demo`` can treat them
alike. Written once here, the two cannot drift apart; each application keeps only its
computation, its own options and its own result fields.

Exit statuses: 0 success, 1 checkpoints exist but none could be restored, 2 a bad option,
setting or directory (as argparse's own errors).
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import re
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager, redirect_stderr, redirect_stdout
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import xxhash

from greenckpt.ckpt.api import (
    Checkpointer,
    CheckpointError,
    CheckpointInfo,
    RecoveryError,
    RecoveryInfo,
)
from greenckpt.ckpt.comm import Comm, world
from greenckpt.ckpt.inject import maybe_fail
from greenckpt.errors import GreenckptError, InvalidValueError

__all__ = [
    "AppError",
    "BitFlips",
    "NoCheckpoints",
    "Outcome",
    "add_checkpoint_options",
    "checkpoint_settings",
    "digest",
    "fail",
    "open_checkpointer",
    "parse_checked",
    "quiet",
    "report_recovery",
    "restored_json",
    "run_app",
    "run_iterations",
    "say",
    "write_result",
]


class AppError(GreenckptError):
    """A failure the application reports in one line (``PROG: error: ...``) before exiting
    with ``code``; raised where it is found, reported once by :func:`run_app`, so that the
    applications need no status plumbing through their functions."""

    def __init__(self, message: str, *, code: int) -> None:
        super().__init__(message)
        self.message = message
        self.code = code

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickle with ``code``, which the constructor requires (keyword-only)."""
        return (functools.partial(type(self), code=self.code), self.args, self.__dict__)


# ------------------------------------------------------------------------------ command line


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
    g.add_argument(
        "--no-checkpoint",
        action="store_true",
        help="run without the checkpoint library (no files, nothing announced): the "
        "no-checkpoint baseline of a study",
    )
    e = p.add_argument_group("experiments")
    e.add_argument(
        "--size-factor",
        type=float,
        default=1.0,
        help="multiply the problem size (the data, so the checkpoint bytes) by F (default 1)",
    )
    e.add_argument(
        "--bitflip",
        metavar="POS/EVERY",
        help="every EVERY seconds flip bit POS (1 = the lowest bit of a float64) of one value "
        "of rank 0's data, as FTI_BitFlip does (wu2018); e.g. 1/10s",
    )
    p.set_defaults(default_name=default_name)


def parse_checked(
    p: argparse.ArgumentParser, argv: Sequence[str] | None, positive: Sequence[str]
) -> argparse.Namespace:
    """``p.parse_args(argv)``, then a usage error (exit status 2) unless each option named in
    ``positive`` and ``--ranks-per-node`` (when given) is > 0.

    Why here: argparse's ``type=int`` accepts 0 and negative numbers, which would only fail
    later, deep in NumPy or the checkpoint library, with a traceback instead of a usage line.
    """
    args = p.parse_args(argv)
    for name in positive:
        if getattr(args, name) <= 0:
            p.error(f"--{name} must be > 0, not {getattr(args, name)}")
    if not (0 < args.size_factor < 1e6):
        p.error(f"--size-factor must be a number > 0, not {args.size_factor}")
    if args.bitflip is not None:
        try:
            args.bitflip = BitFlips.parse(args.bitflip)
        except ValueError as exc:
            p.error(str(exc))
    if args.ranks_per_node is not None and args.ranks_per_node <= 0:
        p.error(f"--ranks-per-node must be > 0, not {args.ranks_per_node}")
    return args


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


# ------------------------------------------------------------------------------ messages


def say(message: str, *, prog: str, rank: int) -> None:
    """One line on stderr, from rank 0 only (every rank meets the same errors)."""
    if rank == 0:
        print(f"{prog}: {message}", file=sys.stderr, flush=True)


@contextmanager
def quiet(rank: int) -> Iterator[None]:
    """Silence ranks other than 0 (argparse's usage, help and errors: once, not per rank)."""
    if rank == 0:
        yield
        return
    with open(os.devnull, "w") as null, redirect_stdout(null), redirect_stderr(null):
        yield


def fail(message: str, *, prog: str, rank: int, code: int) -> int:
    """Say ``error: message``; the exit status ``code``."""
    say(f"error: {message}", prog=prog, rank=rank)
    return code


def report_recovery(info: RecoveryInfo | None, *, prog: str, rank: int) -> None:
    """Say on stderr what the restart restored and which newer checkpoints it passed over."""
    if info is None:
        say("no checkpoint: starting from the beginning", prog=prog, rank=rank)
        return
    say(
        f"restored checkpoint {info.id} (level {info.level}, iteration {info.iteration}) "
        f"in {info.seconds:.3f} s",
        prog=prog,
        rank=rank,
    )
    for reason in info.skipped:
        say(f"  skipped {reason}", prog=prog, rank=rank)
    if info.rebuilt:
        rebuilt = list(info.rebuilt)
        say(f"  rebuilt the files of ranks {rebuilt} from redundancy", prog=prog, rank=rank)


# ------------------------------------------------------------------------------ running


def run_app(
    prog: str,
    argv: Sequence[str] | None,
    parse_args: Callable[[Sequence[str] | None], argparse.Namespace],
    run: Callable[[argparse.Namespace, Comm], int],
) -> int:
    """An application's ``main``: parse the options (rank 0 alone speaks), ``run`` them on
    the world communicator, and turn an :class:`AppError` into its message and exit status."""
    comm = world()
    with quiet(comm.rank):
        args = parse_args(argv)
    try:
        return run(args, comm)
    except AppError as exc:
        return fail(exc.message, prog=prog, rank=comm.rank, code=exc.code)


class NoCheckpoints:
    """What :func:`run_iterations` uses in place of a :class:`Checkpointer` under
    ``--no-checkpoint``: nothing is protected, written, restored or announced, so the run is
    the application alone (a study's baseline)."""

    def __init__(self) -> None:
        self.state: dict[str, Any] = {}
        self.set_aside: tuple[Path, ...] = ()
        self.history: tuple[CheckpointInfo, ...] = ()

    def protect(self, name: str, array: Any) -> None:
        """Nothing is protected."""

    def recover(self) -> RecoveryInfo | None:
        """Nothing to restore."""
        return None

    def need_checkpoint(self, iteration: int) -> int | None:
        """Never."""
        return None

    def checkpoint(self, level: int, *, iteration: int) -> None:
        """Never called (need_checkpoint says never)."""

    def finalize(self) -> None:
        """Nothing to finish."""


@dataclass
class BitFlips:
    """``--bitflip POS/EVERY``: flip bit ``pos`` (1-based from the lowest bit of a float64)
    of one value of rank 0's data every ``every`` seconds of the run (wu2018's injection:
    a position and a frequency). The run goes on with the changed value: the injection
    measures the cost of the faults, not their detection."""

    pos: int
    every: float
    done: int = 0
    _last: float = 0.0

    @staticmethod
    def parse(text: str) -> BitFlips:
        """``"1/10s"`` (or ``1/10``): position 1..64, seconds > 0."""
        match = re.fullmatch(r"\s*(\d+)\s*/\s*([0-9.]+(?:[eE][-+]?\d+)?)\s*s?\s*", text)
        if match is None:
            raise InvalidValueError(f"--bitflip must be POS/EVERY, e.g. 1/10s, not {text!r}")
        pos, every = int(match[1]), float(match[2])
        if not 1 <= pos <= 64 or not every > 0:
            raise InvalidValueError(
                f"--bitflip {text!r}: the position must be 1..64 and the period > 0 seconds"
            )
        return BitFlips(pos, every, _last=time.monotonic())

    def maybe_flip(self, data: npt.NDArray[np.float64]) -> None:
        """Flip when the period has passed (the value in the middle of ``data``)."""
        now = time.monotonic()
        if now - self._last < self.every or data.size == 0:
            return
        self._last = now
        words = data.reshape(-1).view(np.uint64)
        words[(words.size // 2 + 1) % words.size] ^= np.uint64(1 << (self.pos - 1))
        self.done += 1


def open_checkpointer(args: argparse.Namespace, comm: Comm) -> Checkpointer | NoCheckpoints:
    """The :class:`Checkpointer` the options (and the TOML file, the environment) configure
    (:class:`NoCheckpoints` under ``--no-checkpoint``); a bad setting or directory is an
    :class:`AppError` with exit status 2."""
    if args.no_checkpoint:
        return NoCheckpoints()
    try:
        return Checkpointer(args.config, comm=comm, **checkpoint_settings(args, os.environ))
    except ValueError as exc:  # ConfigError, StoreError: a bad setting or directory
        raise AppError(str(exc), code=2) from exc


@dataclass(frozen=True)
class Outcome:
    """What :func:`run_iterations` did with the checkpoints: the result's common entries."""

    restored: RecoveryInfo | None
    """The checkpoint the run started from (None: from the beginning)."""
    history: Sequence[CheckpointInfo]
    """The checkpoints this run committed."""
    failed: int
    """Checkpoints that failed (on every rank) while the run computed on."""
    bitflips: int = 0
    """Bit flips injected (``--bitflip``) on this rank."""

    def json(self) -> dict[str, Any]:
        """The result's ``restored``, ``checkpoints``, ``checkpointed`` and
        ``failed_checkpoints`` entries, in that order."""
        return {
            "restored": restored_json(self.restored),
            "checkpoints": len(self.history),
            "checkpointed": [{"iteration": c.iteration, "level": c.level} for c in self.history],
            "failed_checkpoints": self.failed,
            "bitflips": self.bitflips,
        }


def run_iterations(
    ck: Checkpointer | NoCheckpoints,
    iterations: int,
    step: Callable[[], None],
    *,
    prog: str,
    rank: int,
    reset: Callable[[], None] | None = None,
    flips: tuple[BitFlips, npt.NDArray[np.float64]] | None = None,
) -> Outcome:
    """Recover, then call ``step`` for each iteration not done yet, with checkpoints; finalize.

    The arrays must be protected already; ``state["it"]`` (completed iterations) is protected
    here. After each ``step``, ``maybe_fail("compute", ...)`` lets a test kill a rank after it
    computed a given iteration (``GREENCKPT_INJECT=kill@compute:rank=2,iteration=120``). A
    failed checkpoint is a warning: the older checkpoints are intact, so the run computes on.
    Raises :class:`AppError` (1) when checkpoints exist but none can be restored, and (2) when
    the restored one is past ``iterations``.

    The way out of unrestorable checkpoints is the ``on_unrecoverable = "fresh"`` setting
    (``GREENCKPT_ON_UNRECOVERABLE=fresh``): recovery moves them aside and the run starts from
    the beginning. The failed reads may have left parts of their data in the protected
    arrays, so ``reset`` (which puts them back to their initial values) is called then;
    without one the run stops (1) instead of computing from such data, and the next run,
    finding no checkpoint, starts afresh.
    """
    ck.state["it"] = 0
    try:
        info = ck.recover()
    except RecoveryError as exc:
        message = (
            f"{exc}; to move them aside and start afresh, run again with "
            'GREENCKPT_ON_UNRECOVERABLE=fresh (or on_unrecoverable = "fresh" in [checkpoint])'
        )
        raise AppError(message, code=1) from exc
    if info is None and ck.set_aside:
        where = ", ".join(map(str, ck.set_aside))
        if reset is None:
            ck.finalize()
            message = (
                f"the checkpoints that could not be restored were moved aside to {where}; the "
                "data may hold parts of the failed reads: run again to start afresh"
            )
            raise AppError(message, code=1)
        reset()
        say(f"moved unrestorable checkpoints aside to {where}", prog=prog, rank=rank)
    report_recovery(info, prog=prog, rank=rank)
    start: int = ck.state["it"]
    if start > iterations:  # the result would claim fewer iterations than its data had
        ck.finalize()
        message = f"the checkpoint is at iteration {start}, past --iterations {iterations}"
        raise AppError(message, code=2)

    failed = 0
    for it in range(start + 1, iterations + 1):
        step()
        if flips is not None and rank == 0:
            flips[0].maybe_flip(flips[1])
        maybe_fail("compute", rank=rank, iteration=it)
        ck.state["it"] = it
        level = ck.need_checkpoint(it)
        if level is not None:
            try:
                ck.checkpoint(level, iteration=it)
            except CheckpointError as exc:  # on every rank; the older checkpoints are intact
                failed += 1
                say(f"warning: {exc}; computing on", prog=prog, rank=rank)
    ck.finalize()
    return Outcome(info, ck.history, failed, flips[0].done if flips is not None else 0)


# ------------------------------------------------------------------------------ the result


def restored_json(info: RecoveryInfo | None) -> dict[str, int | None] | None:
    """The ``restored`` entry of the result."""
    if info is None:
        return None
    return {"id": info.id, "level": info.level, "iteration": info.iteration}


def digest(data: npt.NDArray[np.float64]) -> str:
    """The result's ``digest``: xxh3_64 of the gathered data's bytes, in hexadecimal.

    Why a digest: a restarted run is correct when it ends with the very bits of a
    failure-free one, and one short string is easy to compare across runs and files.
    """
    return xxhash.xxh3_64(data.tobytes()).hexdigest()


def write_result(result: Mapping[str, Any], path: Path | None) -> None:
    """Write ``result`` to ``path`` (indented, when given) and print it as one JSON line."""
    if path is not None:
        path.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result), flush=True)
