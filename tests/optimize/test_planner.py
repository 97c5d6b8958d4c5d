"""The planner: joint optimum, baselines, constraints, Pareto front, bad input."""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from greenckpt.model import epe, time_factor, young_interval
from greenckpt.optimize import (
    PlanError,
    ProfileError,
    Scenario,
    load_profile,
    pareto_front,
    plan,
    profile_from_json,
)
from tests.conftest import EXAMPLE_PROFILE, small_profile_doc

GIB = 2**30
SAITO = Scenario(ckpt_size=64 * GIB, rate=1.89474e-5, app_power=471.1)


def _brute_force(doc: dict[str, Any], scn: Scenario) -> float:
    prof = profile_from_json(doc)
    best = np.inf
    grid = np.geomspace(10.0, 1e6, 20001)
    for w, r in itertools.product(prof.for_op("write"), prof.for_op("read")):
        tc, tr = scn.ckpt_size / w.throughput, scn.ckpt_size / r.throughput
        values = epe(grid, tc, tr, scn.rate, scn.app_power, w.power, r.power)
        best = min(best, float(values.min()))
    return best


@pytest.mark.parametrize("app_power", [150.0, 250.0, 400.0])
def test_joint_optimum_matches_brute_force(app_power: float) -> None:
    scn = Scenario(ckpt_size=8 * GIB, rate=1 / 7200, app_power=app_power)
    got = plan(profile_from_json(small_profile_doc()), scn)
    want = _brute_force(small_profile_doc(), scn)
    assert got.best.epe <= want * (1 + 1e-9)
    assert got.best.epe == pytest.approx(want, rel=1e-6)


def test_saito_scenario_on_the_example_profile() -> None:
    result = plan(load_profile(EXAMPLE_PROFILE), SAITO)
    assert result.synthetic
    assert result.app_processes == 48
    # Like saito2013's Table 3, one or two I/O processes win over all 48 writing at once.
    assert result.best.write.processes <= 2 and result.best.read.processes <= 2
    for b in result.baselines:
        s = result.savings(b)
        assert b.choice is not None and s is not None
        assert b.choice.write.processes == 48
        assert s.epe > 0 and s.write_energy_per_gb > 0 and s.read_energy_per_gb > 0
    # Jointly optimising the interval beats using Young's interval with the same settings.
    c = result.best
    at_young = float(
        epe(
            young_interval(c.T_C, SAITO.rate),
            c.T_C,
            c.T_R,
            SAITO.rate,
            SAITO.app_power,
            c.write.power,
            c.read.power,
        )
    )
    assert c.epe < at_young


def test_baselines_from_fixed_frequencies_and_unevaluable_ondemand() -> None:
    result = plan(profile_from_json(small_profile_doc()), Scenario(8 * GIB, 1 / 7200, 250.0))
    by_name = {b.name: b for b in result.baselines}
    assert result.app_processes == 4
    perf, save, ond = by_name["performance"], by_name["powersave"], by_name["ondemand"]
    assert perf.choice is not None and perf.choice.write.frequency == 2e9
    assert save.choice is not None and save.choice.write.frequency == 1e9
    assert ond.choice is None and "cannot be inferred" in ond.how
    assert result.savings(ond) is None


def test_baseline_at_a_process_count_the_profile_lacks_is_not_guessed() -> None:
    result = plan(
        profile_from_json(small_profile_doc()), Scenario(8 * GIB, 1 / 7200, 250.0, app_processes=16)
    )
    assert all(b.choice is None for b in result.baselines)
    assert all("at 16 I/O processes" in b.how for b in result.baselines)


def test_measured_governor_points_are_used_for_baselines() -> None:
    doc = small_profile_doc()
    doc["points"] += [
        {
            "op": op,
            "governor": "ondemand",
            "processes": 4,
            "throughput_Bps": 320e6,
            "power_W": 280.0,
            "power_source": "synthetic",
        }
        for op in ("write", "read")
    ]
    result = plan(profile_from_json(doc), Scenario(8 * GIB, 1 / 7200, 250.0))
    ond = next(b for b in result.baselines if b.name == "ondemand")
    assert ond.choice is not None and ond.choice.write.governor == "ondemand"
    assert "measured under the ondemand governor" in ond.how


