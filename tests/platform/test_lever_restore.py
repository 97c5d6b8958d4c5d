"""Every sysfs lever changed at once is restored byte for byte: on exception, on a signal, and
after SIGKILL from the state file (``restore_from_state_file`` and ``greenckpt restore``); a
state file naming a path outside the allow-list is refused. SYNTHETIC trees only."""

from __future__ import annotations

import json
import signal
from pathlib import Path

import pytest

import greenckpt.platform.lever_state as lever_state_mod
from greenckpt.cli.main import main
from greenckpt.platform.restore import NodeSettings, pending_state, restore_from_state_file
from greenckpt.platform.root import PlatformError, SysRoot
from greenckpt.testing.cpu import diff, snapshot
from tests.platform import fake_nvml
from tests.platform.fake_levers import CAP, UNC, FakeLeverRoot, build_node
from tests.ready_child import spawn_ready

CHILD = """
import sys, time
from pathlib import Path
from greenckpt.platform.levers import split_cpus
from greenckpt.platform.restore import NodeSettings
from tests.platform.fake_levers import FakeLeverRoot

root = FakeLeverRoot(Path(sys.argv[1]))
with NodeSettings(root, state_file=sys.argv[2]) as node:
    node.set_frequency(2.0e9)
    node.disable_cstates(deeper_than_s=5e-6)
    writers, waiters = split_cpus(1, range(4))
    node.set_frequency(2.4e9, cpus=writers, method="clamp")
    node.set_frequency(1.2e9, cpus=waiters)
    node.set_uncore(1000000)
    node.set_power_limit(120)
    node.set_power_limit(30, "dram")
    if sys.argv[3:] == ["gpu"]:
        node.set_gpu_clocks(810, 585)
        node.set_gpu_power_limit(120)
    print("ready", flush=True)
    time.sleep(60)
"""


def change_every_lever(node: NodeSettings) -> None:
    node.set_frequency(2.0e9)
    node.disable_cstates(deeper_than_s=5e-6)
    node.set_frequency(2.4e9, cpus=[0], method="clamp")
    node.set_frequency(1.2e9, cpus=[1, 2, 3])
    node.set_uncore(1000000)
    node.set_power_limit(120)
    node.set_power_limit(30, "dram")


def killed(tmp_path: Path, *extra: str) -> tuple[Path, Path, dict[str, bytes]]:
    tree = build_node(tmp_path / "tree")
    state = tmp_path / "run" / "node-state.json"
    before = snapshot(tree)
    child = spawn_ready(CHILD, str(tree), str(state), *extra)
    child.send_signal(signal.SIGKILL)
    assert child.wait(timeout=10) == -signal.SIGKILL
    child.communicate()
    changed = "\n".join(diff(before, snapshot(tree)))
    for path in ("scaling_setspeed", "cpuidle", f"{UNC}/package_01", "intel-rapl:1:0/enabled"):
        assert path in changed  # the child changed every lever...
    return tree, state, before


def test_kill_9_then_restore_from_state_file(tmp_path: Path) -> None:
    tree, state, before = killed(tmp_path)
    saved = json.loads(state.read_text())["sysfs"]
    assert f"{UNC}/package_00_die_00/min_freq_khz" in saved
    assert saved[f"{CAP}/intel-rapl:0:0/enabled"] == "0"
    pending = pending_state(SysRoot(tree), state)
    assert pending is not None and pending.lever_files == len(saved)
    assert "uncore/power-limit files" in pending.describe()
    report = restore_from_state_file(FakeLeverRoot(tree), state)
    assert report.ok and report.written
    assert diff(before, snapshot(tree)) == []  # ...and every file is back, byte for byte
    assert not state.exists()


