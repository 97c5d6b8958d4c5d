"""Reading one configuration value: a converter per kind of value, and :class:`ConfigError`.

Why apart from the settings table and the merging: every source (TOML file, environment
variable, keyword, a :class:`~greenckpt.ckpt.config.Config` built directly) checks its values
with these same converters, so a value means the same thing and is refused with the same
one-line message wherever it is written. Units such as ``"14h"`` are parsed here and only here
(:mod:`greenckpt.units`); what comes out is a plain SI number. Internal to
:mod:`greenckpt.ckpt.config`, which re-exports the public names; see
docs/design/levels-and-config.md.
"""

from __future__ import annotations

import math
import numbers
import operator
import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import NoReturn, SupportsFloat, SupportsIndex, cast

from greenckpt.errors import GreenckptError
from greenckpt.io.checksum import CHECKSUMS
from greenckpt.io.codec import CODEC_LEVEL_RANGES
from greenckpt.units import UnitError, parse_duration

#: Compression codecs and the range of their ``<name>:<level>`` suffix (``None``: no level);
#: the I/O engine's table, so configuration and engine cannot disagree.
CODECS: Mapping[str, tuple[int, int] | None] = MappingProxyType(CODEC_LEVEL_RANGES)

_CODEC_SPELLINGS = "none, zstd, zstd:<1-22>, lz4, zlib or zlib:<0-9>"
_TRUE_WORDS = ("1", "true", "yes", "on")
_FALSE_WORDS = ("0", "false", "no", "off")


class ConfigError(GreenckptError, ValueError):
    """The checkpoint configuration is invalid.

    The message is one line that names where the value came from (a keyword, an environment
    variable or a TOML file, section and key), the setting and what would be valid, so that
    the command-line tools can print it as is.
    """


@dataclass(frozen=True)
class Reading:
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
        raise ConfigError(f"{self.where}: {self.label} must be {expected}, not {show(value)}")

    def error(self, problem: str) -> ConfigError:
        return ConfigError(f"{self.where}: {self.label} {problem}")


def show(value: object) -> str:
    """``repr`` of a value, shortened: keeps messages on one line and readable."""
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def is_int(value: object) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def is_real(value: object) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def to_name(value: object, r: Reading) -> str:
    expected = 'a plain directory name (non-empty, no "/", not "." or "..")'
    if not isinstance(value, str) or value in ("", ".", "..") or "/" in value or "\0" in value:
        r.fail(expected, value)
    return value


_VARIABLE = re.compile(r"\$(?:\{(?P<braced>[A-Za-z_][A-Za-z0-9_]*)\}|(?P<plain>[A-Za-z_]\w*))")


def _expand(path: str, r: Reading, env: Mapping[str, str]) -> str:
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
                raise r.error(f"names an unknown user in {show(path)}")
        path = home + sep + tail

    def substitute(match: re.Match[str]) -> str:
        name = match["braced"] or match["plain"]
        if name not in env:
            raise r.error(f"uses ${name}, which is not set, in {show(path)}")
        return env[name]

    return _VARIABLE.sub(substitute, path)


def to_path(value: object, r: Reading, what: str) -> str:
    """A non-empty path (str or path-like), expanded when the reading has an environment."""
    if isinstance(value, os.PathLike):
        value = os.fspath(value)
    if not isinstance(value, str) or not value.strip() or "\0" in value:
        r.fail(f"a non-empty {what} path", value)
    if r.env is None:
        return value
    expanded = _expand(value, r, r.env)
    if not expanded.strip():
        raise r.error(f"is empty after expanding {show(value)}: give a {what} path")
    return expanded


def to_dir(value: object, r: Reading) -> str | None:
    if value is None and not r.text:
        return None
    return to_path(value, r, "directory")


