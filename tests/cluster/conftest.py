"""The ``slurm`` fixture: one real 3-node Slurm per test session (tests/cluster/slurm_cluster.py),
or a skip with the one-line reason it could not be installed or started; after each test, the
jobs it left running are killed.

The cluster's directory is under /var/tmp, not pytest's temp directory: that is under /tmp,
which each node replaces by its own. Pytest's base temp directory is shared with every node
instead (bound back in at its path), so a test's ``tmp_path`` is seen by its jobs on any node,
as a shared file system would be.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.cluster.slurm_cluster import SlurmCluster, SlurmUnavailable, start_slurm

NODES = 3
ROOT = Path(__file__).resolve().parents[2]


def _seen_by_jobs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, ...]:
    """What the jobs need at its own path on every node: pytest's base temp directory, the
    checkout (the examples, src/) and the Python that runs greenckpt — a clone under /tmp
    (as CI makes) would otherwise vanish behind each node's own /tmp."""
    paths = [tmp_path_factory.getbasetemp(), ROOT, Path(sys.prefix), Path(sys.base_prefix)]
    paths.append(Path(os.path.realpath(sys.executable)).parent)
    return tuple(dict.fromkeys(p.resolve() for p in paths))


@pytest.fixture(scope="session")
def slurm_session(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SlurmCluster]:
    directory = Path(tempfile.mkdtemp(prefix="greenckpt-slurm-", dir="/var/tmp"))
    try:
        cluster = start_slurm(directory, NODES, shared=_seen_by_jobs(tmp_path_factory))
    except (SlurmUnavailable, OSError, subprocess.SubprocessError) as exc:
        shutil.rmtree(directory, ignore_errors=True)
        pytest.skip(f"no Slurm: {exc}")
    try:
        yield cluster
    finally:
        cluster.stop()
        shutil.rmtree(directory, ignore_errors=True)


@pytest.fixture
def slurm(slurm_session: SlurmCluster) -> Iterator[SlurmCluster]:
    """The session's Slurm, with every job a test left running killed after it."""
    yield slurm_session
    slurm_session.cancel_all()
