"""NVML through a SYNTHETIC ``pynvml`` module injected into ``sys.modules``."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from greenckpt.platform.meters import MeterOptions, MeterUnavailable, NvmlMeter, select_meters
from greenckpt.platform.meters.base import HOLD_QUERIES
from greenckpt.platform.root import ENV_VAR, PlatformError, SysRoot
from greenckpt.platform.sampler import Sampler
from tests.platform import fake_power as fp

ROOT = SysRoot()


def test_energy_counter_mode(monkeypatch: pytest.MonkeyPatch) -> None:
    mod = fp.fake_pynvml(gpus=2, energy_supported=True)
    fp.install_pynvml(monkeypatch, mod)
    with NvmlMeter.probe(ROOT, MeterOptions()) as m:
        assert m.domains == ("gpu0", "gpu1")
        assert m.energy_mode
        assert m.source == "measured"
        assert str(m.resolution) == "0.001 J"
        assert m.read() == {"gpu0": 0.0, "gpu1": 0.0}
        mod.energy_mj[0] += 1500
        mod.energy_mj[1] += 250_000
        assert m.read() == {"gpu0": pytest.approx(1.5), "gpu1": pytest.approx(250.0)}
        assert "energy counter" in m.describe()
    assert mod.calls == ["init", "shutdown"]


def test_power_mode_integrates_when_energy_is_not_supported(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    mod = fp.fake_pynvml(gpus=1, energy_supported=False)
    fp.install_pynvml(monkeypatch, mod)
    clock = fp.ManualClock()
    with NvmlMeter.probe(ROOT, MeterOptions(clock=clock, nvml_period_s=0.02)) as m:
        assert not m.energy_mode
        assert m.resolution.unit == "W"
        assert m.read() == {"gpu0": 0.0}  # first query: 100 W from now on
        clock.advance(2.0)
        mod.power_mw[0] = 300_000
        assert m.read()["gpu0"] == pytest.approx(200.0)  # 100 W held for 2 s
        clock.advance(1.0)
        assert m.read()["gpu0"] == pytest.approx(500.0)  # then 300 W for 1 s
        clock.advance(0.01)  # inside nvml_period_s: extrapolated, no query
        queries = m.queries
        assert m.read()["gpu0"] == pytest.approx(503.0)
        assert m.queries == queries


def test_init_failure_is_unavailable(monkeypatch: pytest.MonkeyPatch) -> None:
    mod = fp.fake_pynvml(init_fails=True)
    fp.install_pynvml(monkeypatch, mod)
    with pytest.raises(MeterUnavailable, match="nvmlInit failed"):
        NvmlMeter.probe(ROOT, MeterOptions())


def test_no_gpu_is_unavailable_and_shuts_nvml_down(monkeypatch: pytest.MonkeyPatch) -> None:
    mod = fp.fake_pynvml(gpus=0)
    fp.install_pynvml(monkeypatch, mod)
    with pytest.raises(MeterUnavailable, match="no GPU"):
        NvmlMeter.probe(ROOT, MeterOptions())
    assert mod.calls == ["init", "shutdown"]


def test_missing_module_is_unavailable_with_the_package_name(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    fp.install_pynvml(monkeypatch, None)
    with pytest.raises(MeterUnavailable, match="nvidia-ml-py"):
        NvmlMeter.probe(ROOT, MeterOptions())


@pytest.mark.parametrize(
    "function", ["nvmlDeviceGetCount", "nvmlDeviceGetHandleByIndex", "nvmlDeviceGetPowerUsage"]
)
def test_nvml_errors_after_init_are_unavailable_and_shut_nvml_down(
    monkeypatch: pytest.MonkeyPatch, function: str
) -> None:
    mod = fp.fake_pynvml(gpus=2, energy_supported=function != "nvmlDeviceGetPowerUsage")
    mod.fail[function] = "Unknown Error"
    fp.install_pynvml(monkeypatch, mod)
    with pytest.raises(MeterUnavailable) as info:
        NvmlMeter.probe(ROOT, MeterOptions())
    assert "Unknown Error" in info.value.reason
    assert info.value.meter == "nvml"
    assert mod.calls == ["init", "shutdown"]


def test_auto_detection_and_the_sampler_survive_a_broken_nvml(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    fp.proc_tree(tmp_path)
    fp.hide_ipmitool(monkeypatch, tmp_path)
    mod = fp.fake_pynvml()
    mod.fail["nvmlDeviceGetCount"] = "Unknown Error"
    fp.install_pynvml(monkeypatch, mod)
    with select_meters(root=SysRoot(tmp_path)) as sel:
        assert [m.name for m in sel.meters] == ["estimator"]
        nvml = next(p for p in sel.probes if p.name == "nvml")
        assert nvml.status == "unavailable"
        assert "nvmlDeviceGetCount" in nvml.reason
    monkeypatch.setenv(ENV_VAR, str(tmp_path))
    with Sampler(rate_hz=20) as s:
        assert [m.name for m in s.meters] == ["estimator"]


def test_a_gpu_lost_while_reading_is_a_platform_error(monkeypatch: pytest.MonkeyPatch) -> None:
    mod = fp.fake_pynvml(gpus=2, energy_supported=True)
    fp.install_pynvml(monkeypatch, mod)
    with NvmlMeter.probe(ROOT, MeterOptions()) as m:
        mod.energy_mj[1] += 2000
        assert m.read()["gpu1"] == pytest.approx(2.0)
        mod.fail["nvmlDeviceGetTotalEnergyConsumption"] = "GPU is lost"
        with pytest.raises(PlatformError, match="GPU is lost"):
            m.read()


def test_a_lost_gpu_in_power_mode_is_held_then_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    mod = fp.fake_pynvml(gpus=1, energy_supported=False)
    fp.install_pynvml(monkeypatch, mod)
    clock = fp.ManualClock()
    with NvmlMeter.probe(ROOT, MeterOptions(clock=clock, nvml_period_s=0.02)) as m:
        mod.fail["nvmlDeviceGetPowerUsage"] = "GPU is lost"
        for _ in range(HOLD_QUERIES - 1):
            clock.advance(1.0)
            m.read()  # held
        clock.advance(1.0)
        with pytest.raises(PlatformError, match="GPU is lost"):
            m.read()
        assert m.gaps == {"gpu0": HOLD_QUERIES - 1}


def test_a_sampler_carries_a_lost_gpu_forward_and_marks_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    mod = fp.fake_pynvml(gpus=1, energy_supported=True)
    fp.install_pynvml(monkeypatch, mod)
    with (
        NvmlMeter.probe(ROOT, MeterOptions()) as m,
        Sampler([m], rate_hz=50) as s,
        s.phase("checkpoint") as p,
    ):
        mod.energy_mj[0] += 5000
        time.sleep(0.05)
        mod.fail["nvmlDeviceGetTotalEnergyConsumption"] = "GPU is lost"
        time.sleep(0.05)
    res = p.result
    assert res is not None
    assert res.energy_j["nvml/gpu0"] == pytest.approx(5.0)  # the last good value, carried
    assert res.gaps["nvml/gpu0"] >= 1 and not res.reliable
    assert any("GPU is lost" in e for e in s.errors)
