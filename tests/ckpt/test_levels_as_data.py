"""Levels as data: a fifth level added in a test, with no change to the Checkpointer.

Two test-only levels show what adding a level takes. A plain one (a second copy on the global
file system, under its own subdirectory, no redundancy) is one :class:`LevelSpec` and one
``register_level``. A node-local one with its own redundancy (a mirror of every rank file in
the same directory, from which a lost or corrupt file is rebuilt) adds one class implementing
:class:`Redundancy` and one ``register_scheme`` entry. Both are configured, checkpointed and
recovered through the public API only.
"""

from __future__ import annotations

import re
import shutil
from collections.abc import Iterator, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from greenckpt.ckpt.agree import agree_on, fail_if
from greenckpt.ckpt.api import Checkpointer
from greenckpt.ckpt.comm import Comm
from greenckpt.ckpt.config import ConfigError, LevelConfig, load_config
from greenckpt.ckpt.levels import (
    LevelSpec,
    Storage,
    level_numbers,
    level_spec,
    register_level,
    register_scheme,
    unregister_level,
    unregister_scheme,
)
from greenckpt.ckpt.manifest import (
    Manifest,
    ManifestError,
    RankEntry,
    manifest_from_json,
    manifest_to_json,
    read_manifest,
)
from greenckpt.ckpt.redundancy.builtin import rebuild_name
from greenckpt.ckpt.redundancy.scheme import Rebuilt, Redundancy
from greenckpt.ckpt.topology import Topology
from greenckpt.io.checksum import file_digest

SRC = Path(__file__).resolve().parents[2] / "src" / "greenckpt"

ARCHIVE = LevelSpec(
    5,
    "global archive",
    Storage.GLOBAL,
    "the loss of every node and of level 4's directory",
    subdir="level5",
)
"""A test-only fifth level: a second copy on the global file system, no redundancy."""

MIRROR_PREFIX = "mirror-"


class Mirror:
    """Test-only redundancy: each rank's file mirrored next to it, rebuilt from the mirror."""

    rebuilds = True

    def __init__(self, comm: Comm) -> None:
        self.comm = comm

    def _agreed(self, error: str | None) -> str | None:
        bad = agree_on(self.comm, lambda: fail_if(error), causes_first=True).failure
        return None if bad is None else str(bad)

    def encode(
        self, stage: Path, entries: Sequence[RankEntry]
    ) -> tuple[dict[str, Any], str | None]:
        name = entries[self.comm.rank].file
        error = None
        try:
            shutil.copyfile(stage / name, stage / (MIRROR_PREFIX + name))
        except OSError as exc:
            error = str(exc)
        problem = self._agreed(error)
        return ({}, problem) if problem is not None else ({"scheme": "mirror"}, None)

    def extra_bytes(self, sizes: Sequence[int]) -> list[int]:
        return list(sizes)

    def extra_files(self, manifest: Manifest, rank: int) -> list[str]:
        return [MIRROR_PREFIX + manifest.ranks[rank].file]

    def rebuild(self, manifest: Manifest, lost: set[int], target: Path) -> tuple[Rebuilt, str]:
        mine = manifest.ranks[self.comm.rank]
        done: Rebuilt = []
        error = None
        if self.comm.rank in lost:
            tmp = rebuild_name(target, mine.file)
            try:
                shutil.copyfile(target / (MIRROR_PREFIX + mine.file), tmp)
                digest, _ = file_digest(tmp, manifest.checksum)
            except OSError as exc:
                error = f"its mirror is unusable: {exc}"
            else:
                if digest == mine.digest:
                    done.append((tmp, target / mine.file))
                else:
                    error = "its mirror is corrupt"
        return done, self._agreed(error) or ""


def _mirror(comm: Comm, topology: Topology, settings: LevelConfig, checksum: str) -> Redundancy:
    return Mirror(comm)


MIRRORED = LevelSpec(
    5,
    "mirrored node-local",
    Storage.NODE_LOCAL,
    "the loss or corruption of one rank file",
    scheme="mirror",
    subdir="level5",
)
"""A test-only fifth level with its own redundancy scheme."""


@pytest.fixture
def archive() -> Iterator[LevelSpec]:
    register_level(ARCHIVE)
    try:
        yield ARCHIVE
    finally:
        unregister_level(ARCHIVE.number)


@pytest.fixture
def mirrored() -> Iterator[LevelSpec]:
    register_scheme("mirror", _mirror)
    register_level(MIRRORED)
    try:
        yield MIRRORED
    finally:
        unregister_level(MIRRORED.number)
        unregister_scheme("mirror")


def _dirs(tmp_path: Path) -> dict[str, Any]:
    for name in ("local", "global"):
        (tmp_path / name).mkdir(exist_ok=True)
    return {"local_dir": str(tmp_path / "local"), "global_dir": str(tmp_path / "global")}


def _checkpointer(tmp_path: Path, **settings: Any) -> tuple[Checkpointer, np.ndarray]:
    ck = Checkpointer(env={}, **_dirs(tmp_path), **settings)
    u = np.zeros(1000)
    ck.protect("u", u)
    return ck, u


