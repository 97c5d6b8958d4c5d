"""The test cluster itself (tests/cluster/slurm_cluster.py): three nodes that look like three.

The multi-node tests rely on it: each node idle, its own host name, its own /tmp and /run
(node-local files are not shared), pytest's temp directory shared (a shared file system), one
MPI job across all three through Slurm's PMI-2, and a non-root user who can submit jobs.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.cluster.slurm_cluster import SlurmCluster

NODES = ("n1", "n2", "n3")


def _lines(done: subprocess.CompletedProcess[str]) -> list[str]:
    """The output lines of a finished client, sorted (tasks print in any order)."""
    assert done.returncode == 0, done.stdout + done.stderr
    return sorted(done.stdout.splitlines())


def test_three_idle_nodes_and_the_spank_plugstack(slurm: SlurmCluster) -> None:
    assert slurm.nodes == NODES
    assert slurm.node_states() == dict.fromkeys(NODES, "idle")
    assert slurm.plugstack.read_text() == ""
    conf = Path(slurm.env["SLURM_CONF"]).read_text()
    assert f"PlugStackConfig={slurm.plugstack}" in conf.splitlines()
    assert all(slurm.namespaces[n] != slurm.namespaces[m] for n in NODES for m in NODES if n < m)


def test_each_node_has_its_own_host_name_tmp_and_run(slurm: SlurmCluster, tmp_path: Path) -> None:
    name = f"x-{tmp_path.name}"
    lines = _lines(slurm.run("srun", "-N3", "--ntasks-per-node=1", "sh", "-c",
                             'echo "$SLURMD_NODENAME $(hostname)"'))  # fmt: skip
    assert lines == [f"{n} {n}" for n in NODES]
    # each task touches a file in /tmp and /run named after its node, then lists both
    script = (f'touch /tmp/{name}-$SLURM_NODEID /run/{name}-$SLURM_NODEID; '
              f'echo "$SLURMD_NODENAME $(ls /tmp /run | grep -c {name})"; '
              f'touch {tmp_path}/$SLURMD_NODENAME')  # fmt: skip
    lines = _lines(slurm.run("srun", "-N3", "--ntasks-per-node=1", "sh", "-c", script))
    assert lines == [f"{n} 2" for n in NODES]  # its own two files, not the others' four
    for k, node in enumerate(NODES):
        assert slurm.node_path(node, f"/tmp/{name}-{k}").exists()
        assert slurm.node_path(node, f"/run/{name}-{k}").exists()
        assert not slurm.node_path(node, f"/tmp/{name}-{(k + 1) % 3}").exists()
    assert not list(Path("/tmp").glob(f"{name}-*"))  # nor the host's /tmp
    assert sorted(p.name for p in tmp_path.iterdir()) == list(NODES)  # the shared directory


def test_an_mpi4py_job_spans_the_three_nodes(slurm: SlurmCluster) -> None:
    pytest.importorskip("mpi4py", reason="mpi4py is not installed (pip install -e '.[mpi]')")
    code = ("from mpi4py import MPI; c = MPI.COMM_WORLD; "
            "print(c.rank, c.size, MPI.Get_processor_name(), c.allreduce(c.rank + 1))")  # fmt: skip
    done = slurm.run("srun", "-N3", "--ntasks-per-node=1", "--mpi=pmi2", sys.executable, "-c",
                     code, timeout=60)  # fmt: skip
    assert _lines(done) == [f"{k} 3 {n} 6" for k, n in enumerate(NODES)]


def test_the_job_user_submits_a_batch_job(slurm: SlurmCluster) -> None:
    assert slurm.uid != 0 and slurm.user_dir.stat().st_uid == slurm.uid
    out = slurm.user_dir / "whoami-%j.out"
    done = slurm.run("sbatch", "--parsable", f"--chdir={slurm.user_dir}", f"--output={out}",
                     "--wrap", "id -u; hostname; touch mine", user=slurm.user)  # fmt: skip
    assert done.returncode == 0, done.stderr
    job = done.stdout.strip().split(";")[0]
    result = slurm.user_dir / f"whoami-{job}.out"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and slurm.run("squeue", "-h", "-j", job).stdout.strip():
        time.sleep(0.2)
    uid, node = result.read_text().split()
    assert uid == str(slurm.uid) and node in NODES
    assert (slurm.user_dir / "mine").stat().st_uid == slurm.uid
