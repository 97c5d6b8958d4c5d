"""The documented sbatch script on the 3-node test cluster (issue 29): three agents come up,
one per node, and the job report has every node's checkpoints; an agent that cannot start
names its reason at once (no hello wait), its node runs unmanaged, the wait is start-up and
never compute, and the agents' log is kept. The nodes are one machine under three host names:
the report counts its meters once. A rank that dies fails the job (no hang) and the script
submitted again restarts from its checkpoints; an agent SIGKILLed mid-checkpoint leaves its
node died and changed (restored by greenckpt restore on it), the others finished and restored.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

from greenckpt.runtime.launch_slurm import slurm_socket
from tests.cluster.slurm_cluster import SlurmCluster
from tests.cluster.test_slurm import GOVERNOR, ROOT, SCRIPT, _sbatch, _tree, _wait_end, _wait_file

HEAT = "--nx 32 --ny 32 --iterations 20"  # the script's 10it/50it: two level-1 checkpoints


def _env(cluster: SlurmCluster, tmp_path: Path) -> dict[str, str]:
    """The real root on every node (each has its own /run, so its own node lock)."""
    path = f"{Path(sys.executable).parent}:{cluster.env['PATH']}"
    return {**cluster.env, "PATH": path, "PYTHONPATH": str(ROOT / "src"),
            "PYTHON": sys.executable, "HEAT_ARGS": HEAT, "REPORT_DIR": str(tmp_path / "rep"),
            "LOCAL_DIR": str(tmp_path / "l"), "GLOBAL_DIR": str(tmp_path / "g")}  # fmt: skip


def _run_script(cluster: SlurmCluster, tmp_path: Path) -> tuple[dict, str]:  # type: ignore[type-arg]
    out = tmp_path / "job.out"
    job = _sbatch(cluster, _env(cluster, tmp_path), ROOT, "--nodes=3", "--ntasks-per-node=1",
                  f"--output={out}", str(SCRIPT))  # fmt: skip
    assert _wait_end(cluster, job) == "COMPLETED", out.read_text()
    text = out.read_text()
    return json.loads((tmp_path / "rep" / "job-report.json").read_text()), text


def _startup_s(tmp_path: Path, node: int) -> float:
    report = json.loads((tmp_path / "rep" / "nodes" / f"node{node}" / "report.json").read_text())
    return sum(r["end_s"] - r["start_s"] for r in report["records"] if r["kind"] == "startup")


def test_the_documented_script_on_three_nodes_brings_up_three_agents(
    slurm: SlurmCluster, tmp_path: Path
) -> None:
    doc, out = _run_script(slurm, tmp_path)
    assert doc["states"]["finished"] == [0, 1, 2], out
    assert doc["job"]["node_list"] == list(slurm.nodes)  # each node's own host name
    checkpoints = [p for p in doc["phases"] if p["kind"] == "checkpoint"]
    assert len(checkpoints) == 2 and all(p["nodes"] == 3 for p in checkpoints), out
    assert doc["machines"] == 1  # one host: its meters counted once
    assert any("nodes 0-2 are one machine" in n for n in doc["notes"])
    assert "(slurm, 3 node(s))" in out and "unmanaged" not in out
    assert not (tmp_path / "rep" / "agents.log").exists()


def test_an_agent_that_cannot_start_says_why_at_once_and_the_others_run(
    slurm: SlurmCluster, tmp_path: Path
) -> None:
    """Node n2's /tmp/greenckpt-0 is a file: its agent cannot make its socket folder."""
    blocker = slurm.node_path("n2", Path("/tmp/greenckpt-0"))
    blocker.parent.mkdir(parents=True, exist_ok=True)
    shutil.rmtree(blocker, ignore_errors=True)  # an earlier job's folder on that node
    blocker.write_text("not a folder")
    try:
        doc, out = _run_script(slurm, tmp_path)
    finally:
        blocker.unlink()
    assert doc["states"]["finished"] == [0, 2] and doc["states"]["unmanaged"] == [1], out
    line = next(x for x in out.splitlines() if x.startswith("greenckpt run: node 1 unmanaged:"))
    assert "/tmp/greenckpt-0" in line and "greenckpt agent: error" not in line
    assert "no hello within" not in out
    for node in (0, 2):  # the leader did not wait out its hello timeout before the command
        assert _startup_s(tmp_path, node) < 5.0
    assert "/tmp/greenckpt-0" in (tmp_path / "rep" / "agents.log").read_text()
    checkpoints = [p for p in doc["phases"] if p["kind"] == "checkpoint"]
    assert checkpoints and all(p["nodes"] == 2 for p in checkpoints)


