"""``greenckpt probe --check`` on SYNTHETIC trees: each lever and meter exercised, every wrong
read-back reported with what was expected and what was seen, and the tree as it was found after
every outcome (a check that raises, an interruption, the CLI's exit codes and files)."""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from greenckpt.cli import probe_cmd
from greenckpt.cli.main import main
from greenckpt.platform.meters import MeterOptions, RaplMeter
from greenckpt.platform.restore import default_state_file
from greenckpt.platform.root import SysRoot
from greenckpt.platform.selfcheck import (
    FAILED,
    NOT_CHECKED,
    PASSED,
    Check,
    SelfCheckOptions,
    SelfCheckRecord,
    run_selfcheck,
)
from greenckpt.platform.selfcheck_meters import check_meters
from greenckpt.testing.cpu import FakeMsr, FakeSysfsRoot, build_tree, diff, kernel_error, snapshot
from greenckpt.testing.power import (
    INTEL_RANGE_UJ,
    hide_ipmitool,
    install_ipmitool,
    install_pynvml,
    intel_tree,
    set_energy,
)
from tests.ready_child import spawn_ready

POWERCAP = "sys/class/powercap"
PKG, DRAM = "intel-rapl:0", "intel-rapl:0:2"


def settings(tree: Path) -> dict[str, bytes]:
    """Every file of the tree but the meters' counters (readings, not settings)."""
    return {k: v for k, v in snapshot(tree).items() if not k.startswith(POWERCAP)}


def rapl_load(
    tree: Path, package_w: float = 100.0, dram_w: float = 10.0
) -> Callable[[float], None]:
    """A load that sleeps and advances the fake RAPL counters as if the package drew power
    for as long as the sleep really took (a busy machine oversleeps: counting the time asked
    for would read less power than stated)."""

    def load(seconds: float) -> None:
        start = time.monotonic()
        time.sleep(seconds)
        seconds = time.monotonic() - start
        for zone, watts in ((PKG, package_w), (DRAM, dram_w)):
            path = tree / POWERCAP / zone
            now = int((path / "energy_uj").read_text())
            span = int((path / "max_energy_range_uj").read_text())
            set_energy(tree, zone, (now + int(watts * seconds * 1e6)) % span)

    return load


