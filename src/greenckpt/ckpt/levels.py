"""Checkpoint levels as data: each level is a :class:`LevelSpec` in one registry.

Why: a level differs from another only in facts — where it stores, what it survives, which
redundancy it adds and which settings it takes besides its interval and codec — so those facts
are written once here, and the configuration (:mod:`greenckpt.ckpt.config`), the manifest
check, the notification socket and the :class:`~greenckpt.ckpt.api.Checkpointer` read them
when they run instead of restating level numbers. Adding a level is one spec and one
:func:`register_level` call; a new kind of redundancy is one class implementing
:class:`~greenckpt.ckpt.redundancy.scheme.Redundancy` and one :func:`register_scheme` call, which
declares the settings the scheme takes (:class:`LevelSetting`: key, converter, default) and
the check across them. A level takes its scheme's settings plus its own (``LevelSpec.settings``)
and the configuration reads, checks and describes them from these declarations alone.

The built-in schemes are declared here, their classes named by ``"module:attribute"`` and
imported when a Checkpointer first builds one: the configuration (read by the CLI, which must
start without NumPy) needs the declarations, not the erasure code.

The numbers order the levels by cost; what a level survives (:attr:`LevelSpec.tolerates`) is
only a partial order, so a checkpoint retires or stands in for another level's only where it
survives at least as much (:meth:`LevelSpec.covers`), never by number alone.
docs/design/levels-and-config.md ("Levels as data") explains both.
"""

from __future__ import annotations

import enum
import importlib
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, TypeAlias

from greenckpt.ckpt.redundancy.scheme import SchemeFactory
from greenckpt.ckpt.topology import Topology
from greenckpt.errors import InvalidValueError

if TYPE_CHECKING:
    from greenckpt.ckpt.config.values import Reading

__all__ = [
    "BUILTIN_LEVELS",
    "BUILTIN_SCHEMES",
    "Failure",
    "LevelSetting",
    "LevelSpec",
    "SchemeSpec",
    "Storage",
    "level_numbers",
    "level_settings",
    "level_spec",
    "level_specs",
    "numbers_text",
    "register_level",
    "register_scheme",
    "scheme_spec",
    "scheme_specs",
    "unregister_level",
    "unregister_scheme",
]

Convert: TypeAlias = "Callable[[object, Reading], object]"
"""A setting's converter: checks a raw value read from a source, returns it normalised."""


# The converters of the built-in settings import the configuration's when first called: this
# module is read by the notification socket's client, which must start without NumPy (that
# greenckpt.io, under the configuration's converters, loads).


def _at_least(minimum: int) -> Convert:
    def convert(value: object, r: Reading) -> object:
        from greenckpt.ckpt.config.values import to_int  # noqa: PLC0415 - see above

        return to_int(minimum)(value, r)

    return convert


def _boolean(value: object, r: Reading) -> object:
    from greenckpt.ckpt.config.values import to_bool  # noqa: PLC0415 - see above

    return to_bool(value, r)


@dataclass(frozen=True)
class LevelSetting:
    """A setting that only some levels take: those whose scheme or spec declares it.

    ``name``: the :attr:`LevelConfig.settings <greenckpt.ckpt.config.LevelConfig>` key and the
    name :meth:`Config.describe <greenckpt.ckpt.config.Config.describe>` shows
    (``l3.group_size``); ``key``: its TOML key, level keyword key and ``GREENCKPT_L<n>_<KEY>``
    suffix (``name`` when not given); ``convert``: checks and normalises a value (the
    converters of :mod:`greenckpt.ckpt.config.values`, or any callable raising
    :class:`~greenckpt.ckpt.config.ConfigError` through its ``Reading``); ``default``: its
    value when no source gives one.
    """

    name: str
    convert: Convert
    default: object
    key: str = ""

    def __post_init__(self) -> None:
        if not self.key:
            object.__setattr__(self, "key", self.name)


Sourced: TypeAlias = Mapping[str, tuple[object, str]]
"""A level's setting values by name, each with the source it came from (for messages)."""

SettingsCheck: TypeAlias = Callable[[int, Sourced], None]
"""A check across a scheme's settings of one level (``level``, values with their sources);
it raises :class:`~greenckpt.ckpt.config.ConfigError` naming the sources."""


@dataclass(frozen=True)
class SchemeSpec:
    """A redundancy scheme, as data: its name (what a :class:`LevelSpec` names), how to build
    it (a :data:`SchemeFactory`, or ``"module:attribute"`` naming one, imported on first use),
    the settings every level using it takes, and a check across them."""

    name: str
    factory: SchemeFactory | str
    settings: tuple[LevelSetting, ...] = ()
    check: SettingsCheck | None = None

    def build_factory(self) -> SchemeFactory:
        """The factory, imported if named by a string."""
        if not isinstance(self.factory, str):
            return self.factory
        module, _, attribute = self.factory.partition(":")
        found: object = importlib.import_module(module)
        for part in attribute.split("."):
            found = getattr(found, part)
        assert callable(found)
        return found


