"""``greenckpt run --policy fixed`` with the levers beyond the core clock: ``--uncore``,
``--power-limit``, ``--waiting-frequency``, ``--gpu-clocks``, ``--gpu-power-limit``. Every phase
gets them (the report says so, source ``fixed``), the node ends as found, and a malformed value,
a lever the node lacks or a value outside the hardware's range is refused in one line (exit 2)
before anything is applied. The nodes are SYNTHETIC sysfs trees."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from greenckpt.cli.main import main
from greenckpt.testing.cpu import build_tree, diff, snapshot
from tests.platform.fake_levers import build_node

PROBE = (
    "from greenckpt.ckpt.notify_client import hook_from_env\n"
    "h = hook_from_env()\n"
    "a = h.begin('checkpoint', level=1, path='/tmp', size=100, node=0)\n"
    "print('ADVICE', a.io_processes, flush=True)\n"
    "h.end('checkpoint', node=0, ok=True, seconds=0.0)\n"
)
# greenckpt run on two CPUs at most, so the split's writer and waiting CPUs (the first
# --io-processes of its affinity, and the rest) lie on the fake node's four.
TWO_CPUS = (
    "import os, sys; os.sched_setaffinity(0, sorted(os.sched_getaffinity(0))[:2]); "
    "from greenckpt.cli.main import main; sys.exit(main(sys.argv[1:]))"
)


METER = ["--meters", "estimator", "--tdp", "100W"]


def metered_node(dest: Path) -> Path:
    """The fake lever node, with this machine's /proc/cpuinfo and /proc/stat for the
    utilisation estimator (the tree has no power meter of its own)."""
    tree = build_node(dest)
    for name in ("cpuinfo", "stat"):
        (tree / "proc" / name).write_bytes(Path("/proc", name).read_bytes())
    return tree


def test_every_phase_gets_the_fixed_levers_and_the_node_ends_as_found(tmp_path: Path) -> None:
    tree = metered_node(tmp_path / "node")
    before = snapshot(tree)
    out = tmp_path / "r"
    cmd = [sys.executable, "-c", TWO_CPUS, "run", "--policy", "fixed", "--io-processes", "1",
           "--frequency", "2.0GHz", "--waiting-frequency", "1.2GHz", "--uncore", "1.0GHz",
           "--power-limit", "120W", *METER, "-o", str(out), "--",
           sys.executable, "-c", PROBE]  # fmt: skip
    env = {**__import__("os").environ, "GREENCKPT_SYSROOT": str(tree)}
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False, env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "ADVICE 1" in done.stdout
    doc = json.loads((out / "report.json").read_text())
    record = next(r for r in doc["records"] if r["kind"] == "checkpoint")
    settings = record["settings"]
    assert settings["source"].startswith("fixed (2.00 GHz, 1 I/O processes")
    assert settings["uncore_khz"] == 1_000_000 and settings["power_limit_w"] == 120.0
    assert settings["waiting_frequency_hz"] == 1_200_000_000
    assert set(settings["levers"]) == {"per-core split", "uncore frequency", "power limit"}
    assert not [n for n in settings["notes"] if n.startswith("could not apply")]
    derived = ("/scaling_cur_freq:", "/scaling_setspeed:")  # a plain root (this run's) does
    left = [d for d in diff(before, snapshot(tree)) if not any(x in d for x in derived)]
    assert left == []  # not recompute what the kernel derives; every lever was put back
    text = (out / "report.txt").read_text() if (out / "report.txt").exists() else done.stdout
    assert "levers applied beyond the CPU frequency and C-states" in text + done.stderr


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--uncore", "5GHz"], "5000000"),  # outside initial_min..initial_max
        (["--power-limit", "900W"], "900"),  # above constraint_0_max_power_uw
        (["--waiting-frequency", "1.2GHz"], "--waiting-frequency (the waiting ranks' cores) "),
        (["--gpu-clocks", "877:1380"], "--gpu-clocks: this node has no gpu clocks control"),
    ],
)
def test_what_the_node_cannot_apply_is_one_line_and_nothing_changes(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    flags: list[str],
    message: str,
) -> None:
    tree = metered_node(tmp_path / "node")
    monkeypatch.setenv("GREENCKPT_SYSROOT", str(tree))
    monkeypatch.setenv("GREENCKPT_NVML_LIBRARY", str(tmp_path / "no-libnvidia-ml.so"))
    before = snapshot(tree)
    out = tmp_path / "r"
    assert main(["run", "--policy", "fixed", *flags, *METER, "-o", str(out), "--", "true"]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1 and "Traceback" not in err
    assert diff(before, snapshot(tree)) == []


def test_a_node_without_the_lever_refuses_it_with_the_reason(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    tree = build_tree("vm-no-cpufreq", tmp_path / "vm")
    monkeypatch.setenv("GREENCKPT_SYSROOT", str(tree))
    out = tmp_path / "r"
    assert (
        main(["run", "--policy", "fixed", "--power-limit", "100", "-o", str(out), "--", "true"])
        == 2
    )
    err = capsys.readouterr().err
    assert "--power-limit: this node has no power limit control (no intel-rapl zone" in err
    assert err.count("\n") == 1


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--policy", "fixed", "--uncore", "fast"], "--uncore"),
        (["--policy", "fixed", "--power-limit", "-3W"], "--power-limit"),
        (["--policy", "fixed", "--gpu-clocks", "877"], "is not MEM:GR"),
        (["--policy", "performance", "--uncore", "1.8GHz"], "go with --policy fixed"),
    ],
)
def test_malformed_lever_flags_are_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], flags: list[str], message: str
) -> None:
    out = tmp_path / "r"
    try:
        status = main(["run", *flags, "-o", str(out), "--", "true"])
    except SystemExit as exc:  # argparse's own usage error
        status = int(exc.code or 0)
    assert status == 2 and message in capsys.readouterr().err
    assert not out.exists()
