"""Failure injection: kill or exit a rank at a chosen point, corrupt data, lose a node's storage.

Why: a checkpoint library is only trustworthy if it has been seen to recover from the failures
it claims to survive, injected deliberately at named points of its own code paths. Process
failures follow a plan in ``GREENCKPT_INJECT`` (:data:`ENV`), e.g.
``kill@compute:rank=2,iteration=7;exit@checkpoint-write:rank=1,hit=2,code=3``, checked by
:func:`maybe_fail` (one cached check when unset); data failures are functions a test calls
(:func:`flip_bits_in_file`, :func:`flip_bits_in_buffer`, :func:`erase_node_storage`). The
plan's syntax and rules: docs/design/checkpointer.md.
"""

from __future__ import annotations

import contextlib
import operator
import os
import random
import re
import shutil
import signal
import sys
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, Literal

from greenckpt.errors import GreenckptError, InvalidValueError

__all__ = [
    "ENV",
    "POINTS",
    "Fault",
    "InjectError",
    "active_plan",
    "erase_node_storage",
    "flip_bits_in_buffer",
    "flip_bits_in_file",
    "maybe_fail",
    "parse_plan",
    "reset",
]

ENV: Final = "GREENCKPT_INJECT"
"""The environment variable holding the fault plan (unset or blank: no process failures)."""

POINTS: Final = ("compute", "checkpoint-write", "checkpoint-commit", "restart-read", "flush")
"""Where the library calls :func:`maybe_fail`: the phases a failure can interrupt."""

ACTIONS: Final = ("kill", "exit")
KEYS: Final = ("rank", "iteration", "hit", "code")
SYNTAX: Final = (
    "syntax: ACTION@POINT[:key=value,...] separated by ';', e.g. "
    "'kill@compute:rank=2,iteration=7;exit@checkpoint-write:rank=1,hit=2,code=3'"
)
MAX_EXIT_CODE: Final = 255
"""Exit statuses are one byte: ``os._exit(256)`` would look like a success."""

_POINT_SET: Final = frozenset(POINTS)
_UINT: Final = re.compile(r"[0-9]+")


class InjectError(GreenckptError, ValueError):
    """A fault plan that cannot be parsed; the one-line message names the bad token, the
    valid choices and the syntax."""


@dataclass(frozen=True)
class Fault:
    """One planned process failure: what to do, where, and which call triggers it."""

    action: Literal["kill", "exit"]
    """``kill``: SIGKILL this process; ``exit``: ``os._exit(code)``."""
    point: str
    """One of :data:`POINTS`."""
    rank: int | None = None
    """The rank that fails; None: every rank."""
    iteration: int | None = None
    """Fire only when :func:`maybe_fail` is called with this iteration."""
    hit: int | None = None
    """Fire on the hit-th matching call of a rank (1-based); None: the first."""
    code: int = 1
    """The exit status for ``exit``."""

    def __post_init__(self) -> None:
        # Faults built in Python (not parsed) get the same checks, so a typo in a test's fault
        # fails loudly instead of injecting nothing.
        if self.action not in ACTIONS:
            raise InjectError(
                f"unknown action {self.action!r}: valid actions: {', '.join(ACTIONS)}"
            )
        if self.point not in _POINT_SET:
            raise InjectError(f"unknown point {self.point!r}: valid points: {', '.join(POINTS)}")
        for key in ("rank", "iteration"):
            value = getattr(self, key)
            if value is not None and value < 0:
                raise InjectError(f"{key} must be an integer >= 0, not {value}")
        if self.hit is not None and self.hit < 1:
            raise InjectError(f"hit must be an integer >= 1, not {self.hit}")
        if not 0 <= self.code <= MAX_EXIT_CODE:
            raise InjectError(f"code must be an integer from 0 to {MAX_EXIT_CODE}, not {self.code}")

    def matches(self, point: str, rank: int, iteration: int | None) -> bool:
        """Whether a call at ``point`` by ``rank`` at ``iteration`` counts towards this fault."""
        return (
            self.point == point
            and (self.rank is None or self.rank == rank)
            and (self.iteration is None or self.iteration == iteration)
        )

    def __str__(self) -> str:
        """The fault in plan syntax (what :func:`parse_plan` reads back)."""
        keys = [
            f"{k}={v}"
            for k, v in (("rank", self.rank), ("iteration", self.iteration), ("hit", self.hit))
            if v is not None
        ]
        if self.action == "exit" and self.code != 1:
            keys.append(f"code={self.code}")
        return f"{self.action}@{self.point}" + (":" + ",".join(keys) if keys else "")


