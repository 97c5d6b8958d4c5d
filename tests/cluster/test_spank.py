"""The SPANK plugin on the real 3-node test cluster (tests/cluster/slurm_cluster.py).

- ``srun ./heat2d`` (examples/c) unmodified: a rank killed fails the job, its checkpoints are
  accounted, and the resubmitted script restarts to the failure-free checksum;
- an unknown ``--greenckpt``/``--greenckpt-intercept`` value is refused by ``srun`` and
  ``sbatch`` in one line, and nothing is queued;
- ``sbatch --greenckpt`` of an unmodified script (``srun --mpi=pmi2 ./heat2d``, examples/c) gives a
  job report with 3 finished nodes and the example's checkpoints, and leaves no agent, spool
  or state file on any node;
- one node's agent killed while the job checkpoints: that node is ``died`` (its
  ``died.json`` written by the step's end), the other two accounted, every node restored;
- a node whose agent cannot start runs the step unmanaged, says so in the job's output, and
  the job succeeds; ``--greenckpt=off`` and the site default;
- the unprivileged job user cannot make the root agent write where it could not, nor through
  a link planted in its report folder.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from greenckpt.native import BuildError, spank_plugin
from tests.cluster.slurm_cluster import SlurmCluster
from tests.native.test_heat2d_c import build, checksum, launch, mpiexec

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def plugin() -> Path:
    try:
        return spank_plugin()
    except BuildError as exc:
        pytest.skip(f"no SPANK plugin: {exc}")


@pytest.fixture
def spank(slurm: SlurmCluster, plugin: Path) -> Iterator[SlurmCluster]:
    """The cluster with greenckpt's plugin in plugstack.conf (emptied again after the test)."""
    slurm.plugstack.write_text(f"optional {plugin} python={sys.executable} timeout=40\n")
    try:
        yield slurm
    finally:
        slurm.plugstack.write_text("")


def _configure(slurm: SlurmCluster, plugin: Path, extra: str) -> None:
    slurm.plugstack.write_text(f"optional {plugin} python={sys.executable} {extra}\n")


def _wait_job(slurm: SlurmCluster, job: str, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and slurm.run("squeue", "-h", "-j", job).stdout.strip():
        time.sleep(0.3)
    assert not slurm.run("squeue", "-h", "-j", job).stdout.strip(), f"job {job} still runs"


def _sbatch(slurm: SlurmCluster, cwd: Path, *args: str, user: str | None = None) -> str:
    done = slurm.run("sbatch", "--parsable", *args, cwd=cwd, user=user)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip().split(";")[0]


def _logs(slurm: SlurmCluster) -> str:
    """The plugin's lines in the slurmd logs (what a failed assertion shows)."""
    lines = []
    for log in sorted(slurm.directory.glob("slurmd-*.log")):
        lines += [ln for ln in log.read_text(errors="replace").splitlines() if "greenckpt" in ln]
    return "\n".join(lines[-20:])


def _report(slurm: SlurmCluster, folder: Path) -> dict[str, object]:
    path = folder / "job-report.json"
    assert path.is_file(), f"no {path}; the plugin's log lines:\n{_logs(slurm)}"
    doc = json.loads(path.read_text())
    assert isinstance(doc, dict)
    return doc


def _no_leftovers(slurm: SlurmCluster, job: str, wait_s: float = 15.0) -> None:
    """No agent of ``job`` runs (an agent exits just after its last release answered) and no
    spool folder or state file is left on any node."""
    deadline = time.monotonic() + wait_s
    while True:
        ps = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True, check=True)
        running = f"greenckpt.cli.spank agent --job {job} " in ps.stdout
        if not running or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert not running, f"an agent of job {job} still runs"
    for node in slurm.nodes:
        assert not slurm.node_path(node, f"/run/greenckpt-spank/job-{job}").exists()
        assert not slurm.node_path(node, "/run/greenckpt/node-state.json").exists()


