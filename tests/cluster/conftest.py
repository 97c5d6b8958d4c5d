"""The ``slurm`` fixture: one real one-node Slurm per test session (tests/cluster/
slurm_cluster.py), or a skip with the one-line reason it could not be installed or started;
after each test, the jobs it left running are killed."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator

import pytest

from tests.cluster.slurm_cluster import SlurmCluster, SlurmUnavailable, start_slurm


@pytest.fixture(scope="session")
def slurm_session(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SlurmCluster]:
    try:
        cluster = start_slurm(tmp_path_factory.mktemp("slurm"))
    except (SlurmUnavailable, OSError, subprocess.SubprocessError) as exc:
        pytest.skip(f"no Slurm: {exc}")
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture
def slurm(slurm_session: SlurmCluster) -> Iterator[SlurmCluster]:
    """The session's Slurm, with every job a test left running killed after it."""
    yield slurm_session
    slurm_session.cancel_all()
