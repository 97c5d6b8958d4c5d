"""Checkpoint configuration: precedence, validation messages, defaults and sources."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from greenckpt.ckpt.config import (
    CHECKSUMS,
    CODECS,
    Config,
    ConfigError,
    LevelConfig,
    load_config,
)

EXAMPLE = """\
[checkpoint]
name = "heat"
local_dir = "/tmp/greenckpt"
global_dir = "/scratch/me/ckpt"
keep = 2
checksum = "xxh3_64"
writers_per_node = 2
writers_total = 8
ranks_per_node = 2
mtbf = "14h"

[checkpoint.l1]
every = "5min"
codec = "lz4"

[checkpoint.l2]
every = "20it"

[checkpoint.l3]
every = "auto"
group_size = 4
parity = 1

[checkpoint.l4]
every = "1h"
async = true
codec = "zstd:3"
"""


def write(tmp_path: Path, text: str, name: str = "ckpt.toml") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def error_of(*args: Any, **kwargs: Any) -> str:
    """The message of the ConfigError that load_config raises; it must be one line."""
    kwargs.setdefault("env", {})
    with pytest.raises(ConfigError) as info:
        load_config(*args, **kwargs)
    message = str(info.value)
    assert "\n" not in message and "\r" not in message, message
    return message


# --------------------------------------------------------------------------------------------
# Reading the example file, defaults.
# --------------------------------------------------------------------------------------------


def test_example_file_is_read_into_si_values(tmp_path: Path) -> None:
    config = load_config(write(tmp_path, EXAMPLE), env={})
    assert config.name == "heat"
    assert config.local_dir == "/tmp/greenckpt"
    assert config.global_dir == "/scratch/me/ckpt"
    assert (config.keep, config.checksum) == (2, "xxh3_64")
    assert (config.writers_per_node, config.writers_total, config.ranks_per_node) == (2, 8, 2)
    assert config.mtbf == 14 * 3600.0
    l1, l2, l3, l4 = config.levels
    assert l1 == LevelConfig(1, enabled=True, every_s=300.0, codec="lz4")
    assert l2 == LevelConfig(2, enabled=True, every_iterations=20)
    assert l3 == LevelConfig(3, enabled=True, auto=True, group_size=4, parity=1)
    assert l4 == LevelConfig(4, enabled=True, every_s=3600.0, codec="zstd:3", async_flush=True)
    assert config.enabled_levels == (1, 2, 3, 4)
    assert config.level(3) is l3


def test_defaults_with_only_a_local_dir() -> None:
    config = load_config(env={}, local_dir="/x")
    assert config.name == "greenckpt"
    assert config.keep == 2
    assert config.checksum == "xxh3_64" == CHECKSUMS[0]
    assert config.writers_per_node is None
    assert config.writers_total is None
    assert config.ranks_per_node is None
    assert config.mtbf is None
    assert config.global_dir is None
    assert config.enabled_levels == (1,)
    l1 = config.level(1)
    assert l1.enabled and not l1.has_interval and l1.codec is None
    l3, l4 = config.level(3), config.level(4)
    assert (l3.group_size, l3.parity, l4.async_flush) == (4, 1, False)


def test_no_config_file_without_keyword_or_variable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)  # a stray ckpt.toml in the working directory is not picked up
    write(tmp_path, "[checkpoint]\nkeep = 7\n")
    assert load_config(env={}, local_dir="/x").keep == 2


def test_os_environ_is_read_when_no_env_is_given(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GREENCKPT_LOCAL_DIR", "/from/environ")
    monkeypatch.setenv("GREENCKPT_KEEP", "5")
    config = load_config()
    assert (config.local_dir, config.keep) == ("/from/environ", 5)


# --------------------------------------------------------------------------------------------
# Precedence: keyword > environment > TOML > default.
# --------------------------------------------------------------------------------------------

# (TOML line in its section, env var and value, keyword, the describe key, the three results)
PRECEDENCE = [
    ("[checkpoint]\nkeep = 3", ("GREENCKPT_KEEP", "4"), {"keep": 5}, "keep", (3, 4, 5)),
    (
        '[checkpoint]\nname = "toml"',
        ("GREENCKPT_NAME", "env"),
        {"name": "kw"},
        "name",
        ("toml", "env", "kw"),
    ),
    (
        '[checkpoint]\nchecksum = "crc32"',
        ("GREENCKPT_CHECKSUM", "xxh3_64"),
        {"checksum": "crc32"},
        "checksum",
        ("crc32", "xxh3_64", "crc32"),
    ),
    (
        '[checkpoint]\nmtbf = "1h"',
        ("GREENCKPT_MTBF", "2h"),
        {"mtbf": 10800},
        "mtbf",
        (3600.0, 7200.0, 10800.0),
    ),
    (
        "[checkpoint]\nwriters_total = 2",
        ("GREENCKPT_WRITERS_TOTAL", "3"),
        {"writers_total": None},
        "writers_total",
        (2, 3, None),
    ),
    (
        '[checkpoint.l1]\ncodec = "lz4"',
        ("GREENCKPT_L1_CODEC", "zlib:6"),
        {"l1": {"codec": "none"}},
        "l1.codec",
        ("lz4", "zlib:6", None),
    ),
    (
        '[checkpoint.l2]\nevery = "20it"',
        ("GREENCKPT_L2_EVERY", "90s"),
        {"l2": {"every_iterations": 7}},
        "l2.every_iterations",
        (20, None, 7),
    ),
    (
        "[checkpoint.l3]\ngroup_size = 5",
        ("GREENCKPT_L3_GROUP_SIZE", "6"),
        {"l3": {"group_size": 8}},
        "l3.group_size",
        (5, 6, 8),
    ),
    (
        "[checkpoint.l4]\nasync = true",
        ("GREENCKPT_L4_ASYNC", "off"),
        {"l4": {"async": True}},
        "l4.async_flush",
        (True, False, True),
    ),
]


@pytest.mark.parametrize(("toml", "var", "keyword", "key", "expected"), PRECEDENCE)
def test_precedence(
    tmp_path: Path,
    toml: str,
    var: tuple[str, str],
    keyword: dict[str, Any],
    key: str,
    expected: tuple[object, object, object],
) -> None:
    path = write(tmp_path, toml + "\n")
    base: dict[str, Any] = {"local_dir": "/l", "global_dir": "/g"}
    from_toml, from_env, from_keyword = expected
    section, assignment = toml.split("\n")
    toml_key = assignment.partition(" =")[0]

    only_toml = load_config(path, env={}, **base).describe()[key]
    assert only_toml == {"value": from_toml, "source": f"{path}: {section} {toml_key}"}

    env = {var[0]: var[1]}
    env_beats_toml = load_config(path, env=env, **base).describe()[key]
    assert env_beats_toml == {"value": from_env, "source": var[0]}

    keyword_wins = load_config(path, env=env, **base, **keyword).describe()[key]
    assert keyword_wins["value"] == from_keyword
    assert keyword_wins["source"].startswith("keyword ")
    assert next(iter(keyword)) in keyword_wins["source"]


def test_defaults_have_source_default() -> None:
    described = load_config(env={}, local_dir="/x").describe()
    for key in ("name", "keep", "checksum", "mtbf", "l1.codec", "l3.parity", "l4.async_flush"):
        assert described[key]["source"] == "default", key
    assert described["local_dir"] == {"value": "/x", "source": "keyword local_dir"}


def test_config_file_from_environment_variable(tmp_path: Path) -> None:
    path = write(tmp_path, '[checkpoint]\nlocal_dir = "/x"\nkeep = 3\n')
    config = load_config(env={"GREENCKPT_CONFIG": str(path)})
    assert config.keep == 3
    assert config.describe()["keep"]["source"] == f"{path}: [checkpoint] keep"


def test_config_keyword_beats_config_variable(tmp_path: Path) -> None:
    mine = write(tmp_path, '[checkpoint]\nlocal_dir = "/x"\nkeep = 3\n', "mine.toml")
    other = write(tmp_path, '[checkpoint]\nlocal_dir = "/x"\nkeep = 9\n', "other.toml")
    assert load_config(mine, env={"GREENCKPT_CONFIG": str(other)}).keep == 3
    assert load_config(str(mine), env={"GREENCKPT_CONFIG": str(other)}).keep == 3


def test_level_dict_merges_key_by_key_with_lower_sources(tmp_path: Path) -> None:
    path = write(tmp_path, '[checkpoint]\nlocal_dir = "/x"\n[checkpoint.l1]\ncodec = "lz4"\n')
    config = load_config(path, env={}, l1={"every": "2min"})
    assert config.level(1) == LevelConfig(1, enabled=True, every_s=120.0, codec="lz4")


def test_level_config_keyword_replaces_the_whole_level(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        '[checkpoint]\nlocal_dir = "/x"\n[checkpoint.l1]\nevery = "5min"\ncodec = "lz4"\n',
    )
    level = LevelConfig(1, enabled=True, every_iterations=10)
    config = load_config(path, env={}, l1=level)
    assert config.level(1) == level
    assert config.describe()["l1.codec"] == {"value": None, "source": "keyword l1"}


def test_interval_is_one_setting_across_spellings(tmp_path: Path) -> None:
    path = write(tmp_path, '[checkpoint]\nlocal_dir = "/x"\n[checkpoint.l2]\nevery = "auto"\n')
    config = load_config(path, env={"GREENCKPT_L2_EVERY": "50it"}, mtbf="1d")
    assert config.level(2) == LevelConfig(2, enabled=True, every_iterations=50)


def test_enabled_false_turns_a_level_off_whatever_its_interval(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        '[checkpoint]\nlocal_dir = "/l"\n[checkpoint.l1]\nevery = "1min"\n'
        '[checkpoint.l4]\nevery = "1h"\n',
    )
    config = load_config(path, env={"GREENCKPT_L4_ENABLED": "no"})
    assert config.enabled_levels == (1,)  # no global_dir needed: level 4 is off
    l4 = config.describe()["l4.every_s"]
    assert l4["value"] is None
    assert "GREENCKPT_L4_ENABLED" in l4["source"]


def test_enabled_true_gives_a_level_without_interval() -> None:
    config = load_config(env={}, local_dir="/l", l2={"enabled": True})
    assert config.enabled_levels == (2,)
    assert not config.level(2).has_interval


# --------------------------------------------------------------------------------------------
# Validation: every bad value names its source and the setting.
# --------------------------------------------------------------------------------------------

BAD_ENV = [
    ("GREENCKPT_NAME", "a/b", "name"),
    ("GREENCKPT_NAME", "..", "name"),
    ("GREENCKPT_NAME", ".", "name"),
    ("GREENCKPT_KEEP", "0", "keep"),
    ("GREENCKPT_KEEP", "two", "keep"),
    ("GREENCKPT_KEEP", "2.0", "keep"),
    ("GREENCKPT_KEEP", "", "keep"),
    ("GREENCKPT_CHECKSUM", "md5", "checksum"),
    ("GREENCKPT_WRITERS_PER_NODE", "0", "writers_per_node"),
    ("GREENCKPT_WRITERS_TOTAL", "-1", "writers_total"),
    ("GREENCKPT_RANKS_PER_NODE", "many", "ranks_per_node"),
    ("GREENCKPT_MTBF", "14", "mtbf"),
    ("GREENCKPT_MTBF", "0h", "mtbf"),
    ("GREENCKPT_MTBF", "-3h", "mtbf"),
    ("GREENCKPT_LOCAL_DIR", "", "local_dir"),
    ("GREENCKPT_GLOBAL_DIR", "$NOT_SET_ANYWHERE/x", "global_dir"),
    ("GREENCKPT_L1_EVERY", "often", "every"),
    ("GREENCKPT_L1_EVERY", "0s", "every"),
    ("GREENCKPT_L2_EVERY", "0it", "every"),
    ("GREENCKPT_L2_EVERY", "", "every"),
    ("GREENCKPT_L1_CODEC", "gzip", "codec"),
    ("GREENCKPT_L1_CODEC", "zstd:23", "codec"),
    ("GREENCKPT_L1_CODEC", "zstd:0", "codec"),
    ("GREENCKPT_L1_CODEC", "zlib:10", "codec"),
    ("GREENCKPT_L1_CODEC", "lz4:1", "codec"),
    ("GREENCKPT_L3_GROUP_SIZE", "1", "group_size"),
    ("GREENCKPT_L3_PARITY", "0", "parity"),
    ("GREENCKPT_L4_ASYNC", "maybe", "async"),
    ("GREENCKPT_L2_ENABLED", "2", "enabled"),
]


@pytest.mark.parametrize(("var", "value", "setting"), BAD_ENV)
def test_bad_environment_value(var: str, value: str, setting: str) -> None:
    message = error_of(env={var: value}, local_dir="/l", global_dir="/g")
    assert message.startswith(f"{var}: ")
    assert setting in message


BAD_TOML = [
    ("checkpoint", 'name = ""', "name"),
    ("checkpoint", "name = 1", "name"),
    ("checkpoint", 'local_dir = ""', "local_dir"),
    ("checkpoint", "local_dir = 3", "local_dir"),
    ("checkpoint", "global_dir = false", "global_dir"),
    ("checkpoint", "keep = 0", "keep"),
    ("checkpoint", 'keep = "2"', "keep"),
    ("checkpoint", "keep = 2.0", "keep"),
    ("checkpoint", "keep = true", "keep"),
    ("checkpoint", 'checksum = "sha1"', "checksum"),
    ("checkpoint", "writers_per_node = 0", "writers_per_node"),
    ("checkpoint", 'writers_total = "lots"', "writers_total"),
    ("checkpoint", "ranks_per_node = -2", "ranks_per_node"),
    ("checkpoint", "mtbf = -1", "mtbf"),
    ("checkpoint", "mtbf = 0", "mtbf"),
    ("checkpoint", "mtbf = nan", "mtbf"),
    ("checkpoint", 'mtbf = "soon"', "mtbf"),
    ("checkpoint", "mtbf = true", "mtbf"),
    ("checkpoint.l1", "every = 10", "every"),
    ("checkpoint.l1", 'every = "-5min"', "every"),
    ("checkpoint.l1", "every = true", "every"),
    ("checkpoint.l2", "every_iterations = 0", "every_iterations"),
    ("checkpoint.l2", 'every_iterations = "5"', "every_iterations"),
    ("checkpoint.l1", "codec = 5", "codec"),
    ("checkpoint.l1", 'codec = "zstd:fast"', "codec"),
    ("checkpoint.l1", "enabled = 1", "enabled"),
    ("checkpoint.l3", "group_size = 1", "group_size"),
    ("checkpoint.l3", "parity = 0", "parity"),
    ("checkpoint.l4", 'async = "yes"', "async"),
]


@pytest.mark.parametrize(("section", "line", "key"), BAD_TOML)
def test_bad_toml_value(tmp_path: Path, section: str, line: str, key: str) -> None:
    path = write(tmp_path, f"[{section}]\n{line}\n")
    message = error_of(path, local_dir="/l", global_dir="/g")
    assert message.startswith(f"{path}: [{section}] {key}: ")
    assert key in message.split(": ", 2)[2]


BAD_KEYWORDS: list[dict[str, Any]] = [
    {"name": ""},
    {"name": None},
    {"name": "x/y"},
    {"keep": 0},
    {"keep": True},
    {"keep": "2"},
    {"keep": 1.5},
    {"keep": None},
    {"checksum": None},
    {"checksum": "adler32"},
    {"writers_per_node": 0},
    {"writers_total": 2.0},
    {"ranks_per_node": "2"},
    {"mtbf": 0},
    {"mtbf": -5.0},
    {"mtbf": float("inf")},
    {"mtbf": "14"},
    {"mtbf": False},
    {"local_dir": ""},
    {"local_dir": 5},
    {"global_dir": b"/bytes"},
]


@pytest.mark.parametrize("keyword", BAD_KEYWORDS, ids=repr)
def test_bad_keyword_value(keyword: dict[str, Any]) -> None:
    (setting,) = keyword
    base = {"local_dir": "/l", "global_dir": "/g"}
    message = error_of(**{**base, **keyword})
    assert message.startswith(f"keyword {setting}: {setting} ")


BAD_LEVEL_KEYWORDS: list[tuple[str, dict[str, Any], str]] = [
    ("l1", {"every": "xx"}, "every"),
    ("l1", {"every": 60}, "every"),
    ("l2", {"every_iterations": 0}, "every_iterations"),
    ("l1", {"codec": "bzip2"}, "codec"),
    ("l1", {"codec": 3}, "codec"),
    ("l1", {"enabled": "yes"}, "enabled"),
    ("l3", {"group_size": 1}, "group_size"),
    ("l3", {"parity": 0}, "parity"),
    ("l4", {"async": 1}, "async"),
]


@pytest.mark.parametrize(("level", "values", "key"), BAD_LEVEL_KEYWORDS)
def test_bad_level_keyword_value(level: str, values: dict[str, Any], key: str) -> None:
    message = error_of(local_dir="/l", global_dir="/g", **{level: values})
    assert message.startswith(f"keyword {level}[{key!r}]: {level} {key} ")


@pytest.mark.parametrize(("group_size", "parity"), [(2, 2), (4, 4), (4, 7), (3, 3)])
def test_parity_must_be_smaller_than_group_size(
    tmp_path: Path, group_size: int, parity: int
) -> None:
    path = write(tmp_path, f"[checkpoint.l3]\ngroup_size = {group_size}\nparity = {parity}\n")
    message = error_of(path, local_dir="/l")
    assert "parity" in message and "group_size" in message
    assert f"{path}: [checkpoint.l3] parity" in message


def test_parity_checked_against_group_size_from_another_source(tmp_path: Path) -> None:
    path = write(tmp_path, "[checkpoint.l3]\nparity = 3\n")
    message = error_of(path, env={"GREENCKPT_L3_GROUP_SIZE": "3"}, local_dir="/l")
    assert "GREENCKPT_L3_GROUP_SIZE" in message and "[checkpoint.l3] parity" in message
    assert load_config(path, env={"GREENCKPT_L3_GROUP_SIZE": "5"}, local_dir="/l")


def test_reed_solomon_parity() -> None:
    config = load_config(
        env={}, local_dir="/l", l3={"every": "30min", "group_size": 6, "parity": 2}
    )
    assert (config.level(3).group_size, config.level(3).parity) == (6, 2)


def test_overridden_bad_value_is_still_an_error(tmp_path: Path) -> None:
    """A typo in a lower source does not hide behind an override."""
    path = write(tmp_path, "[checkpoint]\nkeep = 0\n")
    message = error_of(path, keep=3, local_dir="/l")
    assert message.startswith(f"{path}: [checkpoint] keep")


def test_every_and_every_iterations_in_one_source_conflict(tmp_path: Path) -> None:
    path = write(tmp_path, '[checkpoint.l2]\nevery = "5min"\nevery_iterations = 5\n')
    message = error_of(path, local_dir="/l")
    assert f"{path}: [checkpoint.l2]" in message and "every_iterations" in message
    message = error_of(local_dir="/l", l2={"every": "auto", "every_iterations": 3})
    assert message.startswith("keyword l2: ")


# --------------------------------------------------------------------------------------------
# Unknown names: TOML keys and sections, variables, keywords.
# --------------------------------------------------------------------------------------------


def test_unknown_toml_key_is_named_with_valid_keys(tmp_path: Path) -> None:
    path = write(tmp_path, "[checkpoint]\nkepe = 3\n")
    message = error_of(path, local_dir="/l")
    assert "'kepe'" in message and "did you mean 'keep'" in message
    assert "local_dir" in message and "writers_per_node" in message


def test_unknown_level_key(tmp_path: Path) -> None:
    path = write(tmp_path, '[checkpoint.l1]\nevry = "5min"\n')
    message = error_of(path, local_dir="/l")
    assert "[checkpoint.l1]" in message and "'evry'" in message and "'every'" in message


def test_level_specific_key_on_the_wrong_level(tmp_path: Path) -> None:
    path = write(tmp_path, "[checkpoint.l1]\ngroup_size = 4\n")
    message = error_of(path, local_dir="/l")
    assert "'group_size'" in message and "level 3 only" in message
    path = write(tmp_path, "[checkpoint.l2]\nasync = true\n")
    assert "level 4 only" in error_of(path, local_dir="/l")


def test_unknown_section(tmp_path: Path) -> None:
    path = write(tmp_path, "[chekpoint]\nkeep = 3\n")
    message = error_of(path, local_dir="/l")
    assert "[chekpoint]" in message and "[checkpoint]" in message


def test_unknown_level_table(tmp_path: Path) -> None:
    path = write(tmp_path, '[checkpoint.l5]\nevery = "1h"\n')
    message = error_of(path, local_dir="/l")
    assert "'l5'" in message and "[checkpoint.l1]" in message


def test_key_outside_any_section(tmp_path: Path) -> None:
    path = write(tmp_path, "keep = 3\n")
    message = error_of(path, local_dir="/l")
    assert "'keep'" in message and "[checkpoint]" in message


def test_level_must_be_a_table(tmp_path: Path) -> None:
    path = write(tmp_path, '[checkpoint]\nl1 = "5min"\n')
    assert "[checkpoint.l1]" in error_of(path, local_dir="/l")


def test_empty_file_and_empty_section_are_fine(tmp_path: Path) -> None:
    assert load_config(write(tmp_path, ""), env={}, local_dir="/l").keep == 2
    assert load_config(write(tmp_path, "[checkpoint]\n"), env={}, local_dir="/l").keep == 2


@pytest.mark.parametrize(
    ("text", "line"),
    [
        ('[checkpoint]\nname = "heat"\nkeep = = 3\n', 3),
        ('[checkpoint]\nname = "unterminated\n', 2),
        ("[checkpoint]\nkeep = 2\nkeep = 3\n", 3),
        ("[checkpoint]\nkeep = ", 2),
    ],
)
def test_toml_syntax_error_names_file_and_line(tmp_path: Path, text: str, line: int) -> None:
    path = write(tmp_path, text)
    message = error_of(path, local_dir="/l")
    assert message.startswith(f"{path}, line {line}")
    assert "invalid TOML" in message


def test_file_that_is_not_utf8(tmp_path: Path) -> None:
    path = tmp_path / "latin1.toml"
    path.write_bytes('[checkpoint]\nname = "caf\xe9"\n'.encode("latin-1"))
    assert "UTF-8" in error_of(path, local_dir="/l")


def test_missing_config_file_names_path_and_source(tmp_path: Path) -> None:
    missing = tmp_path / "nope.toml"
    message = error_of(missing, local_dir="/l")
    assert message.startswith("keyword config: ") and str(missing) in message
    message = error_of(env={"GREENCKPT_CONFIG": str(missing)}, local_dir="/l")
    assert message.startswith("GREENCKPT_CONFIG: ") and str(missing) in message


@pytest.mark.parametrize(
    "var",
    [
        "GREENCKPT_L1_GROUP_SIZE",
        "GREENCKPT_L5_EVERY",
        "GREENCKPT_L2_EVERY_ITERATIONS",
        "GREENCKPT_L1_CODECS",
    ],
)
def test_unknown_level_variable(var: str) -> None:
    message = error_of(env={var: "1"}, local_dir="/l")
    assert message.startswith(var) and "GREENCKPT_L1_EVERY" in message


def test_unrelated_greenckpt_variables_are_ignored() -> None:
    env = {"GREENCKPT_SYSROOT": "/fake", "GREENCKPT_SOMETHING_ELSE": "x", "GREENCKPT_LOG": "1"}
    assert load_config(env=env, local_dir="/l").keep == 2


def test_unknown_keyword() -> None:
    message = error_of(local_dir="/l", kep=3)
    assert "'kep'" in message and "did you mean 'keep'" in message and "writers_total" in message


def test_unknown_key_in_level_keyword() -> None:
    message = error_of(local_dir="/l", l4={"async_flush": True})
    assert message.startswith("keyword l4: ") and "'async'" in message


def test_level_keyword_of_the_wrong_type_or_level() -> None:
    assert "LevelConfig" in error_of(local_dir="/l", l1="5min")
    message = error_of(local_dir="/l", l2=LevelConfig(3, enabled=True))
    assert message.startswith("keyword l2: ") and "3" in message


# --------------------------------------------------------------------------------------------
# Rules across settings: auto needs mtbf, levels need directories, the default level.
# --------------------------------------------------------------------------------------------


def test_auto_requires_mtbf(tmp_path: Path) -> None:
    path = write(tmp_path, '[checkpoint]\nlocal_dir = "/l"\n[checkpoint.l3]\nevery = "auto"\n')
    message = error_of(path)
    assert message.startswith(f"{path}: [checkpoint.l3] every")
    assert "set mtbf" in message and "GREENCKPT_MTBF" in message
    assert load_config(path, env={"GREENCKPT_MTBF": "14h"}).level(3).auto


def test_auto_on_a_disabled_level_needs_no_mtbf() -> None:
    config = load_config(env={"GREENCKPT_L3_ENABLED": "0"}, local_dir="/l", l3={"every": "auto"})
    assert config.enabled_levels == (1,)


def test_level4_requires_global_dir() -> None:
    message = error_of(env={"GREENCKPT_L4_EVERY": "1h"}, local_dir="/l")
    assert message.startswith("GREENCKPT_L4_EVERY: level 4")
    assert "global_dir" in message and "GREENCKPT_GLOBAL_DIR" in message


@pytest.mark.parametrize("level", [1, 2, 3])
def test_local_levels_require_local_dir(level: int) -> None:
    message = error_of(global_dir="/g", **{f"l{level}": {"every": "10min"}})
    assert message.startswith(f"keyword l{level}['every']: level {level}")
    assert "local_dir" in message


def test_no_directory_at_all() -> None:
    message = error_of()
    assert "local_dir" in message and "global_dir" in message
    assert "GREENCKPT_LOCAL_DIR" in message


@pytest.mark.parametrize(
    ("dirs", "expected"),
    [
        ({"local_dir": "/l"}, (1,)),
        ({"global_dir": "/g"}, (4,)),
        ({"local_dir": "/l", "global_dir": "/g"}, (1,)),
        ({"local_dir": "/l", "global_dir": "/g", "l1": {"enabled": False}}, (4,)),
    ],
)
def test_default_level_when_no_interval_is_given(
    dirs: dict[str, Any], expected: tuple[int, ...]
) -> None:
    config = load_config(env={}, **dirs)
    assert config.enabled_levels == expected
    level = config.level(expected[0])
    assert not level.has_interval
    assert config.describe()[f"l{expected[0]}.enabled"]["source"].startswith("default")


def test_no_default_level_once_an_interval_is_given() -> None:
    config = load_config(env={}, local_dir="/l", global_dir="/g", l2={"every": "10min"})
    assert config.enabled_levels == (2,)


def test_all_levels_switched_off_is_an_error() -> None:
    message = error_of(local_dir="/l", l1={"every": "1min", "enabled": False})
    assert "no checkpoint level is enabled" in message
    message = error_of(local_dir="/l", l1={"enabled": False})
    assert "no checkpoint level is enabled" in message


# --------------------------------------------------------------------------------------------
# Normalisation: codecs, intervals, words for "unset", paths, booleans.
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        ("none", None),
        ("NONE", None),
        (None, None),
        ("zstd", "zstd"),
        ("ZSTD:03", "zstd:3"),
        (" zstd : 22 ", "zstd:22"),
        ("zstd:1", "zstd:1"),
        ("lz4", "lz4"),
        ("Lz4", "lz4"),
        ("zlib", "zlib"),
        ("zlib:0", "zlib:0"),
        ("zlib:9", "zlib:9"),
    ],
)
def test_codec_normalisation(given: str | None, expected: str | None) -> None:
    config = load_config(env={}, local_dir="/l", l1={"codec": given})
    assert config.level(1).codec == expected


@pytest.mark.parametrize(
    "bad", ["", "zstd:", "zstd:23", "zstd:0", "zstd:-1", "zlib:10", "lz4:1", "snappy", "zstd:1.5"]
)
def test_codec_validation(bad: str) -> None:
    message = error_of(local_dir="/l", l1={"codec": bad})
    assert message.startswith("keyword l1['codec']: l1 codec must be ")
    assert "zstd:<1-22>" in message or "with a level from" in message


@given(st.text(max_size=12))
def test_any_codec_text_gives_a_valid_codec_or_a_one_line_error(text: str) -> None:
    env = {"GREENCKPT_L1_CODEC": text}
    try:
        codec = load_config(env=env, local_dir="/l").level(1).codec
    except ConfigError as exc:
        assert str(exc).startswith("GREENCKPT_L1_CODEC: l1 codec ")
        assert "\n" not in str(exc)
    else:
        assert codec is None or codec.split(":")[0] in CODECS


@pytest.mark.parametrize(
    ("every", "field", "value"),
    [
        ("10min", "every_s", 600.0),
        ("90s", "every_s", 90.0),
        ("1h30min", "every_s", 5400.0),
        ("50it", "every_iterations", 50),
        ("50 iterations", "every_iterations", 50),
        ("1 IT", "every_iterations", 1),
        ("auto", "auto", True),
        ("AUTO", "auto", True),
    ],
)
def test_interval_spellings(every: str, field: str, value: object) -> None:
    config = load_config(env={"GREENCKPT_L2_EVERY": every}, local_dir="/l", mtbf="14h")
    level = config.level(2)
    assert getattr(level, field) == value
    intervals = [level.every_s is not None, level.every_iterations is not None, level.auto]
    assert sum(intervals) == 1 and level.enabled


@given(st.integers(min_value=1, max_value=10**9))
def test_iteration_counts_round_trip(count: int) -> None:
    config = load_config(env={"GREENCKPT_L1_EVERY": f"{count}it"}, local_dir="/l")
    assert config.level(1).every_iterations == count


@given(st.integers(min_value=1, max_value=10**6))
def test_integer_settings_round_trip_from_environment(number: int) -> None:
    config = load_config(env={"GREENCKPT_KEEP": f" {number} "}, local_dir="/l")
    assert config.keep == number


@pytest.mark.parametrize(
    ("setting", "word"),
    [("writers_per_node", "all"), ("writers_total", "unlimited"), ("ranks_per_node", "host")],
)
def test_unset_words_override_a_number(tmp_path: Path, setting: str, word: str) -> None:
    path = write(tmp_path, f'[checkpoint]\nlocal_dir = "/l"\n{setting} = 4\n')
    assert getattr(load_config(path, env={}), setting) == 4
    env = {f"GREENCKPT_{setting.upper()}": word.upper()}
    assert getattr(load_config(path, env=env), setting) is None


def test_mtbf_spellings(tmp_path: Path) -> None:
    assert load_config(env={}, local_dir="/l", mtbf=3600).mtbf == 3600.0
    assert load_config(env={}, local_dir="/l", mtbf="1d").mtbf == 86400.0
    path = write(tmp_path, '[checkpoint]\nlocal_dir = "/l"\nmtbf = 7200.5\n')
    assert load_config(path, env={}).mtbf == 7200.5
    assert load_config(env={"GREENCKPT_MTBF": "1h30min"}, local_dir="/l").mtbf == 5400.0


def test_checksum_case_is_normalised() -> None:
    assert load_config(env={"GREENCKPT_CHECKSUM": "CRC32"}, local_dir="/l").checksum == "crc32"


def test_tilde_and_variables_are_expanded_everywhere(tmp_path: Path) -> None:
    env = {"HOME": "/home/me", "TMPDIR": "/tmp/job42", "SCRATCH": "/scratch/me"}
    path = write(tmp_path, '[checkpoint]\nlocal_dir = "$TMPDIR/ckpt"\nglobal_dir = "~/ckpt"\n')
    config = load_config(path, env=env)
    assert (config.local_dir, config.global_dir) == ("/tmp/job42/ckpt", "/home/me/ckpt")
    config = load_config(env={**env, "GREENCKPT_GLOBAL_DIR": "${SCRATCH}/x"}, local_dir="~")
    assert (config.local_dir, config.global_dir) == ("/home/me", "/scratch/me/x")
    config = load_config(env=env, local_dir=Path("$TMPDIR") / "p")
    assert config.local_dir == "/tmp/job42/p"


def test_config_path_is_expanded(tmp_path: Path) -> None:
    write(tmp_path, '[checkpoint]\nlocal_dir = "/l"\nkeep = 4\n')
    config = load_config("$CFGDIR/ckpt.toml", env={"CFGDIR": str(tmp_path)})
    assert config.keep == 4


def test_unset_variable_in_a_directory_is_an_error() -> None:
    message = error_of(env={"GREENCKPT_LOCAL_DIR": "$TMPDIR/ckpt"})
    assert message.startswith("GREENCKPT_LOCAL_DIR: local_dir") and "$TMPDIR" in message


def test_directories_are_not_checked_for_existence(tmp_path: Path) -> None:
    missing = str(tmp_path / "does" / "not" / "exist")
    assert load_config(env={}, local_dir=missing).local_dir == missing


@pytest.mark.parametrize(
    ("word", "value"),
    [
        ("1", True),
        ("true", True),
        ("TRUE", True),
        ("yes", True),
        ("On", True),
        ("0", False),
        ("false", False),
        ("No", False),
        ("off", False),
        (" yes ", True),
    ],
)
def test_booleans_from_environment(word: str, value: bool) -> None:
    env = {"GREENCKPT_L4_ASYNC": word, "GREENCKPT_L2_ENABLED": word}
    config = load_config(env=env, local_dir="/l", global_dir="/g", l1={"every": "1h"})
    assert config.level(4).async_flush is value
    assert config.level(2).enabled is value
    assert config.describe()["l4.async_flush"]["source"] == "GREENCKPT_L4_ASYNC"


# --------------------------------------------------------------------------------------------
# describe(), the dataclasses.
# --------------------------------------------------------------------------------------------


def test_describe_reports_values_and_sources(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        '[checkpoint]\nlocal_dir = "/l"\nglobal_dir = "/g"\nkeep = 3\n'
        '[checkpoint.l1]\nevery = "5min"\n[checkpoint.l4]\nevery = "1h"\ncodec = "zstd"\n',
    )
    env = {"GREENCKPT_MTBF": "14h", "GREENCKPT_L4_EVERY": "2h"}
    described = load_config(path, env=env, name="run7").describe()
    assert described["name"] == {"value": "run7", "source": "keyword name"}
    assert described["keep"] == {"value": 3, "source": f"{path}: [checkpoint] keep"}
    assert described["mtbf"] == {"value": 50400.0, "source": "GREENCKPT_MTBF"}
    assert described["checksum"] == {"value": "xxh3_64", "source": "default"}
    assert described["l1.every_s"] == {"value": 300.0, "source": f"{path}: [checkpoint.l1] every"}
    assert described["l1.enabled"] == {"value": True, "source": f"{path}: [checkpoint.l1] every"}
    assert described["l4.every_s"] == {"value": 7200.0, "source": "GREENCKPT_L4_EVERY"}
    assert described["l4.codec"] == {"value": "zstd", "source": f"{path}: [checkpoint.l4] codec"}
    assert described["l2.enabled"] == {"value": False, "source": "default"}
    assert "l1.group_size" not in described and "l3.group_size" in described
    assert "l4.async_flush" in described and "l3.async_flush" not in described
    top = {f.name for f in dataclasses.fields(Config)} - {"levels", "sources"}
    assert top <= set(described)


def test_config_is_frozen_hashable_and_compares_without_sources() -> None:
    a = load_config(env={}, local_dir="/l", keep=3)
    b = load_config(env={"GREENCKPT_KEEP": "3", "GREENCKPT_LOCAL_DIR": "/l"})
    assert a == b and hash(a) == hash(b)
    assert a.describe()["keep"]["source"] != b.describe()["keep"]["source"]
    with pytest.raises(dataclasses.FrozenInstanceError):
        a.keep = 4  # type: ignore[misc]
    with pytest.raises(TypeError):
        a.sources["keep"] = "x"  # type: ignore[index]


def test_direct_construction_is_checked() -> None:
    levels = (LevelConfig(1, enabled=True), LevelConfig(2), LevelConfig(3), LevelConfig(4))
    config = Config(local_dir="/l", levels=levels)
    assert config.enabled_levels == (1,)
    assert config.describe()["keep"]["source"] == "Config"
    with pytest.raises(ConfigError, match=r"^Config: keep"):
        Config(local_dir="/l", keep=0, levels=levels)
    with pytest.raises(ConfigError, match="no checkpoint level is enabled"):
        Config(local_dir="/l")
    with pytest.raises(ConfigError, match="global_dir"):
        Config(levels=(LevelConfig(1), LevelConfig(2), LevelConfig(3), LevelConfig(4, True)))
    with pytest.raises(ConfigError, match="levels"):
        Config(local_dir="/l", levels=levels[:3])


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"level": 5}, "level must be 1, 2, 3 or 4"),
        ({"level": 1, "every_s": 60.0}, "disabled level"),
        ({"level": 1, "enabled": True, "every_s": 60.0, "auto": True}, "only one of"),
        ({"level": 1, "enabled": True, "every_s": 0.0}, "every_s"),
        ({"level": 1, "enabled": True, "every_iterations": 0}, "every_iterations"),
        ({"level": 1, "group_size": 8}, "level 3 only"),
        ({"level": 2, "async_flush": True}, "level 4 only"),
        ({"level": 3, "group_size": 4, "parity": 4}, "parity"),
        ({"level": 1, "codec": "brotli"}, "codec"),
    ],
)
def test_level_config_is_checked(kwargs: dict[str, Any], match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        LevelConfig(**kwargs)


def test_level_config_normalises_codec_and_seconds() -> None:
    level = LevelConfig(1, enabled=True, every_s=60, codec="none")
    assert level.codec is None and isinstance(level.every_s, float)
    assert LevelConfig(4, codec="ZLIB:5").codec == "zlib:5"


def test_config_error_is_a_value_error() -> None:
    assert issubclass(ConfigError, ValueError)
