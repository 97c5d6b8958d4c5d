"""Every built-in level, and two test-only fifth levels, pass ``LevelContract``.

Levels 2 and 3 keep their redundancy on other nodes, so they run on ranks that are threads of
this process, each its own emulated node (``greenckpt.testing.comm``). The mirrored fifth level
is added from this module alone: its redundancy scheme (``Mirror`` in test_levels_as_data)
declares a setting of its own and is registered with the public ``register_scheme``.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from greenckpt.ckpt import (
    LevelSetting,
    LevelSpec,
    register_level,
    register_scheme,
    unregister_level,
    unregister_scheme,
)
from greenckpt.ckpt.config import load_config
from greenckpt.ckpt.config.values import to_int
from greenckpt.ckpt.levels import BUILTIN_LEVELS, level_spec
from greenckpt.testing.levels import LevelContract
from tests.ckpt.test_levels_as_data import ARCHIVE, MIRRORED, _mirror


class BuiltIn(LevelContract):
    """A built-in level: always registered, nothing to add or remove."""

    number = 0

    @pytest.fixture
    def level(self) -> Iterator[LevelSpec]:
        yield level_spec(self.number)


class TestNodeLocalLevelContract(BuiltIn):
    number = 1


class TestPartnerLevelContract(BuiltIn):
    number, rebuilds, ranks = 2, True, 2


class TestErasureLevelContract(BuiltIn):
    number, rebuilds, ranks = 3, True, 3

    def settings(self, level: LevelSpec) -> dict[str, Any]:
        return {"l3": {"enabled": True, "group_size": 3}}


class TestGlobalLevelContract(BuiltIn):
    number = 4


def test_every_built_in_level_has_a_contract_class() -> None:
    tested = {cls.number for cls in BuiltIn.__subclasses__()}
    assert tested == {spec.number for spec in BUILTIN_LEVELS}


class TestArchiveLevelContract(LevelContract):
    """A second copy on the global file system, no redundancy."""

    @pytest.fixture
    def level(self) -> Iterator[LevelSpec]:
        register_level(ARCHIVE)
        try:
            yield ARCHIVE
        finally:
            unregister_level(ARCHIVE.number)


COPIES = LevelSetting("mirrors", to_int(1), 1)
"""The mirror scheme's own setting (how many mirrors it would keep: read, checked, described)."""


class TestMirroredLevelContract(LevelContract):
    """Node-local, with a mirror of every rank file from which a lost one is rebuilt; its
    scheme declares a setting, and the contract runs with it set."""

    rebuilds = True

    @pytest.fixture
    def level(self) -> Iterator[LevelSpec]:
        register_scheme("mirror", _mirror, settings=(COPIES,))
        register_level(MIRRORED)
        try:
            yield MIRRORED
        finally:
            unregister_level(MIRRORED.number)
            unregister_scheme("mirror")

    def settings(self, level: LevelSpec) -> dict[str, Any]:
        return {"l5": {"enabled": True, "mirrors": 2}}

    def test_the_scheme_setting_is_read_and_checked_like_a_built_in_one(
        self, level: LevelSpec
    ) -> None:
        config = load_config(env={"GREENCKPT_L5_MIRRORS": "3"}, local_dir="/l", l5={"every": "2it"})
        assert config.level(5).settings["mirrors"] == 3 and config.level(5).mirrors == 3
        assert config.describe()["l5.mirrors"]["source"] == "GREENCKPT_L5_MIRRORS"
        with pytest.raises(ValueError, match="l5 mirrors"):
            load_config(env={}, local_dir="/l", l5={"every": "2it", "mirrors": 0})
        with pytest.raises(ValueError, match="mirrors applies to level 5 only"):
            load_config(env={}, local_dir="/l", l1={"every": "2it", "mirrors": 2})