# ---------------------------------------------------------------------- parsing


def _parse_fault(text: str) -> Fault:
    where = f"in fault {text!r}"
    head, sep, options = text.partition(":")
    action, at, point = (s.strip() for s in head.partition("@"))
    if not at:
        raise InjectError(f"fault {text!r} has no '@POINT'; {SYNTAX}")
    if action not in ACTIONS:
        raise InjectError(
            f"unknown action {action!r} {where}: valid actions: {', '.join(ACTIONS)}; {SYNTAX}"
        )
    if point not in _POINT_SET:
        raise InjectError(
            f"unknown point {point!r} {where}: valid points: {', '.join(POINTS)}; {SYNTAX}"
        )
    values: dict[str, int] = {}
    if sep:
        for item in options.split(","):
            key, eq, raw = (s.strip() for s in item.partition("="))
            if not eq:
                raise InjectError(
                    f"option {item.strip()!r} is not key=value {where}: valid keys: "
                    f"{', '.join(KEYS)}; {SYNTAX}"
                )
            if key not in KEYS:
                raise InjectError(
                    f"unknown key {key!r} {where}: valid keys: {', '.join(KEYS)}; {SYNTAX}"
                )
            if key in values:
                raise InjectError(f"key {key!r} is given twice {where}; {SYNTAX}")
            if not _UINT.fullmatch(raw):
                raise InjectError(
                    f"{key}={raw!r} {where}: {key} must be an integer >= "
                    f"{1 if key == 'hit' else 0}; {SYNTAX}"
                )
            values[key] = int(raw)
    if "code" in values and action != "exit":
        raise InjectError(f"code applies only to action 'exit' {where}; {SYNTAX}")
    try:
        return Fault(
            "kill" if action == "kill" else "exit",
            point,
            rank=values.get("rank"),
            iteration=values.get("iteration"),
            hit=values.get("hit"),
            code=values.get("code", 1),
        )
    except InjectError as exc:  # out-of-range values: say which fault
        raise InjectError(f"{exc} {where}; {SYNTAX}") from None


def parse_plan(text: str) -> tuple[Fault, ...]:
    """The faults of a plan (see the module docstring); ``()`` for blank text.

    Raises :class:`InjectError` on anything malformed — including an empty fault between two
    ``;`` — because a plan that is silently partly ignored makes a failure test meaningless.
    """
    if not text.strip():
        return ()
    faults = []
    for i, part in enumerate(text.split(";")):
        if not part.strip():
            raise InjectError(f"fault {i + 1} of plan {text!r} is empty; {SYNTAX}")
        faults.append(_parse_fault(part.strip()))
    return tuple(faults)


# ---------------------------------------------------------------------- process failures

_plan: tuple[Fault, ...] | None = None
"""The cached plan; None until first read (or after :func:`reset` without a plan)."""
_counts: dict[tuple[int, int], int] = {}
"""Matching calls so far, per (fault index, rank)."""
_lock: Final = threading.Lock()


def active_plan() -> tuple[Fault, ...]:
    """The plan in force: parsed once from ``$GREENCKPT_INJECT`` and cached (empty when unset
    or blank), or the one installed by :func:`reset`.

    Caching is what makes :func:`maybe_fail` nearly free; the price is that changing the
    environment variable inside a running process has no effect until :func:`reset`.
    """
    global _plan  # noqa: PLW0603 - the process-wide cache is the point
    plan = _plan
    if plan is None:
        text = os.environ.get(ENV, "")
        try:
            plan = parse_plan(text)
        except InjectError as exc:
            raise InjectError(f"{ENV}={text!r}: {exc}") from None
        _plan = plan
    return plan


