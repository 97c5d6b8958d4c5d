"""The two test-only fifth levels of test_levels_as_data pass ``LevelContract``."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from greenckpt.ckpt import redundancy as redundancy_module
from greenckpt.ckpt.levels import LevelSpec, register_level, unregister_level
from greenckpt.ckpt.redundancy import register_scheme
from greenckpt.testing.levels import LevelContract
from tests.ckpt.test_levels_as_data import ARCHIVE, MIRRORED, _mirror


class TestArchiveLevelContract(LevelContract):
    """A second copy on the global file system, no redundancy."""

    @pytest.fixture
    def level(self) -> Iterator[LevelSpec]:
        register_level(ARCHIVE)
        try:
            yield ARCHIVE
        finally:
            unregister_level(ARCHIVE.number)


class TestMirroredLevelContract(LevelContract):
    """Node-local, with a mirror of every rank file from which a lost one is rebuilt."""

    rebuilds = True

    @pytest.fixture
    def level(self) -> Iterator[LevelSpec]:
        register_scheme("mirror", _mirror)
        register_level(MIRRORED)
        try:
            yield MIRRORED
        finally:
            unregister_level(MIRRORED.number)
            del redundancy_module.SCHEMES["mirror"]
