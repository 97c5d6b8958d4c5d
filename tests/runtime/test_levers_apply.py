"""The runtime applies the levers beyond the core clock per phase and always puts them back.

On a SYNTHETIC node (tests/platform/fake_levers.py: per-core cpufreq policies, C-states,
uncore domains and RAPL zones in a fake sysfs tree) a run under the profile policy gives each
phase the uncore frequency, package power limit and per-core split of the point it chose
(tests/runtime/lever_profile.py), and every file ends byte for byte as found: after each
phase, at the end, and after the runtime's process is SIGKILLed mid-phase (through the state
file, ``greenckpt restore``). A lever that fails mid-run is put back, the phase goes on with
the others, and the report says which lever failed and why. Nothing here is a measurement.
"""

from __future__ import annotations

import json
import os
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from greenckpt.cli.main import main
from greenckpt.platform.restore import pending_state, restore_from_state_file
from greenckpt.platform.root import SysRoot
from greenckpt.report.run_text import render_run_text
from greenckpt.runtime.baselines import GovernorPolicy
from greenckpt.runtime.control import BACKGROUND, CONTROL_OFF, effective_settings
from greenckpt.runtime.run_report import load_report
from greenckpt.runtime.session import Runtime
from greenckpt.runtime.settings import PhaseRequest
from greenckpt.testing.cpu import diff, snapshot
from tests.platform import fake_power as fp
from tests.platform.fake_levers import CAP, UNC, FakeLeverRoot, build_node
from tests.ready_child import spawn_ready
from tests.runtime.lever_profile import (
    CKPT_LIMIT_W,
    CKPT_UNCORE_KHZ,
    RESTART_LIMIT_W,
    RESTART_UNCORE_KHZ,
    lever_node,
    lever_policy,
    lever_profile,
)

CPUFREQ = "sys/devices/system/cpu/cpufreq"
MIB = 2**20
PACKAGES = ("package_00_die_00", "package_01_die_00")


@pytest.fixture(autouse=True)
def _four_cpus(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[None]:
    """This process may run on the fake node's four CPUs (the split's writers are the first
    of them); no host meter leaks in; the signal handlers end as found."""
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1, 2, 3})
    fp.hide_ipmitool(monkeypatch, tmp_path)
    fp.install_pynvml(monkeypatch, None)
    before = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)}
    yield
    assert {s: signal.getsignal(s) for s in before} == before


def runtime(root: SysRoot, state: Path) -> Runtime:
    return Runtime(
        lever_policy(),
        root=root,
        meters=[fp.FakeMeter({"package-0": 100.0}, name="rapl")],
        state_file=state,
        node=lever_node(),
    )


def uncore(root: SysRoot) -> set[tuple[str, str]]:
    """Every uncore domain's (min, max) in kHz, as the fake sysfs shows them."""
    return {
        (root.read(f"{UNC}/{p}/min_freq_khz"), root.read(f"{UNC}/{p}/max_freq_khz"))
        for p in PACKAGES
    }


def package_limits(root: SysRoot) -> set[str]:
    return {root.read(f"{CAP}/intel-rapl:{p}/constraint_0_power_limit_uw") for p in (0, 1)}


def setspeeds(root: SysRoot) -> list[str]:
    return [root.read(f"{CPUFREQ}/policy{c}/scaling_setspeed") for c in range(4)]


