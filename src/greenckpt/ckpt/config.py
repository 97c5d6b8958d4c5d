"""Configuration of the checkpoint library: TOML file, environment variables, keywords.

A checkpointing job is configured in three places that people actually use: a TOML file kept
with the job script, environment variables set by a batch system or a wrapper, and keyword
arguments passed by the application itself. :func:`load_config` merges them into one frozen
:class:`Config`, setting by setting, with this precedence (first wins)::

    keyword arguments  >  environment variables  >  TOML file  >  defaults

so a job script can override the file, and the application can override both. Each setting is
taken whole from the highest source that gives it; for example ``GREENCKPT_L2_EVERY=30min``
replaces ``every = "20it"`` in ``[checkpoint.l2]``, while the level's ``codec`` may still come
from the file. :meth:`Config.describe` reports every value with the source it came from
(``"keyword keep"``, ``"GREENCKPT_KEEP"``, ``"ckpt.toml: [checkpoint] keep"``, ``"default"``).
With ``keep = 3`` in ``ckpt.toml`` and ``GREENCKPT_KEEP=4`` in the environment::

    load_config("ckpt.toml").describe()["keep"]
        -> {"value": 4, "source": "GREENCKPT_KEEP"}
    load_config("ckpt.toml", keep=5).describe()["keep"]
        -> {"value": 5, "source": "keyword keep"}

Every value is checked where it is read, even one that a higher source overrides, so that a
typo never hides until the day the override is removed. Errors are :class:`ConfigError` (a
:class:`ValueError`) with a one-line message that names the source, the setting and what would
be valid, e.g. ``GREENCKPT_KEEP: keep must be an integer >= 1, not '0'``; unknown TOML keys and
sections, unknown keywords and unknown ``GREENCKPT_L<n>_*`` variables are errors too, with the
valid names listed. Inside greenckpt every quantity is a plain SI number (seconds here); units
such as ``"14h"`` are parsed only in this module, by :mod:`greenckpt.units`.

Settings
--------

=================  ==========================  ==========  ======================================
setting            environment variable        default     valid values
=================  ==========================  ==========  ======================================
name               GREENCKPT_NAME              greenckpt   a directory name: non-empty, no "/",
                                                           not "." or ".."
local_dir          GREENCKPT_LOCAL_DIR         (none)      base directory of node-local storage
                                                           (levels 1-3)
global_dir         GREENCKPT_GLOBAL_DIR        (none)      base directory on the global/parallel
                                                           file system (level 4)
keep               GREENCKPT_KEEP              2           committed checkpoints kept per level,
                                                           an integer >= 1
checksum           GREENCKPT_CHECKSUM          xxh3_64     "xxh3_64" or "crc32"
writers_per_node   GREENCKPT_WRITERS_PER_NODE  (all)       ranks of a node that write at once,
                                                           an integer >= 1 or "all"
writers_total      GREENCKPT_WRITERS_TOTAL     (no limit)  ranks of the job that write at once,
                                                           an integer >= 1 or "unlimited"
ranks_per_node     GREENCKPT_RANKS_PER_NODE    (host)      emulate nodes of N consecutive ranks
                                                           (tests, one host), an integer >= 1 or
                                                           "host": a node is a host (MPI
                                                           processor name)
mtbf               GREENCKPT_MTBF              (none)      the job's mean time between failures
                                                           for automatic intervals: a duration
                                                           such as "14h" (a number of seconds
                                                           from TOML or keywords)
on_unrecoverable   GREENCKPT_ON_UNRECOVERABLE  raise       what ``recover()`` does when
                                                           checkpoints exist but none can be
                                                           restored: "raise" (RecoveryError) or
                                                           "fresh" (move them aside, warn, start
                                                           as a first run)
space_check        GREENCKPT_SPACE_CHECK       true        check free space before writing a
                                                           checkpoint (a boolean); false for file
                                                           systems whose free space means nothing
                                                           (a size of 0 is taken as unknown
                                                           anyway)
=================  ==========================  ==========  ======================================

Each level ``<n>`` (1 node-local, 2 partner copy, 3 erasure-coded group, 4 global file system)
has a TOML table ``[checkpoint.l<n>]``, a keyword ``l<n>=`` and these settings:

================  ===========================  ============================================
TOML key          environment variable         valid values
================  ===========================  ============================================
every             GREENCKPT_L<n>_EVERY         a duration ("10min", "90s"), an iteration
                                               count ("50it") or "auto" (the interval that
                                               the model finds best from the measured
                                               checkpoint time and ``mtbf``, which must
                                               then be set)
every_iterations  (as GREENCKPT_L<n>_EVERY)    an integer >= 1, instead of ``every = "50it"``
enabled           GREENCKPT_L<n>_ENABLED       true: the level is on without an interval
                                               (checkpoints only by ``checkpoint(level=n)``);
                                               false: the level is off whatever its interval
codec             GREENCKPT_L<n>_CODEC         "none" (default), "zstd", "zstd:<1-22>",
                                               "lz4", "zlib", "zlib:<0-9>"
group_size (l3)   GREENCKPT_L3_GROUP_SIZE      nodes per erasure-code group, >= 2 (default 4)
parity (l3)       GREENCKPT_L3_PARITY          parity blocks per group, >= 1 and < group_size
                                               (default 1: XOR; more: Reed-Solomon)
async (l4)        GREENCKPT_L4_ASYNC           flush to the file system in the background
                                               (default false)
================  ===========================  ============================================

A level is enabled when it has an interval or ``enabled = true``, unless ``enabled = false``.
Levels 1-3 need ``local_dir`` and level 4 needs ``global_dir``; the directories are only
checked here for being non-empty strings (the store checks that they exist when it starts), and
``~`` and environment variables (``$TMPDIR``, ``${SCRATCH}``) in them are expanded, from the
same environment that the ``GREENCKPT_*`` variables are read from. When no level has an interval
and none is enabled, level 1 is enabled for explicit checkpoints if ``local_dir`` is set, else
level 4 if ``global_dir`` is set.

Booleans in environment variables are ``1/0``, ``true/false``, ``yes/no`` or ``on/off`` (case
ignored); in TOML and keywords they are booleans. TOML has no null, so "no limit" is spelled
with the words given above. The TOML file looks like this::

    [checkpoint]
    name = "heat"
    local_dir = "$TMPDIR/greenckpt"
    global_dir = "/scratch/me/ckpt"
    keep = 2
    mtbf = "14h"

    [checkpoint.l1]
    every = "5min"
    codec = "lz4"

    [checkpoint.l3]
    every = "auto"
    group_size = 4
    parity = 1

    [checkpoint.l4]
    every = "1h"
    async = true
    codec = "zstd:3"

Its path is the ``config`` argument of :func:`load_config`, else ``$GREENCKPT_CONFIG``; without
either no file is read. Keyword arguments use the setting names above; a level is given as a
dict of its TOML keys (``l1={"every": "5min", "codec": "lz4"}``), merged key by key with the
lower sources, or as a :class:`LevelConfig`, which replaces the whole level. A keyword given as
``None`` sets a setting that may be unset (``local_dir``, ``global_dir``, ``writers_per_node``,
``writers_total``, ``ranks_per_node``, ``mtbf``) to "unset". Other ``GREENCKPT_*`` variables
(such as ``GREENCKPT_SYSROOT``) belong to other parts of greenckpt and are left alone here.
"""

