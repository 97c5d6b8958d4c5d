"""The protected data of one rank: named arrays and buffers, plus a small picklable state.

Why it is separate from the checkpoint protocol: what a rank saves, in which order, and how a
restart checks that the application still has the same data (names, kinds, dtypes, shapes)
is a self-contained question. Arrays and buffers are never copied — the write streams from
them and the restart reads straight back into them — so they must be C-contiguous, and
writable for recovery. The state (an iteration counter, a random generator's state) is
pickled at each checkpoint and replaced on recovery.

Protected arrays are saved and restored *in place*: recovery writes into the very objects
given to :meth:`Protected.add`. An application that swaps arrays by rebinding names
(``u_prev, u_curr = u_curr, u_prev``) changes which object holds which data without telling
the checkpointer, so a restart would put each array's data into the other one. Copy in place
(``u_prev[...] = u_curr``) or protect the objects again after a swap.

The pickled state also records which checkpoint it belongs to (:class:`Identity`: job name,
checkpoint id, iteration). The rank file's digest covers it, so recovery can check the
manifest's ``name``/``id``/``iteration`` against the data it restores: a manifest that says
iteration 111 over data written at iteration 110 is caught even if its own digest was
recomputed.
"""

from __future__ import annotations

import pickle
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from greenckpt.ckpt.manifest import Variable, VariableKind
from greenckpt.errors import GreenckptError, InvalidValueError
from greenckpt.io import as_bytes_view
from greenckpt.io.checksum import new_hasher

__all__ = [
    "STATE_NAME",
    "Identity",
    "IdentityMismatchError",
    "Protected",
    "Slot",
    "describe_mismatch",
    "unpack_state",
]

STATE_NAME = "__state__"
"""The variable holding the pickled state (last in every rank's stream)."""

_STATE_TAG = "greenckpt-state-v2"
"""First element of the pickled ``(tag, identity, state)`` triple; a plain dictionary is the
state of a checkpoint written before identities were recorded."""

DIGEST_BLOCK = 256 * 1024
"""Bytes hashed into both digests at a time: small enough to stay in a core's L2 cache between
the two updates."""


@dataclass(frozen=True)
class Identity:
    """Which checkpoint a rank's data belong to, as recorded in its state blob: what the
    manifest also says, so each can be checked against the other. The level is not recorded:
    one checkpoint's data are shared by its copies at several levels (an asynchronous level-4
    flush, a rebuilt level-2/3 file), and the directory holding a copy says its level."""

    name: str
    id: int
    iteration: int | None

    def describe(self) -> str:
        """``checkpoint 12 of job 'heat' at iteration 110``."""
        return f"checkpoint {self.id} of job {self.name!r} at iteration {self.iteration}"


class IdentityMismatchError(GreenckptError, ValueError):
    """The data restored belong to another checkpoint than the manifest says."""


@dataclass(frozen=True)
class Slot:
    """One variable about to be written or read: its description and its bytes."""

    name: str
    kind: VariableKind
    dtype: str | None
    shape: tuple[int, ...] | None
    view: memoryview


