"""The runtime's predictions and the modelled EPE count the ranks that wait during a phase as
the planner does: the predicted power of a checkpoint with ``n`` I/O processes of ``R`` ranks is
the point's plus ``(R − n) × w`` from the profile's waiting entries, and says how many ranks
wait and where ``w`` came from; a profile without entries predicts exactly the point's figures.

Every profile here is SYNTHETIC (made up so that one I/O process wins beside polite waiters).
"""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from greenckpt.errors import InvalidValueError
from greenckpt.model import epe
from greenckpt.optimize import Scenario, plan
from greenckpt.optimize.profile_data import Profile
from greenckpt.optimize.waiting import WaitingPower
from greenckpt.runtime import GovernorPolicy, PhaseRecord, RunReport, Settings
from greenckpt.runtime.modelled import modelled_epe
from greenckpt.runtime.records import settings_from_dict, settings_to_dict
from tests.runtime.test_policy import ckpt, fake_node, fake_profile, profile_policy, pt, restart

GIB = 2**30
RATE = 1 / (4 * 3600.0)
W_A = 250.0
POLITE_W = 0.2
SPIN_W = 15.0


def bare_profile() -> Profile:
    """One writer or every rank, for writes and reads, at 1 GHz; 8 cores, so R = 8."""
    return fake_profile(
        pt("write", 1.0, 1, 1000.0, 200.0),
        pt("write", 1.0, 8, 1020.0, 230.0),
        pt("read", 1.0, 1, 2000.0, 200.0),
        pt("read", 1.0, 8, 2000.0, 230.0),
        cores=8,
    )


def waiting_profile() -> Profile:
    entries = tuple(
        WaitingPower(mode=m, ranks=8, power_per_rank=w, power_source="synthetic", frequency=1e9)
        for m, w in (("polite", POLITE_W), ("spin", SPIN_W))
    )
    return replace(bare_profile(), waiting=entries)


