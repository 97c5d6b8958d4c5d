"""``greenckpt run --launcher slurm`` under a real Slurm (the ``slurm`` fixture; one node each).

The documented sbatch script runs the heat example with checkpoints and one job report that
carries the Slurm job id and node list; ``scancel`` during a checkpoint leaves the node as found
(the agents restore it on SIGTERM), and after a node-level SIGKILL of the agent ``srun greenckpt
restore`` puts it back; ``srun --cpu-freq`` leaves the frequency to Slurm, said in one line and
in the report. The node is a fake cpufreq tree ($GREENCKPT_SYSROOT) with control on, so what was
set and restored is visible. The job id, node list and --cpu-freq parsing, and bad Slurm input
(one line, exit 2, nothing written), are tested without Slurm.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from greenckpt.errors import InvalidValueError
from greenckpt.runtime.launch_slurm import (
    SlurmJob,
    cpu_freq_request,
    expand_nodelist,
    parse_job_id,
    slurm_socket,
)
from tests.cluster.slurm_cluster import SlurmCluster
from tests.platform import fake_power
from tests.platform.fake_cpu import build_tree, load_spec

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "examples" / "slurm" / "greenckpt-heat.sbatch"
GOVERNOR = "sys/devices/system/cpu/cpufreq/policy0/scaling_governor"

# Begins a checkpoint on its node, says "ready" in a file and waits for a "go" file (or to be
# cancelled), then ends the checkpoint.
APP = textwrap.dedent(
    """
    import os, sys, time
    from greenckpt.ckpt.notify_client import hook_from_env
    out = sys.argv[1]
    hook = hook_from_env()
    hook.begin("checkpoint", level=1, path=out, size=1 << 20, node=0)
    open(os.path.join(out, "ready"), "w").close()
    while not os.path.exists(os.path.join(out, "go")):
        time.sleep(0.1)
    hook.end("checkpoint", node=0, ok=True, seconds=0.1)
    """
)


def _tree(path: Path) -> str:
    fake_power.intel_tree(build_tree(load_spec("intel-acpi-cpufreq"), path))
    found = (path / GOVERNOR).read_text().strip()
    assert found != "performance"
    return found


def _env(cluster: SlurmCluster, tree: Path) -> dict[str, str]:
    path = f"{Path(sys.executable).parent}:{cluster.env['PATH']}"
    return {**cluster.env, "PATH": path, "PYTHONPATH": str(ROOT / "src"),
            "PYTHON": sys.executable, "GREENCKPT_SYSROOT": str(tree)}  # fmt: skip


def _sbatch(cluster: SlurmCluster, env: dict[str, str], cwd: Path, *argv: str) -> str:
    done = subprocess.run(["sbatch", "--parsable", *argv], env=env, cwd=cwd, capture_output=True,
                          text=True, timeout=60, check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr
    return done.stdout.strip().split(";")[0]


def _state(cluster: SlurmCluster, job: str) -> str:
    out = cluster.run("scontrol", "show", "job", "-o", job).stdout
    return next((w.split("=", 1)[1] for w in out.split() if w.startswith("JobState=")), "GONE")


def _node(cluster: SlurmCluster, job: str) -> str:
    """The node ``job`` ran on (the cluster has several; these jobs take one)."""
    out = cluster.run("scontrol", "show", "job", "-o", job).stdout
    return next(w.split("=", 1)[1] for w in out.split() if w.startswith("NodeList="))


def _wait_end(cluster: SlurmCluster, job: str, seconds: float = 240.0) -> str:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        state = _state(cluster, job)
        if state not in ("PENDING", "RUNNING", "COMPLETING", "CONFIGURING", "SUSPENDED"):
            return state
        time.sleep(0.5)
    cluster.run("scancel", job)
    raise AssertionError(f"job {job} did not end in {seconds:g} s")


def _wait_file(path: Path, cluster: SlurmCluster, job: str, log: Path) -> None:
    for _ in range(1200):
        if path.exists() or _state(cluster, job) not in ("PENDING", "RUNNING", "CONFIGURING"):
            break
        time.sleep(0.1)
    assert path.exists(), log.read_text() if log.exists() else "no job output"


def test_sbatch_of_the_documented_script_gives_a_job_report_with_slurm_id_and_nodes(
    slurm: SlurmCluster, tmp_path: Path
) -> None:
    tree = tmp_path / "tree"
    found = _tree(tree)
    env = {**_env(slurm, tree), "HEAT_ARGS": "--nx 32 --ny 32 --iterations 20",
           "GREENCKPT_FLAGS": "--policy performance", "REPORT_DIR": str(tmp_path / "rep"),
           "LOCAL_DIR": str(tmp_path / "l"), "GLOBAL_DIR": str(tmp_path / "g")}  # fmt: skip
    # the script's own checkpoint intervals (10it, 50it) give two level-1 checkpoints
    job = _sbatch(slurm, env, ROOT, f"--output={tmp_path}/job.out", str(SCRIPT))
    assert _wait_end(slurm, job) == "COMPLETED", (tmp_path / "job.out").read_text()
    out = (tmp_path / "job.out").read_text()
    doc = json.loads((tmp_path / "rep" / "job-report.json").read_text())
    assert doc["states"]["finished"] == [0], out
    assert doc["job"]["id"] == job and doc["job"]["launcher"] == "slurm"
    node_name = _node(slurm, job)
    assert doc["job"]["scheduler"]["node_list"] == [node_name]
    assert doc["job"]["scheduler"]["job_id"] == job
    assert doc["job"]["node_list"] == [node_name]
    assert doc["states"]["finished"] == [0]
    checkpoints = [p for p in doc["phases"] if p["kind"] == "checkpoint"]
    assert len(checkpoints) == 2 and all(p["levels"] == [1] for p in checkpoints), out
    node = json.loads((tmp_path / "rep" / "nodes" / "node0" / "report.json").read_text())
    assert sum(r["kind"] == "checkpoint" for r in node["records"]) == 2
    assert f"greenckpt job report: job {job} (slurm, 1 node(s))" in out
    assert (tree / GOVERNOR).read_text().strip() == found  # restored by the agent
    assert not slurm.node_path(node_name, slurm_socket(job)).parent.exists()  # socket dir gone


def _start_checkpoint(slurm: SlurmCluster, tmp_path: Path, srun: str = "srun") -> tuple[str, str]:
    """A job whose app is inside a checkpoint: the governor found before and the job id."""
    found = _tree(tmp_path / "tree")
    env = _env(slurm, tmp_path / "tree")
    (tmp_path / "app.py").write_text(APP)
    command = (f"greenckpt run --launcher slurm --policy performance -o {tmp_path}/rep -- "
               f"{srun} {sys.executable} {tmp_path}/app.py {tmp_path}")  # fmt: skip
    job = _sbatch(slurm, env, tmp_path, "-n1", f"--output={tmp_path}/job.out", "--wrap", command)
    _wait_file(tmp_path / "ready", slurm, job, tmp_path / "job.out")
    return found, job


def _in_checkpoint(slurm: SlurmCluster, tmp_path: Path) -> tuple[str, str]:
    """:func:`_start_checkpoint`, the checkpoint's setting applied."""
    found, job = _start_checkpoint(slurm, tmp_path)
    assert (tmp_path / "tree" / GOVERNOR).read_text().strip() == "performance"
    return found, job


