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
from greenckpt.platform.meters.base import HOLD_QUERIES
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
    # Each interval's power is within a loaded machine's jitter of 250 W (the meter stamps its
    # own clock a moment after the sampler's); the series integrates back exactly.
    assert float(np.median(watts[:, 0])) == pytest.approx(250.0, rel=0.05)
    keep = np.concatenate(([True], np.diff(series.t_s) > 0))
    dt = np.diff(series.t_s[keep])
    assert float(np.sum(watts[:, 0] * dt)) == pytest.approx(series.energy_j[-1, 0], rel=1e-9)
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
    assert len(s.series()) == 2  # start and final readings


class _BusyMeter(fp.FakeMeter):
    """SYNTHETIC: each read in the sampler's thread spins ``spin_s`` of that thread's CPU and
    adds what it spun to ``spun_s``."""

    def __init__(self, spin_s: float) -> None:
        super().__init__()
        self.spin_s = spin_s
        self.spun_s = 0.0

    def read(self) -> dict[str, float]:
        if threading.current_thread().name == "greenckpt-sampler":
            start = time.thread_time()
            while time.thread_time() - start < self.spin_s:
                pass
            self.spun_s += time.thread_time() - start
        return super().read()


def test_thread_cpu_is_the_sampling_threads_own_cpu_time() -> None:
    meter = _BusyMeter(spin_s=0.002)
    s = Sampler([meter], rate_hz=50)
    assert s.thread_cpu_s == 0.0  # known only after stop()
    w0 = time.monotonic()
    s.start()
    time.sleep(0.3)  # the main thread only sleeps: its CPU must not count
    s.stop()
    wall = time.monotonic() - w0
    assert s.ticks >= 3
    # At least what the reads spun in the sampler's thread, at most one core for the run.
    assert meter.spun_s <= s.thread_cpu_s <= wall


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


def test_a_truncated_phase_counts_only_the_samples_inside_it() -> None:
    s = Sampler([fp.FakeMeter()], rate_hz=100).start()
    ph = s.phase("checkpoint")
    ph.__enter__()
    time.sleep(0.1)
    s.stop()
    ph.__exit__(None, None, None)
    res = ph.result
    assert res is not None and res.truncated
    series = s.series()
    start, end = _row_of(series.t_s, res.start_s), _row_of(series.t_s, res.end_s)
    assert end == len(series) - 1  # the final reading ends the phase
    assert res.samples == end - start - 1  # the rows strictly between the two
    assert not series.boundary[start + 1 : end].any()


def test_a_phase_that_ends_normally_counts_the_samples_inside_it() -> None:
    with Sampler([fp.FakeMeter()], rate_hz=100) as s, s.phase("compute") as ph:
        time.sleep(0.1)
    res = ph.result
    assert res is not None
    series = s.series()
    start, end = _row_of(series.t_s, res.start_s), _row_of(series.t_s, res.end_s)
    assert res.samples == end - start - 1 >= 3


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


# ---------------------------------------------------------------- failing and degraded meters


def test_a_failing_meter_does_not_starve_the_meters_after_it() -> None:
    """[failing, rapl] used to lose the whole tick at the first meter: rapl went unread."""
    bad = fp.FakeMeter({"node": 50.0}, name="badcsv", fail_in_thread=True)
    good = fp.FakeMeter({"package-0": 100.0}, name="rapl")
    with Sampler([bad, good], rate_hz=100) as s:
        time.sleep(0.3)
    assert s.ticks >= 5
    assert good.reads >= s.ticks + 2  # every tick, plus start and stop
    series = s.series()
    ticks = ~series.boundary
    # The good meter's energy grows tick by tick; the failing one's is carried forward, marked.
    assert np.all(np.diff(series.energy_j[:, 1]) > 0)
    assert series.held[ticks, 0].all() and not series.held[:, 1].any()
    assert s.failed_reads == {"badcsv": s.ticks, "rapl": 0}
    assert s.gaps == {"badcsv/node": s.ticks, "rapl/package-0": 0}
    assert s.error_count == s.ticks
    assert s.errors[0].startswith("sample: badcsv: OSError: synthetic read failure")


def test_a_meter_failing_at_a_phase_boundary_is_carried_forward_and_marked() -> None:
    flaky = fp.FakeMeter({"node": 200.0}, name="csv")
    steady = fp.FakeMeter({"package-0": 100.0}, name="rapl")
    with Sampler([flaky, steady], rate_hz=5) as s:
        with s.phase("checkpoint") as ph:
            time.sleep(0.05)
            last_good = flaky.log[-1]["node"]
            flaky.failing = True
        flaky.failing = False
        with s.phase("compute") as after:
            time.sleep(0.01)
    res = ph.result
    assert res is not None  # the boundary did not raise
    assert not res.reliable
    assert res.gaps["csv/node"] >= 1
    assert res.gaps["rapl/package-0"] == 0
    assert res.energy_j["rapl/package-0"] == pytest.approx(100.0 * res.duration_s, rel=0.05)
    # csv: its last good reading, carried forward to the phase's end (and marked there).
    series = s.series()
    end = _row_of(series.t_s, res.end_s)
    assert series.held[end].tolist() == [True, False]
    assert series.energy_j[end, 0] == pytest.approx(last_good - flaky.log[0]["node"])
    doc = res.to_dict()
    assert doc["reliable"] is False
    assert doc["energy"]["csv/node"]["gaps"] == res.gaps["csv/node"]
    assert doc["energy"]["rapl/package-0"]["gaps"] == 0
    assert after.result is not None and after.result.reliable
    assert any("phase 'checkpoint' end: csv:" in e for e in s.errors)