@pytest.fixture(autouse=True)
def polite_waits(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GREENCKPT_WAIT", raising=False)


def test_the_predicted_phase_power_counts_the_waiting_ranks_as_the_plan_does() -> None:
    profile = waiting_profile()
    s = profile_policy(profile).decide(ckpt(GIB))
    assert s.io_processes == 1
    assert s.predicted_power_w == pytest.approx(200.0 + 7 * POLITE_W)
    assert s.predicted_energy_j == pytest.approx((200.0 + 7 * POLITE_W) * GIB / 1e9)
    assert (s.waiting_ranks, s.wait_mode, s.waiting_source) == (7, "polite", "synthetic")
    assert s.waiting_power_w == pytest.approx(7 * POLITE_W)
    assert s.power_source == "synthetic"
    best = plan(profile, Scenario(GIB, RATE, W_A)).best
    assert s.predicted_power_w == pytest.approx(best.W_C)
    note = "predicted power 201.4 W: the point's 200.0 W + 7 waiting ranks (polite) × 0.2 W"
    assert any(n.startswith(note) and "synthetic at 1.00 GHz" in n for n in s.notes)
    r = profile_policy(profile).decide(restart(GIB))
    assert r.predicted_power_w == pytest.approx(best.W_R) == pytest.approx(200.0 + 7 * POLITE_W)
    assert r.waiting_ranks == 7


def test_spinning_waiters_are_charged_and_no_rank_waits_when_every_rank_writes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("GREENCKPT_WAIT", "spin")
    s = profile_policy(waiting_profile()).decide(ckpt(GIB))
    assert s.io_processes == 8  # 200 W + 7 × 15 W spinning beats 230 W no more
    assert (s.predicted_power_w, s.waiting_ranks, s.waiting_power_w) == (230.0, 0, 0.0)
    assert s.wait_mode == "spin"
    assert any("no rank waits (8 I/O processes of 8)" in n for n in s.notes)


def test_a_profile_without_waiting_entries_predicts_the_points_figures_exactly() -> None:
    s = profile_policy(bare_profile()).decide(ckpt(GIB))
    seconds = GIB / 1000e6
    assert s.io_processes == 1
    assert (s.predicted_seconds, s.predicted_power_w) == (seconds, 200.0)
    assert s.predicted_energy_j == 200.0 * seconds
    assert (s.waiting_ranks, s.waiting_power_w, s.waiting_source) == (7, 0.0, "not measured")
    assert any("assumed to cost no more than idle" in n for n in s.notes)


def test_the_governor_policy_says_no_rank_waits() -> None:
    profile = replace(
        waiting_profile(),
        points=(
            pt("write", None, 8, 900.0, 240.0, governor="performance"),
            pt("read", None, 8, 1800.0, 235.0, governor="performance"),
        ),
    )
    s = GovernorPolicy("performance", profile, node=fake_node()).decide(ckpt(GIB))
    assert (s.io_processes, s.predicted_power_w, s.waiting_ranks) == (8, 240.0, 0)


def _record(kind: str, index: int, start: float, end: float, **extra: object) -> PhaseRecord:
    return PhaseRecord(
        kind=kind,  # type: ignore[arg-type]
        index=index,
        start_s=start,
        end_s=end,
        energy_j={},
        sources={},
        node_energy_j=None,
        power_source=None,
        power_domains=(),
        **extra,  # type: ignore[arg-type]
    )


@pytest.mark.parametrize(
    ("profile", "waiting_w"), [(waiting_profile(), 7 * POLITE_W), (bare_profile(), 0.0)]
)
def test_the_modelled_epe_uses_the_phase_power_with_its_waiting_ranks(
    profile: Profile, waiting_w: float
) -> None:
    """Compute 10 s then a checkpoint, twice: the model's W_C and W_R are the predicted phase
    powers (the restart's asked of the policy), and the derivation says who waited."""
    policy = profile_policy(profile)
    ck = policy.decide(ckpt(GIB))
    where = {"path": "/local/ckpt", "size": GIB, "level": 1, "notifiers": 1, "settings": ck}
    records = [
        _record("compute", 0, 0.0, 10.0),
        _record("checkpoint", 1, 10.0, 11.0, **where),
        _record("compute", 2, 11.0, 21.0),
        _record("checkpoint", 3, 21.0, 22.0, **where),
    ]
    m = modelled_epe(RunReport.from_records(records), rate=RATE, app_power=W_A, policy=policy)
    phase = 200.0 + waiting_w
    powers = (m.W_C, m.W_R)  # the phase powers the model was given
    assert powers == pytest.approx((phase, phase))
    t = GIB / 1000e6, GIB / 2000e6
    assert m.epe_w == pytest.approx(float(epe(10.0, t[0], t[1], RATE, W_A, phase, phase)))
    assert m.checkpoint_waiting is not None and m.checkpoint_waiting.ranks == (7,)
    doc = m.to_dict()
    assert doc["checkpoint_waiting"]["waiting_ranks"] == [7]
    assert doc["restart_waiting"]["power_w"] == pytest.approx(waiting_w)
    if waiting_w:
        assert "W_C 201.4 W (synthetic; incl. 1.40 W for 7 waiting ranks (polite; their " in (
            m.derivation
        )
        assert doc["checkpoint_waiting"]["source"] == "synthetic"
    else:
        assert "7 waiting ranks (polite) taken as idle: their power not measured" in m.derivation
        assert doc["restart_waiting"]["source"] == "not measured"


def test_a_prediction_without_waiting_fields_is_said_not_to_count_them() -> None:
    """Settings from a policy (or a report) that predates the waiting term."""
    old = Settings(
        io_processes=1,
        source="profile lookup",
        predicted_seconds=1.0,
        predicted_power_w=50.0,
        predicted_energy_j=50.0,
        power_source="estimated",
    )
    records = [
        _record("compute", 0, 0.0, 10.0),
        _record("checkpoint", 1, 10.0, 11.0, path="/c", size=1, settings=old),
        _record("restart", 2, 11.0, 12.0, path="/c", size=1, settings=old),
    ]
    m = modelled_epe(RunReport.from_records(records), rate=RATE, app_power=W_A)
    assert m.W_C == 50.0 and m.checkpoint_waiting is None
    assert "W_C 50.0 W (estimated; waiting ranks not counted)" in m.derivation


def test_the_waiting_fields_are_saved_and_optional() -> None:
    s = profile_policy(waiting_profile()).decide(ckpt(GIB))
    doc = settings_to_dict(s)
    assert doc["waiting_ranks"] == 7 and doc["waiting_source"] == "synthetic"
    assert settings_from_dict(doc) == s
    for key in ("waiting_ranks", "waiting_power_w", "waiting_source", "wait_mode"):
        del doc[key]  # a report saved before they existed
    assert settings_from_dict(doc).waiting_ranks is None


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"waiting_ranks": -1}, "waiting_ranks must be an integer >= 0"),
        ({"waiting_power_w": math.nan, "waiting_source": "measured"}, "waiting_power_w must"),
        ({"waiting_power_w": 3.0}, "a waiting power needs its waiting_source"),
        ({"waiting_source": "guessed"}, "waiting_source must be one of measured, "),
        ({"wait_mode": "busy"}, "wait_mode must be one of polite, spin"),
    ],
)
def test_bad_waiting_fields_are_refused(fields: dict[str, object], message: str) -> None:
    with pytest.raises(InvalidValueError, match=message):
        Settings(io_processes=1, source="test", **fields)  # type: ignore[arg-type]