from __future__ import annotations

import difflib
import math
import numbers
import operator
import os
import re
import tomllib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, NoReturn, SupportsFloat, SupportsIndex, TypedDict, cast

from greenckpt.ckpt.levels import Storage, level_numbers, level_spec, level_specs, numbers_text
from greenckpt.errors import GreenckptError, InvalidValueError
from greenckpt.io.checksum import CHECKSUMS
from greenckpt.io.codec import CODEC_LEVEL_RANGES
from greenckpt.units import UnitError, parse_duration

__all__ = [
    "CHECKSUMS",
    "CODECS",
    "ENV_PREFIX",
    "ON_UNRECOVERABLE",
    "Config",
    "ConfigError",
    "LevelConfig",
    "SettingDescription",
    "load_config",
]

#: Compression codecs and the range of their ``<name>:<level>`` suffix (``None``: no level);
#: the I/O engine's table, so configuration and engine cannot disagree.
CODECS: Mapping[str, tuple[int, int] | None] = MappingProxyType(CODEC_LEVEL_RANGES)

#: Prefix of the environment variables read by :func:`load_config`.
ENV_PREFIX = "GREENCKPT_"

_CONFIG_ENV = ENV_PREFIX + "CONFIG"
_DEFAULT = "default"
_DIRECT = "Config"  # the source of a value given to Config(...) directly
_CODEC_SPELLINGS = "none, zstd, zstd:<1-22>, lz4, zlib or zlib:<0-9>"
_NO_LEVEL = (
    "no checkpoint level is enabled: give a level an interval "
    '(every = "10min", "50it" or "auto") or enabled = true'
)
_TRUE_WORDS = ("1", "true", "yes", "on")
_FALSE_WORDS = ("0", "false", "no", "off")


class ConfigError(GreenckptError, ValueError):
    """The checkpoint configuration is invalid.

    The message is one line that names where the value came from (a keyword, an environment
    variable or a TOML file, section and key), the setting and what would be valid, so that
    the command-line tools can print it as is.
    """


class SettingDescription(TypedDict):
    """One entry of :meth:`Config.describe`: a setting's value (SI units) and its source."""

    value: str | int | float | bool | None
    source: str


# --------------------------------------------------------------------------------------------
# Converters: one per kind of value; each checks a raw value and returns it normalised.
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Reading:
    """Where a raw value comes from: what a converter needs for parsing and for messages.

    ``text`` is set for values that are strings to parse (environment variables), where a
    number or a boolean can only be written as text. ``env`` is the environment used to expand
    ``~`` and ``$VAR`` in directories; ``None`` means the value is not expanded (it was given
    to :class:`Config` directly).
    """

    where: str
    label: str
    text: bool = False
    env: Mapping[str, str] | None = None

    def fail(self, expected: str, value: object) -> NoReturn:
        raise ConfigError(f"{self.where}: {self.label} must be {expected}, not {_show(value)}")

    def error(self, problem: str) -> ConfigError:
        return ConfigError(f"{self.where}: {self.label} {problem}")


def _show(value: object) -> str:
    """``repr`` of a value, shortened: keeps messages on one line and readable."""
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _is_int(value: object) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def _is_real(value: object) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def _to_name(value: object, r: _Reading) -> str:
    expected = 'a plain directory name (non-empty, no "/", not "." or "..")'
    if not isinstance(value, str) or value in ("", ".", "..") or "/" in value or "\0" in value:
        r.fail(expected, value)
    return value


