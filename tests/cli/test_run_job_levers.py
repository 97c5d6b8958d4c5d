"""``greenckpt run --nodes-emulated 2`` under ``--policy fixed`` and under the profile policy (a
SYNTHETIC profile whose checkpoint point sets the same levers), with the levers beyond the core
clock on SYNTHETIC lever nodes (tests/platform/fake_levers.py): every node's agent applies the
per-core split, the uncore frequency and the power limit for the checkpoint; one agent SIGKILLed
mid-checkpoint leaves its node changed, the other node ends as found, and the next run's agent
for the killed node restores it at start — every lever file as found; the job report's phase
names the levers and their source."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from greenckpt.optimize.profile_data import save_profile
from greenckpt.testing.cpu import diff, snapshot
from tests.cli.test_run_job import APP, _agent_pid, _env, _wait_for
from tests.platform.fake_levers import CAP, UNC, build_node
from tests.runtime.lever_profile import lever_profile

UNCORE_MIN = f"{UNC}/package_00_die_00/min_freq_khz"
LIMIT = f"{CAP}/intel-rapl:1/constraint_0_power_limit_uw"
WRITER = "sys/devices/system/cpu/cpufreq/policy0/scaling_setspeed"
WAITER = "sys/devices/system/cpu/cpufreq/policy1/scaling_setspeed"
# greenckpt run (and so its agents) on two CPUs at most: the split's writer and waiting CPUs,
# the first --io-processes of the affinity and the rest, then lie on the fake node's four.
TWO_CPUS = (
    "import os, sys; os.sched_setaffinity(0, sorted(os.sched_getaffinity(0))[:2]); "
    "from greenckpt.cli.main import main; sys.exit(main(sys.argv[1:]))"
)
LEVERS = ["--policy", "fixed", "--io-processes", "1", "--frequency", "2.0GHz",
          "--waiting-frequency", "1.2GHz", "--uncore", "1.0GHz",
          "--power-limit", "120W"]  # fmt: skip
DERIVED = ("/scaling_cur_freq:", "/scaling_setspeed:")  # an agent's plain root does not
# recompute what the kernel derives from the limits and the governor


def _node(dest: Path) -> Path:
    tree = build_node(dest)
    for pkg in (0, 1):  # what the RAPL meter needs of the dram subzones
        sub = tree / CAP / f"intel-rapl:{pkg}" / f"intel-rapl:{pkg}:0"
        (sub / "max_energy_range_uj").write_text("65712999613\n")
    return tree


def _left(before: dict[str, bytes], tree: Path) -> list[str]:
    return [d for d in diff(before, snapshot(tree)) if not any(x in d for x in DERIVED)]


FIXED_SOURCE = (
    "1.00 GHz (fixed (2.00 GHz, 1 I/O processes, waiting cores 1.20 GHz, uncore 1.00 GHz, "
    "package limit 120 W))"
)
PROFILE = ["--profile", "levers.json", "--mtbf", "4h", "--app-power", "250W",
           "--app-processes", "4"]  # fmt: skip
"""The profile policy over tests/runtime/lever_profile.py's SYNTHETIC profile: its
checkpoint point sets what LEVERS sets (uncore 1.0 GHz, 120 W, the split 2.0/1.2 GHz)."""


@pytest.mark.parametrize(
    ("policy", "source"),
    [(LEVERS, FIXED_SOURCE), (PROFILE, "1.00 GHz (profile lookup (levers.json))")],
    ids=["fixed", "profile"],
)
def test_a_killed_agent_leaves_its_levers_for_the_next_run_and_the_other_node_restored(
    tmp_path: Path, policy: list[str], source: str
) -> None:
    save_profile(lever_profile(), tmp_path / "levers.json")
    trees = [_node(tmp_path / "trees" / f"node{k}") for k in range(2)]
    before = [snapshot(t) for t in trees]
    roots = str(tmp_path / "trees" / "node{node}")
    run = subprocess.Popen(
        [sys.executable, "-c", TWO_CPUS, "run", "--nodes-emulated", "2", *policy,
         "--node-root", roots, "-o", "rep", "--", sys.executable, "-c", APP, str(tmp_path), "2"],
        cwd=tmp_path, env=_env(tmp_path), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True, start_new_session=True,
    )  # fmt: skip
    try:
        _wait_for(tmp_path / "ready", run)
        for t in trees:  # both agents applied every lever for the checkpoint
            assert (t / UNCORE_MIN).read_text() == "1000000\n"
            assert (t / LIMIT).read_text() == "120000000\n"
            assert (t / WRITER).read_text() == "2000000\n"
            assert (t / WAITER).read_text() == "1200000\n"
        template = (tmp_path / "socket.txt").read_text()
        os.kill(_agent_pid(template.replace("{node}", "1")), signal.SIGKILL)
        (tmp_path / "go").touch()
        out, err = run.communicate(timeout=120)
    finally:
        if run.poll() is None:
            run.kill()
            run.wait()
    assert run.returncode == 0, out + err
    assert _left(before[0], trees[0]) == []  # restored by its agent
    assert _left(before[1], trees[1]) != []  # the killed agent's node was left changed...
    doc = json.loads((tmp_path / "rep" / "job-report.json").read_text())
    assert doc["states"]["died"] == [1]
    (ckpt,) = [p for p in doc["phases"] if p["kind"] == "checkpoint"]
    assert ckpt["levers"]["uncore frequency"] == [source]
    again = subprocess.run(
        [sys.executable, "-m", "greenckpt", "run", "--nodes-emulated", "2", "--policy",
         "defaults", "--node-root", roots, "-o", "rep2", "--", "true"],
        cwd=tmp_path, env=_env(tmp_path), capture_output=True, text=True, timeout=120,
        check=False,
    )  # fmt: skip
    assert again.returncode == 0, again.stdout + again.stderr
    assert _left(before[1], trees[1]) == []  # ...and its next agent restored every lever
    node1 = json.loads((tmp_path / "rep2" / "nodes" / "node1" / "report.json").read_text())
    assert any("restored at start" in n for n in node1["notes"])
