"""Configuration of the checkpoint library: TOML file, environment variables, keywords.

Why three sources: a job is configured where people actually configure it — a TOML file kept
with the job script, ``GREENCKPT_*`` variables set by a batch system or wrapper, keywords
passed by the application — and :func:`load_config` merges them into one frozen, checked
:class:`Config` (keywords > environment > TOML file > defaults, setting by setting), whose
:meth:`Config.describe` names the source of every value. Errors are one-line
:class:`ConfigError` messages naming the source, the setting and what would be valid.

This package is the public face; its modules split the work by job:
:mod:`~greenckpt.ckpt.config.values` (one converter per kind of value),
:mod:`~greenckpt.ckpt.config.table` (the table of settings, levels' settings from the level
registry), :mod:`~greenckpt.ckpt.config.result` (:class:`Config`, :class:`LevelConfig`) and
:mod:`~greenckpt.ckpt.config.load` (reading and merging). Every setting, its variable, default
and valid values, and the TOML layout are in docs/design/levels-and-config.md.
"""

from __future__ import annotations

from greenckpt.ckpt.config.load import load_config
from greenckpt.ckpt.config.result import Config, LevelConfig, SettingDescription
from greenckpt.ckpt.config.table import ENV_PREFIX
from greenckpt.ckpt.config.values import CODECS, ON_UNRECOVERABLE, ConfigError
from greenckpt.io.checksum import CHECKSUMS

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