_VARIABLE = re.compile(r"\$(?:\{(?P<braced>[A-Za-z_][A-Za-z0-9_]*)\}|(?P<plain>[A-Za-z_]\w*))")


def _expand(path: str, r: _Reading, env: Mapping[str, str]) -> str:
    """Expand a leading ``~`` or ``~user`` and ``$VAR`` / ``${VAR}`` as a shell would.

    Unlike :func:`os.path.expandvars` an unset variable is an error: a directory literally
    named ``$TMPDIR`` would swallow checkpoints where nobody looks for them.
    """
    if path.startswith("~"):
        head, sep, tail = path.partition("/")
        if head == "~":
            home = env.get("HOME") or os.path.expanduser("~")
        else:
            home = os.path.expanduser(head)
            if home == head:
                raise r.error(f"names an unknown user in {_show(path)}")
        path = home + sep + tail

    def substitute(match: re.Match[str]) -> str:
        name = match["braced"] or match["plain"]
        if name not in env:
            raise r.error(f"uses ${name}, which is not set, in {_show(path)}")
        return env[name]

    return _VARIABLE.sub(substitute, path)


def _to_path(value: object, r: _Reading, what: str) -> str:
    """A non-empty path (str or path-like), expanded when the reading has an environment."""
    if isinstance(value, os.PathLike):
        value = os.fspath(value)
    if not isinstance(value, str) or not value.strip() or "\0" in value:
        r.fail(f"a non-empty {what} path", value)
    if r.env is None:
        return value
    expanded = _expand(value, r, r.env)
    if not expanded.strip():
        raise r.error(f"is empty after expanding {_show(value)}: give a {what} path")
    return expanded


def _to_dir(value: object, r: _Reading) -> str | None:
    if value is None and not r.text:
        return None
    return _to_path(value, r, "directory")


def _count(minimum: int, unset: tuple[str, ...] = ()) -> Callable[[object, _Reading], int | None]:
    """A converter for an integer >= ``minimum``; ``unset`` are words (and ``None``) for none."""
    words = " or ".join(f'"{word}"' for word in unset)
    expected = f"an integer >= {minimum}" + (f" or {words}" if unset else "")

    def convert(value: object, r: _Reading) -> int | None:
        if unset and (value is None and not r.text):
            return None
        if isinstance(value, str) and unset and value.strip().lower() in unset:
            return None
        if r.text and isinstance(value, str) and re.fullmatch(r"[+-]?[0-9]+", value.strip()):
            number = int(value)
        elif _is_int(value):
            number = operator.index(cast(SupportsIndex, value))
        else:
            r.fail(expected, value)
        if number < minimum:
            r.fail(expected, value)
        return number

    return convert


def _to_int_required(minimum: int) -> Callable[[object, _Reading], int]:
    """Like :func:`_count` for a setting that must always have a value."""
    convert = _count(minimum)

    def required(value: object, r: _Reading) -> int:
        number = convert(value, r)
        assert number is not None  # _count without unset words never returns None
        return number

    return required


def _to_bool(value: object, r: _Reading) -> bool:
    if isinstance(value, bool):
        return value
    if r.text and isinstance(value, str):
        word = value.strip().lower()
        if word in _TRUE_WORDS:
            return True
        if word in _FALSE_WORDS:
            return False
        r.fail("a boolean: 1/0, true/false, yes/no or on/off", value)
    r.fail("true or false", value)


def _to_checksum(value: object, r: _Reading) -> str:
    if isinstance(value, str) and value.strip().lower() in CHECKSUMS:
        return value.strip().lower()
    r.fail(" or ".join(f'"{name}"' for name in CHECKSUMS), value)


def _positive_seconds(value: object, r: _Reading, expected: str) -> float:
    """A number of seconds, finite and > 0 (numbers come from TOML, keywords or Config)."""
    seconds = float(cast(SupportsFloat, value))
    if not (math.isfinite(seconds) and seconds > 0):
        r.fail(expected, value)
    return seconds


def _to_mtbf(value: object, r: _Reading) -> float | None:
    expected = 'a duration such as "14h", or a number of seconds > 0'
    if value is None and not r.text:
        return None
    if isinstance(value, str):
        try:
            return parse_duration(value)
        except UnitError as exc:
            raise r.error(f'must be a duration such as "14h" ({exc})') from None
    if _is_real(value) and not r.text:
        return _positive_seconds(value, r, expected)
    r.fail(expected, value)


ON_UNRECOVERABLE = ("raise", "fresh")
"""The values of ``on_unrecoverable`` (see :meth:`greenckpt.ckpt.api.Checkpointer.recover`)."""


def _to_on_unrecoverable(value: object, r: _Reading) -> str:
    if isinstance(value, str) and value.strip().lower() in ON_UNRECOVERABLE:
        return value.strip().lower()
    r.fail(
        '"raise" (a RecoveryError) or "fresh" (move the unrestorable checkpoints aside and '
        "start afresh)",
        value,
    )


