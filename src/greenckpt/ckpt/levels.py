"""Checkpoint levels as data: each level is a :class:`LevelSpec` in one registry.

Why: a level differs from another only in facts — where it stores, what it survives, which
redundancy it adds and which settings it takes besides its interval and codec — so those facts
are written once here, and the configuration (:mod:`greenckpt.ckpt.config`), the manifest
check, the notification socket and the :class:`~greenckpt.ckpt.api.Checkpointer` read them
when they run instead of restating level numbers. Adding a level is one spec and one
:func:`register_level` call (plus a :class:`~greenckpt.ckpt.redundancy.Redundancy` scheme for a
new kind of redundancy).

The numbers order the levels by cost; what a level survives (:attr:`LevelSpec.tolerates`) is
only a partial order, so a checkpoint retires or stands in for another level's only where it
survives at least as much (:meth:`LevelSpec.covers`), never by number alone.
docs/design/levels-and-config.md ("Levels as data") explains both.
"""

from __future__ import annotations

import enum
import os
from dataclasses import dataclass
from pathlib import Path

from greenckpt.ckpt.topology import Topology
from greenckpt.errors import InvalidValueError

__all__ = [
    "BUILTIN_LEVELS",
    "Failure",
    "LevelSpec",
    "Storage",
    "level_numbers",
    "level_spec",
    "level_specs",
    "numbers_text",
    "register_level",
    "unregister_level",
]


class Storage(enum.Enum):
    """Where a level's checkpoints live; the value is the setting naming the directory.

    Node-local storage has one directory per node (a subdirectory per emulated node), whose
    lowest rank commits and cleans it; the global file system has one directory for the whole
    job, committed and cleaned by rank 0.
    """

    NODE_LOCAL = "local_dir"
    GLOBAL = "global_dir"

    @property
    def setting(self) -> str:
        """The configuration setting that names the base directory."""
        return self.value

    def base(self, directory: str, topology: Topology, node: int) -> Path:
        """This node's base directory under the configured ``directory``."""
        if self is Storage.GLOBAL:
            return Path(os.path.expanduser(directory))
        return topology.local_base(directory, node)

    def leader(self, topology: Topology, node: int) -> int:
        """The rank that commits and cleans the directory that ``node``'s ranks write to."""
        return 0 if self is Storage.GLOBAL else topology.leader(node)

    def dir_ranks(self, topology: Topology, node: int) -> tuple[int, ...] | None:
        """The ranks whose files ``node``'s directory holds (None: every rank's)."""
        return None if self is Storage.GLOBAL else topology.nodes[node]

    def directories(self, topology: Topology) -> list[tuple[int, tuple[int, ...]]]:
        """Every directory as (its leader, the ranks whose files it holds)."""
        if self is Storage.GLOBAL:
            return [(0, tuple(range(topology.nranks)))]
        return [(topology.leader(n), ranks) for n, ranks in enumerate(topology.nodes)]

    def where(self, topology: Topology, rank: int) -> str:
        """Where the directory measured by ``rank`` is, for messages."""
        if self is Storage.GLOBAL:
            return "the global file system"
        return f"node {topology.node_of(rank)}"


class Failure(enum.Enum):
    """A kind of failure a level's checkpoints may survive; a level survives at least what
    another survives when its set of them includes the other's."""

    PROCESS = "a process fails (its node and storage intact)"
    ONE_NODE = "any one node is lost"
    NODES_APART = "several nodes are lost, none of them holding another's partner copy"
    NODES_PER_GROUP = "up to parity nodes of each erasure group are lost"
    EVERY_NODE = "every node is lost"


_SURVIVED_BY_STORAGE: dict[Storage, frozenset[Failure]] = {
    Storage.NODE_LOCAL: frozenset({Failure.PROCESS}),
    Storage.GLOBAL: frozenset(Failure),
}
"""What a level survives when its spec does not say: node-local files without redundancy
only a process failure, a copy on the global file system every loss of nodes."""


