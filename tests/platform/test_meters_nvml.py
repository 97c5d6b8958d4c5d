"""NVML through a SYNTHETIC ``pynvml`` module injected into ``sys.modules``."""

from __future__ import annotations

import pytest

from greenckpt.platform.meters import MeterOptions, MeterUnavailable, NvmlMeter
from greenckpt.platform.root import SysRoot
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