class Protected:
    """Named buffers in registration order, and the state dictionary."""

    def __init__(self) -> None:
        self._objects: dict[str, Any] = {}
        self.state: dict[str, Any] = {}
        self.identity: Identity | None = None
        """Recorded with the state at the next write (set by the checkpointer per
        checkpoint); None records none, like versions before identities existed."""

    def add(self, name: str, obj: Any) -> None:
        """Protect ``obj`` (a NumPy array or any buffer-protocol object) under ``name``.

        Protecting a name again replaces the object (arrays reallocated by the application).
        """
        if not isinstance(name, str) or not name or name == STATE_NAME:
            raise InvalidValueError(f"a protected name must be a non-empty string, not {name!r}")
        if isinstance(obj, np.ndarray):
            if obj.dtype.hasobject:
                raise InvalidValueError(f"{name}: arrays of Python objects cannot be checkpointed")
            if not obj.flags.c_contiguous:
                raise InvalidValueError(
                    f"{name}: the array is not C-contiguous; protect numpy.ascontiguousarray(...)"
                )
        else:
            try:
                as_bytes_view(obj)
            except (TypeError, ValueError) as exc:
                raise InvalidValueError(
                    f"{name}: protect a NumPy array or a buffer (bytearray, memoryview…), "
                    f"not {type(obj).__name__} ({exc}); put small values in .state"
                ) from None
        self._objects[name] = obj

    def remove(self, name: str) -> None:
        """Stop protecting ``name``."""
        self._objects.pop(name, None)

    @property
    def nbytes(self) -> int:
        """Bytes of the protected buffers (the state, small and pickled at write, excluded)."""
        return sum(as_bytes_view(obj).nbytes for obj in self._objects.values())

    @property
    def names(self) -> tuple[str, ...]:
        """Protected names, in stream order."""
        return tuple(self._objects)

    def slots(self, *, for_write: bool) -> list[Slot]:
        """The variables in stream order, the pickled state last."""
        out = []
        for name, obj in self._objects.items():
            if isinstance(obj, np.ndarray):
                view = as_bytes_view(obj, writable=not for_write)
                out.append(Slot(name, "array", obj.dtype.str, tuple(obj.shape), view))
            else:
                view = as_bytes_view(obj, writable=not for_write)
                out.append(Slot(name, "buffer", None, None, view))
        if for_write:
            blob: Any = self.state
            if self.identity is not None:
                who = self.identity
                blob = (
                    _STATE_TAG,
                    {"name": who.name, "id": who.id, "iteration": who.iteration},
                    self.state,
                )
            state = pickle.dumps(blob, protocol=pickle.HIGHEST_PROTOCOL)
            out.append(Slot(STATE_NAME, "state", None, None, memoryview(state)))
        return out

    def variables(self, slots: list[Slot], checksum: str) -> tuple[tuple[Variable, ...], str]:
        """Manifest entries of ``slots`` (offsets in stream order, digests of their bytes as
        they are read here) and the digest of their whole stream, in one pass over memory.

        The stream digest is what the data file's digest must be when it is stored without a
        codec: a checkpoint compares the two, so memory that changed while it was written is
        caught then (each block of a later variable is hashed twice while it is in cache, so
        the second digest costs little next to reading the memory once).
        """
        digests = []
        stream = new_hasher(checksum)
        for i, s in enumerate(slots):
            n = len(s.view)
            # The first variable starts the stream, so the stream's digest at its end is its
            # own: its bytes (often nearly all of them, one large array) are hashed once.
            var = stream if i == 0 else new_hasher(checksum)
            for pos in range(0, n, DIGEST_BLOCK):
                block = s.view[pos : pos + DIGEST_BLOCK]
                var.update(block)
                if var is not stream:
                    stream.update(block)
            digests.append(var.hexdigest())
        return self.describe(slots, digests), stream.hexdigest()

    @staticmethod
    def describe(slots: list[Slot], digests: list[str]) -> tuple[Variable, ...]:
        """Manifest entries of ``slots`` with their ``digests`` (offsets in stream order)."""
        out = []
        offset = 0
        for s, digest in zip(slots, digests, strict=True):
            n = len(s.view)
            out.append(Variable(s.name, s.kind, s.dtype, s.shape, offset, n, digest))
            offset += n
        return tuple(out)

    def read_slots(self, variables: tuple[Variable, ...]) -> tuple[list[memoryview], bytearray]:
        """Where a restart puts each recorded variable: the protected buffers, then a fresh
        buffer for the state. Call :func:`describe_mismatch` first."""
        state = bytearray(
            variables[-1].nbytes if variables and variables[-1].kind == "state" else 0
        )
        views = [s.view for s in self.slots(for_write=False)]
        return [*views, memoryview(state)], state

    def load_state(self, raw: bytes | bytearray, expected: Identity | None = None) -> None:
        """Replace the state with the recovered one.

        ``expected``: the checkpoint the manifest describes; the state must record the same
        one (:class:`IdentityMismatchError` otherwise, and the state is left as it was). A state
        without a record (written before records existed) passes only with ``expected=None``.
        """
        recorded, state = unpack_state(raw)
        if expected is not None and recorded != expected:
            found = "no record of its checkpoint" if recorded is None else recorded.describe()
            raise IdentityMismatchError(
                f"the manifest describes {expected.describe()}, the data hold {found}"
            )
        self.state = state

    def check(self, variables: tuple[Variable, ...]) -> str | None:
        """Why this checkpoint's variables cannot be restored into the protected data, or None."""
        return describe_mismatch(self.slots(for_write=False), variables)


def unpack_state(raw: bytes | bytearray) -> tuple[Identity | None, dict[str, Any]]:
    """The identity (None if not recorded) and the state dictionary of a state blob."""
    blob = pickle.loads(raw) if raw else {}
    identity = None
    if isinstance(blob, tuple) and len(blob) == 3 and blob[0] == _STATE_TAG:
        _, who, blob = blob
        if not (
            isinstance(who, dict)
            and isinstance(who.get("name"), str)
            and isinstance(who.get("id"), int)
            and (who.get("iteration") is None or isinstance(who.get("iteration"), int))
        ):
            raise InvalidValueError("the recovered state's checkpoint record is malformed")
        identity = Identity(who["name"], who["id"], who["iteration"])
    if not isinstance(blob, dict):
        raise InvalidValueError("the recovered state is not a dictionary")
    return identity, blob


def describe_mismatch(slots: list[Slot], variables: tuple[Variable, ...]) -> str | None:
    """One line on the first difference between protected data and a checkpoint's, or None."""
    recorded = [v for v in variables if v.kind != "state"]
    have: Mapping[str, Slot] = {s.name: s for s in slots}
    names = [v.name for v in recorded]
    if names != [s.name for s in slots]:
        return (
            f"the protected names differ: the checkpoint has {names}, the application "
            f"protects {[s.name for s in slots]}"
        )
    for v in recorded:
        s = have[v.name]
        if v.kind != s.kind:
            return f"{v.name} was a {v.kind} at checkpoint and is a {s.kind} now"
        if v.kind == "array" and (v.dtype != s.dtype or v.shape != s.shape):
            return (
                f"{v.name} was {v.dtype} of shape {v.shape} at checkpoint and is {s.dtype} of "
                f"shape {s.shape} now: protect an array of the same shape and dtype"
            )
        if v.nbytes != len(s.view):
            return f"{v.name} held {v.nbytes} B at checkpoint and holds {len(s.view)} B now"
    return None
