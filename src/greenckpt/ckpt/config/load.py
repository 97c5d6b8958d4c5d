"""Reading the configuration's sources and merging them into one checked ``Config``.

Why one merge by setting: each setting is taken whole from the highest source that gives it
(keywords > environment > TOML file > defaults), while every value of every source is checked
where it is read, even one a higher source overrides, so that a typo never hides until the day
the override is removed; unknown keys, sections, keywords and ``GREENCKPT_L<n>_*`` variables
are errors naming the valid ones. Internal to :mod:`greenckpt.ckpt.config`, which re-exports
:func:`load_config`; see docs/design/levels-and-config.md.
"""

from __future__ import annotations

import os
import re
import tomllib
from collections.abc import Callable, Mapping
from typing import Any

from greenckpt.ckpt.config.result import Config, LevelConfig
from greenckpt.ckpt.config.table import (
    ENV_PREFIX,
    LEVEL_ENV_PATTERN,
    NO_LEVEL,
    TOP,
    TOP_DEFAULTS,
    TOP_ENV,
    every_level_setting,
    how_to_set,
    level_keys,
    level_variables,
    levels_only,
    levels_phrase,
    merged_key,
    settings_of,
    suggest,
)
from greenckpt.ckpt.config.values import ConfigError, Interval, Reading, show, to_path
from greenckpt.ckpt.levels import Storage, level_numbers, level_spec, level_specs, scheme_spec

_CONFIG_ENV = ENV_PREFIX + "CONFIG"
_DEFAULT = "default"

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