def test_the_level_numbers_are_tested_only_in_the_level_specs() -> None:
    """The issue's criterion: no ``level == N`` outside the specs (ckpt/levels.py)."""
    found = [
        f"{path.relative_to(SRC)}:{n}"
        for path in sorted(SRC.rglob("*.py"))
        if path.name != "levels.py"
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if re.search(r"level == [1-4]", line)
    ]
    assert found == []


def test_a_fifth_level_is_checkpointed_on_schedule_and_recovered(
    archive: LevelSpec, tmp_path: Path
) -> None:
    ck, u = _checkpointer(tmp_path, l1={"every": "2it"}, l5={"every": "3it"})
    assert ck.config.enabled_levels == (1, 5)
    due = []
    for it in range(1, 7):
        u[:] = it
        ck.state["it"] = it
        level = ck.need_checkpoint(it)
        due.append(level)
        if level is not None:
            ck.checkpoint(level, iteration=it)
    ck.finalize()
    # the higher level also serves the lower one's schedule (at 6 both are due: level 5)
    assert due == [None, 1, 5, 1, None, 5]
    stored = tmp_path / "global" / "level5" / "greenckpt"
    assert sorted(p.name for p in stored.glob("ckpt-*")) == ["ckpt-00000002", "ckpt-00000004"]
    # node-local storage lost: the fifth level's newest checkpoint is restored
    shutil.rmtree(tmp_path / "local")
    again, v = _checkpointer(tmp_path, l1={"every": "2it"}, l5={"every": "3it"})
    info = again.recover()
    assert info is not None and (info.id, info.level, info.iteration) == (4, 5, 6)
    assert again.state["it"] == 6 and np.all(v == 6)
    again.finalize()


def test_a_fifth_level_with_its_own_redundancy_rebuilds_a_lost_file(
    mirrored: LevelSpec, tmp_path: Path
) -> None:
    ck, u = _checkpointer(tmp_path, l5={"enabled": True})
    u[:] = 7
    ck.state["it"] = 7
    ck.checkpoint(5, iteration=7)
    ck.finalize()
    directory = tmp_path / "local" / "level5" / "greenckpt" / "ckpt-00000001"
    assert sorted(p.name for p in directory.iterdir()) == [
        "manifest.json",
        "mirror-rank-000000.data",
        "rank-000000.data",
    ]
    (directory / "rank-000000.data").unlink()
    again, v = _checkpointer(tmp_path, l5={"enabled": True})
    info = again.recover()
    assert info is not None and (info.level, info.rebuilt) == (5, (0,))
    assert again.state["it"] == 7 and np.all(v == 7)
    assert (directory / "rank-000000.data").is_file()
    again.finalize()


def test_a_fifth_level_is_configured_like_the_others(archive: LevelSpec, tmp_path: Path) -> None:
    toml = tmp_path / "ckpt.toml"
    toml.write_text('[checkpoint]\nglobal_dir = "/g"\n[checkpoint.l5]\nevery = "10min"\n')
    config = load_config(toml, env={"GREENCKPT_L5_CODEC": "lz4"})
    assert config.enabled_levels == (5,)
    assert config.level(5).every_s == 600.0
    assert config.describe()["l5.codec"] == {"value": "lz4", "source": "GREENCKPT_L5_CODEC"}
    with pytest.raises(
        ConfigError, match=r"unknown key 'group_size'.*; group_size applies to level 3 only"
    ):
        load_config(env={}, global_dir="/g", l5={"group_size": 3})
    with pytest.raises(ConfigError, match="level 5 is enabled but global_dir is not set"):
        load_config(env={}, local_dir="/l", l5={"enabled": True})


def test_a_manifest_may_name_a_level_only_while_it_is_registered(tmp_path: Path) -> None:
    ck, _ = _checkpointer(tmp_path)
    ck.checkpoint(1)
    ck.finalize()
    path = next((tmp_path / "local" / "greenckpt").glob("ckpt-*/manifest.json"))
    data = manifest_to_json(replace(read_manifest(path), level=5))
    with pytest.raises(ManifestError, match="expected one of 1, 2, 3, 4 "):
        manifest_from_json(data)
    register_level(ARCHIVE)
    try:
        assert manifest_from_json(data).level == 5
    finally:
        unregister_level(ARCHIVE.number)


def test_the_registry_keeps_the_levels_ordered_and_the_built_in_ones() -> None:
    assert level_numbers() == (1, 2, 3, 4)
    assert level_spec(2).scheme == "partner" and level_spec(3).scheme == "erasure"
    with pytest.raises(ValueError, match="already registered"):
        register_level(LevelSpec(4, "again", Storage.GLOBAL, "nothing new"))
    with pytest.raises(ValueError, match="built in"):
        unregister_level(1)
    with pytest.raises(ValueError, match="level must be 1, 2, 3 or 4, not 5"):
        level_spec(5)