def test_srun_cpu_freq_wins_and_greenckpt_says_so(slurm: SlurmCluster, tmp_path: Path) -> None:
    found, job = _start_checkpoint(slurm, tmp_path, "srun --cpu-freq=Low")
    assert (tmp_path / "tree" / GOVERNOR).read_text().strip() == found  # not performance
    (tmp_path / "go").touch()
    assert _wait_end(slurm, job) == "COMPLETED", (tmp_path / "job.out").read_text()
    out = (tmp_path / "job.out").read_text()
    line = "greenckpt run: Slurm was asked to set the CPU frequency (--cpu-freq=Low): Slurm's"
    assert line in out
    doc = json.loads((tmp_path / "rep" / "job-report.json").read_text())
    assert doc["job"]["scheduler"]["frequency_by"] == "slurm"
    assert doc["job"]["scheduler"]["cpu_freq_requested"] == "Low"
    assert any("Slurm's setting wins" in n for n in doc["notes"])
    node = json.loads((tmp_path / "rep" / "nodes" / "node0" / "report.json").read_text())
    assert sum(r["kind"] == "checkpoint" for r in node["records"]) == 1


def _agent_pid(job: str) -> int:
    """The pid of the agent of ``job`` (only ours: its socket path names the job)."""
    path = slurm_socket(job).encode()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"agent" in argv and path in argv and b"srun" not in argv[0]:
            return int(entry.name)
    raise AssertionError(f"no agent of job {job}")


