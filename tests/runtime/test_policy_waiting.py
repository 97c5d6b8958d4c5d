"""The profile policy plans with the ranks' wait mode: ``GREENCKPT_WAIT=spin`` makes the
planner charge spinning waiters, which changes how many I/O processes a checkpoint gets.

Every profile here is SYNTHETIC (made up so that one writer wins beside polite waiters and
every rank writes beside spinning ones).
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from greenckpt.errors import InvalidValueError
from greenckpt.optimize.profile_data import Profile
from greenckpt.optimize.waiting import WaitingPower
from tests.runtime.test_policy import ckpt, fake_profile, profile_policy, pt

GIB = 2**30


def spin_profile() -> Profile:
    points = (
        pt("write", 1.0, 1, 1000.0, 200.0),
        pt("write", 1.0, 8, 1020.0, 230.0),
        pt("read", 1.0, 8, 2000.0, 220.0),
    )
    entries = tuple(
        WaitingPower(mode=m, ranks=8, power_per_rank=w, power_source="synthetic", frequency=1e9)
        for m, w in (("polite", 0.2), ("spin", 15.0))
    )
    return replace(fake_profile(*points, cores=8), waiting=entries)


@pytest.mark.parametrize(("env", "mode", "writers"), [(None, "polite", 1), ("spin", "spin", 8)])
def test_the_policy_plans_for_the_librarys_wait_mode(
    env: str | None, mode: str, writers: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    if env is None:
        monkeypatch.delenv("GREENCKPT_WAIT", raising=False)
    else:
        monkeypatch.setenv("GREENCKPT_WAIT", env)
    policy = profile_policy(spin_profile())
    assert policy.wait_mode == mode
    assert policy._scenario(GIB).wait_mode == mode
    assert policy.decide(ckpt(GIB)).io_processes == writers


def test_a_bad_wait_mode_fails_when_the_policy_is_made_not_at_a_checkpoint(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("GREENCKPT_WAIT", "busy")
    with pytest.raises(InvalidValueError, match="GREENCKPT_WAIT must be polite or spin"):
        profile_policy(spin_profile())