HEAT_SCRIPT = """#!/bin/bash
#SBATCH -N3
#SBATCH --ntasks-per-node=1
srun -N3 mkdir -p /tmp/heat-$SLURM_JOB_ID
srun --mpi=pmi2 {heat2d} --nx {n} --ny {n} --iterations {iterations} --interval {every} \\
    --ckpt-dir $PWD/heat-$SLURM_JOB_ID --ranks-per-node 1
"""
"""An unmodified job script: examples/c's heat2d, which announces its own checkpoints through
libgreenckpt, started with ``srun --mpi=pmi2`` as such scripts are. Why the C example and not
examples/heat2d.py: the MPICH wheel's UCX address exchange puts 4096 bytes through PMI-1, the
padding being whatever memory follows the address; in a Python process that memory is often
incompressible, the request passes 1024 bytes, and Slurm's pmi2 plugin (one read of at most
1024 bytes per PMI-1 request) parses its tail as a malformed request: MPI start-up fails or
hangs at random (docs/user-guide.md, "Under Slurm"). The small C program's requests have
stayed under that size in every run here."""


@pytest.fixture(scope="module")
def heat2d(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """examples/c/heat2d.c, built as its README says."""
    return build(Path(mpiexec()).with_name("mpicc"), tmp_path_factory.mktemp("heat_c") / "heat2d")


def _heat_script(
    folder: Path, heat2d: Path, iterations: int, *, n: int = 64, every: int = 50
) -> Path:
    script = folder / "heat.sh"
    script.write_text(HEAT_SCRIPT.format(heat2d=heat2d, iterations=iterations, n=n, every=every))
    return script


def test_unknown_values_are_refused_in_one_line_before_queueing(
    spank: SlurmCluster, tmp_path: Path
) -> None:
    for argv, name in (
        (("srun", "-N1", "--greenckpt=fastest", "true"), "--greenckpt"),
        (("sbatch", "--greenckpt=fastest", "--wrap", "true"), "--greenckpt"),
        (("sbatch", "--greenckpt-intercept=mpi", "--wrap", "true"), "--greenckpt-intercept"),
        (("srun", "-N1", "--greenckpt", "--greenckpt-intercept=x", "true"),
         "--greenckpt-intercept"),
    ):  # fmt: skip
        done = spank.run(*argv, cwd=tmp_path, user=spank.user)
        assert done.returncode != 0
        lines = done.stderr.strip().splitlines()
        assert len(lines) == 1 and f"Invalid {name} argument" in lines[0], done.stderr
    assert not spank.run("squeue", "-h").stdout.strip()
    assert "--greenckpt" in spank.run("sbatch", "--help").stdout


def test_sbatch_greenckpt_of_an_unmodified_script_reports_three_finished_nodes(
    spank: SlurmCluster, tmp_path: Path, heat2d: Path
) -> None:
    job = _sbatch(spank, tmp_path, "--greenckpt", f"--output={tmp_path}/job.out",
                  str(_heat_script(tmp_path, heat2d, 300)))  # fmt: skip
    _wait_job(spank, job)
    assert "checksum " in (tmp_path / "job.out").read_text()  # it ran to its end
    folder = tmp_path / f"greenckpt-{job}"
    doc = _report(spank, folder)
    assert doc["job"]["id"] == job and doc["job"]["launcher"] == "slurm-spank"  # type: ignore[index]
    assert doc["states"]["finished"] == [0, 1, 2]  # type: ignore[index]
    checkpoints = doc["by_kind"]["checkpoint"]  # type: ignore[index]
    assert checkpoints["nodes"] == 3 and checkpoints["count"] == 3 * 5  # 50, ..., 250 of 300
    by_kind = doc["by_kind"]  # the tasks' time is compute; only the agent's own is start-up
    assert by_kind["compute"]["node_seconds"] > by_kind["startup"]["node_seconds"]  # type: ignore[index]
    assert doc["useful_compute_s"] > 0  # type: ignore[operator]
    assert (folder / "job-phases.csv").is_file() and (folder / "job-power.png").is_file()
    for k in range(3):  # each node: a session for the mkdir step and one for the heat step,
        # or one for both when the heat step joined the agent before the mkdir step let it go
        sessions = sorted((folder / "nodes" / f"node{k}").glob("step*"))
        assert sessions and sessions[0].name == "step0"
        for session in sessions:
            assert (session / "summary.json").is_file() and (session / "report.json").is_file()
    _no_leftovers(spank, job)


def test_a_killed_agent_is_died_the_others_accounted_every_node_restored(
    spank: SlurmCluster, tmp_path: Path, heat2d: Path
) -> None:
    script = _heat_script(tmp_path, heat2d, 30000, n=256, every=1000)  # long enough to kill
    job = _sbatch(spank, tmp_path, "--greenckpt", f"--output={tmp_path}/job.out", str(script))
    state = spank.node_path("n2", f"/run/greenckpt-spank/job-{job}/agent.json")
    pid = None
    deadline = time.monotonic() + 90
    while pid is None and time.monotonic() < deadline:  # node 1's heat-step agent, checkpointing
        try:
            doc = json.loads(state.read_text())
        except (OSError, ValueError):
            doc = {}
        progress = (doc.get("progress") or {}).get("by_kind", {})
        if "checkpoint" in progress:  # the heat step's agent (it may have joined step 0's)
            pid = int(doc["pid"])
        time.sleep(0.1)
    assert pid is not None, "node 1's agent never reported a checkpoint"
    os.kill(pid, 9)
    _wait_job(spank, job)
    assert "checksum " in (tmp_path / "job.out").read_text()  # the application completed
    folder = tmp_path / f"greenckpt-{job}"
    doc = _report(spank, folder)
    states = doc["states"]
    assert states["died"] == [1] and states["finished"] == [0, 2]  # type: ignore[index]
    (died_file,) = (folder / "nodes" / "node1").glob("step*/died.json")
    died = json.loads(died_file.read_text())
    assert f"pid {pid}" in died["reason"] and died["progress"]["by_kind"]["checkpoint"]
    rows = {r["node"]: r for r in doc["nodes"]}  # type: ignore[attr-defined]
    assert rows[1]["accounting_ends"] and rows[0]["records"] and rows[2]["records"]
    first = next(p for p in doc["phases"] if p["kind"] == "checkpoint")  # type: ignore[attr-defined]
    assert first["nodes"] == 3  # node 1's came with its progress, kept in died.json
    _no_leftovers(spank, job)


def test_a_node_without_an_agent_runs_unmanaged_and_says_so(
    slurm: SlurmCluster, plugin: Path, tmp_path: Path
) -> None:
    _configure(slurm, plugin, "python=/nonexistent/python3")
    try:
        show = 'echo "$SLURM_NODEID ${GREENCKPT_RUNTIME_SOCKET:-none}"'
        done = slurm.run("srun", "-N3", "--greenckpt", "sh", "-c", show, cwd=tmp_path)
    finally:
        slurm.plugstack.write_text("")
    assert done.returncode == 0, done.stderr
    assert sorted(done.stdout.split("\n"))[1:] == ["0 none", "1 none", "2 none"]
    said = [ln for ln in done.stderr.splitlines() if "unmanaged" in ln]
    assert len(said) == 3 and all("/nonexistent/python3" in ln for ln in said), done.stderr


def test_off_and_the_site_default(slurm: SlurmCluster, plugin: Path, tmp_path: Path) -> None:
    show = ("sh", "-c", 'echo "${GREENCKPT_RUNTIME_SOCKET:-none}"')
    _configure(slurm, plugin, "default=on timeout=40")
    try:
        on = slurm.run("srun", "-N1", *show, cwd=tmp_path)
        off = slurm.run("srun", "-N1", "--greenckpt=off", *show, cwd=tmp_path)
    finally:
        slurm.plugstack.write_text("")
    assert on.stdout.strip().startswith("/run/greenckpt-spank/job-"), on.stderr
    assert off.stdout.strip() == "none", off.stderr


def test_the_job_user_cannot_make_the_root_agent_write_elsewhere(
    spank: SlurmCluster, tmp_path: Path
) -> None:
    home = spank.user_dir / f"t-{tmp_path.name}"
    subprocess.run(["runuser", "-u", spank.user, "--", "mkdir", "-p", str(home)], check=True)
    forbidden = Path("/var/tmp") / f"greenckpt-forbidden-{tmp_path.name}"
    forbidden.mkdir(mode=0o755)  # root's: the user may not write here
    mine = home / "elsewhere"
    planted = home / "planted"
    for link_dir in (planted,):
        subprocess.run(["runuser", "-u", spank.user, "--", "mkdir", "-p", str(mine),
                        str(link_dir)], check=True)  # fmt: skip
    os.symlink(forbidden, planted / "nodes")  # a link to root's folder, in the user's report
    os.lchown(planted / "nodes", spank.uid, spank.gid)
    try:
        for report in (forbidden / "r", planted, home / "linked"):
            if report.name == "linked":  # the report folder itself a link to the user's own
                os.symlink(mine, report)
                os.lchown(report, spank.uid, spank.gid)
            job = _sbatch(spank, home, "-N3", "--greenckpt", f"--greenckpt-report={report}",
                          "--wrap", "srun -N3 true", user=spank.user)  # fmt: skip
            _wait_job(spank, job)
            _no_leftovers(spank, job)
        assert list(forbidden.iterdir()) == []
        assert list(mine.iterdir()) == []
    finally:
        for p in forbidden.iterdir():
            p.unlink()
        forbidden.rmdir()


C_SCRIPT = """#!/bin/bash
#SBATCH -N3
#SBATCH --ntasks-per-node=1
srun --mpi=pmi2 --kill-on-bad-exit=1 {heat2d} --nx 48 --ny 48 --iterations 300 \\
    --interval 50 --ckpt-dir {ckpt} --ranks-per-node 1 --kill-at 170 --kill-rank 1
"""


def test_the_c_example_unmodified_under_the_plugin_fails_restarts_and_is_accounted(
    spank: SlurmCluster, tmp_path: Path, heat2d: Path
) -> None:
    """``srun ./heat2d`` from examples/c in a script with no greenckpt in it: rank 1 dies
    after iteration 170 (the job fails at once: --kill-on-bad-exit), the nodes' agents still
    account its checkpoints; submitted again, it restarts from checkpoint 150 and ends with
    the failure-free checksum, the restart in the job report."""
    reference = checksum(launch(heat2d, tmp_path / "ref", "--nx", "48", "--ny", "48",
                                "--iterations", "300", "--interval", "50", n=3))  # fmt: skip
    script = tmp_path / "heat-c.sh"
    script.write_text(C_SCRIPT.format(heat2d=heat2d, ckpt=tmp_path / "ckpt"))
    reports = []
    for attempt in ("first", "again"):
        out = tmp_path / f"{attempt}.out"
        job = _sbatch(spank, tmp_path, "--greenckpt", f"--output={out}", str(script))
        _wait_job(spank, job)
        reports.append(_report(spank, tmp_path / f"greenckpt-{job}"))
    first, again = reports
    assert first["states"]["finished"] == [0, 1, 2]  # type: ignore[index]
    assert first["by_kind"]["checkpoint"]["count"] == 3 * 3  # 50, 100, 150 on every node  # type: ignore[index]
    assert "restart" in again["by_kind"] and again["by_kind"]["restart"]["nodes"] == 3  # type: ignore[index, operator]
    assert f"checksum {reference}" in (tmp_path / "again.out").read_text()


def test_intercept_preloads_the_interposer_in_every_task(
    spank: SlurmCluster, tmp_path: Path
) -> None:
    show = 'echo "$SLURM_NODEID ${GREENCKPT_INTERCEPT:-none} ${LD_PRELOAD:-none}"'
    done = spank.run("srun", "-N3", "--greenckpt", "--greenckpt-intercept=fti", "sh", "-c",
                     show, cwd=tmp_path)  # fmt: skip
    assert done.returncode == 0, done.stderr
    lines = sorted(done.stdout.split("\n")[:-1])
    assert [ln.split()[:2] for ln in lines] == [["0", "fti"], ["1", "fti"], ["2", "fti"]]
    assert all(ln.split()[2].endswith("libgreenckpt_intercept.so") for ln in lines), lines