def check_parity(level: int, values: Sourced) -> None:
    """The erasure scheme's check: parity below the group size (a group needs a data block),
    naming where both values came from."""
    (group_size, group_where), (parity, parity_where) = values["group_size"], values["parity"]
    assert isinstance(group_size, int) and isinstance(parity, int)
    if parity >= group_size:
        from greenckpt.ckpt.config.values import ConfigError  # noqa: PLC0415 - see _at_least

        where = parity_where if parity_where == group_where else f"{parity_where} and {group_where}"
        raise ConfigError(
            f"{where}: l{level} parity ({parity}) must be < group_size ({group_size}): "
            "a group needs at least one data block"
        )


GROUP_SIZE_DEFAULT = 4
PARITY_DEFAULT = 1
_REDUNDANCY = "greenckpt.ckpt.redundancy.builtin:"

BUILTIN_SCHEMES: tuple[SchemeSpec, ...] = (
    SchemeSpec("none", _REDUNDANCY + "NoRedundancy.build"),
    SchemeSpec("partner", _REDUNDANCY + "PartnerLevel.build"),
    SchemeSpec(
        "erasure",
        _REDUNDANCY + "ErasureLevel.build",
        settings=(
            LevelSetting("group_size", _at_least(2), GROUP_SIZE_DEFAULT),
            LevelSetting("parity", _at_least(1), PARITY_DEFAULT),
        ),
        check=check_parity,
    ),
)
"""The built-in redundancy schemes, always registered."""

ASYNC_FLUSH = LevelSetting("async_flush", _boolean, False, key="async")
"""Level 4's own setting: write to its ``async_via`` level first, copy in the background."""

_SCHEMES: dict[str, SchemeSpec] = {spec.name: spec for spec in BUILTIN_SCHEMES}


def register_scheme(
    name: str,
    factory: SchemeFactory | str,
    *,
    settings: tuple[LevelSetting, ...] = (),
    check: SettingsCheck | None = None,
) -> SchemeSpec:
    """Add a redundancy scheme that level specs can name: how to build it, the settings
    every level using it takes, and the check across them (see :class:`SchemeSpec`)."""
    if name in _SCHEMES:
        raise InvalidValueError(f"redundancy scheme {name!r} is already registered")
    names = [s.name for s in settings]
    if len(set(names)) != len(names) or ASYNC_FLUSH.name in names:
        raise InvalidValueError(f"redundancy scheme {name!r}: its settings {names} repeat a name")
    spec = SchemeSpec(name, factory, tuple(settings), check)
    _SCHEMES[name] = spec
    return spec


def unregister_scheme(name: str) -> None:
    """Remove a scheme added by :func:`register_scheme` (the built-in ones stay; a scheme a
    registered level names stays until that level is removed)."""
    if any(spec.name == name for spec in BUILTIN_SCHEMES):
        raise InvalidValueError(f"redundancy scheme {name!r} is built in and cannot be removed")
    users = [spec.number for spec in _REGISTRY.values() if spec.scheme == name]
    if users:
        raise InvalidValueError(f"redundancy scheme {name!r} is used by level {users[0]}")
    _SCHEMES.pop(name, None)


def scheme_spec(name: str) -> SchemeSpec:
    """The scheme registered as ``name``; :class:`ValueError` naming the known ones if none."""
    try:
        return _SCHEMES[name]
    except KeyError:
        raise InvalidValueError(
            f"unknown redundancy scheme {name!r}: known schemes are {', '.join(_SCHEMES)}"
        ) from None


def scheme_specs() -> tuple[SchemeSpec, ...]:
    """Every registered scheme, built-in ones first."""
    return tuple(_SCHEMES.values())


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
    redundancy (a registered :class:`SchemeSpec`; ``"none"``: the rank files only), whose
    settings the level takes. ``settings``: the level's own settings besides its scheme's and
    the interval and codec every level has (:class:`LevelSetting`). ``async_via``: the level whose
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
    settings: tuple[LevelSetting, ...] = ()
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
        tolerates=frozenset({Failure.PROCESS, Failure.ONE_NODE, Failure.NODES_PER_GROUP}),
    ),
    LevelSpec(
        4,
        "global file system",
        Storage.GLOBAL,
        "the loss of every node",
        settings=(ASYNC_FLUSH,),
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
    scheme = scheme_spec(spec.scheme)
    names = [s.name for s in (*scheme.settings, *spec.settings)]
    if len(set(names)) != len(names):
        raise InvalidValueError(
            f"level {spec.number}: its settings {names} repeat a name (its scheme "
            f"{spec.scheme!r} declares {[s.name for s in scheme.settings]})"
        )
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


def level_settings(number: int) -> dict[str, LevelSetting]:
    """The settings level ``number`` takes besides interval and codec, by name: its scheme's,
    then its own."""
    spec = level_spec(number)
    return {s.name: s for s in (*scheme_spec(spec.scheme).settings, *spec.settings)}


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
