"""``greenckpt run --nodes-emulated N``: one agent per emulated node, one job report.

The heat example under ``mpiexec -n 8`` over 4 emulated nodes gives one job report with every
node's checkpoints; one node's agent killed mid-run leaves the others accounted, that node
marked died (and, with a fake cpufreq tree under control, restored when an agent for it
starts again); an agent that cannot start leaves its node unmanaged and the job runs.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.ckpt.test_mpi import mpiexec
from tests.cli.test_cli_run import greenckpt
from tests.platform import fake_power
from tests.platform.fake_cpu import build_tree, load_spec

ROOT = Path(__file__).resolve().parents[2]

# Begins a checkpoint on every node (a node without an agent only warns), says "ready" in a
# file, waits for a "go" file, then ends the checkpoints.
APP = textwrap.dedent(
    """
    import os, sys, time
    from greenckpt.ckpt.notify_client import hook_from_env
    out, nodes = sys.argv[1], int(sys.argv[2])
    hook = hook_from_env()
    started = []
    for node in range(nodes):
        try:
            hook.begin("checkpoint", level=1, path=out, size=1 << 20, node=node)
            started.append(node)
        except Exception as exc:
            print("node", node, "no agent:", exc, file=sys.stderr)
    with open(os.path.join(out, "socket.txt"), "w") as f:
        f.write(os.environ["GREENCKPT_RUNTIME_SOCKET"])
    open(os.path.join(out, "ready"), "w").close()
    for _ in range(600):
        if os.path.exists(os.path.join(out, "go")):
            break
        time.sleep(0.1)
    for node in started:
        try:
            hook.end("checkpoint", node=node, ok=True, seconds=0.1)
        except Exception as exc:
            print("node", node, "end lost:", exc, file=sys.stderr)
    """
)

GOVERNOR = "sys/devices/system/cpu/cpufreq/policy0/scaling_governor"


def _env(tmp_path: Path) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT / "src"), "XDG_RUNTIME_DIR": str(tmp_path)}


def _agent_pid(socket_path: str) -> int:
    """The pid of the agent serving ``socket_path`` (only ours: the path is this test's)."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"agent" in argv and socket_path.encode() in argv:
            return int(entry.name)
    raise AssertionError(f"no agent serves {socket_path}")


def _wait_for(path: Path, proc: subprocess.Popen[str]) -> None:
    for _ in range(600):
        if path.exists() or proc.poll() is not None:
            break
        time.sleep(0.1)
    assert path.exists(), proc.communicate()


def _kill_agent_mid_run(
    tmp_path: Path, args: list[str], before: Callable[[], bool]
) -> tuple[int, str, str]:
    """``greenckpt run ARGS`` whose command writes socket.txt and "ready" then waits for
    "go": once ready and ``before()`` holds, node 1's agent is SIGKILLed and the command let
    go; the run's status, stdout and stderr."""
    run = subprocess.Popen(
        [sys.executable, "-m", "greenckpt", "run", *args], cwd=tmp_path, env=_env(tmp_path),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
    )  # fmt: skip
    try:
        _wait_for(tmp_path / "ready", run)
        assert before()
        template = (tmp_path / "socket.txt").read_text()
        os.kill(_agent_pid(template.replace("{node}", "1")), signal.SIGKILL)
        (tmp_path / "go").touch()
        out, err = run.communicate(timeout=120)
    finally:
        if run.poll() is None:
            run.kill()
            run.wait()
    return run.returncode, out, err


@pytest.mark.skipif(mpiexec() is None, reason="no mpiexec: pip install '.[mpi]'")
def test_heat_over_four_emulated_nodes_gives_one_job_report(tmp_path: Path) -> None:
    launcher = mpiexec()
    assert launcher is not None
    for d in ("l", "g"):
        (tmp_path / d).mkdir()
    proc = greenckpt(
        "run", "--nodes-emulated", "4", "--no-control", "-o", "rep", "--",
        launcher, "-n", "8", sys.executable, str(ROOT / "examples" / "heat2d.py"),
        "--nx", "32", "--ny", "32", "--iterations", "20", "--local-dir", "l",
        "--global-dir", "g", "--ranks-per-node", "2", "--l1-every", "10it",
        "--l4-every", "20it", cwd=tmp_path,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    doc = json.loads((tmp_path / "rep" / "job-report.json").read_text())
    assert doc["format"] == "greenckpt-job-report" and doc["job"]["nodes"] == 4
    assert doc["states"]["finished"] == [0, 1, 2, 3]
    checkpoints = [p for p in doc["phases"] if p["kind"] == "checkpoint"]
    assert [p["levels"] for p in checkpoints] == [[1], [4]]
    assert all(p["nodes"] == 4 for p in checkpoints)
    assert {lv["level"] for lv in doc["by_level"]} == {1, 4}
    assert doc["total"]["source"] in ("measured", "estimated")
    assert any("are one machine" in n for n in doc["notes"])  # one machine's meters, once
    assert doc["machines"] == 1 and len({r["host_id"] for r in doc["nodes"]}) == 1
    node_energy = [r["energy_j"] for r in doc["nodes"]]
    assert doc["total"]["energy_j"] == pytest.approx(max(node_energy))
    for k in range(4):
        node = json.loads((tmp_path / "rep" / "nodes" / f"node{k}" / "report.json").read_text())
        assert [r["nodes"] for r in node["records"] if r["kind"] == "checkpoint"] == [[k], [k]]
    assert "greenckpt job report" in proc.stdout and "finished" in proc.stdout
    assert (tmp_path / "rep" / "job-phases.csv").read_text().count("checkpoint") == 2
    assert not (tmp_path / "rep" / "agents.log").exists()  # every node finished


def test_a_killed_agent_leaves_the_others_accounted_and_its_node_restored_later(
    tmp_path: Path,
) -> None:
    trees = tmp_path / "trees"
    for k in range(3):  # node 3 has no tree: its agent cannot start
        fake_power.intel_tree(build_tree(load_spec("intel-acpi-cpufreq"), trees / f"node{k}"))
    found = (trees / "node1" / GOVERNOR).read_text().strip()
    assert found != "performance"
    code, out, err = _kill_agent_mid_run(
        tmp_path,
        ["--nodes-emulated", "4", "--policy", "performance", "--node-root",
         str(trees / "node{node}"), "-o", "rep", "--", sys.executable, "-c", APP,
         str(tmp_path), "4"],
        before=lambda: (trees / "node1" / GOVERNOR).read_text().strip() == "performance",
    )  # fmt: skip
    assert code == 0, out + err
    assert "greenckpt run: node 3 unmanaged: its sysfs root " in err  # the reason, once
    doc = json.loads((tmp_path / "rep" / "job-report.json").read_text())
    assert doc["states"] == {"finished": [0, 2], "died": [1], "unmanaged": [3],
                             "running": [], "starting": []}  # fmt: skip
    assert doc["synthetic"] is True  # fake trees: no real measurement
    died = doc["nodes"][1]
    assert "accounting ends" in died["accounting_ends"]
    assert doc["by_kind"]["checkpoint"]["nodes"] == 2 and doc["total"]["complete"] is False
    assert any(n.startswith("node 1 died") for n in doc["notes"])
    kept = (tmp_path / "rep" / "agents.log").read_text()  # not every node finished
    assert "node 3: its sysfs root" in kept and "agents.log" in " ".join(doc["notes"])
    for k in (0, 2):  # restored by their agents
        assert (trees / f"node{k}" / GOVERNOR).read_text().strip() == found
    assert (trees / "node1" / GOVERNOR).read_text().strip() == "performance"  # left changed
    again = subprocess.run(
        [sys.executable, "-m", "greenckpt", "run", "--nodes-emulated", "3", "--policy",
         "performance", "--node-root", str(trees / "node{node}"), "-o", "rep2", "--", "true"],
        cwd=tmp_path, env=_env(tmp_path), capture_output=True, text=True, timeout=120,
        check=False,
    )  # fmt: skip
    assert again.returncode == 0, again.stdout + again.stderr
    assert (trees / "node1" / GOVERNOR).read_text().strip() == found  # restored at start
    node1 = json.loads((tmp_path / "rep2" / "nodes" / "node1" / "report.json").read_text())
    assert any("restored at start" in n for n in node1["notes"])


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--node-root", "trees/x"], "--node-root 'trees/x' has no {node}"),
        (["--compare", "nope.json"], "cannot read the job report nope.json"),
    ],
)
def test_bad_job_input_is_one_line_exit_2(args: list[str], message: str, tmp_path: Path) -> None:
    proc = greenckpt("run", "--nodes-emulated", "2", *args, "--", "true", cwd=tmp_path)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert message in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "greenckpt-report").exists()


