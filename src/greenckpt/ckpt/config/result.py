"""The frozen result of the checkpoint configuration: :class:`Config` and :class:`LevelConfig`.

Why the checks live in the constructors: a :class:`Config` built directly (by a test, or by
an application that assembles its settings itself) is checked exactly like one merged by
:func:`~greenckpt.ckpt.config.load_config`, with ``"Config"`` as the source named in its
messages, so no unchecked configuration reaches the checkpoint library. The relations between
settings (a level needs its storage's directory, ``auto`` needs the MTBF, parity below the
group size) are checked here too, once. Internal to :mod:`greenckpt.ckpt.config`, which
re-exports both classes; see docs/design/levels-and-config.md.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TypedDict

from greenckpt.ckpt.config.table import (
    NO_LEVEL,
    TOP,
    every_level_setting,
    how_to_set,
    levels_only,
    settings_of,
)
from greenckpt.ckpt.config.values import (
    ConfigError,
    Reading,
    is_int,
    is_real,
    positive_seconds,
    show,
    to_bool,
    to_codec,
    to_int,
)
from greenckpt.ckpt.levels import level_numbers, level_spec, numbers_text, scheme_spec
from greenckpt.errors import InvalidValueError
from greenckpt.io.checksum import CHECKSUMS

_DIRECT = "Config"  # the source of a value given to Config(...) directly


class SettingDescription(TypedDict):
    """One entry of :meth:`Config.describe`: a setting's value (SI units) and its source."""

    value: str | int | float | bool | None
    source: str


