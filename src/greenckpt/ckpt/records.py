"""What a checkpoint and a recovery return or raise: the records users read and the errors
they catch (re-exported by :mod:`greenckpt.ckpt.api` and :mod:`greenckpt.ckpt`)."""

from __future__ import annotations

from dataclasses import dataclass

from greenckpt.errors import GreenckptError

__all__ = ["CheckpointError", "CheckpointInfo", "RecoveryError", "RecoveryInfo"]


class CheckpointError(GreenckptError, RuntimeError):
    """A checkpoint failed on some rank; nothing of it was committed, older ones are intact."""


class RecoveryError(GreenckptError, RuntimeError):
    """Checkpoints exist but none could be restored; the message says why for each."""


@dataclass(frozen=True)
class CheckpointInfo:
    """A committed checkpoint, as seen by this rank."""

    id: int
    level: int
    iteration: int | None
    seconds: float
    """Wall time of the whole collective checkpoint on this rank (write, agree, commit)."""
    logical_bytes: int
    """This rank's protected bytes."""
    stored_bytes: int
    """This rank's bytes on storage (fewer with a codec)."""
    flushing: bool = False
    """Level 4 with ``async``: the data are committed on node-local storage and being copied
    to the global file system in the background; the level-4 copy is committed at a later API
    call once every rank's copy is durable (then :attr:`Checkpointer.history` gets an entry
    with ``flushing=False`` and the flush's duration)."""


@dataclass(frozen=True)
class RecoveryInfo:
    """The checkpoint a recovery restored, and why newer ones were passed over."""

    id: int
    level: int
    iteration: int | None
    seconds: float
    skipped: tuple[str, ...]
    rebuilt: tuple[int, ...] = ()
    """Ranks whose files were rebuilt from partner copies or parity (levels 2 and 3)."""
