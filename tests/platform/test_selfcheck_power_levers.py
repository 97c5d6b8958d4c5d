"""``probe --check`` moves the uncore frequency and the RAPL power limit through the session,
reads them back and restores them (SYNTHETIC trees); an absent lever is not checked, with why."""

from __future__ import annotations

from pathlib import Path

import pytest

from greenckpt.platform.selfcheck import (
    FAILED,
    NOT_CHECKED,
    PASSED,
    Check,
    SelfCheckOptions,
    run_selfcheck,
)
from greenckpt.testing.cpu import build_tree, diff, snapshot
from greenckpt.testing.power import install_pynvml
from tests.platform import fake_nvml
from tests.platform.fake_levers import FakeLeverRoot, build_node


@pytest.fixture(autouse=True)
def _no_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    install_pynvml(monkeypatch, None)
    monkeypatch.setenv("GREENCKPT_NVML_LIBRARY", "/nonexistent/libnvidia-ml.so.1")


def run(root: FakeLeverRoot, tmp_path: Path) -> dict[str, Check]:
    opts = SelfCheckOptions(
        hold_s=0.0, interval_s=0.01, load=lambda s: None, state_file=tmp_path / "run" / "s.json"
    )
    return {c.name: c for c in run_selfcheck(root, opts).checks}


def test_uncore_and_power_limit_set_read_back_restored(tmp_path: Path) -> None:
    tree = build_node(tmp_path / "tree")
    before = snapshot(tree)
    checks = run(FakeLeverRoot(tree), tmp_path)
    for name in (
        "uncore frequency lowest",
        "uncore frequency highest",
        "uncore frequency restored",
        "power limit package",
        "power limit restored",
        "node as found",
    ):
        assert checks[name].outcome == PASSED, (name, checks[name])
    assert "184.5 W" in checks["power limit package"].did  # 90 % of the 205 W in force
    assert checks["gpu power limit"].outcome == NOT_CHECKED
    assert "libnvidia-ml" in (checks["gpu power limit"].reason or "")
    assert diff(before, snapshot(tree)) == [] and not (tmp_path / "run" / "s.json").exists()


def test_a_refused_power_limit_write_fails_and_is_restored(tmp_path: Path) -> None:
    tree = build_node(tmp_path / "tree")
    before = snapshot(tree)
    checks = run(FakeLeverRoot(tree, fail_on="intel-rapl:1/constraint_0_power_limit_uw"), tmp_path)
    failed = checks["power limit package"]
    assert failed.outcome == FAILED and "everything it changed was restored" in (failed.seen or "")
    assert checks["node as found"].outcome == PASSED
    assert diff(before, snapshot(tree)) == []


def test_absent_levers_are_not_checked_with_the_reason(tmp_path: Path) -> None:
    tree = build_tree("vm-no-cpufreq", tmp_path / "tree")
    checks = run(FakeLeverRoot(tree), tmp_path)
    assert checks["uncore frequency"].outcome == NOT_CHECKED
    assert "intel_uncore_frequency" in (checks["uncore frequency"].reason or "")
    assert "intel-rapl" in (checks["power limit"].reason or "")


def test_the_gpu_power_limit_is_set_read_back_and_restored(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake = fake_nvml.install(tmp_path, monkeypatch, gpus=2)
    found = fake.state()
    checks = run(FakeLeverRoot(build_node(tmp_path / "tree")), tmp_path)
    assert checks["gpu power limit"].outcome == PASSED, checks["gpu power limit"]
    assert "100 W" in checks["gpu power limit"].did
    assert checks["gpu power limit restored"].outcome == PASSED
    assert fake.state() == found


def test_the_gpu_clocks_are_set_read_back_and_restored(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake = fake_nvml.install(tmp_path, monkeypatch, gpus=2)
    fake.update(1, app_mem=810, app_gr=585)  # not at its defaults: put back to 810:585
    found = fake.state()
    checks = run(FakeLeverRoot(build_node(tmp_path / "tree")), tmp_path)
    assert checks["gpu clocks"].outcome == PASSED, checks["gpu clocks"]
    assert "memory 810 MHz and graphics 135 MHz" in checks["gpu clocks"].did  # the lowest pair
    assert checks["gpu clocks restored"].outcome == PASSED, checks["gpu clocks restored"]
    assert fake.state() == found


def test_gpu_clocks_that_do_not_read_back_fail_and_are_restored(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake = fake_nvml.install(tmp_path, monkeypatch, gpus=1)
    fake.fail("nvmlDeviceSetApplicationsClocks", 3)  # NVML_ERROR_NOT_SUPPORTED
    found = fake.state()
    checks = run(FakeLeverRoot(build_node(tmp_path / "tree")), tmp_path)
    failed = checks["gpu clocks"]
    assert failed.outcome == FAILED and "everything it changed was restored" in (failed.seen or "")
    assert fake.state() == found