def test_an_agent_is_not_started_by_hand(tmp_path: Path) -> None:
    proc = greenckpt("agent", "--node", "0", "--job-id", "j", "--socket", "s", "--leader",
                     "127.0.0.1:1", "--output", "o", cwd=tmp_path)  # fmt: skip
    assert proc.returncode == 2
    assert "no job token" in proc.stderr and len(proc.stderr.strip().splitlines()) == 1


MIXED_APP = textwrap.dedent(
    """
    import os, sys
    from greenckpt.ckpt.notify_client import hook_from_env
    out, governor = sys.argv[1], sys.argv[2]
    hook = hook_from_env()
    for node in (0, 1):
        hook.begin("checkpoint", level=1, path=out, size=1 << 20, node=node)
    print("during", open(governor).read().strip())
    for node in (0, 1):
        hook.end("checkpoint", node=node, ok=True, seconds=0.01)
    """
)


def test_a_node_without_cpufreq_next_to_one_with_it(tmp_path: Path) -> None:
    """Issue 15 item 4: nodes of one job differ; each agent decides for its own node."""
    trees = tmp_path / "trees"
    fake_power.intel_tree(build_tree(load_spec("intel-acpi-cpufreq"), trees / "node0"))
    fake_power.intel_tree(build_tree(load_spec("vm-no-cpufreq"), trees / "node1"))  # meters
    found = (trees / "node0" / GOVERNOR).read_text().strip()
    done = subprocess.run(
        [sys.executable, "-m", "greenckpt", "run", "--nodes-emulated", "2", "--policy",
         "performance", "--node-root", str(trees / "node{node}"), "-o", "rep", "--",
         sys.executable, "-c", MIXED_APP, str(tmp_path), str(trees / "node0" / GOVERNOR)],
        cwd=tmp_path, env=_env(tmp_path), capture_output=True, text=True, timeout=120,
        check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert "during performance" in done.stdout  # node 0 has cpufreq: applied there
    assert (trees / "node0" / GOVERNOR).read_text().strip() == found  # and restored
    doc = json.loads((tmp_path / "rep" / "job-report.json").read_text())
    assert doc["states"]["finished"] == [0, 1]
    node1 = json.loads((tmp_path / "rep" / "nodes" / "node1" / "report.json").read_text())
    assert any("no frequency control on this node" in n for n in node1["notes"])
    node0 = json.loads((tmp_path / "rep" / "nodes" / "node0" / "report.json").read_text())
    assert not any("no frequency control on this node" in n for n in node0["notes"])


def test_a_cancelled_job_says_so_per_node_with_the_signal(tmp_path: Path) -> None:
    """scancel sends the leader SIGTERM: every node that finished says 'cancelled', the notes
    name the signal, and the wait before the command is start-up, never compute."""
    run = subprocess.Popen(
        [sys.executable, "-m", "greenckpt", "run", "--nodes-emulated", "2", "--no-control",
         "-o", "rep", "--", "sh", "-c", "touch started; exec sleep 60"],
        cwd=tmp_path, env=_env(tmp_path), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True, start_new_session=True,
    )  # fmt: skip
    try:
        _wait_for(tmp_path / "started", run)
        run.send_signal(signal.SIGTERM)
        out, err = run.communicate(timeout=120)
    finally:
        if run.poll() is None:
            run.kill()
            run.wait()
    doc = json.loads((tmp_path / "rep" / "job-report.json").read_text())
    assert doc["job"]["ended"] == "cancelled", out + err
    assert [r["ended"] for r in doc["nodes"]] == ["cancelled", "cancelled"]
    assert any(n.startswith("the job was cancelled: SIGTERM") for n in doc["notes"])
    assert "finished, cancelled" in out
    assert {"startup", "compute", "teardown"} <= set(doc["by_kind"])


def test_a_failed_command_makes_a_failed_job(tmp_path: Path) -> None:
    proc = greenckpt("run", "--nodes-emulated", "2", "--no-control", "-o", "rep", "--", "false",
                     cwd=tmp_path)  # fmt: skip
    assert proc.returncode == 1
    doc = json.loads((tmp_path / "rep" / "job-report.json").read_text())
    assert doc["job"]["ended"] == "failed" and doc["nodes"][0]["ended"] == "failed"
    assert "the job failed: its command exited with status 1" in doc["notes"]


# One checkpoint on each node, then "ready", then waits for "go".
APP_DONE = textwrap.dedent(
    """
    import os, sys, time
    from greenckpt.ckpt.notify_client import hook_from_env
    out, nodes = sys.argv[1], int(sys.argv[2])
    hook = hook_from_env()
    for node in range(nodes):
        hook.begin("checkpoint", level=1, path=out, size=1 << 20, node=node)
        hook.end("checkpoint", node=node, ok=True, seconds=0.01)
    with open(os.path.join(out, "socket.txt"), "w") as f:
        f.write(os.environ["GREENCKPT_RUNTIME_SOCKET"])
    open(os.path.join(out, "ready"), "w").close()
    while not os.path.exists(os.path.join(out, "go")):
        time.sleep(0.1)
    """
)


def test_a_node_killed_after_its_checkpoint_keeps_it_in_the_job_phases_and_plot(
    tmp_path: Path,
) -> None:
    _, out, err = _kill_agent_mid_run(
        tmp_path,
        ["--nodes-emulated", "2", "--no-control", "-o", "rep", "--", sys.executable, "-c",
         APP_DONE, str(tmp_path), "2"],
        before=lambda: time.sleep(4.5) is None,  # two progress messages after the checkpoint
    )  # fmt: skip
    doc = json.loads((tmp_path / "rep" / "job-report.json").read_text())
    assert doc["states"]["died"] == [1], out + err
    checkpoint = next(p for p in doc["phases"] if p["kind"] == "checkpoint")
    assert checkpoint["nodes"] == 2  # node 1's came with its progress
    assert doc["series"]["nodes"] == 2 and (tmp_path / "rep" / "job-power.png").exists()
    assert "checkpoint" in (tmp_path / "rep" / "job-phases.csv").read_text()
    assert "node1" not in out.split("node reports:")[1]  # it wrote no report of its own