def reset(plan: str | None = None) -> None:
    """Forget the cached plan and the hit counters (for tests).

    With ``plan``, install that plan text instead of reading the environment, so in-process
    tests need not touch ``os.environ``; without it, the next call re-reads :data:`ENV`.
    """
    global _plan  # noqa: PLW0603 - the process-wide cache is the point
    parsed = None if plan is None else parse_plan(plan)
    with _lock:
        _plan = parsed
        _counts.clear()


def maybe_fail(point: str, *, rank: int, iteration: int | None = None) -> None:
    """Die here if the plan says so; otherwise return at once.

    The library calls this at each of :data:`POINTS`. An unknown ``point`` is a programming
    error (:class:`ValueError`), checked even without a plan so that a misspelt point cannot
    hide until someone plans a fault there.
    """
    plan = _plan if _plan is not None else active_plan()
    if point not in _POINT_SET:
        raise InvalidValueError(
            f"unknown injection point {point!r}: valid points: {', '.join(POINTS)}"
        )
    if not plan:
        return
    fire = None
    with _lock:  # ranks emulated by threads share the counters
        for index, fault in enumerate(plan):
            if not fault.matches(point, rank, iteration):
                continue
            count = _counts.get((index, rank), 0) + 1
            _counts[index, rank] = count
            if fire is None and (fault.hit is None or fault.hit == count):
                fire = (fault, count)
    if fire is not None:
        _fire(fire[0], rank, iteration, fire[1])


def _fire(fault: Fault, rank: int, iteration: int | None, count: int) -> None:
    """Announce the deliberate failure on stderr, then kill or exit this process."""
    where = f"at {fault.point}"
    details = []
    if iteration is not None:
        details.append(f"iteration {iteration}")
    if fault.hit is not None:
        details.append(f"hit {count}")
    if details:
        where += f" ({', '.join(details)})"
    if fault.action == "kill":
        line = f"greenckpt.inject: killing rank {rank} {where}\n"
    else:
        line = f"greenckpt.inject: exiting rank {rank} with code {fault.code} {where}\n"
    for stream in (sys.stdout, sys.stderr):
        if stream is not None:
            with contextlib.suppress(Exception):
                stream.flush()
    # Straight to file descriptor 2: nothing buffered is lost when the process dies next.
    with contextlib.suppress(OSError):
        os.write(2, line.encode())
    if fault.action == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    else:
        os._exit(fault.code)


# ---------------------------------------------------------------------- data failures


def _bit_positions(
    nbits: int,
    what: str,
    count: int,
    positions: Sequence[int] | None,
    seed: int | None,
) -> list[int]:
    """Validated, sorted, distinct bit positions in ``0 … nbits-1``."""
    if nbits == 0:
        raise InvalidValueError(f"{what} is empty: there is no bit to flip")
    if positions is None:
        if not 1 <= count <= nbits:
            raise InvalidValueError(
                f"count must be from 1 to {nbits} (the size of {what} in bits), not {count}"
            )
        # random.sample over a range draws distinct positions without building the range.
        return sorted(random.Random(seed).sample(range(nbits), count))
    chosen = [operator.index(p) for p in positions]
    if not chosen:
        raise InvalidValueError("positions is empty: give at least one bit position")
    if count not in (1, len(chosen)):
        raise InvalidValueError(
            f"count={count} disagrees with {len(chosen)} positions: give one or the other"
        )
    bad = [p for p in chosen if not 0 <= p < nbits]
    if bad:
        raise InvalidValueError(
            f"bit position {bad[0]} is outside {what}, which holds {nbits} bits "
            f"(positions 0 to {nbits - 1})"
        )
    if len(set(chosen)) != len(chosen):
        raise InvalidValueError(
            "bit positions repeat: flipping a bit twice would leave it unchanged"
        )
    return sorted(chosen)