def test_degraded_readings_a_meter_reports_reach_the_phase() -> None:
    meter = fp.FakeMeter({"package-0": 100.0, "dram-0": 10.0})
    with Sampler([meter], rate_hz=20) as s:
        with s.phase("compute") as clean:
            time.sleep(0.01)
        with s.phase("checkpoint") as marked:
            meter.gap_counts["dram-0"] = 1  # e.g. a counter read too late
            time.sleep(0.01)
    assert clean.result is not None and clean.result.reliable
    assert clean.result.to_dict()["reliable"] is True
    assert marked.result is not None and not marked.result.reliable
    assert marked.result.gaps == {"fake/package-0": 0, "fake/dram-0": 1}
    series = s.series()
    assert series.held[:, 1].sum() == 1
    assert series.to_dict()["domains"]["fake/dram-0"]["held_rows"] == [
        int(np.flatnonzero(series.held[:, 1])[0])
    ]


def test_a_meter_failing_at_start_is_refused_and_owned_meters_closed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    meter = fp.FakeMeter()
    meter.failing = True
    monkeypatch.setattr("greenckpt.platform.sampler.select_meters", lambda: Selection([meter], []))
    s = Sampler()
    with pytest.raises(PlatformError, match="first reading failed: fake: OSError"):
        s.start()
    assert meter.closed
    assert not s.running


def test_auto_detected_meters_are_closed_when_validation_fails(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    meter = fp.FakeMeter(max_period_s=0.01)
    monkeypatch.setattr("greenckpt.platform.sampler.select_meters", lambda: Selection([meter], []))
    with pytest.raises(PlatformError, match="could wrap"):
        Sampler(rate_hz=10)
    assert meter.closed


# ---------------------------------------------------------------- slow meters


def test_a_phase_boundary_never_waits_for_a_slow_query() -> None:
    """A boundary in the application's thread takes the held power, integrated to the
    boundary, while the background thread is stuck in a slow query (ipmitool)."""
    meter = fp.SlowPolledMeter(watts=100.0)
    with Sampler([meter], rate_hz=50) as s:
        meter.block = True
        assert meter.in_query.wait(2.0)  # the background thread is inside the query
        with s.phase("checkpoint") as ph:
            time.sleep(0.02)
        still_in_query = meter.in_query.is_set()
        meter.gate.set()
    assert still_in_query  # the phase began and ended while the query ran
    assert set(meter.query_threads) == {"greenckpt-sampler"}
    res = ph.result
    assert res is not None and res.reliable
    assert res.mean_power_w["slowpoll/node"] == pytest.approx(100.0, rel=0.01)


def test_a_slow_meter_failing_for_good_is_held_then_carried_forward() -> None:
    meter = fp.SlowPolledMeter(watts=100.0)
    with Sampler([meter], rate_hz=100) as s:
        time.sleep(0.05)
        meter.fail = True
        deadline = time.monotonic() + 10.0
        while meter.consecutive_failures < HOLD_QUERIES and time.monotonic() < deadline:
            time.sleep(0.01)  # 2 failed queries held, the 3rd refused
        with s.phase("checkpoint") as ph:
            time.sleep(0.02)
    res = ph.result
    assert res is not None and not res.reliable
    assert res.energy_j["slowpoll/node"] == 0.0  # nothing extrapolated past the hold
    assert meter.gaps == {"node": 2}
    assert any("not extrapolating" in e for e in s.errors)


def test_marks_bracket_a_window_with_the_exact_counter_delta() -> None:
    meter = fp.FakeMeter({"package-0": 100.0})
    with Sampler([meter], rate_hz=50) as s:
        a = s.mark()
        time.sleep(0.03)
        b = s.mark()
    n = len(meter.log)
    assert n >= 3
    logged = [r["package-0"] for r in meter.log]
    e = a.energy_to(b)["fake/package-0"]
    # Energy = difference of two logged reads, and ≈ 100 W x elapsed monotonic time.
    assert any(abs(logged[j] - logged[i] - e) < 1e-9 for i in range(n) for j in range(i, n))
    assert e == pytest.approx(100.0 * (b.monotonic_s - a.monotonic_s), rel=0.05)
    assert b.t_s - a.t_s == pytest.approx(b.monotonic_s - a.monotonic_s)
    assert a.gaps_to(b) == {"fake/package-0": 0}


def test_mark_counts_a_failed_read_as_a_gap_and_needs_a_running_sampler() -> None:
    meter = fp.FakeMeter({"package-0": 100.0})
    s = Sampler([meter], rate_hz=5)
    with pytest.raises(PlatformError, match="not running"):
        s.mark()
    with s:
        a = s.mark()
        meter.failing = True
        b = s.mark()
        meter.failing = False
    assert a.gaps_to(b)["fake/package-0"] >= 1
    assert a.energy_to(b)["fake/package-0"] == 0.0  # carried forward, never guessed
