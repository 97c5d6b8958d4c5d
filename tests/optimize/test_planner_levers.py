"""The planner with the levers beyond the core clock (issue 33): uncore frequency and power
limit points are searched jointly with the rest, the per-core split only where the profile says
the node had it, the governor baselines never use a lever, and profiles without levers give
exactly the plans they gave before.

The SYNTHETIC profile examples/profiles/synthetic-levers.json is derived in docs/model.md
("Levers beyond the core clock"); the expected figures below are recomputed from the same
stated assumptions, not read back from the planner.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from greenckpt.optimize import pareto_front, plan
from greenckpt.optimize.front import _pareto_front_exhaustive
from greenckpt.optimize.planner import Plan, Scenario, _plan_exhaustive
from greenckpt.optimize.profile_data import (
    Profile,
    ProfilePoint,
    cell_key,
    load_profile,
    profile_from_json,
)
from greenckpt.optimize.setting import CpuSetting

ROOT = Path(__file__).resolve().parents[2]
PROFILES = ROOT / "examples" / "profiles"
LEVERS = PROFILES / "synthetic-levers.json"
GOLDEN = Path(__file__).parent / "data" / "plans_before_issue33.json"

SCN = Scenario(ckpt_size=64e9, rate=1 / 86400, app_power=250.0)
SPIN = replace(SCN, wait_mode="spin")


def _golden_scenario(mode: str, slow: str) -> Scenario:
    return Scenario(
        ckpt_size=16e9,
        rate=1 / (6 * 3600),
        app_power=300.0,
        wait_mode="spin" if mode == "spin" else "polite",
        max_slowdown=None if slow == "None" else float(slow),
    )


def test_profiles_without_levers_plan_exactly_as_before() -> None:
    """Captured with the planner before issue 33 (tests/optimize/data/, every shipped example
    profile without levers, both wait modes, with and without a slowdown bound)."""
    golden = json.loads(GOLDEN.read_text())
    assert len(golden) >= 20
    for key, want in golden.items():
        name, mode, slow = key.split("|")
        result = plan(load_profile(PROFILES / name), _golden_scenario(mode, slow))
        b = result.best
        assert list(cell_key(b.write)[:8]) == want["write"], key
        assert list(cell_key(b.read)[:8]) == want["read"], key
        assert all(v is None for v in cell_key(b.write)[8:]), key
        assert (b.T_A, b.epe, b.W_C, b.W_R) == (
            want["interval_s"],
            want["epe_W"],
            want["W_C"],
            want["W_R"],
        ), key
        got = {x.name: None if x.choice is None else x.choice.epe for x in result.baselines}
        assert got == want["baselines"], key
        assert result.frequency_only is None and not result.split_searched, key
        assert b.write_split is None and b.write_waiting_setting == b.write.setting


def _pt(op: str, thr: float, power: float, **kw: object) -> ProfilePoint:
    return ProfilePoint(
        op=op,  # type: ignore[arg-type]
        processes=kw.pop("processes", 4),  # type: ignore[arg-type]
        throughput=thr,
        power=power,
        power_source="synthetic",
        frequency=kw.pop("frequency", 2.0e9),  # type: ignore[arg-type]
        **kw,  # type: ignore[arg-type]
    )


def _small(uncore_thr: float) -> Profile:
    """As found: 2 GB/s at 150 W; uncore 1.8 GHz: ``uncore_thr`` at 130 W (both ops)."""
    pts = []
    for op in ("write", "read"):
        pts.append(_pt(op, 2e9, 150.0))
        pts.append(_pt(op, uncore_thr, 130.0, uncore_khz=1_800_000))
    return Profile(points=tuple(pts), synthetic=True, levers={"uncore frequency": True})


def test_joint_search_picks_the_uncore_point_when_it_is_better() -> None:
    result = plan(_small(2e9), SCN)  # same throughput, 20 W less: better
    assert result.best.write.uncore_khz == 1_800_000
    assert result.best.read.uncore_khz == 1_800_000
    assert result.frequency_only is not None and result.frequency_only.choice is not None
    assert result.frequency_only.choice.write.uncore_khz is None
    saved = result.savings(result.frequency_only)
    assert saved is not None and saved.write_energy_per_gb == pytest.approx(20 / 150)


def test_joint_search_leaves_the_uncore_as_found_when_that_is_better() -> None:
    result = plan(_small(1e9), SCN)  # half the throughput for 13 % less power: worse
    assert result.best.write.uncore_khz is None
    assert result.frequency_only is not None and result.frequency_only.choice is not None
    assert result.frequency_only.choice.epe == result.best.epe


def _without_split(profile: Profile, value: bool | None) -> Profile:
    levers = {k: v for k, v in profile.levers.items() if k != "per-core split"}
    if value is not None:
        levers["per-core split"] = value
    return replace(profile, levers=levers)


def test_the_split_is_chosen_only_when_the_profile_says_the_node_had_it() -> None:
    prof = load_profile(LEVERS)
    with_split = plan(prof, SPIN)
    assert with_split.split_searched
    assert with_split.best.write_split == CpuSetting.frequency(1.2e9)
    assert with_split.best.write_waiting_setting == CpuSetting.frequency(1.2e9)
    assert with_split.best.read_waiting_setting == CpuSetting.frequency(1.2e9)
    assert with_split.best.write.setting == CpuSetting.frequency(1.8e9)
    for value, why in ((False, "per-core split false"), (None, "does not record")):
        result = plan(_without_split(prof, value), SPIN)
        assert not result.split_searched
        assert result.best.write_split is None and result.best.read_split is None
        assert result.best.write_waiting_setting == result.best.write.setting
        assert any("per-core split not searched" in n and why in n for n in result.notes)
        assert result.best.epe > with_split.best.epe


def test_the_split_needs_a_measured_fixed_frequency_waiting_entry() -> None:
    """Waiting entries only at governors: nothing to split to, so no split."""
    prof = load_profile(LEVERS)
    only_governors = tuple(w for w in prof.waiting if w.frequency is None)
    result = plan(replace(prof, waiting=only_governors), SPIN)
    assert result.best.write_split is None and result.best.read_split is None


def test_governor_baselines_never_use_a_lever() -> None:
    prof = load_profile(LEVERS)
    plain = replace(
        prof,
        points=tuple(p for p in prof.points if p.levers_as_found),
        levers={},
    )
    # A lever point at the performance baseline's own cell, far better than it:
    tempting = tuple(
        replace(p, uncore_khz=2_000_000, throughput=p.throughput * 2, power=p.power / 2)
        for p in prof.points
        if p.levers_as_found and p.frequency == 2.4e9 and p.processes == 16
    )
    with_levers = replace(prof, points=prof.points + tempting)
    for mode_scn in (SCN, SPIN):
        a, b = plan(with_levers, mode_scn), plan(plain, mode_scn)
        for x, y in zip(a.baselines, b.baselines, strict=True):
            assert x.name == y.name and x.how == y.how
            assert x.choice is not None and y.choice is not None
            assert x.choice.write is y.choice.write or x.choice.write == y.choice.write
            assert x.choice.write.levers_as_found and x.choice.read.levers_as_found
            assert x.choice.write_split is None and x.choice.read_split is None
            assert x.choice.epe == y.choice.epe


# --- the SYNTHETIC profile, derived in docs/model.md ("Levers beyond the core clock") -------
P_FLOOR, UNCORE_W_PER_GHZ_SOCKET, SOCKETS = 90.0, 15.0, 2


def _power(f_ghz: float, n: int, uncore_ghz: float) -> float:
    """P_io = P_floor + sockets·k_u·(u − 1.2 GHz) + n·(1 + 3 (f/2.4)²)."""
    uncore = SOCKETS * UNCORE_W_PER_GHZ_SOCKET * (uncore_ghz - 1.2)
    return P_FLOOR + uncore + n * (1.0 + 3.0 * (f_ghz / 2.4) ** 2)


def _spin(f_ghz: float) -> float:
    """A spinning waiting rank: 0.5 + 5.5 (f/2.4)² W."""
    return 0.5 + 5.5 * (f_ghz / 2.4) ** 2


def test_uncore_and_split_beat_the_best_single_frequency_on_the_synthetic_profile() -> None:
    """SYNTHETIC: with 12 of 16 ranks spinning, the best plan writes with 4 processes at
    1.8 GHz (the device's bound, 2 GB/s), the uncore at 1.8 GHz (above the 1.6 GHz knee, so
    no throughput lost, 18 W saved) and the waiters' cores at 1.2 GHz; the best plan with one
    frequency and the uncore as found is 16 writers at 1.2 GHz (nobody waits)."""
    prof = load_profile(LEVERS)
    assert prof.synthetic
    result = plan(prof, SPIN)
    best = result.best
    assert best.write.uncore_khz == 1_800_000 and best.write.processes == 4
    assert best.write.throughput == 2.0e9
    want_wc = _power(1.8, 4, 1.8) + 12 * _spin(1.2)  # 118.75 + 22.5 W
    assert pytest.approx(want_wc, rel=1e-6) == best.W_C
    assert pytest.approx(141.25, rel=1e-6) == best.W_C
    fo = result.frequency_only
    assert fo is not None and fo.choice is not None
    w = fo.choice.write
    assert (w.frequency, w.processes, w.uncore_khz) == (1.2e9, 16, None)
    assert pytest.approx(_power(1.2, 16, 2.4), rel=1e-6) == fo.choice.W_C  # 154 W
    assert w.throughput == pytest.approx(1.8e9)
    saved = result.savings(fo)
    assert saved is not None and saved.epe > 0
    want_saved = 1 - (want_wc / 2.0e9) / (154.0 / 1.8e9)  # J/GB: 70.6 vs 85.6
    assert saved.write_energy_per_gb == pytest.approx(want_saved, rel=1e-6)
    # each lever alone also beats the single frequency, and both together beat each alone
    uncore_only = plan(_without_split(prof, False), SPIN).best
    split_only = plan(
        replace(
            _without_split(prof, True), points=tuple(p for p in prof.points if p.uncore_khz is None)
        ),
        SPIN,
    ).best
    for alone in (uncore_only, split_only):
        assert best.epe < alone.epe < fo.choice.epe
    for b in result.baselines:
        s = result.savings(b)
        assert s is not None and s.epe > 0 and s.write_energy_per_gb > 0


@pytest.mark.parametrize("scn", [SCN, SPIN, replace(SPIN, max_slowdown=0.001)])
def test_pruned_search_equals_exhaustive_with_levers(scn: Scenario) -> None:
    prof = load_profile(LEVERS)
    a, b = plan(prof, scn), _plan_exhaustive(prof, scn)
    assert a.best == b.best
    assert _fo_epe(a) == _fo_epe(b)


def _fo_epe(p: Plan) -> float | None:
    fo = p.frequency_only
    return None if fo is None or fo.choice is None else fo.choice.epe


def test_the_pareto_front_includes_lever_points_and_the_split() -> None:
    prof = load_profile(LEVERS)
    front = pareto_front(prof, SPIN)
    assert front and any(f.write.uncore_khz is not None for f in front)
    assert any(f.write_split == CpuSetting.frequency(1.2e9) for f in front)
    assert front == _pareto_front_exhaustive(prof, SPIN)
    no_split = pareto_front(_without_split(prof, False), SPIN)
    assert all(f.write_split is None and f.read_split is None for f in no_split)


def test_a_profile_of_lever_points_only_has_no_frequency_only_plan() -> None:
    raw = json.loads(LEVERS.read_text())
    raw["points"] = [p for p in raw["points"] if "uncore_khz" in p]
    result = plan(profile_from_json(raw), SCN)
    assert result.frequency_only is not None and result.frequency_only.choice is None
    assert "no point with every lever as found" in result.frequency_only.how