@dataclass(frozen=True)
class LevelSpec:
    """One checkpoint level, as data.

    ``subdir``: the level's own subdirectory of its storage's base (each level's checkpoints
    must be listed, kept and removed apart from the others', or a level-1 cleanup would delete
    the older level-2 checkpoint that a node loss needs). ``scheme``: the name of its
    redundancy (:data:`greenckpt.ckpt.redundancy.SCHEMES`; ``"none"``: the rank files only).
    ``settings``: the :class:`~greenckpt.ckpt.config.LevelConfig` fields that apply to this
    level besides the interval and codec every level has. ``async_via``: the level whose
    store an asynchronous checkpoint of this one is written to first (with the ``async``
    setting), before a background copy commits it here. ``survives`` says in words what
    ``tolerates`` says as data: the :class:`Failure` kinds its checkpoints survive (by
    default what its storage alone survives: a process failure on node-local storage, every
    loss of nodes on the global file system).
    """

    number: int
    name: str
    storage: Storage
    survives: str
    scheme: str = "none"
    subdir: str | None = None
    settings: tuple[str, ...] = ()
    async_via: int | None = None
    tolerates: frozenset[Failure] | None = None

    def __post_init__(self) -> None:
        if self.tolerates is None:
            object.__setattr__(self, "tolerates", _SURVIVED_BY_STORAGE[self.storage])

    @property
    def failures(self) -> frozenset[Failure]:
        """The failure kinds this level's checkpoints survive (``tolerates``, resolved)."""
        assert self.tolerates is not None  # resolved at construction
        return self.tolerates

    def covers(self, other: LevelSpec) -> bool:
        """Whether this level survives at least every failure ``other`` survives: only then
        may its checkpoints retire ``other``'s or fully stand in for them."""
        return self.failures >= other.failures

    def base(self, directory: str, topology: Topology, node: int) -> Path:
        """This node's base directory of the level's store."""
        base = self.storage.base(directory, topology, node)
        return base if self.subdir is None else base / self.subdir


BUILTIN_LEVELS: tuple[LevelSpec, ...] = (
    LevelSpec(
        1,
        "node-local",
        Storage.NODE_LOCAL,
        "the failure of a process",
        tolerates=frozenset({Failure.PROCESS}),
    ),
    LevelSpec(
        2,
        "partner copy",
        Storage.NODE_LOCAL,
        "the loss of any one node",
        scheme="partner",
        subdir="level2",
        tolerates=frozenset({Failure.PROCESS, Failure.ONE_NODE, Failure.NODES_APART}),
    ),
    LevelSpec(
        3,
        "erasure code",
        Storage.NODE_LOCAL,
        "the loss of up to parity nodes of each group",
        scheme="erasure",
        subdir="level3",
        settings=("group_size", "parity"),
        tolerates=frozenset({Failure.PROCESS, Failure.ONE_NODE, Failure.NODES_PER_GROUP}),
    ),
    LevelSpec(
        4,
        "global file system",
        Storage.GLOBAL,
        "the loss of every node",
        settings=("async_flush",),
        async_via=1,
        tolerates=frozenset(Failure),
    ),
)
"""Levels 1 (node-local) to 4 (global file system), always registered."""

_REGISTRY: dict[int, LevelSpec] = {spec.number: spec for spec in BUILTIN_LEVELS}


def register_level(spec: LevelSpec) -> None:
    """Add a level; its number must be new and above every registered one (the numbers order
    the levels, and the configuration's ``l<n>`` follow them)."""
    if not isinstance(spec.number, int) or isinstance(spec.number, bool) or spec.number < 1:
        raise InvalidValueError(f"a level number is an integer >= 1, not {spec.number!r}")
    if spec.number in _REGISTRY:
        raise InvalidValueError(
            f"level {spec.number} is already registered ({_REGISTRY[spec.number]})"
        )
    if spec.number < max(_REGISTRY):
        raise InvalidValueError(f"level {spec.number} must be above level {max(_REGISTRY)}")
    if spec.async_via is not None and spec.async_via not in _REGISTRY:
        raise InvalidValueError(
            f"level {spec.number}: async_via names unknown level {spec.async_via}"
        )
    _REGISTRY[spec.number] = spec


def unregister_level(number: int) -> None:
    """Remove a level added by :func:`register_level` (the built-in levels stay)."""
    if any(spec.number == number for spec in BUILTIN_LEVELS):
        raise InvalidValueError(f"level {number} is built in and cannot be removed")
    _REGISTRY.pop(number, None)


def level_specs() -> tuple[LevelSpec, ...]:
    """Every registered level, in increasing order."""
    return tuple(_REGISTRY[n] for n in sorted(_REGISTRY))


def level_numbers() -> tuple[int, ...]:
    """The registered level numbers, in increasing order."""
    return tuple(sorted(_REGISTRY))


def level_spec(number: int) -> LevelSpec:
    """The spec of level ``number``; :class:`ValueError` naming the valid ones if unknown."""
    try:
        return _REGISTRY[number]
    except (KeyError, TypeError):
        raise InvalidValueError(f"level must be {numbers_text()}, not {number!r}") from None


def numbers_text(numbers: tuple[int, ...] | None = None, last: str = "or") -> str:
    """``1, 2, 3 or 4``: the level numbers as messages write them."""
    shown = [str(n) for n in (level_numbers() if numbers is None else numbers)]
    return shown[0] if len(shown) == 1 else f"{', '.join(shown[:-1])} {last} {shown[-1]}"
