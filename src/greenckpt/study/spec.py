"""A study file: the experiment's design, read and checked before anything runs.

Why every check here: a study runs for minutes to hours; a typo found after the first hour
wastes it. So the whole file is validated first, each error one line naming ``FILE:LINE`` and
what would be right (tomllib gives no line for a value that parses but is wrong, so the line
of the key is looked up in the text). The format: docs/formats.md ("Study file").
"""

from __future__ import annotations

import re
import shutil
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from greenckpt.errors import InvalidValueError
from greenckpt.study.lever_factors import LEVER_FACTORS, RIGHT, lever_level_ok, lever_refusal
from greenckpt.units import parse_duration, parse_frequency

__all__ = [
    "FACTORS",
    "PLACEHOLDERS",
    "POLICIES",
    "Study",
    "StudyError",
    "load_study",
    "parse_ckp",
]

POLICIES = ("profile", "performance", "powersave", "ondemand", "defaults")
SETTINGS_FACTORS = ("frequency", "io_processes", "cstates", *LEVER_FACTORS)
"""Factors applied through ``greenckpt run --policy fixed`` (so not beside ``policy``)."""
FACTORS = ("policy", "checkpoint", "size", "failure", *SETTINGS_FACTORS, "codec", "target")
"""The factors a study can vary (each a list of levels in ``[factors]``)."""
"""Factors of the papers that ``greenckpt study`` cannot vary yet (said so in one line)."""
PLACEHOLDERS = (
    "python",
    "mpiexec",
    "run_dir",
    "size",
    "target",
    "checkpoint_args",
    "failure_args",
)
DEFAULTS: dict[str, object] = {
    "policy": "profile",
    "checkpoint": "app",
    "size": 1.0,
    "failure": "none",
    "codec": "app",
    "target": "{run_dir}/target",
}
_STUDY_KEYS = ("name", "mirrors", "repeats", "seed", "order", "baseline", "scale", "time_unit")
_RUN_KEYS = ("no_control", "profile", "node_mtbf", "app_power", "nodes_emulated")
_CKP = re.compile(r"ckp\((\d+),(\d+),(\d+),(\d+)\)")
_CODEC = re.compile(r"none|app|zstd(:\d{1,2})?|lz4|zlib(:\d)?")
_KILL = re.compile(r"kill@([1-9]\d*)it")
_BITFLIP = re.compile(r"bitflip@(\d+)/([0-9.]+(?:[eE][-+]?\d+)?)s?")


class StudyError(InvalidValueError):
    """A study file that cannot be run: one line, ``FILE:LINE: what is wrong; what is right``."""


@dataclass(frozen=True)
class Study:
    """A validated study file."""

    path: Path
    name: str
    mirrors: str
    repeats: int
    seed: int
    order: str
    baseline: dict[str, object]
    scale: float
    time_unit_s: float
    command: tuple[str, ...]
    dirs: tuple[str, ...]
    run: dict[str, Any]
    factors: dict[str, tuple[object, ...]] = field(default_factory=dict)


def parse_ckp(text: str) -> tuple[int, int, int, int] | None:
    """``ckp(a,b,c,d)``: the L1..L4 intervals in time units (0: level unused); None if not."""
    match = _CKP.fullmatch(text.replace(" ", ""))
    if match is None:
        return None
    a, b, c, d = (int(g) for g in match.groups())
    return a, b, c, d


class _Reader:
    """The text of the file, to name the line of a key in an error."""

    def __init__(self, path: Path, text: str) -> None:
        self.path, self.lines = path, text.splitlines()

    def line_of(self, table: str, key: str | None = None) -> int:
        current = ""
        for number, line in enumerate(self.lines, 1):
            head = re.match(r"\s*\[([^\]]+)\]\s*(#.*)?$", line)
            if head:
                current = head[1].strip()
                if key is None and current == table:
                    return number
                continue
            if key is not None and current == table and re.match(rf"\s*{re.escape(key)}\s*=", line):
                return number
        return 1

    def error(self, table: str, key: str | None, message: str) -> StudyError:
        return StudyError(f"{self.path}:{self.line_of(table, key)}: {message}")