def _restore(env: dict[str, str], *srun: str) -> str:
    done = subprocess.run([*srun, "greenckpt", "restore", "--json"], env=env, capture_output=True,
                          text=True, timeout=60, check=False)  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    return str(json.loads(done.stdout)["outcome"])


def test_scancel_during_a_checkpoint_leaves_the_node_as_found(
    slurm: SlurmCluster, tmp_path: Path
) -> None:
    found, job = _in_checkpoint(slurm, tmp_path)
    assert slurm.run("scancel", job).returncode == 0
    assert _wait_end(slurm, job, 60) == "CANCELLED"
    assert (tmp_path / "tree" / GOVERNOR).read_text().strip() == found  # the agent restored it
    assert _restore(_env(slurm, tmp_path / "tree")) == "nothing"  # and left no state file
    doc = json.loads((tmp_path / "rep" / "job-report.json").read_text())
    assert doc["job"]["ended"] == "cancelled", (tmp_path / "job.out").read_text()
    assert any(n.startswith("the job was cancelled: SIGTERM") for n in doc["notes"])
    assert [r["ended"] for r in doc["nodes"]] == ["cancelled"]


def test_after_a_node_level_sigkill_srun_greenckpt_restore_restores_the_node(
    slurm: SlurmCluster, tmp_path: Path
) -> None:
    found, job = _in_checkpoint(slurm, tmp_path)
    node_name = _node(slurm, job)
    os.kill(_agent_pid(job), signal.SIGKILL)  # it cannot restore anything
    assert slurm.run("scancel", job).returncode == 0
    assert _wait_end(slurm, job, 60) == "CANCELLED"
    assert (tmp_path / "tree" / GOVERNOR).read_text().strip() == "performance"  # left changed
    # what the user guide says to run after the job (or a site's epilog): one task per node
    srun = ("srun", "--nodes=1", "--ntasks-per-node=1", f"--nodelist={node_name}")
    assert _restore(_env(slurm, tmp_path / "tree"), *srun) == "restored"
    assert (tmp_path / "tree" / GOVERNOR).read_text().strip() == found
    assert _restore(_env(slurm, tmp_path / "tree"), *srun) == "nothing"


@pytest.mark.parametrize(
    ("text", "names"),
    [("vm", ["vm"]), ("n[1-3,5]", ["n1", "n2", "n3", "n5"]),
     ("a1,b[08-10]", ["a1", "b08", "b09", "b10"]),
     ("r[1-2]c[1-2]", ["r1c1", "r1c2", "r2c1", "r2c2"])],
)  # fmt: skip
def test_slurm_node_lists_expand(text: str, names: list[str]) -> None:
    assert expand_nodelist(text) == names


@pytest.mark.parametrize("text", ["n[1-", "n[x]", "n[3-1]", "", "a,,b", "n]1["])
def test_a_node_list_that_does_not_parse_is_one_line(text: str) -> None:
    with pytest.raises(InvalidValueError, match="does not parse"):
        expand_nodelist(text)


