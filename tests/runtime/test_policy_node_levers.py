"""The profile policy on a node that lacks a lever the profile swept (issue 33): a profile
made on another node, or merged from several, must not choose a lever this node cannot apply
(it would fail at every phase). SYNTHETIC profile: tests/runtime/lever_profile.py."""

from __future__ import annotations

from dataclasses import replace

from greenckpt.runtime.policy import ProfilePolicy
from greenckpt.runtime.settings import PhaseRequest
from tests.runtime.lever_profile import (
    CKPT_LIMIT_W,
    CKPT_UNCORE_KHZ,
    WAITING_HZ,
    lever_node,
    lever_profile,
)

MIB = 1 << 20
EVERY = {"uncore frequency": True, "per-core split": True, "power limit": True}


def _decide(levers: dict[str, bool] | None):  # type: ignore[no-untyped-def]
    node = replace(lever_node(), levers=levers)
    policy = ProfilePolicy(
        lever_profile(), node=node, mtbf=4 * 3600.0, app_power=250.0, app_processes=4
    )
    return policy.decide(PhaseRequest("checkpoint", "/local/ckpt", MIB, level=1))


def test_a_node_with_every_lever_gets_the_profiles_choice() -> None:
    settings = _decide(EVERY)
    assert settings.uncore_khz == CKPT_UNCORE_KHZ and settings.power_limit_w == CKPT_LIMIT_W
    assert settings.waiting_frequency_hz == WAITING_HZ
    assert _decide(None).uncore_khz == CKPT_UNCORE_KHZ  # not known: nothing ruled out


def test_a_node_without_uncore_or_split_uses_points_that_leave_them_as_found() -> None:
    settings = _decide({**EVERY, "uncore frequency": False, "per-core split": False})
    assert settings.uncore_khz is None and settings.power_limit_w is None
    assert settings.waiting_frequency_hz is None
    text = " ".join(settings.notes)
    assert "no uncore frequency control" in text and "no per-core split" in text