def to_count(minimum: int, unset: tuple[str, ...] = ()) -> Callable[[object, Reading], int | None]:
    """A converter for an integer >= ``minimum``; ``unset`` are words (and ``None``) for none."""
    words = " or ".join(f'"{word}"' for word in unset)
    expected = f"an integer >= {minimum}" + (f" or {words}" if unset else "")

    def convert(value: object, r: Reading) -> int | None:
        if unset and (value is None and not r.text):
            return None
        if isinstance(value, str) and unset and value.strip().lower() in unset:
            return None
        if r.text and isinstance(value, str) and re.fullmatch(r"[+-]?[0-9]+", value.strip()):
            number = int(value)
        elif is_int(value):
            number = operator.index(cast(SupportsIndex, value))
        else:
            r.fail(expected, value)
        if number < minimum:
            r.fail(expected, value)
        return number

    return convert


def to_int(minimum: int) -> Callable[[object, Reading], int]:
    """Like :func:`to_count` for a setting that must always have a value."""
    convert = to_count(minimum)

    def required(value: object, r: Reading) -> int:
        number = convert(value, r)
        assert number is not None  # to_count without unset words never returns None
        return number

    return required


def to_bool(value: object, r: Reading) -> bool:
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


def to_checksum(value: object, r: Reading) -> str:
    if isinstance(value, str) and value.strip().lower() in CHECKSUMS:
        return value.strip().lower()
    r.fail(" or ".join(f'"{name}"' for name in CHECKSUMS), value)


def positive_seconds(value: object, r: Reading, expected: str) -> float:
    """A number of seconds, finite and > 0 (numbers come from TOML, keywords or Config)."""
    seconds = float(cast(SupportsFloat, value))
    if not (math.isfinite(seconds) and seconds > 0):
        r.fail(expected, value)
    return seconds


def to_mtbf(value: object, r: Reading) -> float | None:
    expected = 'a duration such as "14h", or a number of seconds > 0'
    if value is None and not r.text:
        return None
    if isinstance(value, str):
        try:
            return parse_duration(value)
        except UnitError as exc:
            raise r.error(f'must be a duration such as "14h" ({exc})') from None
    if is_real(value) and not r.text:
        return positive_seconds(value, r, expected)
    r.fail(expected, value)


ON_UNRECOVERABLE = ("raise", "fresh")
"""The values of ``on_unrecoverable`` (see :meth:`greenckpt.ckpt.api.Checkpointer.recover`)."""


def to_on_unrecoverable(value: object, r: Reading) -> str:
    if isinstance(value, str) and value.strip().lower() in ON_UNRECOVERABLE:
        return value.strip().lower()
    r.fail(
        '"raise" (a RecoveryError) or "fresh" (move the unrestorable checkpoints aside and '
        "start afresh)",
        value,
    )


def to_codec(value: object, r: Reading) -> str | None:
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
class Interval:
    """A level's automatic interval: exactly one of seconds, iterations or auto."""

    seconds: float | None = None
    iterations: int | None = None
    auto: bool = False


_ITERATIONS = re.compile(r"([0-9]+)[ \t]*(?:it|its|iter|iters|iteration|iterations)", re.I)
_EVERY = 'a duration such as "10min", an iteration count such as "50it", or "auto"'


def to_interval(value: object, r: Reading) -> Interval:
    if not isinstance(value, str):
        if is_real(value):
            r.fail(
                f'{_EVERY} (a bare number is ambiguous: write "{value}s" or use every_iterations)',
                value,
            )
        r.fail(_EVERY, value)
    text = value.strip()
    if text.lower() == "auto":
        return Interval(auto=True)
    match = _ITERATIONS.fullmatch(text)
    if match:
        iterations = int(match[1])
        if iterations < 1:
            r.fail(f"{_EVERY}; an iteration count must be >= 1", value)
        return Interval(iterations=iterations)
    try:
        return Interval(seconds=parse_duration(text))
    except UnitError as exc:
        raise r.error(f"must be {_EVERY} ({exc})") from None


def to_iterations(value: object, r: Reading) -> Interval:
    """``every_iterations = 50``: the same setting as ``every = "50it"``."""
    return Interval(iterations=to_int(1)(value, r))