def test_job_ids_and_the_allocation_from_slurms_environment() -> None:
    assert parse_job_id("4711") == "4711" and parse_job_id("4711_3") == "4711_3"
    for bad in ("", "47a", "4711_", "../x", "1_2_3"):
        with pytest.raises(InvalidValueError, match="does not parse"):
            parse_job_id(bad)
    env = {"SLURM_JOB_ID": "12", "SLURM_JOB_NODELIST": "n[1-2]", "SLURM_JOB_NUM_NODES": "2"}
    job = SlurmJob.from_environ(env)
    assert (job.job_id, job.nodes, job.node_list) == ("12", 2, ("n1", "n2"))
    arr = SlurmJob.from_environ({**env, "SLURM_ARRAY_JOB_ID": "10", "SLURM_ARRAY_TASK_ID": "4"})
    assert arr.job_id == "10_4"
    with pytest.raises(InvalidValueError, match="does not match"):
        SlurmJob.from_environ({**env, "SLURM_JOB_NUM_NODES": "3"})
    with pytest.raises(InvalidValueError, match="inside a Slurm allocation"):
        SlurmJob.from_environ({})
    assert slurm_socket("12", uid=7) == "/tmp/greenckpt-7/job-12/agent.sock"


def test_slurms_cpu_freq_request_is_noticed() -> None:
    assert cpu_freq_request({"SLURM_CPU_FREQ_REQ": "2000000"}, ["true"]) == "2000000"
    assert cpu_freq_request({}, ["srun", "--cpu-freq=High", "python", "a"]) == "High"
    assert cpu_freq_request({}, ["/usr/bin/srun", "--cpu-freq", "Low", "x"]) == "Low"
    assert cpu_freq_request({}, ["srun", "python", "--cpu-freq=1"]) is None  # the app's flag
    assert cpu_freq_request({}, ["mpiexec", "--cpu-freq=1"]) is None


def test_launcher_slurm_outside_an_allocation_is_one_line_exit_2(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
    env["PYTHONPATH"] = str(ROOT / "src")
    done = subprocess.run([sys.executable, "-m", "greenckpt", "run", "--launcher", "slurm",
                           "--", "true"], env=env, cwd=tmp_path, capture_output=True, text=True,
                          timeout=60, check=False)  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert "$SLURM_JOB_ID is not set" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "greenckpt-report").exists()
    bad = {**env, "SLURM_JOB_ID": "12x", "SLURM_JOB_NODELIST": "vm"}
    done = subprocess.run([sys.executable, "-m", "greenckpt", "run", "--launcher", "slurm",
                           "--", "true"], env=bad, cwd=tmp_path, capture_output=True, text=True,
                          timeout=60, check=False)  # fmt: skip
    assert done.returncode == 2 and "Slurm job id '12x' does not parse" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1


def test_bad_slurm_input_is_one_line_exit_2(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
    env |= {"PYTHONPATH": str(ROOT / "src"), "SLURM_JOB_ID": "12", "SLURM_JOB_NODELIST": "vm"}
    cases = [
        ({}, ["run", "--launcher", "slurm", "--nodes-emulated", "2", "--", "true"],
         "--launcher slurm and --nodes-emulated exclude each other"),
        ({"SLURM_JOB_NODELIST": "n[1-"}, ["run", "--launcher", "slurm", "--", "true"],
         "Slurm node list 'n[1-' does not parse"),
        ({}, ["agent", "--node", "slurm", "--job-id", "12", "--socket", "s", "--leader",
              "127.0.0.1:1", "--output", "o"], "--node slurm needs $SLURM_NODEID"),
    ]  # fmt: skip
    for extra, argv, message in cases:
        run_env = {**env, "GREENCKPT_JOB_TOKEN": "t", **extra}
        done = subprocess.run([sys.executable, "-m", "greenckpt", *argv], env=run_env,
                              cwd=tmp_path, capture_output=True, text=True, timeout=60,
                              check=False)  # fmt: skip
        assert done.returncode == 2, done.stderr
        assert message in done.stderr and len(done.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "greenckpt-report").exists()