def _parse_toml(path: str, shown: str, r: Reading) -> dict[str, Any]:
    """The TOML document at ``path``; a one-line :class:`ConfigError` naming the file (and
    the line of a syntax error) if it cannot be read or parsed."""
    try:
        with open(path, "rb") as fp:
            text = fp.read()
    except OSError as exc:
        raise r.error(f"file {shown} cannot be read: {exc.strerror or exc}") from None
    try:
        return tomllib.loads(text.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{shown}: not UTF-8 text (byte {exc.start})") from None
    except tomllib.TOMLDecodeError as exc:
        raise _toml_error(shown, text, exc) from None
    except RecursionError:  # tomllib recurses once per nested array or inline table
        raise ConfigError(f"{shown}: arrays or tables nested too deeply to be settings") from None


def _checkpoint_section(doc: Mapping[str, Any], shown: str) -> dict[str, Any]:
    """The document's ``[checkpoint]`` table (empty if absent): the only section there is."""
    for key, value in doc.items():
        if key == "checkpoint":
            if not isinstance(value, dict):
                raise ConfigError(
                    f"{shown}: checkpoint must be a table [checkpoint], not {show(value)}"
                )
            continue
        if isinstance(value, dict):
            raise ConfigError(
                f"{shown}: unknown section [{key}]{suggest(key, ['checkpoint'])}: "
                "valid sections: [checkpoint]"
            )
        raise ConfigError(
            f"{shown}: key {key!r} is outside any section: put checkpoint settings under "
            "[checkpoint]"
        )
    section: dict[str, Any] = doc.get("checkpoint", {})
    return section


def _read_toml(given: object, given_by: str, env: Mapping[str, str]) -> _Merged:
    """Read and check the TOML file named by ``given`` (from keyword config or the env)."""
    r = Reading(given_by, "config", env=env)
    path = to_path(given, r, "file")
    shown = _shown_path(path)
    section = _checkpoint_section(_parse_toml(path, shown, r), shown)
    merged: _Merged = {}
    known = level_numbers()
    level_tables = {f"l{level}": level for level in known}
    valid = [*TOP, *level_tables]
    for key, value in section.items():
        where = f"{shown}: [checkpoint] {key}"
        if key in TOP:
            merged[key] = (TOP[key](value, Reading(where, key, env=env)), where)
        elif key in level_tables:
            if not isinstance(value, dict):
                raise ConfigError(f"{where}: must be a table [checkpoint.{key}], not {show(value)}")
            merged.update(_read_level_table(level_tables[key], value, shown))
        else:
            raise ConfigError(
                f"{shown}: [checkpoint] unknown key {key!r}{suggest(key, valid)}: valid keys: "
                f"{', '.join(TOP)}, and tables [checkpoint.l{known[0]}] to "
                f"[checkpoint.l{known[-1]}]"
            )
    return merged


def _level_specific_hint(key: str) -> str:
    for name, setting in every_level_setting().items():
        if key in (name, setting.key):
            return f"; {setting.key} applies to {levels_only(name)}"
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
    keys = level_keys(level)
    merged: _Merged = {}
    for key, value in items.items():
        if key not in keys:
            raise ConfigError(
                f"{context} unknown key {key!r}{suggest(str(key), list(keys))}: valid keys: "
                f"{', '.join(keys)}{_level_specific_hint(str(key))}"
            )
        where = where_of(key)
        merged[merged_key(level, key)] = (
            keys[key](value, Reading(where, f"l{level} {key}")),
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
    level_env = level_variables()
    for name in sorted(env):
        if not name.startswith(ENV_PREFIX):
            continue
        value = env[name].strip()
        if name in TOP_ENV:
            key = TOP_ENV[name]
            if not value:
                raise ConfigError(f"{name}: {key} is empty: give a value or unset {name}")
            merged[key] = (TOP[key](value, Reading(name, key, text=True, env=env)), name)
        elif name in level_env:
            level, key = level_env[name]
            r = Reading(name, f"l{level} {key}", text=True)
            merged[merged_key(level, key)] = (level_keys(level)[key](value, r), name)
        elif LEVEL_ENV_PATTERN.match(name):
            raise ConfigError(
                f"{name} is not a greenckpt setting{suggest(name, list(level_env))}: valid "
                f"level variables: {', '.join(level_env)}"
            )
    return merged


def _read_keywords(kwargs: Mapping[str, object], env: Mapping[str, str]) -> _Merged:
    merged: _Merged = {}
    levels = {f"l{level}": level for level in level_numbers()}
    for key, value in kwargs.items():
        where = f"keyword {key}"
        if key in TOP:
            merged[key] = (TOP[key](value, Reading(where, key, env=env)), where)
        elif key in levels:
            merged.update(_read_level_keyword(levels[key], value))
        else:
            valid = [*TOP, *levels, "config", "env"]
            raise ConfigError(
                f"keyword {key!r} is not a setting{suggest(key, valid)}: valid keywords: "
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
        interval: Interval | None = None
        if value.has_interval:
            interval = Interval(value.every_s, value.every_iterations, value.auto)
        merged[f"{name}.every"] = (interval, where)
        merged[f"{name}.enabled"] = (value.enabled, where)
        merged[f"{name}.codec"] = (value.codec, where)
        for field_name, setting in settings_of(level).items():
            merged[f"{name}.{setting.key}"] = (value.settings[field_name], where)
        return merged
    if not isinstance(value, Mapping):
        raise ConfigError(
            f"keyword {name}: must be a dict of level settings such as "
            f'{{"every": "5min", "codec": "lz4"}} or a LevelConfig, not {show(value)}'
        )
    _check_one_interval(value, f"keyword {name}")
    return _merge_level_items(
        level, value, f"keyword {name}:", lambda key: f"keyword {name}[{key!r}]"
    )


# --------------------------------------------------------------------------------------------
# Merging.
# --------------------------------------------------------------------------------------------


#: Per level: (its interval or None, source) and (whether it is enabled, source).
_Switches = tuple[dict[int, tuple[Interval | None, str]], dict[int, tuple[bool, str]]]


def _switches(merged: _Merged, top: Mapping[str, object]) -> _Switches:
    """Each level's interval and whether it is on, with sources: ``enabled = false`` turns a
    level off whatever its interval, and with no interval and no level on anywhere the default
    level (:func:`_default_level`) is on for explicit checkpoints."""
    intervals: dict[int, tuple[Interval | None, str]] = {}
    enabled: dict[int, tuple[bool, str]] = {}
    explicit: dict[int, bool] = {}
    for level in level_numbers():
        interval, source = merged.get(f"l{level}.every", (None, _DEFAULT))
        assert interval is None or isinstance(interval, Interval)
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
    return intervals, enabled


def _check_schemes(merged: _Merged) -> None:
    """Each level's scheme's check across its settings (parity below the group size), given
    the merged values with their sources, so that a message names where each came from."""
    for level in level_numbers():
        check = scheme_spec(level_spec(level).scheme).check
        if check is not None:
            values = {
                name: merged[f"l{level}.{setting.key}"]
                for name, setting in settings_of(level).items()
            }
            check(level, values)


def _level_config(
    level: int,
    merged: _Merged,
    switches: _Switches,
    sources: dict[str, str],
) -> LevelConfig:
    """Level ``level``'s :class:`LevelConfig`, recording the source of each field in
    ``sources`` (the three interval fields share the source of ``every``)."""
    interval, interval_source = switches[0][level]
    flag, flag_source = switches[1][level]
    extra: dict[str, Any] = {}
    for field_name, setting in settings_of(level).items():
        extra[field_name], sources[f"l{level}.{field_name}"] = merged[f"l{level}.{setting.key}"]
    codec, sources[f"l{level}.codec"] = merged[f"l{level}.codec"]
    sources[f"l{level}.enabled"] = flag_source
    for name in ("every_s", "every_iterations", "auto"):
        sources[f"l{level}.{name}"] = interval_source
    interval = interval or Interval()
    return LevelConfig(
        level,
        enabled=flag,
        every_s=interval.seconds,
        every_iterations=interval.iterations,
        auto=interval.auto,
        codec=codec,
        settings=extra,
    )


def _build(merged: _Merged) -> Config:
    """Resolve levels (enabled, default level) and build the checked :class:`Config`."""
    sources: dict[str, str] = {key: merged[key][1] for key in TOP}
    top: dict[str, Any] = {key: merged[key][0] for key in TOP}
    switches = _switches(merged, top)
    _check_schemes(merged)
    levels = tuple(_level_config(level, merged, switches, sources) for level in level_numbers())
    return Config(**top, levels=levels, sources=sources)


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
            f"no checkpoint directory: set local_dir for node-local {levels_phrase(local)} "
            f"({how_to_set('local_dir')}) or global_dir for {levels_phrase(global_)} "
            f"({how_to_set('global_dir')})"
        )
    raise ConfigError(NO_LEVEL)


def _defaults() -> _Merged:
    merged: _Merged = {key: (value, _DEFAULT) for key, value in TOP_DEFAULTS.items()}
    for level in level_numbers():
        merged[f"l{level}.codec"] = (None, _DEFAULT)
        for setting in settings_of(level).values():
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