def test_a_dead_rank_ends_the_job_and_the_resubmitted_script_restarts_from_its_checkpoints(
    slurm: SlurmCluster, tmp_path: Path
) -> None:
    """Without $USER, with HEAT_ARGS overriding the level-1 interval: rank 1 killed at
    iteration 15 ends the job (no hang until scancel), the report says it failed on every
    node, and the same script submitted again restarts from its own level-1 checkpoint."""
    env = {k: v for k, v in _env(slurm, tmp_path).items() if k != "USER"}
    env["HEAT_ARGS"] = "--nx 32 --ny 32 --iterations 30 --l1-every 5it"
    first, second = tmp_path / "first.out", tmp_path / "second.out"
    job = _sbatch(slurm, {**env, "GREENCKPT_INJECT": "kill@compute:rank=1,iteration=15",
                          "REPORT_DIR": str(tmp_path / "rep1")}, ROOT, "--nodes=3",
                  "--ntasks-per-node=1", f"--output={first}", str(SCRIPT))  # fmt: skip
    assert _wait_end(slurm, job, 120.0) == "FAILED", first.read_text()
    doc = json.loads((tmp_path / "rep1" / "job-report.json").read_text())
    assert doc["job"]["ended"] == "failed", first.read_text()
    assert {r["ended"] for r in doc["nodes"] if r["state"] == "finished"} == {"failed"}
    levels = [p["levels"] for p in doc["phases"] if p["kind"] == "checkpoint"]
    assert levels[:2] == [[1], [1]]  # 5it and 10it: HEAT_ARGS came last and won
    assert any((tmp_path / "l").iterdir())  # kept after the failure, for the restart
    job = _sbatch(slurm, {**env, "REPORT_DIR": str(tmp_path / "rep2")}, ROOT, "--nodes=3",
                  "--ntasks-per-node=1", f"--output={second}", str(SCRIPT))  # fmt: skip
    assert _wait_end(slurm, job) == "COMPLETED", second.read_text()
    result = next(
        json.loads(x) for x in second.read_text().splitlines() if x.startswith('{"iterations"')
    )
    assert result["restored"] is not None and result["restored"]["iteration"] >= 10, result
    assert not (tmp_path / "l").exists()  # the node-local copies go once a job completed


# On every node: begin a checkpoint at that node's agent, say ready-<node>, wait for "go".
APP = textwrap.dedent(
    """
    import os, sys, time
    from greenckpt.ckpt.notify_client import hook_from_env
    out, node = sys.argv[1], int(os.environ["SLURM_NODEID"])
    hook = hook_from_env()
    hook.begin("checkpoint", level=1, path=out, size=1 << 20, node=node)
    open(os.path.join(out, f"ready-{node}"), "w").close()
    while not os.path.exists(os.path.join(out, "go")):
        time.sleep(0.1)
    try:
        hook.end("checkpoint", node=node, ok=True, seconds=0.1)
    except Exception as exc:
        print("node", node, "end lost:", exc, file=sys.stderr)
    """
)


def _agent_of(job: str, node: int) -> int:
    """The pid of ``job``'s agent on node index ``node`` (its environment says which)."""
    path = slurm_socket(job).encode()
    for entry in Path("/proc").iterdir():
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
            environ = (entry / "environ").read_bytes().split(b"\0")
        except OSError:
            continue
        ours = b"agent" in argv and path in argv and b"srun" not in argv[0]
        if ours and f"SLURM_NODEID={node}".encode() in environ:
            return int(entry.name)
    raise AssertionError(f"no agent of job {job} on node {node}")