def _to_codec(value: object, r: _Reading) -> str | None:
    """Normalise a codec: ``"none"`` becomes ``None``, names and levels are checked."""
    if value is None and not r.text:
        return None
    expected = f"one of {_CODEC_SPELLINGS}"
    if not isinstance(value, str):
        r.fail(expected, value)
    text = value.strip().lower()
    if text == "none":
        return None
    name, colon, level = (part.strip() for part in text.partition(":"))
    if name not in CODECS:
        r.fail(expected, value)
    limits = CODECS[name]
    if not colon:
        return name
    if limits is None:
        r.fail(f"{name} without a level (one of {_CODEC_SPELLINGS})", value)
    low, high = limits
    if not re.fullmatch(r"[0-9]+", level) or not low <= int(level) <= high:
        r.fail(f"{name} or {name}:<level> with a level from {low} to {high}", value)
    return f"{name}:{int(level)}"


@dataclass(frozen=True)
class _Interval:
    """A level's automatic interval: exactly one of seconds, iterations or auto."""

    seconds: float | None = None
    iterations: int | None = None
    auto: bool = False


_ITERATIONS = re.compile(r"([0-9]+)[ \t]*(?:it|its|iter|iters|iteration|iterations)", re.I)
_EVERY = 'a duration such as "10min", an iteration count such as "50it", or "auto"'


def _to_interval(value: object, r: _Reading) -> _Interval:
    if not isinstance(value, str):
        if _is_real(value):
            r.fail(
                f'{_EVERY} (a bare number is ambiguous: write "{value}s" or use every_iterations)',
                value,
            )
        r.fail(_EVERY, value)
    text = value.strip()
    if text.lower() == "auto":
        return _Interval(auto=True)
    match = _ITERATIONS.fullmatch(text)
    if match:
        iterations = int(match[1])
        if iterations < 1:
            r.fail(f"{_EVERY}; an iteration count must be >= 1", value)
        return _Interval(iterations=iterations)
    try:
        return _Interval(seconds=parse_duration(text))
    except UnitError as exc:
        raise r.error(f"must be {_EVERY} ({exc})") from None


def _to_iterations(value: object, r: _Reading) -> _Interval:
    """``every_iterations = 50``: the same setting as ``every = "50it"``."""
    return _Interval(iterations=_to_int_required(1)(value, r))


# --------------------------------------------------------------------------------------------
# The settings: TOML keys, environment variables, keywords and how to read each.
# --------------------------------------------------------------------------------------------

_Convert = Callable[[object, _Reading], object]

#: Top-level settings: field name (= TOML key = keyword) -> converter.
_TOP: Mapping[str, _Convert] = MappingProxyType(
    {
        "name": _to_name,
        "local_dir": _to_dir,
        "global_dir": _to_dir,
        "keep": _to_int_required(1),
        "checksum": _to_checksum,
        "writers_per_node": _count(1, ("all",)),
        "writers_total": _count(1, ("unlimited", "none")),
        "ranks_per_node": _count(1, ("host",)),
        "mtbf": _to_mtbf,
        "on_unrecoverable": _to_on_unrecoverable,
        "space_check": _to_bool,
    }
)

_TOP_DEFAULTS: Mapping[str, object] = MappingProxyType(
    {
        "name": "greenckpt",
        "local_dir": None,
        "global_dir": None,
        "keep": 2,
        "checksum": CHECKSUMS[0],
        "writers_per_node": None,
        "writers_total": None,
        "ranks_per_node": None,
        "mtbf": None,
        "on_unrecoverable": "raise",
        "space_check": True,
    }
)

_GROUP_SIZE_DEFAULT = 4
_PARITY_DEFAULT = 1


@dataclass(frozen=True)
class _LevelSetting:
    """A setting that only the levels whose spec names it take (``LevelSpec.settings``)."""

    key: str
    """Its TOML key, level keyword key and ``GREENCKPT_L<n>_<KEY>`` suffix."""
    convert: _Convert
    default: object


#: The level-specific settings: LevelConfig field -> how it is read.
_LEVEL_SETTINGS: Mapping[str, _LevelSetting] = MappingProxyType(
    {
        "group_size": _LevelSetting("group_size", _to_int_required(2), _GROUP_SIZE_DEFAULT),
        "parity": _LevelSetting("parity", _to_int_required(1), _PARITY_DEFAULT),
        "async_flush": _LevelSetting("async", _to_bool, False),
    }
)


def _settings_of(level: int) -> dict[str, _LevelSetting]:
    """The level-specific settings of ``level``, by LevelConfig field, in table order."""
    names = level_spec(level).settings
    return {name: setting for name, setting in _LEVEL_SETTINGS.items() if name in names}


def _levels_phrase(levels: tuple[int, ...]) -> str:
    """``level 4``, ``levels 1-3`` or ``levels 1, 2 and 5``."""
    if len(levels) == 1:
        return f"level {levels[0]}"
    if list(levels) == list(range(levels[0], levels[-1] + 1)):
        return f"levels {levels[0]}-{levels[-1]}"
    return f"levels {numbers_text(levels, 'and')}"


def _only(field_name: str) -> str:
    """``level 3 only``: the levels that take a level-specific setting."""
    return (
        f"{_levels_phrase(tuple(s.number for s in level_specs() if field_name in s.settings))} only"
    )


def _level_keys(level: int) -> dict[str, _Convert]:
    """TOML keys of ``[checkpoint.l<level>]`` (also the keys of a level keyword dict)."""
    keys: dict[str, _Convert] = {
        "every": _to_interval,
        "every_iterations": _to_iterations,
        "enabled": _to_bool,
        "codec": _to_codec,
    }
    for setting in _settings_of(level).values():
        keys[setting.key] = setting.convert
    return keys


