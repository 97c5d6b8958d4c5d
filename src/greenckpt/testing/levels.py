"""``LevelContract``: the pytest suite a checkpoint level (a ``LevelSpec``) passes.

Why: a level is data (:class:`greenckpt.ckpt.levels.LevelSpec` in a registry, its redundancy a
:class:`greenckpt.ckpt.redundancy.Redundancy`), so a user can add one without touching the
Checkpointer; these tests check that such a level is configured, checkpointed and recovered
through the public API like the built-in ones, on one rank in a temporary directory::

    class TestMyLevel(LevelContract):
        rebuilds = True                           # its redundancy rebuilds a lost rank file

        @pytest.fixture
        def level(self):                          # register it, yield it, unregister it
            register_level(SPEC)
            yield SPEC
            unregister_level(SPEC.number)
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import pytest

from greenckpt.ckpt.api import Checkpointer
from greenckpt.ckpt.config import load_config
from greenckpt.ckpt.levels import LevelSpec, Storage
from greenckpt.ckpt.manifest import read_manifest

__all__ = ["LevelContract"]

SIZE = 1000
"""Elements of the protected array."""


class LevelContract:
    """Contract tests for one level; subclass it as ``Test...`` and give the ``level`` fixture.

    ``rebuilds``: whether the level's redundancy rebuilds a lost rank file on recovery.
    """

    rebuilds: ClassVar[bool] = False

    @pytest.fixture
    def level(self) -> Iterator[LevelSpec]:
        """The level under test, registered for the test's duration."""
        pytest.fail(f"{type(self).__name__} must define the 'level' fixture")
        yield  # pragma: no cover - a generator, like the fixtures that override it

    def settings(self, level: LevelSpec) -> dict[str, Any]:
        """The Checkpointer settings enabling only this level (override to add some)."""
        return {f"l{level.number}": {"enabled": True}}

    def open(self, tmp_path: Path, level: LevelSpec) -> tuple[Checkpointer, np.ndarray]:
        """A one-rank Checkpointer on ``tmp_path`` protecting one array, ``u``."""
        dirs: dict[str, Any] = {}
        for storage in Storage:
            (tmp_path / storage.name.lower()).mkdir(exist_ok=True)
            dirs[storage.setting] = str(tmp_path / storage.name.lower())
        ck = Checkpointer(env={}, **dirs, **self.settings(level))
        u = np.zeros(SIZE)
        ck.protect("u", u)
        return ck, u

    def store(self, tmp_path: Path, level: LevelSpec, iterations: tuple[int, ...]) -> None:
        """Checkpoint at each iteration (the array and the state hold the iteration)."""
        ck, u = self.open(tmp_path, level)
        for it in iterations:
            u[:] = it
            ck.state["it"] = it
            ck.checkpoint(level.number, iteration=it)
        ck.finalize()

    def directories(self, tmp_path: Path, level: LevelSpec) -> list[Path]:
        """Every committed checkpoint directory of ``level`` under ``tmp_path``, oldest first."""
        found = [
            (manifest.id, path.parent)
            for path in tmp_path.rglob("manifest.json")
            if (manifest := read_manifest(path)).level == level.number
        ]
        return [directory for _, directory in sorted(found)]

    def test_the_level_is_configured_like_the_others(
        self, level: LevelSpec, tmp_path: Path
    ) -> None:
        config = load_config(env={}, local_dir="/l", global_dir="/g", **self.settings(level))
        assert level.number in config.enabled_levels
        assert f"l{level.number}.codec" in config.describe()

    def test_a_checkpoint_is_recovered_as_it_was_written(
        self, level: LevelSpec, tmp_path: Path
    ) -> None:
        self.store(tmp_path, level, (7,))
        assert len(self.directories(tmp_path, level)) == 1
        again, v = self.open(tmp_path, level)
        info = again.recover()
        assert info is not None and (info.level, info.iteration) == (level.number, 7)
        assert again.state["it"] == 7 and np.all(v == 7)
        again.finalize()

    def test_the_newest_checkpoint_is_recovered(self, level: LevelSpec, tmp_path: Path) -> None:
        self.store(tmp_path, level, (3, 5))
        again, v = self.open(tmp_path, level)
        info = again.recover()
        assert info is not None and info.iteration == 5 and np.all(v == 5)
        again.finalize()

    def test_nothing_stored_recovers_nothing(self, level: LevelSpec, tmp_path: Path) -> None:
        ck, v = self.open(tmp_path, level)
        assert ck.recover() is None and np.all(v == 0)
        ck.finalize()

    def test_a_global_level_survives_the_loss_of_node_local_storage(
        self, level: LevelSpec, tmp_path: Path
    ) -> None:
        if level.storage is not Storage.GLOBAL:
            pytest.skip(f"level {level.number} is node-local")
        self.store(tmp_path, level, (4,))
        shutil.rmtree(tmp_path / Storage.NODE_LOCAL.name.lower())
        again, v = self.open(tmp_path, level)
        info = again.recover()
        assert info is not None and info.level == level.number and np.all(v == 4)
        again.finalize()

    def test_a_lost_rank_file_is_rebuilt(self, level: LevelSpec, tmp_path: Path) -> None:
        if not self.rebuilds:
            pytest.skip(f"{type(self).__name__}.rebuilds is False")
        self.store(tmp_path, level, (9,))
        directory = self.directories(tmp_path, level)[-1]
        rank_file = directory / read_manifest(directory / "manifest.json").ranks[0].file
        rank_file.unlink()
        again, v = self.open(tmp_path, level)
        info = again.recover()
        assert info is not None and (info.level, info.rebuilt) == (level.number, (0,))
        assert again.state["it"] == 9 and np.all(v == 9) and rank_file.is_file()
        again.finalize()