def test_power_cap_excludes_points() -> None:
    result = plan(
        profile_from_json(small_profile_doc()), Scenario(8 * GIB, 1 / 7200, 200.0, power_cap=235.0)
    )
    assert result.best.write.power <= 235.0 and result.best.read.power <= 235.0
    with pytest.raises(PlanError, match="power cap"):
        plan(
            profile_from_json(small_profile_doc()),
            Scenario(8 * GIB, 1 / 7200, 180.0, power_cap=185.0),
        )
    # The cap bounds the phases greenckpt sets, not the application's own power.
    above = plan(
        profile_from_json(small_profile_doc()), Scenario(8 * GIB, 1 / 7200, 400.0, power_cap=235.0)
    )
    assert above.best.write.power <= 235.0


@settings(max_examples=25, deadline=None)
@given(slowdown=st.floats(0.005, 0.2), app_power=st.floats(100.0, 500.0))
def test_max_slowdown_matches_a_brute_force_search(slowdown: float, app_power: float) -> None:
    prof = profile_from_json(small_profile_doc())
    scn = Scenario(8 * GIB, 1 / 3600, app_power, max_slowdown=slowdown)
    got = plan(prof, scn)
    bound = got.fastest_time_factor * (1 + slowdown)
    assert got.best.time_factor <= bound * (1 + 1e-9)
    grid = np.geomspace(10.0, 1e5, 40001)
    best = np.inf
    for w, r in itertools.product(prof.for_op("write"), prof.for_op("read")):
        tc, tr = scn.ckpt_size / w.throughput, scn.ckpt_size / r.throughput
        ok = time_factor(grid, tc, tr, scn.rate) <= bound
        if ok.any():
            values = epe(grid[ok], tc, tr, scn.rate, app_power, w.power, r.power)
            best = min(best, float(values.min()))
    # Never worse than any feasible grid point, and within the grid's resolution of the best.
    assert got.best.epe <= best * (1 + 1e-9)
    assert got.best.epe >= best * (1 - 1e-4)


def test_zero_slowdown_gives_the_fastest_plan() -> None:
    result = plan(
        load_profile(EXAMPLE_PROFILE), Scenario(**{**SAITO.__dict__, "max_slowdown": 0.0})
    )
    assert result.best.time_factor == pytest.approx(result.fastest_time_factor, rel=1e-9)


def test_pareto_front_is_non_dominated_and_spans_fastest_to_cheapest() -> None:
    prof = load_profile(EXAMPLE_PROFILE)
    front = pareto_front(prof, SAITO)
    result = plan(prof, SAITO)
    times = [f.time_factor for f in front]
    energies = [f.epe for f in front]
    assert times == sorted(times)
    assert all(a > b for a, b in itertools.pairwise(energies))
    assert times[0] == pytest.approx(result.fastest_time_factor, rel=1e-9)
    assert energies[-1] == pytest.approx(result.best.epe, rel=1e-9)
    for f in front:  # every point is what the model says for its settings
        tc, tr = SAITO.ckpt_size / f.write.throughput, SAITO.ckpt_size / f.read.throughput
        assert f.time_factor == pytest.approx(float(time_factor(f.T_A, tc, tr, SAITO.rate)))


def test_profile_without_reads_is_refused() -> None:
    doc = small_profile_doc()
    doc["points"] = [p for p in doc["points"] if p["op"] == "write"]
    with pytest.raises(ProfileError, match="no 'read' points"):
        plan(profile_from_json(doc), Scenario(8 * GIB, 1 / 7200, 250.0))


def test_mtbf_shorter_than_the_checkpoint_is_refused() -> None:
    with pytest.raises(PlanError, match="not longer than the fastest checkpoint"):
        plan(profile_from_json(small_profile_doc()), Scenario(64 * GIB, 1 / 60, 250.0))


@pytest.mark.parametrize(
    ("field", "value"),
    [("ckpt_size", 0.0), ("rate", -1.0), ("app_power", float("nan")), ("max_slowdown", -0.1)],
)
def test_bad_scenario_values(field: str, value: float) -> None:
    kwargs: dict[str, Any] = {"ckpt_size": GIB, "rate": 1e-5, "app_power": 300.0, field: value}
    with pytest.raises(PlanError, match=field):
        plan(profile_from_json(small_profile_doc()), Scenario(**kwargs))


def test_codec_must_match_between_checkpoint_and_restart() -> None:
    doc = small_profile_doc()
    for p in doc["points"]:
        if p["op"] == "write":
            p["codec"] = "zstd"
    with pytest.raises(PlanError, match="share a codec"):
        plan(profile_from_json(doc), Scenario(8 * GIB, 1 / 7200, 250.0))