def test_kill_9_with_the_gpus_changed_too(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Every lever at once, the GPUs included (helper B's fake NVML, SYNTHETIC V100s)."""
    fake = fake_nvml.install(tmp_path, monkeypatch, gpus=2)
    found = [(g.app_mem, g.app_gr, g.limit_mw) for g in fake.state().gpus]
    tree, state, before = killed(tmp_path, "gpu")
    assert [(g.app_mem, g.app_gr, g.limit_mw) for g in fake.state().gpus] != found
    assert json.loads(state.read_text())["gpu"]
    assert main(["restore", "--root", str(tree), "--state-file", str(state)]) == 0
    assert [(g.app_mem, g.app_gr, g.limit_mw) for g in fake.state().gpus] == found
    derived = ("/scaling_cur_freq:", "/scaling_setspeed:")  # a plain root does not recompute
    left = [d for d in diff(before, snapshot(tree)) if not any(x in d for x in derived)]
    assert left == [] and not state.exists()


def test_kill_9_then_greenckpt_restore(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    tree, state, before = killed(tmp_path)
    assert main(["restore", "--root", str(tree), "--state-file", str(state)]) == 0
    assert "restored" in capsys.readouterr().out
    derived = ("/scaling_cur_freq:", "/scaling_setspeed:")  # a plain root does not recompute
    left = [d for d in diff(before, snapshot(tree)) if not any(x in d for x in derived)]
    assert left == [] and not state.exists()


def test_exception_restores_everything(tmp_path: Path) -> None:
    tree = build_node(tmp_path / "tree")
    before = snapshot(tree)
    state = tmp_path / "s.json"
    with pytest.raises(KeyError), NodeSettings(FakeLeverRoot(tree), state, signals=()) as node:
        change_every_lever(node)
        assert diff(before, snapshot(tree)) != []
        raise KeyError("boom")
    assert diff(before, snapshot(tree)) == [] and not state.exists()


def test_sigterm_restores_everything(tmp_path: Path) -> None:
    tree = build_node(tmp_path / "tree")
    state = tmp_path / "run" / "s.json"
    before = snapshot(tree)
    child = spawn_ready(CHILD, str(tree), str(state))
    child.send_signal(signal.SIGTERM)
    assert child.wait(timeout=10) == -signal.SIGTERM
    child.communicate()
    assert diff(before, snapshot(tree)) == [] and not state.exists()


def test_failed_lever_write_keeps_the_others_restored(tmp_path: Path) -> None:
    tree = build_node(tmp_path / "tree")
    before = snapshot(tree)
    root = FakeLeverRoot(tree, fail_on="intel-rapl:1/constraint_0_power_limit_uw")
    with NodeSettings(root, tmp_path / "s.json", signals=()) as node:
        node.set_uncore(1000000)
        with pytest.raises(PlatformError, match="after 1 earlier write"):
            node.set_power_limit(100)
    assert diff(before, snapshot(tree)) == []


def _state_with(tmp_path: Path, tree: Path, **extra: object) -> Path:
    """A state file as a killed session leaves it, plus ``extra`` sections."""
    state = tmp_path / "run" / "s.json"
    with NodeSettings(FakeLeverRoot(tree), state, signals=()) as node:
        node.set_uncore(1000000)
        doc = json.loads(state.read_text())
        node.restore()
    doc.update(extra, pid=2**31 - 1, process_start=None)
    state.parent.mkdir(parents=True, exist_ok=True)
    state.write_text(json.dumps(doc))
    return state


@pytest.mark.parametrize(
    "path",
    ["etc/passwd", f"{CAP}/intel-rapl:0/../../../etc/shadow", f"{UNC}/package_00_die_00/x"],
)
def test_state_file_path_outside_allow_list_refused_in_one_line(
    tmp_path: Path, path: str, capsys: pytest.CaptureFixture[str]
) -> None:
    tree = build_node(tmp_path / "tree")
    state = _state_with(tmp_path, tree, sysfs={path: "1"})
    with pytest.raises(PlatformError, match="is not one greenckpt writes"):
        restore_from_state_file(FakeLeverRoot(tree), state)
    assert main(["restore", "--root", str(tree), "--state-file", str(state)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err and state.exists()


def test_gpu_section_without_the_gpu_module_is_a_failure(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    tree = build_node(tmp_path / "tree")
    state = _state_with(tmp_path, tree, gpu={"GPU-0": {"power_limit_mw": 300000}})
    monkeypatch.setattr(lever_state_mod, "gpu_module", lambda: None)
    with pytest.raises(PlatformError, match="GPU settings saved in the state file cannot be"):
        restore_from_state_file(FakeLeverRoot(tree), state)
    assert state.exists()  # kept for another try, never silently dropped