def test_an_agent_killed_mid_checkpoint_is_died_the_others_accounted_and_restored(
    slurm: SlurmCluster, tmp_path: Path
) -> None:
    """Three nodes, each its own fake cpufreq tree under control; node 1's agent is
    SIGKILLed inside a checkpoint: node 1 died (its tree left changed until the restore the
    epilog runs on it), nodes 0 and 2 finished and were restored by their agents."""
    found = [_tree(tmp_path / "trees" / f"node{k}") for k in range(3)]
    (tmp_path / "app.py").write_text(APP)
    command = (
        f"greenckpt run --launcher slurm --policy performance "
        f"--node-root {tmp_path}/trees/node{{node}} -o {tmp_path}/rep -- "
        f"srun --ntasks-per-node=1 {sys.executable} {tmp_path}/app.py {tmp_path}"
    )
    out = tmp_path / "job.out"
    job = _sbatch(slurm, _env(slurm, tmp_path), tmp_path, "--nodes=3", "--ntasks-per-node=1",
                  f"--output={out}", "--wrap", command)  # fmt: skip
    for k in range(3):
        _wait_file(tmp_path / f"ready-{k}", slurm, job, out)
    assert all(_governor(tmp_path, k) == "performance" for k in range(3))  # applied
    os.kill(_agent_of(job, 1), signal.SIGKILL)
    (tmp_path / "go").touch()
    assert _wait_end(slurm, job) == "COMPLETED", out.read_text()
    doc = json.loads((tmp_path / "rep" / "job-report.json").read_text())
    assert doc["states"]["finished"] == [0, 2] and doc["states"]["died"] == [1], out.read_text()
    checkpoint = next(p for p in doc["phases"] if p["kind"] == "checkpoint")
    assert checkpoint["nodes"] == 2 and doc["total"]["complete"] is False
    assert _governor(tmp_path, 0) == found[0] and _governor(tmp_path, 2) == found[2]
    assert _governor(tmp_path, 1) == "performance"  # its agent could not restore it
    srun = ("srun", "--nodes=1", "--ntasks=1", "--nodelist=n2", "greenckpt", "restore",
            "--root", str(tmp_path / "trees" / "node1"), "--json")  # fmt: skip
    done = subprocess.run(srun, env=_env(slurm, tmp_path), capture_output=True, text=True,
                          timeout=60, check=False)  # fmt: skip
    assert json.loads(done.stdout)["outcome"] == "restored", done.stdout + done.stderr
    assert _governor(tmp_path, 1) == found[1]


def _governor(tmp_path: Path, node: int) -> str:
    return (tmp_path / "trees" / f"node{node}" / GOVERNOR).read_text().strip()


def test_two_jobs_on_one_node_the_second_runs_and_accounts_with_control_off(
    slurm: SlurmCluster, tmp_path: Path
) -> None:
    """Nodes are shared between jobs (no --exclusive): while job A's agent controls n1 (its
    fake cpufreq tree), job B on n1 still runs, is metered and accounted with control off,
    and says in one line and in its report which session has the node."""
    found = _tree(tmp_path / "tree")
    (tmp_path / "app.py").write_text(APP)
    env = _env(slurm, tmp_path)
    common = f"greenckpt run --launcher slurm --policy performance --node-root {tmp_path}/tree"
    a_out, b_out = tmp_path / "a.out", tmp_path / "b.out"
    job_a = _sbatch(slurm, env, tmp_path, "-w", "n1", "-n1", f"--output={a_out}", "--wrap",
                    f"{common} -o {tmp_path}/rep-a -- srun {sys.executable} {tmp_path}/app.py "
                    f"{tmp_path}")  # fmt: skip
    _wait_file(tmp_path / "ready-0", slurm, job_a, a_out)
    job_b = _sbatch(slurm, env, tmp_path, "-w", "n1", "-n1", f"--output={b_out}", "--wrap",
                    f"{common} -o {tmp_path}/rep-b -- srun true")  # fmt: skip
    try:
        assert _wait_end(slurm, job_b) == "COMPLETED", b_out.read_text()
    finally:
        (tmp_path / "go").touch()
    assert _wait_end(slurm, job_a) == "COMPLETED", a_out.read_text()
    line = "greenckpt run: node 0: shared node: another greenckpt session pid "
    assert line in b_out.read_text()
    doc = json.loads((tmp_path / "rep-b" / "job-report.json").read_text())
    assert doc["states"]["finished"] == [0] and doc["nodes"][0]["shared_with"]
    assert any(n.startswith("node 0 shared its node: another ") for n in doc["notes"])
    assert doc["total"]["energy_j"] is not None  # metered and accounted all the same
    assert (tmp_path / "tree" / GOVERNOR).read_text().strip() == found  # A restored it