@dataclass(frozen=True, init=False)
class LevelConfig:
    """The settings of one registered checkpoint level (:mod:`greenckpt.ckpt.levels`).

    At most one of ``every_s``, ``every_iterations`` and ``auto`` is set: the level's automatic
    interval. An enabled level without one takes only explicit checkpoints. ``settings`` holds
    the values of the settings the level's redundancy scheme and spec declare
    (:func:`~greenckpt.ckpt.levels.level_settings`: ``group_size`` and ``parity`` for the
    erasure scheme of level 3, ``async_flush`` for level 4), each at its default unless given;
    they may be given as keywords too (``LevelConfig(3, parity=2)``) and read as attributes
    (``config.level(3).parity``). A setting the level does not take is refused unless it
    holds that setting's default. The values are checked on construction (with this class
    as the source).
    """

    level: int
    enabled: bool = False
    every_s: float | None = None
    every_iterations: int | None = None
    auto: bool = False
    codec: str | None = None
    settings: Mapping[str, object] = field(default_factory=dict, hash=False)

    def __init__(
        self,
        level: int,
        enabled: bool = False,
        every_s: float | None = None,
        every_iterations: int | None = None,
        auto: bool = False,
        codec: str | None = None,
        settings: Mapping[str, object] | None = None,
        **named: object,
    ) -> None:
        for name, value in (
            ("level", level),
            ("enabled", enabled),
            ("every_s", every_s),
            ("every_iterations", every_iterations),
            ("auto", auto),
            ("codec", codec),
        ):
            object.__setattr__(self, name, value)
        object.__setattr__(self, "settings", {**(settings or {}), **named})
        self.__post_init__()

    def __post_init__(self) -> None:
        level = self.level
        if not is_int(level) or level not in level_numbers():
            raise ConfigError(f"LevelConfig: level must be {numbers_text()}, not {show(level)}")
        where = f"LevelConfig(level={level})"

        def reading(name: str) -> Reading:
            return Reading(where, f"l{level} {name}")

        to_bool(self.enabled, reading("enabled"))
        to_bool(self.auto, reading("auto"))
        if self.every_s is not None:
            r = reading("every_s")
            if not is_real(self.every_s):
                r.fail("a number of seconds > 0", self.every_s)
            object.__setattr__(self, "every_s", positive_seconds(self.every_s, r, "> 0"))
        if self.every_iterations is not None:
            to_int(1)(self.every_iterations, reading("every_iterations"))
        object.__setattr__(self, "codec", to_codec(self.codec, reading("codec")))
        given = [n for n in ("every_s", "every_iterations") if getattr(self, n) is not None]
        given += ["auto"] if self.auto else []
        if len(given) > 1:
            raise ConfigError(f"{where}: give only one of {', '.join(given)}")
        if given and not self.enabled:
            raise ConfigError(f"{where}: {given[0]} is set on a disabled level: set enabled=True")
        object.__setattr__(self, "settings", self._checked_settings(where, reading))

    def _checked_settings(self, where: str, reading: Callable[[str], Reading]) -> dict[str, object]:
        """The level's settings, each given one checked and the others at their defaults."""
        own = settings_of(self.level)
        known = every_level_setting()
        for name, value in self.settings.items():
            if name in own:
                continue
            if name not in known:
                valid = ", ".join(own) or "none"
                raise ConfigError(
                    f"{where}: unknown setting {name!r}: level {self.level} takes {valid}"
                )
            if value != known[name].default:
                raise ConfigError(f"{where}: {name} applies to {levels_only(name)}")
        values = {
            name: setting.convert(self.settings.get(name, setting.default), reading(name))
            for name, setting in own.items()
        }
        check = scheme_spec(level_spec(self.level).scheme).check
        if check is not None:
            check(self.level, {name: (value, where) for name, value in values.items()})
        return values

    def __getattr__(self, name: str) -> object:
        """A level-specific setting by name (``config.level(3).parity``)."""
        settings = self.__dict__.get("settings")
        if settings is None or name.startswith("_") or name not in settings:
            raise AttributeError(
                f"{type(self).__name__} of level {self.__dict__.get('level')} has no setting "
                f"{name!r}"
            )
        return settings[name]

    @property
    def has_interval(self) -> bool:
        """Whether checkpoints at this level are also taken automatically."""
        return self.every_s is not None or self.every_iterations is not None or self.auto


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
    memory_check: bool = False
    levels: tuple[LevelConfig, ...] = field(default_factory=_default_levels)
    sources: Mapping[str, str] = field(default_factory=dict, compare=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "sources", MappingProxyType(dict(self.sources)))
        for name, convert in TOP.items():
            value = convert(getattr(self, name), Reading(self._source(name), name))
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
            raise ConfigError(NO_LEVEL)
        for lvl in levels:
            if not lvl.enabled:
                continue
            setting = level_spec(lvl.level).storage.setting
            if getattr(self, setting) is None:
                raise ConfigError(
                    f"{self._source(f'l{lvl.level}.enabled')}: level {lvl.level} is enabled but "
                    f"{setting} is not set: set {setting} ({how_to_set(setting)}) "
                    f"or turn level {lvl.level} off"
                )
            if lvl.auto and self.mtbf is None:
                raise ConfigError(
                    f'{self._source(f"l{lvl.level}.auto")}: l{lvl.level} every = "auto" needs '
                    f'the job\'s MTBF: set mtbf ({how_to_set("mtbf")}), e.g. "14h"'
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

        Keys are the top-level field names and ``l<n>.<field>`` for the levels, with each
        level's own settings by name (``group_size`` and ``parity`` for level 3 only,
        ``async_flush`` for level 4 only). Sources read
        ``"default"``, ``"keyword keep"``, ``"GREENCKPT_KEEP"`` or
        ``"<file>: [checkpoint] keep"``; the three interval fields of a level share the source
        of its ``every``.
        """
        out: dict[str, SettingDescription] = {}
        for name in TOP:
            out[name] = {"value": getattr(self, name), "source": self._source(name)}
        for lvl in self.levels:
            names = ["enabled", "every_s", "every_iterations", "auto", "codec"]
            names += list(settings_of(lvl.level))
            for name in names:
                key = f"l{lvl.level}.{name}"
                value = lvl.settings[name] if name in lvl.settings else getattr(lvl, name)
                out[key] = {"value": value, "source": self._source(key)}  # type: ignore[typeddict-item]
        return out