def load_study(path: str | Path) -> Study:
    """Read and check the study file at ``path`` (:class:`StudyError`, one line, if wrong)."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise StudyError(f"cannot read the study file {path}: {exc.strerror or exc}") from None
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise StudyError(f"{path}: not valid TOML: {exc}") from None
    r = _Reader(path, text)
    _known(r, doc, "", ("study", "app", "run", "factors"))
    study = _table(r, doc, "study")
    app = _table(r, doc, "app")
    run = doc.get("run", {})
    factors_doc = doc.get("factors", {})
    _known(r, study, "study", _STUDY_KEYS)
    _known(r, app, "app", ("command", "dirs"))
    _known(r, run, "run", _RUN_KEYS)
    factors = _factors(r, factors_doc)
    _node_can(r, factors)
    name = study.get("name")
    if not isinstance(name, str) or not re.fullmatch(r"[a-z0-9][a-z0-9-]*", name):
        raise r.error("study", "name", f"name must be [a-z0-9-]+, got {name!r}")
    baseline = _baseline(r, study.get("baseline", {}), factors)
    return Study(
        path=path,
        name=name,
        mirrors=str(study.get("mirrors", "")),
        repeats=_int(r, study, "repeats", 1, low=1),
        seed=_int(r, study, "seed", 1, low=0),
        order=_choice(r, study, "order", "blocks", ("blocks", "random")),
        baseline=baseline,
        scale=_positive(r, study, "scale", 1.0),
        time_unit_s=_duration(r, "study", "time_unit", study.get("time_unit", "1min")),
        command=_command(r, app.get("command")),
        dirs=_dirs(r, app.get("dirs", [])),
        run=_run(r, run),
        factors=factors,
    )


def _table(r: _Reader, doc: dict[str, Any], name: str) -> dict[str, Any]:
    table = doc.get(name)
    if not isinstance(table, dict):
        raise StudyError(f"{r.path}:1: a study file needs a [{name}] table")
    return table


def _known(r: _Reader, table: dict[str, Any], name: str, allowed: tuple[str, ...]) -> None:
    for key in table:
        if key not in allowed:
            what = f"table [{key}]" if not name else f"key {key!r} in [{name}]"
            hint = ", ".join(allowed)
            raise r.error(name or key, key if name else None, f"unknown {what}; use {hint}")


def _factors(r: _Reader, doc: object) -> dict[str, tuple[object, ...]]:
    if not isinstance(doc, dict):
        raise StudyError(f"{r.path}:{r.line_of('factors')}: [factors] must be a table")
    _known(r, doc, "factors", FACTORS)
    out: dict[str, tuple[object, ...]] = {}
    for key, levels in doc.items():
        if not isinstance(levels, list) or not levels:
            raise r.error("factors", key, f"{key} must be a non-empty list of levels")
        checked = tuple(_level(r, key, level) for level in levels)
        if len(set(map(str, checked))) != len(checked):
            raise r.error("factors", key, f"{key} names a level twice")
        out[key] = checked
    return out


def _level(r: _Reader, factor: str, level: object) -> object:
    """One level of ``factor``, checked (and normalised: sizes as floats)."""
    number = isinstance(level, int | float) and not isinstance(level, bool)
    if factor == "size" and number and float(level) > 0:  # type: ignore[arg-type]
        return float(level)  # type: ignore[arg-type]
    if factor != "size" and _level_ok(factor, level):
        return level
    right = {
        "policy": f"one of {', '.join(POLICIES)}",
        "size": "a number > 0 (the problem-size factor)",
        "checkpoint": '"none", "app" (the command\'s own) or "ckp(a,b,c,d)" (L1..L4 intervals)',
        "failure": '"none", "bitflip@POS/EVERY" (e.g. "bitflip@1/10s") or "kill@Nit" (rank 1 '
        "killed after iteration N, then one restart)",
        "frequency": 'a frequency such as "1.4GHz"',
        "io_processes": "an integer >= 1",
        "cstates": '"on" or "off"',
        "codec": '"none", "app" or a codec (zstd[:1-22], lz4, zlib[:0-9])',
        "target": 'a directory for {target}: under "{run_dir}/..." or an existing directory',
        **RIGHT,
    }[factor]
    raise r.error("factors", factor, f"{factor} level {level!r} is not {right}")


def _level_ok(factor: str, level: object) -> bool:
    if factor == "policy":
        return level in POLICIES
    if not isinstance(level, str) and factor != "io_processes":
        return False
    if factor == "checkpoint":
        return level in ("none", "app") or parse_ckp(str(level)) is not None
    if factor == "failure":
        match = _BITFLIP.fullmatch(str(level))
        flip = match is not None and 1 <= int(match[1]) <= 64 and float(match[2]) > 0
        return level == "none" or flip or _KILL.fullmatch(str(level)) is not None
    if factor == "target":
        return _target_ok(str(level))
    return _setting_ok(factor, level)


def _target_ok(level: str) -> bool:
    """A storage target: inside the run's directory, or an existing directory elsewhere (a
    local SSD, an NFS mount)."""
    if level.startswith("{run_dir}/") and ".." not in Path(level).parts:
        return True
    return "{" not in level and Path(level).is_dir()


def _setting_ok(factor: str, level: object) -> bool:
    if factor in LEVER_FACTORS:
        return lever_level_ok(factor, level)
    if factor == "io_processes":
        return isinstance(level, int) and not isinstance(level, bool) and level >= 1
    if factor == "cstates":
        return level in ("on", "off")
    if factor == "codec":
        return isinstance(level, str) and _CODEC.fullmatch(level) is not None
    try:
        return parse_frequency(str(level)) > 0
    except (ValueError, InvalidValueError):
        return False


def _node_can(r: _Reader, factors: dict[str, tuple[object, ...]]) -> None:
    """Impossible levels: settings this node cannot apply, found before anything runs."""
    wanted = [f for f in SETTINGS_FACTORS if f in factors]
    if wanted and "policy" in factors:
        raise r.error(
            "factors",
            wanted[0],
            f"{wanted[0]} is applied with greenckpt run --policy fixed: it cannot vary beside "
            "policy in one study (split it in two studies)",
        )
    refused = lever_refusal(factors)
    if refused is not None:
        raise r.error("factors", *refused)
    if "frequency" not in factors and "cstates" not in factors:
        return
    from greenckpt.runtime.node import Node  # noqa: PLC0415 - reads the node only when asked

    node = Node.detect()
    if "frequency" in factors and not node.frequency_control:
        raise r.error(
            "factors",
            "frequency",
            f"impossible level: this node cannot set a CPU frequency "
            f"({node.frequency_reason or 'no cpufreq'}); vary frequency where cpufreq is writable",
        )
    if "cstates" in factors and not node.cstate_control:
        raise r.error(
            "factors", "cstates", "impossible level: this node cannot switch C-states (no cpuidle)"
        )


def _baseline(r: _Reader, doc: object, factors: dict[str, tuple[object, ...]]) -> dict[str, object]:
    if not isinstance(doc, dict):
        raise r.error(
            "study", "baseline", 'baseline must be an inline table, e.g. {checkpoint = "none"}'
        )
    out: dict[str, object] = {}
    for key, value in doc.items():
        if key not in factors:
            raise r.error("study", "baseline", f"baseline names {key!r}, which is not a factor")
        level = _level(r, key, value)
        if str(level) not in map(str, factors[key]):
            raise r.error(
                "study", "baseline", f"baseline {key} = {value!r} is not one of its levels"
            )
        out[key] = level
    return out


def _int(r: _Reader, table: dict[str, Any], key: str, default: int, *, low: int) -> int:
    value = table.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise r.error("study", key, f"{key} must be an integer >= {low}, got {value!r}")
    return value


def _positive(r: _Reader, table: dict[str, Any], key: str, default: float) -> float:
    value = table.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
        raise r.error("study", key, f"{key} must be a number > 0, got {value!r}")
    return float(value)


def _choice(
    r: _Reader, table: dict[str, Any], key: str, default: str, allowed: tuple[str, ...]
) -> str:
    value = table.get(key, default)
    if value not in allowed:
        raise r.error("study", key, f"{key} must be one of {', '.join(allowed)}, got {value!r}")
    return str(value)


def _duration(r: _Reader, table: str, key: str, value: object) -> float:
    try:
        seconds = parse_duration(str(value))
    except (ValueError, InvalidValueError):
        seconds = -1.0
    if not seconds > 0:
        raise r.error(table, key, f'{key} must be a duration such as "1s" or "1min", got {value!r}')
    return seconds


def _command(r: _Reader, command: object) -> tuple[str, ...]:
    if not isinstance(command, list) or not command or not all(isinstance(a, str) for a in command):
        raise r.error("app", "command", "command must be a non-empty list of strings")
    for arg in command:
        for name in re.findall(r"\{([^{}]*)\}", arg):
            if name not in PLACEHOLDERS:
                raise r.error(
                    "app",
                    "command",
                    f"unknown placeholder {{{name}}}; use "
                    + ", ".join("{" + p + "}" for p in PLACEHOLDERS),
                )
    first = command[0]
    if "{" not in first and shutil.which(first) is None and not Path(first).is_file():
        raise r.error(
            "app", "command", f"the application {first!r} is not found (not on PATH, no such file)"
        )
    return tuple(command)


def _dirs(r: _Reader, dirs: object) -> tuple[str, ...]:
    """Folders made in each run's directory before it starts (e.g. the checkpoint bases)."""
    ok = isinstance(dirs, list) and all(
        isinstance(d, str) and d and not Path(d).is_absolute() and ".." not in Path(d).parts
        for d in dirs
    )
    if not ok:
        raise r.error("app", "dirs", 'dirs must be a list of relative folder names, e.g. ["local"]')
    return tuple(dirs)  # type: ignore[arg-type]


def _run(r: _Reader, run: dict[str, Any]) -> dict[str, Any]:
    out = dict(run)
    if "profile" in out:
        profiles = out["profile"] if isinstance(out["profile"], list) else [out["profile"]]
        for item in profiles:
            if not isinstance(item, str) or not Path(item).is_file():
                raise r.error("run", "profile", f"profile {item!r} is not a file")
        out["profile"] = profiles
    if "nodes_emulated" in out:
        n = out["nodes_emulated"]
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise r.error(
                "run", "nodes_emulated", f"nodes_emulated must be an integer >= 1, got {n!r}"
            )
    if "no_control" in out and not isinstance(out["no_control"], bool):
        raise r.error("run", "no_control", "no_control must be true or false")
    for key in ("node_mtbf", "app_power"):
        if key in out and not isinstance(out[key], str):
            raise r.error("run", key, f'{key} must be a string such as "14h" or "200W"')
    return out
