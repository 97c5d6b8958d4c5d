"""The settings of the checkpoint configuration: names, converters, defaults, variables.

Why a table: a setting is named once here — its TOML key and keyword, its
``GREENCKPT_<NAME>`` variable, its converter and default — and the reading, merging and
describing code walk the table instead of naming settings one by one. The level-specific
settings (``group_size``, ``parity``, ``async``) are declared by the redundancy schemes and
levels that take them (:class:`~greenckpt.ckpt.levels.LevelSetting`), so a registered fifth
level gets its ``[checkpoint.l5]`` table, keyword and variables, and a registered scheme its
settings, from the registries. Internal to
:mod:`greenckpt.ckpt.config`; see docs/design/levels-and-config.md.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Mapping
from types import MappingProxyType

from greenckpt.ckpt.config.values import (
    to_bool,
    to_checksum,
    to_codec,
    to_count,
    to_dir,
    to_int,
    to_interval,
    to_iterations,
    to_mtbf,
    to_name,
    to_on_unrecoverable,
)
from greenckpt.ckpt.levels import (
    Convert,
    LevelSetting,
    level_numbers,
    level_settings,
    level_specs,
    numbers_text,
)
from greenckpt.io.checksum import CHECKSUMS

#: Prefix of the environment variables read by :func:`load_config`.
ENV_PREFIX = "GREENCKPT_"
NO_LEVEL = (
    "no checkpoint level is enabled: give a level an interval "
    '(every = "10min", "50it" or "auto") or enabled = true'
)

#: Top-level settings: field name (= TOML key = keyword) -> converter.
TOP: Mapping[str, Convert] = MappingProxyType(
    {
        "name": to_name,
        "local_dir": to_dir,
        "global_dir": to_dir,
        "keep": to_int(1),
        "checksum": to_checksum,
        "writers_per_node": to_count(1, ("all",)),
        "writers_total": to_count(1, ("unlimited", "none")),
        "ranks_per_node": to_count(1, ("host",)),
        "mtbf": to_mtbf,
        "on_unrecoverable": to_on_unrecoverable,
        "space_check": to_bool,
        "memory_check": to_bool,
    }
)

TOP_DEFAULTS: Mapping[str, object] = MappingProxyType(
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
        "memory_check": False,
    }
)


def settings_of(level: int) -> dict[str, LevelSetting]:
    """The level-specific settings of ``level`` by name: its scheme's, then its own."""
    return level_settings(level)


def every_level_setting() -> dict[str, LevelSetting]:
    """Every level-specific setting of the registered levels, by name (first declaration)."""
    found: dict[str, LevelSetting] = {}
    for spec in level_specs():
        for name, setting in level_settings(spec.number).items():
            found.setdefault(name, setting)
    return found


def levels_phrase(levels: tuple[int, ...]) -> str:
    """``level 4``, ``levels 1-3`` or ``levels 1, 2 and 5``."""
    if len(levels) == 1:
        return f"level {levels[0]}"
    if list(levels) == list(range(levels[0], levels[-1] + 1)):
        return f"levels {levels[0]}-{levels[-1]}"
    return f"levels {numbers_text(levels, 'and')}"


def levels_only(name: str) -> str:
    """``level 3 only``: the levels that take a level-specific setting."""
    takers = tuple(s.number for s in level_specs() if name in level_settings(s.number))
    return f"{levels_phrase(takers)} only" if takers else "no registered level"


def level_keys(level: int) -> dict[str, Convert]:
    """TOML keys of ``[checkpoint.l<level>]`` (also the keys of a level keyword dict)."""
    keys: dict[str, Convert] = {
        "every": to_interval,
        "every_iterations": to_iterations,
        "enabled": to_bool,
        "codec": to_codec,
    }
    for setting in settings_of(level).values():
        keys[setting.key] = setting.convert
    return keys


def merged_key(level: int, toml_key: str) -> str:
    """The key under which a level setting is merged: both interval spellings are one setting."""
    return f"l{level}.{'every' if toml_key == 'every_iterations' else toml_key}"


def level_variables() -> dict[str, tuple[int, str]]:
    """``GREENCKPT_L<n>_<KEY>`` -> (level, TOML key), for the levels registered now."""
    table = {}
    for level in level_numbers():
        for key in level_keys(level):
            if key != "every_iterations":
                table[f"{ENV_PREFIX}L{level}_{key.upper()}"] = (level, key)
    return table


TOP_ENV: Mapping[str, str] = MappingProxyType({ENV_PREFIX + k.upper(): k for k in TOP})
LEVEL_ENV_PATTERN = re.compile(rf"{ENV_PREFIX}L[0-9]")


def how_to_set(setting: str) -> str:
    return f"{ENV_PREFIX}{setting.upper()}, [checkpoint] {setting} or keyword {setting}"


def suggest(name: str, valid: list[str]) -> str:
    close = difflib.get_close_matches(name, valid, n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""