def test_the_profile_policy_sets_uncore_split_and_power_limit_per_phase(tmp_path: Path) -> None:
    root = FakeLeverRoot(build_node(tmp_path / "tree"))
    state = tmp_path / "run" / "node-state.json"
    before = snapshot(root.path)
    with runtime(root, state) as rt:
        with rt.phase("checkpoint", path="/local/ckpt", size=64 * MIB, level=1) as s:
            assert s.uncore_khz == CKPT_UNCORE_KHZ and s.power_limit_w == CKPT_LIMIT_W
            assert uncore(root) == {("1000000", "1000000")}
            assert package_limits(root) == {"120000000"}
            assert setspeeds(root) == ["2000000", "1200000", "1200000", "1200000"]
            assert s.writer_cpus == (0,)  # where the library moves each wave's writers
            saved = json.loads(state.read_text())["sysfs"]  # originals saved before the writes
            assert saved[f"{UNC}/{PACKAGES[0]}/min_freq_khz"] == "1200000"
        assert diff(before, snapshot(root.path)) == []  # as found between phases
        with rt.phase("restart", path="/local/ckpt", size=64 * MIB, level=1) as s:
            assert (s.uncore_khz, s.power_limit_w) == (RESTART_UNCORE_KHZ, RESTART_LIMIT_W)
            assert uncore(root) == {("1200000", "1200000")}
            assert package_limits(root) == {"130000000"}
            assert setspeeds(root) == ["2000000", "1200000", "1200000", "1200000"]
    assert diff(before, snapshot(root.path)) == [] and not state.exists()
    report = rt.report(synthetic=True)
    ckpt = next(r for r in report.to_dict()["records"] if r["kind"] == "checkpoint")
    assert ckpt["settings"]["uncore_khz"] == CKPT_UNCORE_KHZ
    assert ckpt["settings"]["waiting_frequency_hz"] == 1_200_000_000
    assert ckpt["settings"]["writer_cpus"] == [0]
    assert set(ckpt["settings"]["levers"]) == {"per-core split", "uncore frequency", "power limit"}
    assert any("per-core split: I/O CPUs 0 at 2.00 GHz" in n for n in ckpt["notes"])
    text = render_run_text(report)
    assert "levers applied beyond the CPU frequency and C-states" in text
    assert "checkpoint L1  uncore frequency  1.00 GHz" in text and "profile lookup" in text
    saved_to = report.write_json(tmp_path / "report.json")
    assert load_report(saved_to).records[0].settings == report.records[0].settings


def test_a_lever_that_fails_mid_run_is_put_back_and_the_phase_goes_on(tmp_path: Path) -> None:
    # The second package's limit fails after the first one was written: half a lever.
    root = FakeLeverRoot(
        build_node(tmp_path / "tree"), fail_on="intel-rapl:1/constraint_0_power_limit_uw"
    )
    state = tmp_path / "run" / "node-state.json"
    before = snapshot(root.path)
    rt = runtime(root, state)
    with rt, rt.phase("checkpoint", path="/local/ckpt", size=MIB, level=1) as s:
        assert s.power_limit_w is None and s.uncore_khz == CKPT_UNCORE_KHZ
        assert package_limits(root) == {"205000000"}  # the first zone was put back too
        assert uncore(root) == {("1000000", "1000000")}  # the others still apply
        assert setspeeds(root) == ["2000000", "1200000", "1200000", "1200000"]
        (note,) = [n for n in s.notes if n.startswith("could not apply the power limit")]
        assert "Input/output error" in note and "put back as found" in note
    assert diff(before, snapshot(root.path)) == [] and not state.exists()
    (ckpt,) = [r for r in rt.records if r.kind == "checkpoint"]
    assert ckpt.ok and ckpt.settings is not None and "power limit" not in ckpt.settings.levers
    text = render_run_text(rt.report(synthetic=True))
    assert "levers that failed (put back as found; the phase went on):" in text
    assert "could not apply the power limit" in text


def test_a_lever_the_node_lacks_is_left_as_found_with_the_reason(tmp_path: Path) -> None:
    tree = build_node(tmp_path / "tree")
    for p in PACKAGES:  # no uncore driver on this node
        for f in (tree / UNC / p).iterdir():
            f.unlink()
        (tree / UNC / p).rmdir()
    root = FakeLeverRoot(tree)
    before = snapshot(tree)
    with runtime(root, tmp_path / "s.json") as rt:
        s = rt.begin("checkpoint", path="/local/ckpt", size=MIB, level=1)
        assert s.uncore_khz is None and s.power_limit_w == CKPT_LIMIT_W
        assert any("could not apply the uncore frequency (no uncore" in n for n in s.notes)
        assert package_limits(root) == {"120000000"}
        rt.end("checkpoint")
    assert diff(before, snapshot(tree)) == []


CHILD = """
import os, sys, time
from pathlib import Path
os.sched_getaffinity = lambda pid: {0, 1, 2, 3}  # the fake node's CPUs
from greenckpt.runtime.session import Runtime
from greenckpt.runtime.settings import PhaseRequest
from tests.platform.fake_levers import FakeLeverRoot
from tests.platform.fake_power import FakeMeter
from tests.runtime.lever_profile import lever_node, lever_policy

rt = Runtime(lever_policy(), root=FakeLeverRoot(Path(sys.argv[1])), state_file=Path(sys.argv[2]),
             meters=[FakeMeter(name="rapl")], node=lever_node())
with rt:
    with rt.phase("checkpoint", path="/local/ckpt", size=1 << 20, level=1):
        print("ready", flush=True)
        time.sleep(60)
"""