def _masks(bits: list[int]) -> dict[int, int]:
    """Byte offset → XOR mask (bit index = byte * 8 + bit, bit 0 the least significant)."""
    masks: dict[int, int] = {}
    for b in bits:
        masks[b // 8] = masks.get(b // 8, 0) | (1 << (b % 8))
    return masks


def flip_bits_in_file(
    path: str | os.PathLike[str],
    *,
    count: int = 1,
    positions: Sequence[int] | None = None,
    seed: int | None = None,
) -> list[int]:
    """Flip ``count`` distinct random bits (or exactly ``positions``) of a file, in place.

    Emulates silent corruption on storage, which a restart must detect by its digests and
    never restore from. Bit index = byte offset * 8 + bit (bit 0 the least significant);
    ``seed`` makes the random choice reproducible. The file is changed with ``pwrite`` and
    fsynced, so a reader in another process sees the corruption. Returns the flipped bit
    positions, sorted.
    """
    fd = os.open(path, os.O_RDWR | os.O_CLOEXEC)
    try:
        size = os.fstat(fd).st_size
        bits = _bit_positions(size * 8, f"file {os.fspath(path)}", count, positions, seed)
        for offset, mask in _masks(bits).items():
            old = os.pread(fd, 1, offset)
            os.pwrite(fd, bytes([old[0] ^ mask]), offset)
        os.fsync(fd)
    finally:
        os.close(fd)
    return bits


def flip_bits_in_buffer(
    obj: Any,
    *,
    count: int = 1,
    positions: Sequence[int] | None = None,
    seed: int | None = None,
) -> list[int]:
    """Flip ``count`` distinct random bits (or exactly ``positions``) of a buffer in memory.

    Emulates corruption of protected data in memory (a bit flip in RAM), so a test can check
    what a checkpoint or a verification makes of it. ``obj`` is a writable C-contiguous buffer
    (a NumPy array, ``bytearray``, ``memoryview``, ...): what
    :meth:`~greenckpt.ckpt.api.Checkpointer.protect` accepts, seen through the same buffer
    protocol, counted byte by byte in memory order as :func:`flip_bits_in_file` counts a file.
    Returns the flipped bit positions, sorted.
    """
    try:
        view = memoryview(obj)
    except (TypeError, ValueError) as exc:  # ValueError: NumPy dtypes without a buffer format
        raise InvalidValueError(
            f"{type(obj).__name__} is not a buffer ({exc}): pass a NumPy array, bytearray or "
            "memoryview"
        ) from None
    if view.readonly:
        raise InvalidValueError(
            f"the {type(obj).__name__} is read-only: bits can be flipped only in writable memory"
        )
    if not view.c_contiguous:
        raise InvalidValueError("the buffer is not C-contiguous: pass numpy.ascontiguousarray(...)")
    raw = view.cast("B") if view.format != "B" or view.ndim != 1 else view
    bits = _bit_positions(raw.nbytes * 8, "the buffer", count, positions, seed)
    for offset, mask in _masks(bits).items():
        raw[offset] ^= mask
    return bits


def erase_node_storage(local_dir: str | os.PathLike[str], node: int | None = None) -> list[Path]:
    """Delete what node-local checkpoint storage holds, as if the node had died with its disk.

    With ``node``, the emulated node's directory ``local_dir/node<k>`` (see
    :meth:`greenckpt.ckpt.topology.Topology.local_base`) is emptied but kept, as a replacement
    node would find it: restart must then fall back to a level that survived. With ``node``
    None, everything inside ``local_dir`` goes (every node lost, or one real host's disk).
    Returns the removed paths (the directory's entries), sorted.
    """
    base = Path(os.path.expanduser(os.fspath(local_dir)))
    if node is not None:
        if node < 0:
            raise InvalidValueError(f"node must be an integer >= 0, not {node}")
        base = base / f"node{node}"
    if not base.is_dir():
        what = "is not a directory" if base.exists() else "does not exist"
        raise InvalidValueError(f"node-local storage {base} {what}: nothing to erase")
    removed = sorted(base.iterdir())
    for entry in removed:
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry)
        else:
            entry.unlink()
    return removed
