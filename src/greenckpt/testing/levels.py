"""``LevelContract``: the pytest suite a checkpoint level (a ``LevelSpec``) passes.

Why: a level is data (:class:`greenckpt.ckpt.levels.LevelSpec` in a registry, its redundancy a
:class:`greenckpt.ckpt.redundancy.scheme.Redundancy`), so a user can add one without touching the
Checkpointer; these tests check that such a level is configured, checkpointed and recovered
through the public API like the built-in ones, in a temporary directory, on one rank or on
several (``ranks``: threads of this process, each its own emulated node, through
:func:`greenckpt.testing.comm.run_ranks`; a level whose redundancy lives on other nodes needs
them)::

    class TestMyLevel(LevelContract):
        rebuilds = True                           # its redundancy rebuilds a lost rank file
        ranks = 2

        @pytest.fixture
        def level(self):                          # register it, yield it, unregister it
            register_scheme("mine", Mine.build, settings=(LevelSetting("copies", to_int(1), 1),))
            register_level(SPEC)
            yield SPEC
            unregister_level(SPEC.number)
            unregister_scheme("mine")

The built-in levels pass it too (tests/ckpt/test_levels_contract.py).
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import pytest

from greenckpt.ckpt.api import Checkpointer
from greenckpt.ckpt.comm import Comm
from greenckpt.ckpt.config import load_config
from greenckpt.ckpt.levels import LevelSpec, Storage, level_settings
from greenckpt.ckpt.manifest import read_manifest
from greenckpt.ckpt.records import RecoveryInfo
from greenckpt.testing.comm import run_ranks

__all__ = ["LevelContract"]

SIZE = 1000
"""Elements of the protected array."""


class LevelContract:
    """Contract tests for one level; subclass it as ``Test...`` and give the ``level`` fixture.

    ``rebuilds``: whether the level's redundancy rebuilds a lost rank file on recovery.
    ``ranks``: how many ranks the job has (each rank its own emulated node when more than one).
    """

    rebuilds: ClassVar[bool] = False
    ranks: ClassVar[int] = 1

    @pytest.fixture
    def level(self) -> Iterator[LevelSpec]:
        """The level under test, registered for the test's duration."""
        pytest.fail(f"{type(self).__name__} must define the 'level' fixture")
        yield  # pragma: no cover - a generator, like the fixtures that override it

    def settings(self, level: LevelSpec) -> dict[str, Any]:
        """The Checkpointer settings enabling only this level (override to add some)."""
        return {f"l{level.number}": {"enabled": True}}

    def open(
        self, tmp_path: Path, level: LevelSpec, comm: Comm | None = None
    ) -> tuple[Checkpointer, np.ndarray]:
        """A Checkpointer of rank ``comm`` (one rank: None) on ``tmp_path`` protecting one
        array, ``u``."""
        dirs: dict[str, Any] = {}
        for storage in Storage:
            (tmp_path / storage.name.lower()).mkdir(exist_ok=True)
            dirs[storage.setting] = str(tmp_path / storage.name.lower())
        if self.ranks > 1:
            dirs["ranks_per_node"] = 1
        ck = Checkpointer(env={}, comm=comm, **dirs, **self.settings(level))
        u = np.zeros(SIZE)
        ck.protect("u", u)
        return ck, u

    def store(self, tmp_path: Path, level: LevelSpec, iterations: tuple[int, ...]) -> None:
        """Checkpoint at each iteration on every rank (the array and the state hold the
        iteration plus the rank)."""

        def work(comm: Comm) -> None:
            ck, u = self.open(tmp_path, level, comm)
            for it in iterations:
                u[:] = it + comm.rank
                ck.state["it"] = it
                ck.checkpoint(level.number, iteration=it)
            ck.finalize()

        run_ranks(self.ranks, work)

    def recover(self, tmp_path: Path, level: LevelSpec) -> list[tuple[RecoveryInfo | None, bool]]:
        """Recover on every rank: each rank's result, and whether its array and state hold
        what it checkpointed at the recovered iteration (all zero when nothing was)."""

        def work(comm: Comm) -> tuple[RecoveryInfo | None, bool]:
            ck, u = self.open(tmp_path, level, comm)
            try:
                info = ck.recover()
                if info is None:
                    return None, bool(np.all(u == 0)) and "it" not in ck.state
                it = info.iteration
                return info, ck.state.get("it") == it and bool(np.all(u == (it or 0) + comm.rank))
            finally:
                ck.finalize()

        return run_ranks(self.ranks, work)

    def directories(self, tmp_path: Path, level: LevelSpec) -> list[Path]:
        """Every committed checkpoint directory of ``level`` under ``tmp_path`` (one per node
        for a node-local level), oldest first."""
        found = [
            (manifest.id, str(path.parent))
            for path in tmp_path.rglob("manifest.json")
            if (manifest := read_manifest(path)).level == level.number
        ]
        return [Path(directory) for _, directory in sorted(found)]

    def test_the_level_is_configured_like_the_others(
        self, level: LevelSpec, tmp_path: Path
    ) -> None:
        config = load_config(env={}, local_dir="/l", global_dir="/g", **self.settings(level))
        assert level.number in config.enabled_levels
        described = config.describe()
        assert f"l{level.number}.codec" in described
        given = self.settings(level)[f"l{level.number}"]
        for setting in level_settings(level.number).values():
            key = f"l{level.number}.{setting.name}"
            assert key in described, f"{setting.name} is not described"
            if setting.key not in given:
                assert described[key] == {"value": setting.default, "source": "default"}
            assert config.level(level.number).settings[setting.name] == described[key]["value"]

    def test_a_checkpoint_is_recovered_as_it_was_written(
        self, level: LevelSpec, tmp_path: Path
    ) -> None:
        self.store(tmp_path, level, (7,))
        assert self.directories(tmp_path, level)
        for info, restored in self.recover(tmp_path, level):
            assert info is not None and (info.level, info.iteration) == (level.number, 7)
            assert restored and info.rebuilt == ()

    def test_the_newest_checkpoint_is_recovered(self, level: LevelSpec, tmp_path: Path) -> None:
        self.store(tmp_path, level, (3, 5))
        for info, restored in self.recover(tmp_path, level):
            assert info is not None and info.iteration == 5 and restored

    def test_nothing_stored_recovers_nothing(self, level: LevelSpec, tmp_path: Path) -> None:
        assert self.recover(tmp_path, level) == [(None, True)] * self.ranks

    def test_a_global_level_survives_the_loss_of_node_local_storage(
        self, level: LevelSpec, tmp_path: Path
    ) -> None:
        if level.storage is not Storage.GLOBAL:
            pytest.skip(f"level {level.number} is node-local")
        self.store(tmp_path, level, (4,))
        shutil.rmtree(tmp_path / Storage.NODE_LOCAL.name.lower())
        for info, restored in self.recover(tmp_path, level):
            assert info is not None and info.level == level.number and restored

    def test_a_lost_rank_file_is_rebuilt(self, level: LevelSpec, tmp_path: Path) -> None:
        if not self.rebuilds:
            pytest.skip(f"{type(self).__name__}.rebuilds is False")
        self.store(tmp_path, level, (9,))
        rank_file = next(
            path
            for directory in self.directories(tmp_path, level)
            if (
                path := directory / read_manifest(directory / "manifest.json").ranks[0].file
            ).is_file()
        )
        rank_file.unlink()
        for info, restored in self.recover(tmp_path, level):
            assert info is not None and (info.level, info.rebuilt) == (level.number, (0,))
            assert restored
        assert rank_file.is_file()
