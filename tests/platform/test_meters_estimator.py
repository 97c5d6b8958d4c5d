"""The utilisation × TDP estimator: on this machine's real /proc and on SYNTHETIC trees."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from greenckpt.platform.meters import (
    CpuInfo,
    MeterOptions,
    MeterUnavailable,
    UtilisationEstimator,
    lookup_tdp,
)
from greenckpt.platform.meters.estimator import (
    DEFAULT_IDLE_FRACTION,
    FALLBACK_W_PER_CPU,
    model_power,
    tdp_table,
)
from greenckpt.platform.root import SysRoot
from tests.platform import fake_power as fp


def test_real_proc_gives_plausible_estimated_figures() -> None:
    root = SysRoot(Path("/"))
    with UtilisationEstimator.probe(root, MeterOptions()) as m:
        assert m.source == "estimated"
        assert m.domains == ("cpu",)
        assert "estimated" in m.describe()
        cpu = CpuInfo.read(root)
        assert cpu.logical_cpus >= 1
        t0 = time.monotonic()
        a = m.read()["cpu"]
        end = time.thread_time() + 0.3
        while time.thread_time() < end:  # keep one CPU busy
            pass
        b = m.read()["cpu"]
        dt = time.monotonic() - t0
        assert 0.0 <= m.utilisation <= 1.0
        power = (b - a) / dt
        assert m.p_idle_w * 0.99 <= power <= m.p_max_w * 1.01
        assert 0 < m.p_max_w < 5000  # watts: plausible for one node's CPUs
        assert m.resolution.unit == "W"


def test_opteron_6172_from_the_table_with_sockets(tmp_path: Path) -> None:
    fp.proc_tree(tmp_path, model="AMD Opteron(tm) Processor 6172", sockets=4, busy=0, idle=0)
    clock = fp.ManualClock()
    with UtilisationEstimator.probe(SysRoot(tmp_path), MeterOptions(clock=clock)) as m:
        assert m.p_max_w == pytest.approx(320.0)  # 80 W × 4 sockets
        assert m.p_idle_w == pytest.approx(96.0)  # 0.3 × 320
        assert "table" in m.tdp_origin
        fp.set_stat(tmp_path, busy=500, idle=500)  # 50 % busy over the next second
        clock.advance(1.0)
        assert m.read()["cpu"] == pytest.approx(96.0 + (320.0 - 96.0) * 0.5)
        fp.set_stat(tmp_path, busy=1500, idle=500)  # 100 % busy
        clock.advance(2.0)
        assert m.read()["cpu"] == pytest.approx(208.0 + 2 * 320.0)
        clock.advance(1.0)  # no new jiffies: previous utilisation reused
        assert m.read()["cpu"] == pytest.approx(208.0 + 3 * 320.0)


def test_given_tdp_and_idle_fraction(tmp_path: Path) -> None:
    fp.proc_tree(tmp_path, model="Some Future CPU", sockets=2)
    opts = MeterOptions(tdp_w=100.0, idle_fraction=0.5)
    with UtilisationEstimator.probe(SysRoot(tmp_path), opts) as m:
        assert m.p_max_w == pytest.approx(200.0)
        assert m.p_idle_w == pytest.approx(100.0)
        assert m.tdp_origin.startswith("given")


def test_unknown_model_falls_back_per_logical_cpu(tmp_path: Path) -> None:
    fp.proc_tree(tmp_path, model="AMD EPYC", sockets=1, cores_per_socket=2)
    with UtilisationEstimator.probe(SysRoot(tmp_path), MeterOptions()) as m:
        assert m.p_max_w == pytest.approx(FALLBACK_W_PER_CPU * 2)
        assert m.p_idle_w == pytest.approx(DEFAULT_IDLE_FRACTION * FALLBACK_W_PER_CPU * 2)
        assert "fallback" in m.tdp_origin and "AMD EPYC" in m.tdp_origin


def test_bad_options_and_missing_proc_are_unavailable(tmp_path: Path) -> None:
    with pytest.raises(MeterUnavailable, match="cpuinfo"):
        UtilisationEstimator.probe(SysRoot(tmp_path), MeterOptions())
    fp.proc_tree(tmp_path)
    with pytest.raises(MeterUnavailable, match="TDP must be positive"):
        UtilisationEstimator.probe(SysRoot(tmp_path), MeterOptions(tdp_w=-1.0))
    with pytest.raises(MeterUnavailable, match="idle_fraction"):
        UtilisationEstimator.probe(SysRoot(tmp_path), MeterOptions(idle_fraction=1.5))
    (tmp_path / "proc/stat").write_text("garbage\n")
    with pytest.raises(MeterUnavailable, match="proc/stat"):
        UtilisationEstimator.probe(SysRoot(tmp_path), MeterOptions())


@pytest.mark.parametrize(
    ("model", "tdp"),
    [
        ("AMD Opteron(tm) Processor 6172", 80.0),
        ("AMD Opteron Processor 6172", 80.0),
        ("Intel(R) Xeon(R) CPU E5-2670 0 @ 2.60GHz", 115.0),
        ("Intel(R) Xeon(R) CPU E5-2680 v4 @ 2.40GHz", 120.0),
        ("Intel(R) Xeon(R) Gold 6148 CPU @ 2.40GHz", 150.0),
        ("AMD EPYC 7763 64-Core Processor", 280.0),
        ("Intel(R) Xeon(R) CPU E5-2670 v2 @ 2.50GHz", None),  # not the v1 entry
        ("AMD EPYC", None),
    ],
)
def test_tdp_table_lookup(model: str, tdp: float | None) -> None:
    entry = lookup_tdp(model)
    assert (entry.tdp_w if entry else None) == tdp


def test_table_is_well_formed() -> None:
    table = tdp_table()
    assert len(table) >= 5
    assert all(e.tdp_w > 0 and e.note for e in table)


def test_model_is_linear_and_clamped() -> None:
    assert model_power(0.0, 30.0, 100.0) == 30.0
    assert model_power(1.0, 30.0, 100.0) == 100.0
    assert model_power(0.5, 30.0, 100.0) == 65.0
    assert model_power(2.0, 30.0, 100.0) == 100.0
