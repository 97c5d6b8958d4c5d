"""The parts of one checkpointing job that the write-and-commit stages, the recovery and the
façade (:class:`greenckpt.ckpt.api.Checkpointer`) share: configuration, communicator,
topology, protected data, each level's store and redundancy, and the small questions asked
of them (who leads a directory, whose files it holds).

Why one object: the stages and the recovery are functions of these parts, not of the
Checkpointer, so each can be read and tested without the whole façade.
"""

from __future__ import annotations

import os
import shutil
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from greenckpt.ckpt.agree import LocalFailure, agree_on, one_line
from greenckpt.ckpt.comm import Comm
from greenckpt.ckpt.config import Config, LevelConfig
from greenckpt.ckpt.levels import LevelSpec, level_spec
from greenckpt.ckpt.protect import Protected
from greenckpt.ckpt.redundancy.builtin import NoRedundancy
from greenckpt.ckpt.redundancy.scheme import Redundancy
from greenckpt.ckpt.store import CheckpointStore, StoreError
from greenckpt.ckpt.topology import Topology
from greenckpt.io import parse_codec

__all__ = ["Job", "tidy"]


def tidy(action: Callable[[], object], what: str) -> None:
    """Housekeeping on one rank (removing old or failed checkpoints): its failure is a
    warning. It must not raise on one rank after all agreed, which would leave the others
    waiting in the next collective; the checkpoints it failed to remove are kept, not lost."""
    try:
        action()
    except (OSError, ValueError) as exc:
        warnings.warn(f"greenckpt: could not {what}: {one_line(exc)}", RuntimeWarning, 3)


@dataclass
class Job:
    """This process's view of the job's checkpointing parts (see the module docstring)."""

    config: Config
    comm: Comm
    topology: Topology
    node: int
    protected: Protected
    redundancy: dict[int, Redundancy]
    stores: dict[int, CheckpointStore] = field(default_factory=dict)

    @property
    def rank(self) -> int:
        return self.comm.rank

    def level(self, number: int) -> LevelConfig:
        """A level's settings."""
        return self.config.level(number)

    def spec(self, number: int) -> LevelSpec:
        """A level's description (storage, what it survives, its scheme)."""
        return level_spec(number)

    def is_leader(self, level: int) -> bool:
        """Whether this rank commits and cleans its directory of ``level``."""
        return self.rank == self.spec(level).storage.leader(self.topology, self.node)

    def dir_ranks(self, level: int) -> tuple[int, ...] | None:
        """The ranks whose files this rank's directory of ``level`` holds (None: all)."""
        return self.spec(level).storage.dir_ranks(self.topology, self.node)

    def redundancy_of(self, level: int) -> Redundancy:
        """A level's redundancy (none for a level used only as an asynchronous flush's
        source)."""
        return self.redundancy.get(level) or NoRedundancy()

    def codec_label(self, level: int) -> str | None:
        """The label of a level's codec as the manifest records it (None: no codec)."""
        spec = parse_codec(self.level(level).codec)
        return None if spec is None else spec.label

    def abort(self, level: int, store: CheckpointStore, ckpt_id: int) -> None:
        """Remove a failed checkpoint's staging data (after every rank stopped writing;
        collective)."""
        self.comm.barrier()
        if self.is_leader(level):
            shutil.rmtree(store.staging_path(ckpt_id), ignore_errors=True)
        self.comm.barrier()

    def store_base(self, number: int) -> Path:
        """Where a level's store lives on this node (:meth:`LevelSpec.base`)."""
        spec = self.spec(number)
        directory = getattr(self.config, spec.storage.setting)
        assert isinstance(directory, str)  # the Config checked it is set for enabled levels
        return spec.base(directory, self.topology, self.node)

    def open_stores(self, flush_source: int) -> dict[int, CheckpointStore]:
        """The stores of the enabled levels and of an asynchronous flush's source (0: none),
        checked on every rank (collective: :class:`StoreError` on every rank if one is
        unusable); each directory's leader removes the leftovers of a crashed run."""
        stores: dict[int, CheckpointStore] = {}

        def open_each() -> None:
            try:
                levels = set(self.config.enabled_levels) | ({flush_source} - {0})
                for number in sorted(levels):
                    base = self.store_base(number)
                    top = Path(
                        os.path.expanduser(getattr(self.config, self.spec(number).storage.setting))
                    )
                    if base != top and top.is_dir():
                        base.mkdir(parents=True, exist_ok=True)  # node<k>/, level2/, level3/
                    store = CheckpointStore(base, self.config.name)
                    store.check_usable()
                    stores[number] = store
            except (StoreError, OSError) as exc:
                raise LocalFailure(str(exc)) from exc

        bad = agree_on(self.comm, open_each).failure
        if bad is not None:
            raise StoreError(bad.error if bad.rank == self.rank else str(bad))
        for number, store in stores.items():
            if self.is_leader(number):
                tidy(store.discard_partial, f"remove leftovers of a crashed run in {store.job_dir}")
        self.comm.barrier()
        return stores