@pytest.mark.parametrize("how", ["restore_from_state_file", "greenckpt restore"])
def test_every_lever_is_back_after_sigkill_of_the_runtime(
    tmp_path: Path, how: str, capsys: pytest.CaptureFixture[str]
) -> None:
    tree = build_node(tmp_path / "tree")
    state = tmp_path / "run" / "node-state.json"
    before = snapshot(tree)
    child = spawn_ready(CHILD, str(tree), str(state))
    root = SysRoot(tree)
    assert uncore(root) == {("1000000", "1000000")} and package_limits(root) == {"120000000"}
    assert setspeeds(root)[1:] == ["1200000"] * 3
    child.send_signal(signal.SIGKILL)  # nothing in the child can run: a crash
    assert child.wait(timeout=10) == -signal.SIGKILL
    child.communicate()
    assert diff(before, snapshot(tree)) != []  # the node was left changed...
    pending = pending_state(root, state)
    assert pending is not None and not pending.alive
    if how == "greenckpt restore":
        assert main(["restore", "--root", str(tree), "--state-file", str(state)]) == 0
        assert "restored" in capsys.readouterr().out
        derived = ("/scaling_cur_freq:", "/scaling_setspeed:")  # a plain root does not
        left = [d for d in diff(before, snapshot(tree)) if not any(x in d for x in derived)]
        assert left == []  # recompute what the kernel derives; every written file is back
    else:
        assert restore_from_state_file(FakeLeverRoot(tree), state).ok
        assert diff(before, snapshot(tree)) == []  # ...and the state file put it all back
    assert not state.exists()


def test_the_next_runtime_restores_what_a_killed_one_left(tmp_path: Path) -> None:
    tree = build_node(tmp_path / "tree")
    state = tmp_path / "run" / "node-state.json"
    before = snapshot(tree)
    child = spawn_ready(CHILD, str(tree), str(state))
    child.kill()
    child.communicate(timeout=10)
    with runtime(FakeLeverRoot(tree), state) as rt:
        assert diff(before, snapshot(tree)) == []  # restored at start, before any phase
        assert any("left by an earlier session" in n for n in rt.notes)
    assert not state.exists()


def test_baselines_background_phases_and_control_off_leave_every_lever_as_found() -> None:

    request = PhaseRequest("checkpoint", "/local/ckpt", MIB, level=1)
    governor = GovernorPolicy("powersave", lever_profile(), node=lever_node(), app_processes=4)
    s = governor.decide(request)
    assert s.governor == "powersave" and s.levers == {} and s.waiting_frequency_hz is None
    decided = lever_policy().decide(request)
    assert set(decided.levers) == {"per-core split", "uncore frequency", "power limit"}
    flush = effective_settings(decided, lever_node(), control=True, background=True)
    assert flush.levers == {} and flush.frequency_hz is None and BACKGROUND in flush.notes
    off = effective_settings(decided, lever_node(), control=False, background=False)
    assert off.levers == {} and CONTROL_OFF in off.notes
    kept = effective_settings(decided, lever_node(), control=True, background=False)
    assert kept.levers == decided.levers


def test_cpu_settings_that_fail_drop_the_split_with_them_and_the_other_levers_stay(
    tmp_path: Path,
) -> None:
    root = FakeLeverRoot(build_node(tmp_path / "tree"), fail_on="policy0/scaling_setspeed")
    before = snapshot(root.path)
    rt = runtime(root, tmp_path / "s.json")
    with rt, rt.phase("checkpoint", path="/local/ckpt", size=MIB, level=1) as s:
        assert s.frequency_hz is None and s.waiting_frequency_hz is None
        assert s.writer_cpus == ()  # no split: the library moves no writer
        assert (s.uncore_khz, s.power_limit_w) == (CKPT_UNCORE_KHZ, CKPT_LIMIT_W)
        assert [root.read(f"{CPUFREQ}/policy{c}/scaling_governor") for c in range(4)] == [
            "schedutil"
        ] * 4  # every core as found: the frequency half-applied was put back, no split
        assert uncore(root) == {("1000000", "1000000")} and package_limits(root) == {"120000000"}
        (note,) = [n for n in s.notes if n.startswith("could not apply the CPU settings")]
        assert "CPU frequency, governor and C-states left as found" in note
    assert diff(before, snapshot(root.path)) == []
