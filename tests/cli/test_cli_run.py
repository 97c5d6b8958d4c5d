"""``greenckpt run`` and ``greenckpt demo``: a command under the runtime, its report, bad input.

The runtime on this VM has no frequency control and no energy counters: the tests check what
is decided, announced and accounted (and that it is labelled estimated), not wattages.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from greenckpt.cli import profile_cmd
from greenckpt.cli.demo_cmd import cpu_sweep_args
from greenckpt.platform.cpufreq import CpufreqController
from tests.ckpt.test_mpi import mpiexec
from tests.conftest import EXAMPLE_PROFILE
from tests.platform import fake_power
from tests.platform.fake_cpu import FakeSysfsRoot, build_tree, load_spec

ROOT = Path(__file__).resolve().parents[2]

# A stand-in for a checkpointing application: announces one checkpoint through the socket
# that `greenckpt run` set, as the checkpoint library does, then exits with a chosen status.
CHILD = textwrap.dedent(
    """
    import sys, time
    from greenckpt.ckpt.notify_client import hook_from_env
    hook = hook_from_env()
    assert hook is not None, "GREENCKPT_RUNTIME_SOCKET is not set"
    advice = hook.begin("checkpoint", level=1, path=sys.argv[1], size=8 << 20, node=0)
    print("advice", advice.io_processes, flush=True)
    time.sleep(0.2)
    hook.end("checkpoint", node=0, ok=True, seconds=0.2)
    sys.exit(int(sys.argv[2]))
    """
)


def greenckpt(*args: str, cwd: Path, root: Path | None = None) -> subprocess.CompletedProcess[str]:
    """``greenckpt ARGS`` from this checkout; on the fake node ``root`` when given (tests that
    start a session without it act on this machine's own root: they are marked real_node)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    if root is not None:
        env.update(GREENCKPT_SYSROOT=str(root), XDG_RUNTIME_DIR=str(cwd))
    return subprocess.run(
        [sys.executable, "-m", "greenckpt", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
        check=False,
    )


def vm_node(tmp_path: Path) -> Path:
    """A fake node like this VM (no cpufreq; C-states; SYNTHETIC RAPL and /proc/stat) for
    tests whose point is not the real machine."""
    tree = build_tree(load_spec("vm-no-cpufreq"), tmp_path / "node")
    fake_power.intel_tree(tree)
    return tree


@pytest.mark.real_node  # greenckpt run as a user runs it: on this machine, its meters and lock
@pytest.mark.parametrize("status", [0, 3])
def test_run_accounts_the_announced_phase_and_reports(tmp_path: Path, status: int) -> None:
    """The command's checkpoint is accounted; a failing command still gets its report, the
    message says so, and its exit status is passed on."""
    proc = greenckpt(
        "run",
        "--report",
        "rep",
        "--",
        sys.executable,
        "-c",
        CHILD,
        str(tmp_path),
        str(status),
        cwd=tmp_path,
    )
    assert proc.returncode == status, proc.stderr
    assert "advice 2" in proc.stdout  # the defaults policy: min(4, CPUs) on this 2-CPU VM
    report = json.loads((tmp_path / "rep" / "report.json").read_text())
    kinds = [r["kind"] for r in report["records"]]
    assert kinds.count("checkpoint") == 1 and "compute" in kinds
    checkpoint = next(r for r in report["records"] if r["kind"] == "checkpoint")
    assert checkpoint["power_source"] in ("measured", "estimated")
    assert checkpoint["settings"]["io_processes"] == 2
    assert (tmp_path / "rep" / "phases.csv").read_text().count("\n") >= 3
    assert "checkpoint" in proc.stdout and "estimated" in proc.stdout
    if status:
        assert f"the command exited with status {status}; the node was restored" in proc.stderr


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["run"], "give the command to run after --"),
        (["run", "--", "/nonexistent/tool"], "cannot run '/nonexistent/tool'"),
        (["run", "--policy", "fastest", "--", "true"], "invalid choice: 'fastest'"),
        (
            ["run", "--profile", str(EXAMPLE_PROFILE), "--", "true"],
            "the profile policy needs --mtbf and --app-power",
        ),
    ],
    ids=["no-command", "missing-program", "bad-policy", "profile-without-scenario"],
)
def test_run_bad_input_is_one_line_exit_2(args: list[str], message: str, tmp_path: Path) -> None:
    proc = greenckpt(*args, cwd=tmp_path)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert message in proc.stderr and "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "greenckpt-report").exists()