@pytest.fixture
def node(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A SYNTHETIC Intel node: acpi-cpufreq, intel_idle, RAPL zones, an msr device, no BMC."""
    tree = build_tree("intel-acpi-cpufreq", tmp_path / "tree")
    intel_tree(tree)
    FakeMsr(tree, 4)  # its dev/cpu/N/msr files, before any snapshot
    install_pynvml(monkeypatch, None)
    hide_ipmitool(monkeypatch, tmp_path)
    return tree


def options(tree: Path, tmp_path: Path, **changes: Any) -> SelfCheckOptions:
    base: dict[str, Any] = {
        "hold_s": 0.02,
        "interval_s": 0.05,
        "load": rapl_load(tree),
        "msr_reader": FakeMsr(tree, 4),
        "state_file": tmp_path / "run" / "state.json",
        "meter_options": MeterOptions(ipmi_period_s=0.0),
    }
    base.update(changes)
    return SelfCheckOptions(**base)


def by_name(record: SelfCheckRecord) -> dict[str, Check]:
    return {c.name: c for c in record.checks}


def test_every_check_passes_on_a_sound_node_and_leaves_it_as_found(
    node: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    install_ipmitool(monkeypatch, tmp_path, watts=300.0)
    opts = options(node, tmp_path)
    before = settings(node)
    record = run_selfcheck(FakeSysfsRoot(node), opts)
    checks = by_name(record)
    assert record.ok, [c.detail for c in record.checks if c.outcome == FAILED]
    for name in (
        "cpufreq policy0 lowest: scaling_cur_freq",
        "cpufreq policy0 lowest: effective frequency",
        "cpufreq policy0 highest: scaling_cur_freq",
        "cpufreq policy0 highest: effective frequency",
        "cpufreq policy0 restored",
        "cpuidle cpu0 C6",
        "cpuidle cpu0 C6 restored",
        "meter rapl",
        "meter ipmi",
        "ipmi node >= rapl package-0+dram-0",
        "node as found",
    ):
        assert checks[name].outcome == PASSED, (name, checks[name])
    low = checks["cpufreq policy0 lowest: effective frequency"]
    assert low.details["source"] == "APERF/MPERF" and "GHz from APERF/MPERF" in low.observed
    assert low.details["effective_hz"] == pytest.approx(1.2e9, rel=0.01)
    # acpi-cpufreq's turbo entry (nominal + 1 MHz) is not the "highest" set: its speed varies.
    assert checks["cpufreq policy0 highest: scaling_cur_freq"].details["requested_hz"] == 2.6e9
    assert checks["meter perf"].outcome == NOT_CHECKED and checks["meter perf"].reason
    assert diff(before, settings(node)) == []
    assert not opts.state_file or not opts.state_file.exists()


def test_a_frequency_that_reads_back_different_fails_with_both_values(
    node: Path, tmp_path: Path
) -> None:
    # The platform runs 2.6 GHz whatever is asked (a BMC cap, firmware): so does the fake.
    for policy in ("policy0", "policy2"):
        (node / f"sys/devices/system/cpu/cpufreq/{policy}/scaling_cur_freq").write_text("2600000\n")
    before = settings(node)
    record = run_selfcheck(FakeSysfsRoot(node, cur_freq_khz=2_600_000), options(node, tmp_path))
    checks = by_name(record)
    cur = checks["cpufreq policy0 lowest: scaling_cur_freq"]
    assert cur.outcome == FAILED
    assert "1.20 GHz" in (cur.expected or "") and "2.60 GHz" in (cur.seen or "")
    eff = checks["cpufreq policy0 lowest: effective frequency"]
    assert eff.outcome == FAILED and "GHz from APERF/MPERF" in (eff.seen or "")
    assert eff.details["effective_hz"] == pytest.approx(2.6e9, rel=0.01)
    assert checks["cpufreq policy0 highest: scaling_cur_freq"].outcome == PASSED
    assert checks["node as found"].outcome == PASSED
    assert not record.ok
    assert diff(before, settings(node)) == []


def test_the_effective_frequency_falls_back_to_proc_cpuinfo_and_says_why(
    node: Path, tmp_path: Path
) -> None:
    (node / "proc").mkdir(exist_ok=True)
    (node / "proc/cpuinfo").write_text("processor\t: 0\ncpu MHz\t\t: 1800.000\n\n")
    opts = options(
        node, tmp_path, msr_reader=lambda path, reg: (_ for _ in ()).throw(kernel_error(2, path))
    )
    checks = by_name(run_selfcheck(FakeSysfsRoot(node), opts))
    eff = checks["cpufreq policy0 lowest: effective frequency"]
    assert eff.outcome == FAILED and "1.800 GHz from /proc/cpuinfo cpu MHz" in (eff.seen or "")
    unused = " ".join(eff.details["unused_sources"])
    assert "dev/cpu/0/msr" in unused and "modprobe msr" in unused
    assert "cpuinfo_cur_freq" in unused


def test_a_cstate_disable_that_does_not_stick_fails(node: Path, tmp_path: Path) -> None:
    before = settings(node)
    record = run_selfcheck(FakeSysfsRoot(node, idle_disable_ignored=True), options(node, tmp_path))
    check = by_name(record)["cpuidle cpu0 C6"]
    assert check.outcome == FAILED
    assert "read 1 after disabling" in (check.expected or "") and check.seen == "0, then 0"
    assert not record.ok
    assert diff(before, settings(node)) == []


def test_meters_of_one_domain_that_disagree_fail_with_the_difference(
    node: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    install_ipmitool(monkeypatch, tmp_path, watts=50.0)  # less than the package alone
    record = run_selfcheck(FakeSysfsRoot(node), options(node, tmp_path))
    check = by_name(record)["ipmi node >= rapl package-0+dram-0"]
    assert check.outcome == FAILED
    assert check.details["a_w"] == pytest.approx(50, rel=0.05) and "W vs" in (check.seen or "")
    assert check.details["difference_w"] < -40
    assert "differ by -" in (check.seen or "")
    assert not record.ok


def test_a_wrapping_rapl_counter_is_corrected(node: Path, tmp_path: Path) -> None:
    set_energy(node, PKG, INTEL_RANGE_UJ - 1000)  # wraps on the first load
    opts = options(node, tmp_path)
    checks = {c.name: c for c in check_meters(SysRoot(node), opts)}
    rapl = checks["meter rapl"]
    assert rapl.outcome == PASSED and "1 counter wrap(s) corrected" in rapl.observed
    assert 50 < rapl.details["power_w"]["package-0"] <= 100
    assert checks["meters of one domain"].outcome == NOT_CHECKED
    assert "no second meter" in (checks["meters of one domain"].reason or "")


def test_a_meter_whose_energy_does_not_rise_fails(node: Path, tmp_path: Path) -> None:
    checks = {
        c.name: c for c in check_meters(SysRoot(node), options(node, tmp_path, load=time.sleep))
    }
    assert checks["meter rapl"].outcome == FAILED
    assert "package-0 did not rise" in (checks["meter rapl"].seen or "")
    assert isinstance(RaplMeter.probe(SysRoot(node), MeterOptions()), RaplMeter)


def test_a_check_that_raises_midway_is_restored_first_then_reported(
    node: Path, tmp_path: Path
) -> None:
    before = settings(node)
    calls = []
    healthy = rapl_load(node)

    def load(seconds: float) -> None:
        calls.append(seconds)
        if len(calls) == 2:  # at the highest frequency: the tree is changed now
            raise kernel_error(5, "synthetic failure while busy")
        healthy(seconds)

    record = run_selfcheck(FakeSysfsRoot(node), options(node, tmp_path, load=load))
    raised = by_name(record)["cpufreq policy0"]
    assert raised.outcome == FAILED
    assert "OSError" in (raised.seen or "") and "was restored" in (raised.seen or "")
    assert by_name(record)["node as found"].outcome == PASSED
    assert by_name(record)["cpuidle cpu0 C6"].outcome == PASSED  # the others still ran
    assert diff(before, settings(node)) == []


def test_an_interruption_restores_the_node_and_propagates(node: Path, tmp_path: Path) -> None:
    before = settings(node)
    opts = options(node, tmp_path)
    calls = []

    def load(seconds: float) -> None:
        calls.append(seconds)
        if len(calls) == 2:
            signal.raise_signal(signal.SIGINT)  # Ctrl-C while the frequency is changed

    with pytest.raises(KeyboardInterrupt):
        run_selfcheck(FakeSysfsRoot(node), options(node, tmp_path, load=load))
    assert diff(before, settings(node)) == []
    assert opts.state_file is not None and not opts.state_file.exists()


def test_a_node_without_cpufreq_says_so_and_checks_the_rest(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    tree = build_tree("vm-no-cpufreq", tmp_path / "tree")
    install_pynvml(monkeypatch, None)
    hide_ipmitool(monkeypatch, tmp_path)
    opts = options(tree, tmp_path, load=time.sleep)
    before = settings(tree)
    record = run_selfcheck(FakeSysfsRoot(tree), opts)
    checks = by_name(record)
    freq = checks["cpufreq"]
    assert freq.outcome == NOT_CHECKED
    assert "no cpufreq policies under" in (freq.reason or "") and "virtual machine" in (
        freq.reason or ""
    )
    assert checks["cpuidle cpu0 haltpoll idle"].outcome == PASSED
    assert checks["meter rapl"].outcome == NOT_CHECKED and "no intel-rapl zone" in (
        checks["meter rapl"].reason or ""
    )
    assert checks["meters of one domain"].outcome == NOT_CHECKED
    assert record.ok
    assert diff(before, settings(tree)) == []


def test_nothing_to_change_means_the_restore_check_is_not_checked(tmp_path: Path) -> None:
    tree = tmp_path / "empty"
    (tree / "sys/devices/system/cpu").mkdir(parents=True)
    record = run_selfcheck(SysRoot(tree), SelfCheckOptions(interval_s=0.01, load=time.sleep))
    checks = by_name(record)
    assert {checks[n].outcome for n in ("cpufreq", "cpuidle", "node as found")} == {NOT_CHECKED}
    assert "nothing to restore" in (checks["node as found"].reason or "")
    doc = record.to_dict()
    assert doc["format"] == "greenckpt-selfcheck" and doc["format_version"] == 1
    assert doc["summary"]["failed"] == 0 and doc["summary"]["not_checked"] >= 3
    assert "| cpufreq | not checked |" in record.to_markdown()


# ------------------------------------------------------------------------------------- CLI


def cli_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    install_pynvml(monkeypatch, None)
    hide_ipmitool(monkeypatch, tmp_path)


def test_cli_exit_0_with_files_when_nothing_failed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    cli_env(monkeypatch, tmp_path)
    tree = build_tree("vm-no-cpufreq", tmp_path / "tree")
    before = settings(tree)
    out, md = tmp_path / "rec.json", tmp_path / "rec.md"
    argv = ["probe", "--root", str(tree), "--check", "--output", str(out), "--markdown", str(md)]
    assert main(argv) == 0
    shown = capsys.readouterr().out
    assert "not checked" in shown and "no cpufreq policies" in shown and str(out) in shown
    doc = json.loads(out.read_text())
    assert doc["format"] == "greenckpt-selfcheck" and doc["root"] == str(tree)
    assert {"host", "kernel", "cpu_model", "greenckpt_version", "created"} <= set(doc)
    assert any(c["name"] == "cpufreq" and c["outcome"] == "not checked" for c in doc["checks"])
    assert md.read_text().startswith("# greenckpt self-check of ")
    assert diff(before, settings(tree)) == []
    assert not default_state_file(SysRoot(tree)).exists()


def test_cli_exit_1_when_a_check_failed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # The CLI's root plays a platform that runs 1.2 GHz whatever is set: the highest
    # frequency reads back wrong.
    cli_env(monkeypatch, tmp_path)
    tree = build_tree("intel-acpi-cpufreq", tmp_path / "tree")

    class StuckRoot(SysRoot):
        @classmethod
        def default(cls, path: str | os.PathLike[str] | None = None) -> SysRoot:
            return FakeSysfsRoot(Path(path or "/"), cur_freq_khz=1_200_000)

    monkeypatch.setattr(probe_cmd, "SysRoot", StuckRoot)
    before = settings(tree)
    out = tmp_path / "rec.json"
    assert main(["probe", "--root", str(tree), "--check", "--output", str(out), "--json"]) == 1
    doc = json.loads(capsys.readouterr().out)
    assert doc == json.loads(out.read_text())
    failed = {c["name"]: c for c in doc["checks"] if c["outcome"] == "failed"}
    high = failed["cpufreq policy0 highest: scaling_cur_freq"]
    assert "2.60 GHz" in high["expected"] and "1.20 GHz" in high["seen"]
    assert diff(before, settings(tree)) == []


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--check", "--output", "{tmp}/missing/rec.json"], "does not exist"),
        (["--check", "--markdown", "{tmp}"], "is a directory"),
        (["--output", "{tmp}/rec.json"], "add --check"),
    ],
)
def test_cli_bad_input_exits_2_in_one_line_and_changes_nothing(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    extra: list[str],
    message: str,
) -> None:
    cli_env(monkeypatch, tmp_path)
    tree = build_tree("intel-acpi-cpufreq", tmp_path / "tree")
    before = snapshot(tree)
    argv = ["probe", "--root", str(tree), *(a.format(tmp=tmp_path) for a in extra)]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1
    assert diff(before, snapshot(tree)) == []
    assert not (tmp_path / "rec.json").exists()


HOLDER = """
import sys, time
from pathlib import Path
from greenckpt.platform.restore import NodeSettings
from greenckpt.platform.root import SysRoot
with NodeSettings(SysRoot(Path(sys.argv[1])), sys.argv[2], signals=()):
    print("ready", flush=True)
    time.sleep(60)
"""


@pytest.mark.usefixtures("refused_at_once")
def test_a_node_held_by_another_session_is_not_checked_and_says_why(
    node: Path, tmp_path: Path
) -> None:
    holder = spawn_ready(HOLDER, str(node), str(tmp_path / "other-state.json"))
    try:
        record = run_selfcheck(FakeSysfsRoot(node), options(node, tmp_path))
    finally:
        holder.kill()
        holder.communicate(timeout=10)
    checks = by_name(record)
    for name in ("cpufreq", "cpuidle"):
        assert checks[name].outcome == NOT_CHECKED
        assert "no node-settings session could start" in (checks[name].reason or "")
    assert checks["node as found"].outcome == NOT_CHECKED
    assert checks["meter rapl"].outcome == PASSED  # the meters are still checked