def _merged_key(level: int, toml_key: str) -> str:
    """The key under which a level setting is merged: both interval spellings are one setting."""
    return f"l{level}.{'every' if toml_key == 'every_iterations' else toml_key}"


def _level_env() -> dict[str, tuple[int, str]]:
    """``GREENCKPT_L<n>_<KEY>`` -> (level, TOML key), for the levels registered now."""
    table = {}
    for level in level_numbers():
        for key in _level_keys(level):
            if key != "every_iterations":
                table[f"{ENV_PREFIX}L{level}_{key.upper()}"] = (level, key)
    return table


_TOP_ENV: Mapping[str, str] = MappingProxyType({ENV_PREFIX + k.upper(): k for k in _TOP})
_LEVEL_ENV_PATTERN = re.compile(rf"{ENV_PREFIX}L[0-9]")


def _how_to_set(setting: str) -> str:
    return f"{ENV_PREFIX}{setting.upper()}, [checkpoint] {setting} or keyword {setting}"


def _suggest(name: str, valid: list[str]) -> str:
    close = difflib.get_close_matches(name, valid, n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""


# --------------------------------------------------------------------------------------------
# The frozen result.
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class LevelConfig:
    """The settings of one checkpoint level (1 node-local .. 4 global file system).

    At most one of ``every_s``, ``every_iterations`` and ``auto`` is set: the level's automatic
    interval. An enabled level without one takes only explicit checkpoints. ``group_size`` and
    ``parity`` apply to level 3 and ``async_flush`` to level 4; on other levels they keep
    their defaults. The values are checked on construction (with this class as the source).
    """

    level: int
    enabled: bool = False
    every_s: float | None = None
    every_iterations: int | None = None
    auto: bool = False
    codec: str | None = None
    group_size: int = _GROUP_SIZE_DEFAULT
    parity: int = _PARITY_DEFAULT
    async_flush: bool = False

    def __post_init__(self) -> None:
        level = self.level
        if not _is_int(level) or level not in level_numbers():
            raise ConfigError(f"LevelConfig: level must be {numbers_text()}, not {_show(level)}")
        where = f"LevelConfig(level={level})"

        def reading(name: str) -> _Reading:
            return _Reading(where, f"l{level} {name}")

        _to_bool(self.enabled, reading("enabled"))
        _to_bool(self.auto, reading("auto"))
        _to_bool(self.async_flush, reading("async_flush"))
        if self.every_s is not None:
            r = reading("every_s")
            if not _is_real(self.every_s):
                r.fail("a number of seconds > 0", self.every_s)
            object.__setattr__(self, "every_s", _positive_seconds(self.every_s, r, "> 0"))
        if self.every_iterations is not None:
            _to_int_required(1)(self.every_iterations, reading("every_iterations"))
        object.__setattr__(self, "codec", _to_codec(self.codec, reading("codec")))
        given = [n for n in ("every_s", "every_iterations") if getattr(self, n) is not None]
        given += ["auto"] if self.auto else []
        if len(given) > 1:
            raise ConfigError(f"{where}: give only one of {', '.join(given)}")
        if given and not self.enabled:
            raise ConfigError(f"{where}: {given[0]} is set on a disabled level: set enabled=True")
        own = _settings_of(level)
        for name, setting in _LEVEL_SETTINGS.items():
            if name in own:
                setting.convert(getattr(self, name), reading(name))
            elif getattr(self, name) != setting.default:
                raise ConfigError(f"{where}: {name} applies to {_only(name)}")
            if name == "parity" and name in own:
                _check_parity(self.group_size, self.parity, where, where)

    @property
    def has_interval(self) -> bool:
        """Whether checkpoints at this level are also taken automatically."""
        return self.every_s is not None or self.every_iterations is not None or self.auto


def _check_parity(group_size: int, parity: int, group_where: str, parity_where: str) -> None:
    if parity >= group_size:
        where = parity_where if parity_where == group_where else f"{parity_where} and {group_where}"
        raise ConfigError(
            f"{where}: l3 parity ({parity}) must be < group_size ({group_size}): "
            "a group needs at least one data block"
        )


def _default_levels() -> tuple[LevelConfig, ...]:
    return tuple(LevelConfig(level) for level in level_numbers())


_COUNT_WORDS = ("no", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine")


@dataclass(frozen=True)
class Config:
    """The checkpoint library's settings, merged and checked (see the module docs for names).

    Quantities are SI (``mtbf`` in seconds). ``levels`` holds a :class:`LevelConfig` per
    registered level (:mod:`greenckpt.ckpt.levels`: levels 1 to 4) in order. ``sources`` maps
    each :meth:`describe` key to the source of its value; it does not take part in equality.
    Built directly, a Config is checked like one built by :func:`load_config`, with "Config"
    as the source of its values.
    """

    name: str = "greenckpt"
    local_dir: str | None = None
    global_dir: str | None = None
    keep: int = 2
    checksum: str = CHECKSUMS[0]
    writers_per_node: int | None = None
    writers_total: int | None = None
    ranks_per_node: int | None = None
    mtbf: float | None = None
    on_unrecoverable: str = "raise"
    space_check: bool = True
    levels: tuple[LevelConfig, ...] = field(default_factory=_default_levels)
    sources: Mapping[str, str] = field(default_factory=dict, compare=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "sources", MappingProxyType(dict(self.sources)))
        for name, convert in _TOP.items():
            value = convert(getattr(self, name), _Reading(self._source(name), name))
            object.__setattr__(self, name, value)
        levels = tuple(self.levels)
        known = level_numbers()
        if [getattr(lvl, "level", None) for lvl in levels] != list(known) or not all(
            isinstance(lvl, LevelConfig) for lvl in levels
        ):
            count = _COUNT_WORDS[len(known)] if len(known) < len(_COUNT_WORDS) else len(known)
            raise ConfigError(
                f"{_DIRECT}: levels must be {count} LevelConfig for levels "
                f"{numbers_text(known, 'and')} in order"
            )
        object.__setattr__(self, "levels", levels)
        if not self.enabled_levels:
            raise ConfigError(_NO_LEVEL)
        for lvl in levels:
            if not lvl.enabled:
                continue
            setting = level_spec(lvl.level).storage.setting
            if getattr(self, setting) is None:
                raise ConfigError(
                    f"{self._source(f'l{lvl.level}.enabled')}: level {lvl.level} is enabled but "
                    f"{setting} is not set: set {setting} ({_how_to_set(setting)}) "
                    f"or turn level {lvl.level} off"
                )
            if lvl.auto and self.mtbf is None:
                raise ConfigError(
                    f'{self._source(f"l{lvl.level}.auto")}: l{lvl.level} every = "auto" needs '
                    f'the job\'s MTBF: set mtbf ({_how_to_set("mtbf")}), e.g. "14h"'
                )

    def _source(self, key: str) -> str:
        return self.sources.get(key, _DIRECT)

    def level(self, number: int) -> LevelConfig:
        """The settings of level ``number`` (1 to 4, or a registered level)."""
        found = next((lvl for lvl in self.levels if lvl.level == number), None)
        if found is None or isinstance(number, bool):
            raise InvalidValueError(f"level must be {numbers_text()}, not {number!r}")
        return found

    @property
    def enabled_levels(self) -> tuple[int, ...]:
        """The numbers of the enabled levels, in increasing order."""
        return tuple(lvl.level for lvl in self.levels if lvl.enabled)

    def describe(self) -> dict[str, SettingDescription]:
        """Every setting's value (SI units) and source, for reports and documentation.

        Keys are the top-level field names and ``l<n>.<field>`` for the levels (``group_size``
        and ``parity`` for level 3 only, ``async_flush`` for level 4 only). Sources read
        ``"default"``, ``"keyword keep"``, ``"GREENCKPT_KEEP"`` or
        ``"<file>: [checkpoint] keep"``; the three interval fields of a level share the source
        of its ``every``.
        """
        out: dict[str, SettingDescription] = {}
        for name in _TOP:
            out[name] = {"value": getattr(self, name), "source": self._source(name)}
        for lvl in self.levels:
            names = ["enabled", "every_s", "every_iterations", "auto", "codec"]
            names += list(_settings_of(lvl.level))
            for name in names:
                key = f"l{lvl.level}.{name}"
                out[key] = {"value": getattr(lvl, name), "source": self._source(key)}
        return out


# --------------------------------------------------------------------------------------------
# Reading the sources.
# --------------------------------------------------------------------------------------------

#: Merged settings: key ("keep", "l2.every", "l4.async") -> (checked value, source).
_Merged = dict[str, tuple[Any, str]]


def _shown_path(path: str) -> str:
    return path if path.isprintable() else repr(path)


def _toml_error(path: str, text: bytes, exc: tomllib.TOMLDecodeError) -> ConfigError:
    """One line with the file and line of a TOML syntax error."""
    message = " ".join(str(exc).split())
    match = re.fullmatch(r"(.*) \(at line (\d+), column (\d+)\)", message)
    if match:
        return ConfigError(f"{path}, line {match[2]}, column {match[3]}: invalid TOML: {match[1]}")
    match = re.fullmatch(r"(.*) \(at end of document\)", message)
    if match:
        last = max(1, text.count(b"\n") + (0 if text.endswith(b"\n") else 1))
        return ConfigError(f"{path}, line {last} (end of file): invalid TOML: {match[1]}")
    return ConfigError(f"{path}: invalid TOML: {message}")


def _read_toml(given: object, given_by: str, env: Mapping[str, str]) -> _Merged:
    """Read and check the TOML file named by ``given`` (from keyword config or the env)."""
    r = _Reading(given_by, "config", env=env)
    path = _to_path(given, r, "file")
    shown = _shown_path(path)
    try:
        with open(path, "rb") as fp:
            text = fp.read()
    except OSError as exc:
        raise r.error(f"file {shown} cannot be read: {exc.strerror or exc}") from None
    try:
        doc = tomllib.loads(text.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{shown}: not UTF-8 text (byte {exc.start})") from None
    except tomllib.TOMLDecodeError as exc:
        raise _toml_error(shown, text, exc) from None
    except RecursionError:  # tomllib recurses once per nested array or inline table
        raise ConfigError(f"{shown}: arrays or tables nested too deeply to be settings") from None

    for key, value in doc.items():
        if key == "checkpoint":
            if not isinstance(value, dict):
                raise ConfigError(
                    f"{shown}: checkpoint must be a table [checkpoint], not {_show(value)}"
                )
            continue
        if isinstance(value, dict):
            raise ConfigError(
                f"{shown}: unknown section [{key}]{_suggest(key, ['checkpoint'])}: "
                "valid sections: [checkpoint]"
            )
        raise ConfigError(
            f"{shown}: key {key!r} is outside any section: put checkpoint settings under "
            "[checkpoint]"
        )
    section: dict[str, Any] = doc.get("checkpoint", {})
    merged: _Merged = {}
    known = level_numbers()
    level_tables = {f"l{level}": level for level in known}
    valid = [*_TOP, *level_tables]
    for key, value in section.items():
        where = f"{shown}: [checkpoint] {key}"
        if key in _TOP:
            merged[key] = (_TOP[key](value, _Reading(where, key, env=env)), where)
        elif key in level_tables:
            if not isinstance(value, dict):
                raise ConfigError(
                    f"{where}: must be a table [checkpoint.{key}], not {_show(value)}"
                )
            merged.update(_read_level_table(level_tables[key], value, shown))
        else:
            raise ConfigError(
                f"{shown}: [checkpoint] unknown key {key!r}{_suggest(key, valid)}: valid keys: "
                f"{', '.join(_TOP)}, and tables [checkpoint.l{known[0]}] to "
                f"[checkpoint.l{known[-1]}]"
            )
    return merged


def _level_specific_hint(key: str) -> str:
    for name, setting in _LEVEL_SETTINGS.items():
        if key in (name, setting.key):
            return f"; {setting.key} applies to {_only(name)}"
    return ""


def _read_level_table(level: int, table: Mapping[str, object], shown: str) -> _Merged:
    context = f"{shown}: [checkpoint.l{level}]"
    _check_one_interval(table, context)
    return _merge_level_items(level, table, context, lambda key: f"{context} {key}")


def _merge_level_items(
    level: int, items: Mapping[Any, object], context: str, where_of: Callable[[Any], str]
) -> _Merged:
    """One level's settings (a TOML table or a keyword dict), each checked and converted;
    ``context`` starts an unknown key's message, ``where_of(key)`` names where each value
    came from."""
    keys = _level_keys(level)
    merged: _Merged = {}
    for key, value in items.items():
        if key not in keys:
            raise ConfigError(
                f"{context} unknown key {key!r}{_suggest(str(key), list(keys))}: valid keys: "
                f"{', '.join(keys)}{_level_specific_hint(str(key))}"
            )
        where = where_of(key)
        merged[_merged_key(level, key)] = (
            keys[key](value, _Reading(where, f"l{level} {key}")),
            where,
        )
    return merged


def _check_one_interval(table: Mapping[str, object], where: str) -> None:
    if "every" in table and "every_iterations" in table:
        raise ConfigError(
            f"{where}: give only one of every and every_iterations (one interval per level)"
        )


def _read_env(env: Mapping[str, str]) -> _Merged:
    merged: _Merged = {}
    level_env = _level_env()
    for name in sorted(env):
        if not name.startswith(ENV_PREFIX):
            continue
        value = env[name].strip()
        if name in _TOP_ENV:
            key = _TOP_ENV[name]
            if not value:
                raise ConfigError(f"{name}: {key} is empty: give a value or unset {name}")
            merged[key] = (_TOP[key](value, _Reading(name, key, text=True, env=env)), name)
        elif name in level_env:
            level, key = level_env[name]
            r = _Reading(name, f"l{level} {key}", text=True)
            merged[_merged_key(level, key)] = (_level_keys(level)[key](value, r), name)
        elif _LEVEL_ENV_PATTERN.match(name):
            raise ConfigError(
                f"{name} is not a greenckpt setting{_suggest(name, list(level_env))}: valid "
                f"level variables: {', '.join(level_env)}"
            )
    return merged


def _read_keywords(kwargs: Mapping[str, object], env: Mapping[str, str]) -> _Merged:
    merged: _Merged = {}
    levels = {f"l{level}": level for level in level_numbers()}
    for key, value in kwargs.items():
        where = f"keyword {key}"
        if key in _TOP:
            merged[key] = (_TOP[key](value, _Reading(where, key, env=env)), where)
        elif key in levels:
            merged.update(_read_level_keyword(levels[key], value))
        else:
            valid = [*_TOP, *levels, "config", "env"]
            raise ConfigError(
                f"keyword {key!r} is not a setting{_suggest(key, valid)}: valid keywords: "
                f"{', '.join(valid)}"
            )
    return merged


def _read_level_keyword(level: int, value: object) -> _Merged:
    name = f"l{level}"
    if isinstance(value, LevelConfig):
        # A whole level: every one of its settings comes from this keyword.
        where = f"keyword {name}"
        merged: _Merged = {}
        if value.level != level:
            raise ConfigError(f"{where}: LevelConfig.level is {value.level}; it must be {level}")
        interval: _Interval | None = None
        if value.has_interval:
            interval = _Interval(value.every_s, value.every_iterations, value.auto)
        merged[f"{name}.every"] = (interval, where)
        merged[f"{name}.enabled"] = (value.enabled, where)
        merged[f"{name}.codec"] = (value.codec, where)
        for field_name, setting in _settings_of(level).items():
            merged[f"{name}.{setting.key}"] = (getattr(value, field_name), where)
        return merged
    if not isinstance(value, Mapping):
        raise ConfigError(
            f"keyword {name}: must be a dict of level settings such as "
            f'{{"every": "5min", "codec": "lz4"}} or a LevelConfig, not {_show(value)}'
        )
    _check_one_interval(value, f"keyword {name}")
    return _merge_level_items(
        level, value, f"keyword {name}:", lambda key: f"keyword {name}[{key!r}]"
    )


# --------------------------------------------------------------------------------------------
# Merging.
# --------------------------------------------------------------------------------------------


def _build(merged: _Merged) -> Config:
    """Resolve levels (enabled, default level) and build the checked :class:`Config`."""
    sources: dict[str, str] = {key: merged[key][1] for key in _TOP}
    top: dict[str, Any] = {key: merged[key][0] for key in _TOP}

    intervals: dict[int, tuple[_Interval | None, str]] = {}
    enabled: dict[int, tuple[bool, str]] = {}
    explicit: dict[int, bool] = {}
    for level in level_numbers():
        interval, source = merged.get(f"l{level}.every", (None, _DEFAULT))
        assert interval is None or isinstance(interval, _Interval)
        intervals[level] = (interval, source)
        if f"l{level}.enabled" in merged:
            flag, flag_source = merged[f"l{level}.enabled"]
            explicit[level] = bool(flag)
            enabled[level] = (bool(flag), flag_source)
            if not flag and interval is not None:  # switched off whatever the interval
                intervals[level] = (None, f"{flag_source} (level off)")
        else:
            enabled[level] = (interval is not None, source)

    if not any(flag for flag, _ in enabled.values()) and not any(
        interval is not None for interval, _ in intervals.values()
    ):
        default = _default_level(top, explicit)
        enabled[default] = (
            True,
            f"default (no interval given: level {default} for explicit checkpoints)",
        )

    for level in level_numbers():
        if "parity" in _settings_of(level):
            group_size, group_where = merged[f"l{level}.group_size"]
            parity, parity_where = merged[f"l{level}.parity"]
            assert isinstance(group_size, int) and isinstance(parity, int)
            _check_parity(group_size, parity, group_where, parity_where)

    levels = []
    for level in level_numbers():
        interval, interval_source = intervals[level]
        flag, flag_source = enabled[level]
        extra: dict[str, Any] = {}
        for field_name, setting in _settings_of(level).items():
            extra[field_name], sources[f"l{level}.{field_name}"] = merged[f"l{level}.{setting.key}"]
        codec, sources[f"l{level}.codec"] = merged[f"l{level}.codec"]
        sources[f"l{level}.enabled"] = flag_source
        for name in ("every_s", "every_iterations", "auto"):
            sources[f"l{level}.{name}"] = interval_source
        interval = interval or _Interval()
        levels.append(
            LevelConfig(
                level,
                enabled=flag,
                every_s=interval.seconds,
                every_iterations=interval.iterations,
                auto=interval.auto,
                codec=codec,
                **extra,
            )
        )
    return Config(**top, levels=tuple(levels), sources=sources)


def _default_level(top: Mapping[str, object], explicit: Mapping[int, bool]) -> int:
    """The level enabled when no source gives any interval: the lowest node-local one (1) if
    local_dir is set, else the lowest global one (4)."""
    on: dict[Storage, tuple[int, ...]] = {
        storage: tuple(s.number for s in level_specs() if s.storage is storage)
        for storage in Storage
    }
    for storage, stored in on.items():
        if stored and top[storage.setting] is not None and explicit.get(stored[0], True):
            return stored[0]
    if all(top[storage.setting] is None for storage in Storage):
        local, global_ = on[Storage.NODE_LOCAL], on[Storage.GLOBAL]
        raise ConfigError(
            f"no checkpoint directory: set local_dir for node-local {_levels_phrase(local)} "
            f"({_how_to_set('local_dir')}) or global_dir for {_levels_phrase(global_)} "
            f"({_how_to_set('global_dir')})"
        )
    raise ConfigError(_NO_LEVEL)


def _defaults() -> _Merged:
    merged: _Merged = {key: (value, _DEFAULT) for key, value in _TOP_DEFAULTS.items()}
    for level in level_numbers():
        merged[f"l{level}.codec"] = (None, _DEFAULT)
        for setting in _settings_of(level).values():
            merged[f"l{level}.{setting.key}"] = (setting.default, _DEFAULT)
    return merged


def load_config(
    config: str | os.PathLike[str] | None = None,
    *,
    env: Mapping[str, str] | None = None,
    **kwargs: object,
) -> Config:
    """Merge keywords > environment > TOML file > defaults into a checked :class:`Config`.

    ``config`` is the TOML file (default ``$GREENCKPT_CONFIG``; no file when neither is
    given). ``env`` is read instead of :data:`os.environ`, for the ``GREENCKPT_*`` variables
    and for expanding ``$VAR`` in directories (tests pass a dict). ``kwargs`` are the settings
    named in the module documentation. Raises :class:`ConfigError` with a one-line message.
    """
    environ: Mapping[str, str] = os.environ if env is None else env
    merged = _defaults()
    if config is not None:
        merged.update(_read_toml(config, "keyword config", environ))
    elif _CONFIG_ENV in environ:
        merged.update(_read_toml(environ[_CONFIG_ENV].strip(), _CONFIG_ENV, environ))
    merged.update(_read_env(environ))
    merged.update(_read_keywords(kwargs, environ))
    return _build(merged)
