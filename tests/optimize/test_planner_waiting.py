"""The planner charges the ranks that wait: ``W_C = P_io(f, n) + (R − n) · w_wait(f, mode)``.

Every profile here is SYNTHETIC and made by hand so that the answer can be told in advance:
one I/O process is the cheaper checkpoint when the other three ranks wait politely, four are
when they spin.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from greenckpt.model import epe
from greenckpt.optimize import PlanError, Profile, ProfileError, ProfilePoint, Scenario, plan
from greenckpt.optimize.planner import _plan_exhaustive
from greenckpt.optimize.waiting import WaitingLookup, WaitingPower

GIB = 2**30
GHZ = 1e9


def point(op: str, f: float, n: int, thr: float, power: float, **kw: object) -> ProfilePoint:
    return ProfilePoint(
        op=op,  # type: ignore[arg-type]
        processes=n,
        throughput=thr,
        power=power,
        power_source="synthetic",
        frequency=f,
        **kw,  # type: ignore[arg-type]
    )


def waiting(mode: str, f: float | None, w: float, **kw: object) -> WaitingPower:
    return WaitingPower(
        mode=mode,  # type: ignore[arg-type]
        ranks=4,
        power_per_rank=w,
        power_source="synthetic",
        frequency=f,
        **kw,  # type: ignore[arg-type]
    )


POINTS = (
    # four processes are barely faster than one and cost 30 W more, at either frequency
    point("write", GHZ, 1, 1.00e9, 200.0),
    point("write", GHZ, 4, 1.02e9, 230.0),
    point("write", 2 * GHZ, 1, 1.00e9, 260.0),
    point("write", 2 * GHZ, 4, 1.02e9, 290.0),
    point("read", GHZ, 1, 2.00e9, 190.0),
    point("read", GHZ, 4, 2.04e9, 220.0),
    point("read", 2 * GHZ, 1, 2.00e9, 250.0),
    point("read", 2 * GHZ, 4, 2.04e9, 280.0),
)
WAITING = (
    waiting("polite", GHZ, 0.2, cpu_fraction=0.03),
    waiting("polite", 2 * GHZ, 0.3),
    waiting("spin", GHZ, 15.0, cpu_fraction=0.99),
    waiting("spin", 2 * GHZ, 22.0),
)
MACHINE = {"cores": 4, "frequencies_hz": [GHZ, 2 * GHZ]}
PROFILE = Profile(points=POINTS, synthetic=True, machine=MACHINE, waiting=WAITING)


def scenario(**kw: object) -> Scenario:
    base: dict[str, object] = {"ckpt_size": 64 * GIB, "rate": 1 / 7200, "app_power": 300.0}
    base.update(kw)
    return Scenario(**base)  # type: ignore[arg-type]


def test_polite_waiters_keep_one_writer_and_spinning_ones_make_every_rank_write() -> None:
    polite = plan(PROFILE, scenario()).best
    assert (polite.write.processes, polite.write.frequency) == (1, GHZ)
    assert (polite.write_waiting.ranks, polite.write_waiting.per_rank) == (3, 0.2)
    assert polite.write_waiting_power == pytest.approx(0.6)
    assert pytest.approx(200.6) == polite.W_C
    assert polite.write_waiting.source == "synthetic" and polite.write_waiting.exact
    spin = plan(PROFILE, scenario(wait_mode="spin")).best
    assert (spin.write.processes, spin.write.frequency) == (4, GHZ)
    assert spin.write_waiting.ranks == 0 and spin.write_waiting_power == 0.0
    assert (spin.read.processes, spin.read.frequency) == (4, GHZ)


def test_the_figures_of_a_choice_include_the_waiting_ranks() -> None:
    scn = scenario()
    c = plan(PROFILE, scn).best
    assert c.write_energy_per_gb == pytest.approx((200.0 + 3 * 0.2) / 1.00e9 * 1e9)
    assert c.read_energy_per_gb == pytest.approx((190.0 + 3 * 0.2) / 2.00e9 * 1e9)
    want = epe(c.T_A, c.T_C, c.T_R, scn.rate, scn.app_power, 200.6, 190.6, form=scn.form)
    assert c.epe == pytest.approx(float(want), rel=1e-12)
    without = epe(c.T_A, c.T_C, c.T_R, scn.rate, scn.app_power, 200.0, 190.0, form=scn.form)
    assert c.epe > float(without)


def test_the_ranks_on_the_node_are_the_scenarios_app_processes() -> None:
    c = plan(PROFILE, scenario(app_processes=2, wait_mode="spin")).best
    one = c.write if c.write.processes == 1 else c.read
    use = c.write_waiting if one is c.write else c.read_waiting
    assert use.ranks == 1  # R - n = 2 - 1
    lookup = WaitingLookup(PROFILE.waiting, "spin", 2)
    assert lookup.use(POINTS[1]).ranks == 0  # four I/O processes of two ranks: nobody waits


def test_a_profile_without_waiting_entries_charges_nothing_and_says_so() -> None:
    bare = replace(PROFILE, waiting=())
    result = plan(bare, scenario(wait_mode="spin"))
    c = result.best
    assert (c.write.processes, c.write.frequency) == (1, GHZ)  # as before waiting existed
    assert c.write_waiting_power == 0.0 and c.write.power == c.W_C
    assert c.write_waiting.source is None and not c.write_waiting.exact
    assert c.write_energy_per_gb == pytest.approx(c.write.energy_per_byte * 1e9)
    assert any(
        "not measured at 1.00 GHz for spin waits: assumed to cost no more than idle" in n
        for n in result.notes
    )


def test_the_governor_baselines_run_every_rank_and_add_nothing() -> None:
    with_waiting = plan(PROFILE, scenario(wait_mode="spin"))
    bare = plan(replace(PROFILE, waiting=()), scenario(wait_mode="spin"))
    assert [b.how for b in with_waiting.baselines] == [b.how for b in bare.baselines]
    for mine, theirs in zip(with_waiting.baselines, bare.baselines, strict=True):
        if mine.choice is None:
            continue
        assert mine.choice.write_waiting.ranks == 0 and mine.choice.read_waiting.ranks == 0
        assert theirs.choice is not None
        assert (mine.choice.epe, mine.choice.T_A) == (theirs.choice.epe, theirs.choice.T_A)
    assert any(b.choice is not None for b in with_waiting.baselines)


def test_the_power_cap_bounds_the_phase_waiting_ranks_included() -> None:
    capped = plan(PROFILE, scenario(wait_mode="spin", power_cap=240.0)).best
    assert capped.write.processes == 4  # one writer draws 200 + 3 x 15 = 245 W > 240 W
    assert plan(PROFILE, scenario(power_cap=240.0)).best.write.processes == 1  # 200.6 W
    with pytest.raises(PlanError, match="waiting ranks included"):
        plan(PROFILE, scenario(wait_mode="spin", power_cap=225.0))


def test_another_frequency_stands_in_when_the_setting_was_not_measured() -> None:
    only_2ghz = replace(PROFILE, waiting=(WAITING[1],))  # polite at 2 GHz only
    result = plan(only_2ghz, scenario())
    use = result.best.write_waiting
    assert result.best.write.frequency == GHZ and result.best.write.processes == 1
    assert (use.per_rank, use.ranks, use.exact) == (0.3, 3, False)
    assert "synthetic at 2.00 GHz with 4 waiters, the nearest frequency" in use.how
    assert "none at 1.00 GHz" in use.how
    assert result.notes[0].startswith("checkpoint: waiting power of the 3 waiting ranks")
    assert "nearest frequency" in result.notes[0]


def test_the_nearest_entry_has_the_points_c_states_first() -> None:
    entries = (
        waiting("spin", GHZ, 15.0, cstates=False),  # the right frequency, other C-states
        waiting("spin", 3 * GHZ, 30.0),  # C-states as the point's: preferred
        waiting("spin", 2.5 * GHZ, 25.0, cstates=False),
    )
    prof = replace(PROFILE, waiting=entries)
    lookup = WaitingLookup(prof.waiting, "spin", 4)
    assert lookup.use(point("write", 1.2 * GHZ, 1, 1e9, 200.0)).per_rank == 30.0
    off = point("write", 2.4 * GHZ, 1, 1e9, 200.0, cstates=False)
    assert lookup.use(off).per_rank == 25.0  # among C-states off, 2.5 GHz is nearer than 1


def test_a_governor_point_without_its_own_entry_is_assumed_idle() -> None:
    gov = ProfilePoint(
        op="write",
        processes=1,
        throughput=1e9,
        power=200.0,
        power_source="synthetic",
        governor="ondemand",
    )
    use = WaitingLookup(PROFILE.waiting, "spin", 4).use(gov)
    assert (use.per_rank, use.source, use.exact) == (0.0, None, False)
    assert "not measured at the ondemand governor for spin waits" in use.how
    own = replace(PROFILE, waiting=(waiting("spin", None, 12.0, governor="ondemand"),))
    assert WaitingLookup(own.waiting, "spin", 4).use(gov).power == pytest.approx(36.0)


def test_a_negative_measurement_is_noise_and_counts_as_nothing() -> None:
    prof = replace(PROFILE, waiting=(waiting("polite", GHZ, -0.05),))
    use = WaitingLookup(prof.waiting, "polite", 4).use(POINTS[0])
    assert use.per_rank == 0.0 and use.source == "synthetic" and use.exact
    assert "-0.05 W per rank is noise around idle, taken as 0 W" in use.how


def test_a_waiting_figure_that_is_not_finite_is_refused() -> None:
    prof = replace(PROFILE, waiting=(waiting("spin", GHZ, float("nan")),))
    with pytest.raises(ProfileError, match="not a finite number"):
        plan(prof, scenario(wait_mode="spin"))


def test_a_duplicated_entry_in_a_profile_object_is_refused() -> None:
    prof = replace(PROFILE, waiting=(*WAITING, WAITING[0]))
    with pytest.raises(ProfileError, match=r"profile.waiting\[0\] and profile.waiting\[4\]"):
        plan(prof, scenario())


def test_an_unknown_wait_mode_is_refused_in_one_line() -> None:
    with pytest.raises(PlanError, match=r"^wait_mode must be one of polite, spin, got 'busy'$"):
        plan(PROFILE, scenario(wait_mode="busy"))


@pytest.mark.parametrize("mode", ["polite", "spin"])
@pytest.mark.parametrize("cap", [None, 260.0])
def test_the_pruned_search_still_answers_what_the_exhaustive_one_does(
    mode: str, cap: float | None
) -> None:
    scn = scenario(wait_mode=mode, power_cap=cap)
    got, want = plan(PROFILE, scn), _plan_exhaustive(PROFILE, scn)
    assert got == want
    assert got.best.write is want.best.write and got.best.read is want.best.read