@pytest.mark.skipif(mpiexec() is None, reason="no mpiexec: pip install '.[mpi]'")
@pytest.mark.real_node  # the README's first command's job, on this machine
def test_demo_end_to_end(tmp_path: Path) -> None:
    """The main job: profile, plan, the heat example under mpiexec -n 4 with the runtime, a
    killed rank and a lost node, restart, bit-identical result, per-phase report."""
    proc = greenckpt("demo", "--dir", "d", cwd=tmp_path)
    out = proc.stdout
    assert proc.returncode == 0, out + proc.stderr
    assert "result after failure and restart is bit-identical to the failure-free run" in out
    assert "rebuilt" in (tmp_path / "d" / "runs.log").read_text()  # node 1 from partner copies
    report = json.loads((tmp_path / "d" / "report" / "report.json").read_text())
    kinds = {r["kind"] for r in report["records"]}
    assert {"compute", "checkpoint", "restart", "rework"} <= kinds
    levels = {r["level"] for r in report["records"] if r["kind"] == "checkpoint"}
    assert levels == {1, 2, 4}
    for governor in ("performance", "powersave", "ondemand"):
        assert governor in out
    assert "estimated" in out
    again = greenckpt("demo", "--dir", "d", cwd=tmp_path)  # reuses the kept profile
    assert again.returncode == 0 and "reusing" in again.stdout


@pytest.mark.real_node  # a governor baseline and its comparison, with this machine's meters
def test_run_compares_with_a_baseline_run(tmp_path: Path) -> None:
    """A baseline run's report (here the performance-governor policy) gives wu2018 Eq. 2
    percentages in the second run's report; a file that is not a report is one line, exit 2."""
    base = greenckpt(
        "run", "--policy", "performance", "--report", "base", "--",
        sys.executable, "-c", CHILD, str(tmp_path), "0", cwd=tmp_path,
    )  # fmt: skip
    assert base.returncode == 0, base.stderr
    second = greenckpt(
        "run", "--compare", "base/report.json", "--report", "second", "--",
        sys.executable, "-c", CHILD, str(tmp_path), "0", cwd=tmp_path,
    )  # fmt: skip
    assert second.returncode == 0, second.stderr
    assert "vs baseline base/report.json (wu2018 Eq. 2, estimated" in second.stdout
    doc = json.loads((tmp_path / "second" / "report.json").read_text())
    (comparison,) = doc["comparisons"]
    assert set(comparison) >= {"runtime_pct", "energy_pct", "epe_pct"}
    bad = greenckpt("run", "--compare", "second/phases.csv", "--", "true", cwd=tmp_path)
    assert bad.returncode == 2 and "is not JSON" in bad.stderr
    assert len(bad.stderr.strip().splitlines()) == 1


def test_demo_profiles_three_frequencies_and_the_governors_where_it_can(tmp_path: Path) -> None:
    """With frequency control (a fake acpi-cpufreq tree), the demo's sweep covers the lowest,
    a middle and the highest offered frequency and the stock governors offered — flags the
    profiler accepts; without it, the CPU as found (no flags)."""
    root = FakeSysfsRoot(build_tree(load_spec("intel-acpi-cpufreq"), tmp_path / "t"))
    policy = CpufreqController(root).detect().policies[0]
    args = cpu_sweep_args(policy)
    table = policy.frequencies_hz
    assert table is not None and len(table) > 3
    wanted = sorted({table[0], table[len(table) // 2], table[-1]})
    assert args[:2] == ["--frequencies", ",".join(f"{hz}Hz" for hz in wanted)]
    assert args[2] == "--governors"
    assert set(args[3].split(",")) == {"performance", "powersave", "ondemand"} & set(
        policy.available_governors
    )
    parser = argparse.ArgumentParser()
    profile_cmd.register(parser.add_subparsers(dest="command"))
    ns = parser.parse_args(["profile", "run", str(tmp_path), "-o", "x.json", *args])
    assert [round(f) for f in ns.frequencies] == wanted
    assert cpu_sweep_args(None) == []
