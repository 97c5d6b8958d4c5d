"""One level registry: the level constants elsewhere are derived from it, and see a new level.

The configuration, the manifest and the notification socket each used to restate the levels
(``MAX_LEVEL = 4``, the level-3 wording of a parity error, "levels 1-3" in messages). They now
read :mod:`greenckpt.ckpt.levels` when they check a value, so a fifth level registered in a
test is accepted and named by each of them, with no change to their code.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from greenckpt.ckpt.config import ConfigError, LevelConfig, load_config
from greenckpt.ckpt.levels import BUILTIN_LEVELS, LevelSpec, Storage, register_level
from greenckpt.ckpt.levels import unregister_level as unregister
from greenckpt.ckpt.manifest import LEVELS
from greenckpt.ckpt.notify_client import (
    MAX_LEVEL,
    BeginRequest,
    ProtocolError,
    decode,
    parse_request,
)

GROUPED = LevelSpec(
    5,
    "wide erasure code",
    Storage.NODE_LOCAL,
    "the loss of up to parity nodes of each wide group",
    scheme="erasure",
    subdir="level5",
)
"""A test-only fifth level with the erasure scheme, so its settings, like level 3."""

FAR = LevelSpec(7, "far archive", Storage.GLOBAL, "the loss of the site", subdir="level7")
"""A test-only level numbered with a gap after level 4."""


@pytest.fixture
def grouped() -> Iterator[LevelSpec]:
    register_level(GROUPED)
    try:
        yield GROUPED
    finally:
        unregister(GROUPED.number)


@pytest.fixture
def far() -> Iterator[LevelSpec]:
    register_level(FAR)
    try:
        yield FAR
    finally:
        unregister(FAR.number)


def _begin(level: int) -> bytes:
    return f'{{"v": 1, "event": "begin", "kind": "checkpoint", "level": {level}}}'.encode()


def test_the_old_constants_are_the_built_in_levels() -> None:
    assert tuple(spec.number for spec in BUILTIN_LEVELS) == LEVELS == (1, 2, 3, 4)
    assert MAX_LEVEL == 4


def test_the_socket_accepts_a_begin_of_a_registered_fifth_level(grouped: LevelSpec) -> None:
    request = parse_request(decode(_begin(5)))
    assert isinstance(request, BeginRequest) and request.level == 5
    with pytest.raises(ProtocolError, match='"level" must be an integer from 1 to 5 or null'):
        BeginRequest("checkpoint", level=6)


def test_the_socket_refuses_a_level_once_it_is_unregistered() -> None:
    register_level(GROUPED)
    try:
        assert BeginRequest("flush", level=5).level == 5
    finally:
        unregister(GROUPED.number)
    with pytest.raises(ProtocolError, match='"level" must be an integer from 1 to 4 or null'):
        parse_request(decode(_begin(5)))


def test_the_socket_names_the_levels_one_by_one_when_they_have_a_gap(far: LevelSpec) -> None:
    assert BeginRequest("restart", level=7).level == 7
    with pytest.raises(ProtocolError, match=r"integer of 1, 2, 3, 4 or 7 or null, got 5"):
        BeginRequest("restart", level=5)


def test_a_fifth_level_takes_the_erasure_settings_its_spec_names(grouped: LevelSpec) -> None:
    config = load_config(
        env={"GREENCKPT_L5_GROUP_SIZE": "8"}, local_dir="/l", l5={"every": "5it", "parity": 2}
    )
    assert (config.level(5).group_size, config.level(5).parity) == (8, 2)
    assert config.describe()["l5.group_size"] == {"value": 8, "source": "GREENCKPT_L5_GROUP_SIZE"}
    with pytest.raises(ConfigError, match=r"l5 parity \(4\) must be < group_size \(4\)"):
        load_config(env={}, local_dir="/l", l5={"every": "5it", "parity": 4})
    with pytest.raises(ConfigError, match=r"l5 parity \(3\) must be < group_size \(2\)"):
        LevelConfig(5, enabled=True, group_size=2, parity=3)
    with pytest.raises(ConfigError, match="async applies to level 4 only"):
        load_config(env={}, local_dir="/l", l5={"async": True})
    with pytest.raises(ConfigError, match="group_size applies to levels 3 and 5 only"):
        LevelConfig(4, group_size=3)


def test_messages_listing_levels_include_a_fifth_level(grouped: LevelSpec, tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"node-local levels 1, 2, 3 and 5 .* level 4"):
        load_config(env={})
    toml = tmp_path / "ckpt.toml"
    toml.write_text("[checkpoint]\nlevels = 5\n")
    with pytest.raises(ConfigError, match=r"tables \[checkpoint.l1\] to \[checkpoint.l5\]"):
        load_config(toml, env={})
    with pytest.raises(ConfigError, match=r"valid keywords: .*, l4, l5, config"):
        load_config(env={}, local_dir="/l", l6={"every": "1it"})


def test_a_parity_error_of_level_3_still_names_level_3() -> None:
    with pytest.raises(ConfigError, match=r"l3 parity \(4\) must be < group_size \(4\)"):
        load_config(env={}, local_dir="/l", l3={"every": "5it", "parity": 4})
