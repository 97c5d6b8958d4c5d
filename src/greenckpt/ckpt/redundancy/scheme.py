"""What a redundancy scheme is to the rest of the library: :class:`Redundancy` and its factory.

Why a module of its own: the level registry (:mod:`greenckpt.ckpt.levels`) stores each scheme's
factory, the configuration checks a level's settings against that registry, and the schemes
(:mod:`greenckpt.ckpt.redundancy.builtin`) register themselves in it; the interface they share
lives here, below the registry and the schemes, so that neither imports the other for it. Only
types: nothing here runs.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, TypeAlias, runtime_checkable

if TYPE_CHECKING:
    from greenckpt.ckpt.comm import Comm
    from greenckpt.ckpt.config.result import LevelConfig
    from greenckpt.ckpt.manifest.document import Manifest, RankEntry
    from greenckpt.ckpt.topology import Topology
    from greenckpt.ckpt.transfer import InMemory

__all__ = ["ReadsMemory", "Rebuilt", "Redundancy", "SchemeFactory"]

Rebuilt = list[tuple[Path, Path]]
"""(temporary file, final file) pairs this rank wrote during a rebuild."""


class Redundancy(Protocol):
    """What a level adds to its rank files so that lost ones can be rebuilt (see
    :mod:`greenckpt.ckpt.redundancy.builtin`). Every method but ``extra_bytes`` and ``extra_files``
    is collective."""

    @property
    def rebuilds(self) -> bool:
        """Whether lost rank files can be rebuilt: then a checkpoint is a recovery candidate
        when *any* node holds it, else only when every node does."""
        ...

    def encode(
        self, stage: Path, entries: Sequence[RankEntry]
    ) -> tuple[dict[str, Any], str | None]:
        """Make the redundant files in ``stage`` (collective): the manifest's ``redundancy``
        object, or the first rank's error (the same on every rank)."""
        ...

    def extra_bytes(self, sizes: Sequence[int]) -> list[int]:
        """Per rank, the redundant bytes its directory holds besides its own file, given
        every rank's stored size."""
        ...

    def extra_files(self, manifest: Manifest, rank: int) -> list[str]:
        """The redundant files ``rank``'s directory holds for checkpoint ``manifest``."""
        ...

    def rebuild(self, manifest: Manifest, lost: set[int], target: Path) -> tuple[Rebuilt, str]:
        """Write the ``lost`` ranks' files and the redundancy they held again, under
        :func:`~greenckpt.ckpt.redundancy.builtin.rebuild_name` in ``target`` (collective): this
        rank's temporary files and '' on success, or the first error (the same on every
        rank)."""
        ...


@runtime_checkable
class ReadsMemory(Redundancy, Protocol):
    """A redundancy that can take a rank's file from memory: right after level 1 wrote it
    without a codec, the file is the protected buffers end to end, and reading them spares a
    read of the file just written. A scheme says so with ``reads_memory`` (a user's scheme
    without it keeps the two-argument ``encode``)."""

    reads_memory: bool

    def encode(
        self, stage: Path, entries: Sequence[RankEntry], memory: InMemory | None = None
    ) -> tuple[dict[str, Any], str | None]:
        """As :meth:`Redundancy.encode`; ``memory``: this rank's file as it sits in memory."""
        ...


SchemeFactory: TypeAlias = "Callable[[Comm, Topology, LevelConfig, str], Redundancy]"
"""Builds a level's redundancy from the job's communicator and topology, the level's settings
(its scheme's values in ``LevelConfig.settings``) and the checksum (collective: every rank
builds the same levels in the same order)."""
