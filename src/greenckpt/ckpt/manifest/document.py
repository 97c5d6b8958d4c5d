"""The manifest's data: :class:`Manifest`, :class:`RankEntry`, :class:`Variable` and the
format's constants.

Why frozen dataclasses apart from the JSON: the checkpoint library builds, compares and copies
manifests in memory (a rebuilt node's copy, a level-4 copy of a level-1 checkpoint) without
caring how they are spelled on disk; :mod:`~greenckpt.ckpt.manifest.serialize` is the one place that
turns them into the document and back, validating everything. Internal to
:mod:`greenckpt.ckpt.manifest`, which re-exports every name; see
docs/design/levels-and-config.md.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Final, Literal

from greenckpt import __version__
from greenckpt.ckpt.levels import BUILTIN_LEVELS
from greenckpt.errors import GreenckptError

FORMAT_NAME: Final = "greenckpt-checkpoint"
FORMAT_VERSION: Final = 2
LEGACY_VERSION: Final = 1
"""The version before manifests carried their own digest: read, but reported unverified."""
MANIFEST_DIGEST_KEY: Final = "manifest_digest"
"""The key of the manifest's digest of itself (format version 2 on)."""
MANIFEST_NAME: Final = "manifest.json"
"""File name of the manifest inside a checkpoint directory (no rank file may use it)."""

LEVELS: Final = tuple(spec.number for spec in BUILTIN_LEVELS)
"""The built-in levels' numbers (:data:`~greenckpt.ckpt.levels.BUILTIN_LEVELS`), for code
that imported them; a manifest may name any level registered when it is read (one added by
:func:`~greenckpt.ckpt.levels.register_level` too), which is what reading checks."""

VariableKind = Literal["array", "buffer", "state"]
VARIABLE_KINDS: Final[tuple[VariableKind, ...]] = ("array", "buffer", "state")


class ManifestError(GreenckptError, ValueError):
    """A manifest file or object is malformed; the message names the JSON path and what is
    valid."""


@dataclass(frozen=True)
class Variable:
    """One protected variable in a rank's logical data stream.

    ``kind`` is ``"array"`` (a NumPy array: ``dtype`` and ``shape`` say how to rebuild it),
    ``"buffer"`` (raw bytes) or ``"state"`` (serialised application state); the latter two have
    no dtype. ``offset``/``nbytes`` locate it in the rank's logical (uncompressed) stream;
    ``digest`` is over those logical bytes.
    """

    name: str
    kind: VariableKind
    dtype: str | None
    shape: tuple[int, ...] | None
    offset: int
    nbytes: int
    digest: str


@dataclass(frozen=True)
class RankEntry:
    """What one rank stored: its file (a plain name inside the checkpoint directory), sizes
    before (``logical_bytes``) and after (``stored_bytes``) the codec, the digest of the stored
    bytes, and its variables in stream order."""

    rank: int
    node: int
    file: str
    logical_bytes: int
    stored_bytes: int
    digest: str
    variables: tuple[Variable, ...]


def _default_tool() -> str:
    return f"greenckpt {__version__}"


@dataclass(frozen=True)
class Manifest:
    """One committed checkpoint of job ``name`` (the fields: docs/formats.md).

    ``nodes[i]`` lists the ranks of node ``i``; ``ranks[r]`` is rank ``r``'s entry.
    ``redundancy`` is level-specific metadata (partner map, erasure group, ...) kept as a plain
    JSON object; the level that wrote it is the one that interprets it.
    """

    name: str
    id: int
    level: int
    created: str
    iteration: int | None
    checksum: str
    codec: str | None
    nranks: int
    nodes: tuple[tuple[int, ...], ...]
    ranks: tuple[RankEntry, ...]
    redundancy: Mapping[str, Any] = field(default_factory=dict)
    tool: str = field(default_factory=_default_tool)
    format_version: int = field(default=FORMAT_VERSION, compare=False)
    """The version of the file it was read from: :data:`LEGACY_VERSION` means the file had no
    digest of its own, so nothing vouches for its fields. Writing writes the current version
    (with its digest) unless told to keep this one (a copy of a read manifest, such as a
    rebuilt node's: :func:`manifest_to_json`); not part of equality, which is about the
    content."""

    @property
    def verified(self) -> bool:
        """Whether the manifest's own digest vouched for its fields when it was read (always
        True for one built in memory or read from a current file)."""
        return self.format_version >= FORMAT_VERSION

    @property
    def logical_bytes(self) -> int:
        """The job's checkpoint size before compression (sum over ranks)."""
        return sum(r.logical_bytes for r in self.ranks)

    @property
    def stored_bytes(self) -> int:
        """Bytes this checkpoint occupies on disk (sum over ranks, manifest excluded)."""
        return sum(r.stored_bytes for r in self.ranks)

    def ranks_of_node(self, node: int) -> tuple[int, ...]:
        """The ranks that ran on node ``node``."""
        return self.nodes[node]


def utc_now_iso() -> str:
    """The current time as the ISO-8601 UTC string a manifest records (millisecond, ``Z``)."""
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
