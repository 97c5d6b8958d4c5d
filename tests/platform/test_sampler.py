"""The sampler with SYNTHETIC meters: phases, energy per phase = counter deltas, rate, stop.

Rates are checked with generous bounds only (this is a loaded 2-core VM in CI); speed is
measured in benchmarks/bench_sampler.py, not asserted here.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import numpy as np
import pytest

from greenckpt.platform.meters import Selection, select_meters
from greenckpt.platform.root import PlatformError, SysRoot
from greenckpt.platform.sampler import PhaseEnergy, Sampler
from tests.platform import fake_power as fp


def _row_of(series_t: np.ndarray, t: float) -> int:
    (idx,) = np.nonzero(series_t == t)
    assert idx.size == 1
    return int(idx[0])


def test_phase_energy_is_the_counter_delta_at_its_boundaries() -> None:
    meter = fp.FakeMeter({"package-0": 100.0, "dram-0": 10.0})
    with Sampler([meter], rate_hz=200) as s:
        with s.phase("checkpoint") as ph:
            time.sleep(0.05)
        time.sleep(0.02)
    res = ph.result
    assert isinstance(res, PhaseEnergy)
    series = s.series()
    start = _row_of(series.t_s, res.start_s)
    end = _row_of(series.t_s, res.end_s)
    assert series.boundary[start] and series.boundary[end]
    # Every read of the meter is one row of the series, in order: rows ↔ meter.log entries.
    assert len(meter.log) == len(series)
    for d in ("package-0", "dram-0"):
        delta = meter.log[end][d] - meter.log[start][d]
        assert res.energy_j[f"fake/{d}"] == pytest.approx(delta, rel=1e-12)
    # And the fake draws constant power, so that delta is power × the phase's duration.
    assert res.energy_j["fake/package-0"] == pytest.approx(100.0 * res.duration_s, rel=0.02)
    assert res.mean_power_w["fake/dram-0"] == pytest.approx(10.0, rel=0.02)
    assert res.sources == {"fake/package-0": "measured", "fake/dram-0": "measured"}


def test_series_power_integrates_back_to_the_energy() -> None:
    meter = fp.FakeMeter({"node": 250.0})
    with Sampler([meter], rate_hz=100) as s:
        time.sleep(0.2)
    series = s.series()
    t_end, watts = series.power_w()
    assert watts.shape == (t_end.size, 1)
    assert np.allclose(watts[:, 0], 250.0, rtol=0.05)
    assert series.energy_j[0, 0] == 0.0
    assert series.energy_j[-1, 0] == pytest.approx(s.energy_j()["fake/node"])
    doc = series.to_dict()
    assert doc["domains"]["fake/node"]["source"] == "measured"


def test_rate_is_respected_roughly() -> None:
    meter = fp.FakeMeter()
    with Sampler([meter], rate_hz=100) as s:
        time.sleep(0.5)
    assert 15 <= s.ticks <= 60  # 50 expected
    assert s.error_count == 0


def test_high_rate_is_possible_with_cheap_meters() -> None:
    with Sampler([fp.FakeMeter()], rate_hz=1000) as s:
        time.sleep(0.3)
    assert s.ticks + s.missed_ticks >= 100  # 300 slots; a loaded VM may skip some
    assert s.ticks >= 50


def test_nested_phases_are_inclusive_with_exclusive_remainders() -> None:
    meter = fp.FakeMeter({"pkg": 100.0})
    with Sampler([meter], rate_hz=50) as s:
        with s.phase("checkpoint") as outer:
            time.sleep(0.02)
            with s.phase("flush") as inner:
                time.sleep(0.03)
            time.sleep(0.01)
        with s.phase("compute"):
            time.sleep(0.01)
    o, i = outer.result, inner.result
    assert o is not None and i is not None
    assert (o.depth, o.parent) == (0, None)
    assert (i.depth, i.parent) == (1, o.index)
    k = "fake/pkg"
    assert o.energy_j[k] > i.energy_j[k] > 0
    assert o.exclusive_energy_j[k] == pytest.approx(o.energy_j[k] - i.energy_j[k])
    assert i.exclusive_energy_j[k] == pytest.approx(i.energy_j[k])
    assert [p.name for p in s.phases] == ["checkpoint", "flush", "compute"]
    totals = s.totals_by_phase()
    assert totals["checkpoint"][k] == pytest.approx(o.exclusive_energy_j[k])
    inclusive = s.totals_by_phase(exclusive=False)
    assert inclusive["checkpoint"][k] == pytest.approx(o.energy_j[k])
    # Exclusive energies of all phases never exceed the energy since start.
    assert sum(t[k] for t in totals.values()) <= s.energy_j()[k]


def test_phases_in_other_threads_do_not_nest_under_this_one() -> None:
    with Sampler([fp.FakeMeter()], rate_hz=20) as s:
        results: list[PhaseEnergy | None] = []

        def worker() -> None:
            with s.phase("io") as p:
                time.sleep(0.01)
            results.append(p.result)

        with s.phase("checkpoint"):
            t = threading.Thread(target=worker)
            t.start()
            t.join()
    assert results[0] is not None
    assert results[0].parent is None
    assert results[0].depth == 0


def test_a_failing_body_still_records_its_phase() -> None:
    with (
        Sampler([fp.FakeMeter()], rate_hz=20) as s,
        pytest.raises(ValueError, match="boom"),
        s.phase("restart"),
    ):
        raise ValueError("boom")
    assert [p.name for p in s.phases] == ["restart"]


def test_estimated_sources_are_labelled_everywhere() -> None:
    est = fp.FakeMeter({"cpu": 50.0}, name="estimator", source="estimated")
    real = fp.FakeMeter({"node": 200.0}, name="ipmi")
    with Sampler([est, real], rate_hz=20) as s, s.phase("compute") as p:
        time.sleep(0.01)
    assert s.sources == {"estimator/cpu": "estimated", "ipmi/node": "measured"}
    res = p.result
    assert res is not None and res.estimated
    doc = res.to_dict()
    assert doc["energy"]["estimator/cpu"]["source"] == "estimated"
    assert doc["energy"]["ipmi/node"]["source"] == "measured"


def test_clean_stop_is_prompt_even_at_a_low_rate() -> None:
    s = Sampler([fp.FakeMeter()], rate_hz=0.2).start()  # a 5 s period
    time.sleep(0.05)
    t0 = time.monotonic()
    s.stop()
    assert time.monotonic() - t0 < 2.0
    assert not s.running
    s.stop()  # idempotent
    assert s.thread_cpu_s >= 0.0
    assert len(s.series()) == 2  # start and final readings


def test_background_errors_are_recorded_and_sampling_goes_on() -> None:
    flaky = fp.FakeMeter(fail_in_thread=True)
    with Sampler([flaky], rate_hz=100) as s, s.phase("compute") as p:
        time.sleep(0.1)
    assert s.error_count >= 3
    assert "synthetic read failure" in s.errors[0]
    assert p.result is not None  # boundary reads (caller's thread) still work


def test_period_above_a_meters_wrap_bound_is_refused() -> None:
    with pytest.raises(PlatformError, match="could wrap"):
        Sampler([fp.FakeMeter(max_period_s=0.05)], rate_hz=10)
    Sampler([fp.FakeMeter(max_period_s=0.05)], rate_hz=50).stop()


@pytest.mark.parametrize("rate", [0.0, -1.0, float("nan"), 1e6])
def test_bad_rates_are_refused(rate: float) -> None:
    with pytest.raises(PlatformError, match="sampling rate"):
        Sampler([fp.FakeMeter()], rate_hz=rate)


def test_misuse_is_refused() -> None:
    s = Sampler([fp.FakeMeter()])
    with pytest.raises(PlatformError, match="not running"), s.phase("compute"):
        pass
    with pytest.raises(PlatformError, match="non-empty"):
        s.phase("")
    with pytest.raises(PlatformError, match="twice"):
        Sampler([fp.FakeMeter(), fp.FakeMeter()])
    with pytest.raises(PlatformError, match="no meter"):
        Sampler(Selection())
    s.start()
    s.stop()
    with pytest.raises(PlatformError, match="already stopped"):
        s.start()


def test_a_phase_left_open_at_stop_is_truncated() -> None:
    s = Sampler([fp.FakeMeter()], rate_hz=50).start()
    ph = s.phase("checkpoint")
    ph.__enter__()
    time.sleep(0.02)
    s.stop()
    ph.__exit__(None, None, None)
    assert ph.result is not None and ph.result.truncated
    assert ph.result.energy_j["fake/package-0"] > 0


def test_max_samples_bounds_the_series() -> None:
    with Sampler([fp.FakeMeter()], rate_hz=1000, max_samples=10) as s:
        time.sleep(0.1)
    assert len(s.series()) == 10


def test_auto_detected_meters_are_owned_and_closed(monkeypatch: pytest.MonkeyPatch) -> None:
    meter = fp.FakeMeter()
    monkeypatch.setattr("greenckpt.platform.sampler.select_meters", lambda: Selection([meter], []))
    with Sampler() as s:
        assert s.meters == (meter,)
    assert meter.closed


def test_end_to_end_with_the_estimator_on_this_machine() -> None:
    with (
        select_meters(["estimator"], root=SysRoot(Path("/"))) as sel,
        Sampler(sel, rate_hz=20) as s,
        s.phase("compute") as p,
    ):
        end = time.thread_time() + 0.1
        while time.thread_time() < end:
            pass
    res = p.result
    assert res is not None and res.estimated
    assert res.sources == {"estimator/cpu": "estimated"}
    est = sel.meters[0]
    power = res.mean_power_w["estimator/cpu"]
    assert est.p_idle_w * 0.99 <= power <= est.p_max_w * 1.01  # type: ignore[attr-defined]
