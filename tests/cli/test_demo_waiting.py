"""``greenckpt demo`` measures the waiting ranks' power and plans with it for its own ranks per
node; a profile kept from a demo that did not measure it still works, and says so.

The sweeps are real and tiny (1 MiB under ``tmp_path``, a 0.1 s waiting window, the meters the
demo detects: estimated on a node without energy counters); the hand-made profiles are
SYNTHETIC.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from greenckpt.cli import demo_cmd
from greenckpt.optimize.profile_data import load_profile, profile_from_json
from greenckpt.profile import run_profile
from tests.conftest import small_profile_doc
from tests.profile.test_run_library import Recorder

MiB = 1 << 20


@pytest.fixture
def small(monkeypatch: pytest.MonkeyPatch) -> None:
    """The demo's sweep, shrunk to one size and a short waiting window."""
    monkeypatch.delenv("GREENCKPT_WAIT", raising=False)
    sweep = replace(demo_cmd.PROFILE_SWEEP, sizes=(MiB,), processes=(1,), waiting_seconds=0.1)
    monkeypatch.setattr(demo_cmd, "PROFILE_SWEEP", sweep)


def test_the_demos_sweep_asks_for_the_waiting_power() -> None:
    assert demo_cmd.PROFILE_SWEEP.waiting_seconds == demo_cmd.WAITING_SECONDS == 0.5


@pytest.mark.usefixtures("small")
def test_the_demo_profile_has_polite_and_spinning_waiters(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    profile = demo_cmd._profile(tmp_path, again=False)
    out = capsys.readouterr().out
    assert "first the waiting ranks' power" in out and "Waiting ranks: power each" in out
    settings = {w.setting_key for w in profile.waiting}
    assert {(w.setting_key, w.mode) for w in profile.waiting} == {
        (k, m) for k in settings for m in ("polite", "spin")
    }
    assert {w.power_source for w in profile.waiting} == profile.power_sources


def _kept(path: Path, **changes: Any) -> None:
    doc = {**small_profile_doc(), "status": "complete", **changes}
    path.write_text(json.dumps(doc))


def test_a_kept_profile_without_waiting_entries_is_reused_and_says_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _kept(tmp_path / "profile.json")
    profile = demo_cmd._profile(tmp_path, again=False)
    assert profile == load_profile(tmp_path / "profile.json") and profile.waiting == ()
    out = capsys.readouterr().out
    assert "reusing" in out and "no waiting-power entries" in out and "--reprofile" in out
    demo_cmd._plan(profile)
    lines = " ".join(capsys.readouterr().out.split())
    assert "not measured at" in lines and "assumed to cost no more than idle" in lines


@pytest.mark.usefixtures("small")
def test_a_partial_profile_begun_without_the_waiting_power_is_continued(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """An interrupted demo from before the measurement left a sweep with no waiting window: it
    is continued as it was begun (a different window would refuse the resume)."""
    (tmp_path / "io").mkdir()
    old = replace(
        demo_cmd.PROFILE_SWEEP,
        path=str((tmp_path / "io").absolute()),
        settings=demo_cmd._cpu_settings(demo_cmd._cpufreq()),
        sizes=(2 * MiB,),
        processes=(1, 2),
        waiting_seconds=0.0,
    )
    with pytest.raises(KeyboardInterrupt):
        run_profile(old, tmp_path / "profile.json", progress=Recorder(stop_after=1))
    sweep = replace(demo_cmd.PROFILE_SWEEP, sizes=(2 * MiB,), processes=(1, 2))
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(demo_cmd, "PROFILE_SWEEP", sweep)
        profile = demo_cmd._profile(tmp_path, again=False)
    assert profile.status == "complete" and profile.waiting == ()
    assert "without the waiting ranks' power" in capsys.readouterr().out


def test_the_plan_charges_the_demos_waiting_ranks(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """R is the demo's ranks per node, not the profile's cores; one writer leaves one rank
    spinning at 30 W (SYNTHETIC), so both ranks write."""
    monkeypatch.setenv("GREENCKPT_WAIT", "spin")
    entry = {"frequency_hz": None, "governor": None, "cstates": None, "ranks": 2}
    waiting = [
        {**entry, "frequency_hz": f, "mode": m, "power_per_rank_W": w, "power_source": "synthetic"}
        for f in (1e9, 2e9)
        for m, w in (("polite", 0.1), ("spin", 30.0))
    ]
    doc = small_profile_doc()
    doc["machine"]["cores"] = 4
    doc["points"] += [
        {**p, "processes": 2, "power_W": p["power_W"] + 5.0}
        for p in small_profile_doc()["points"]
        if p["processes"] == 1
    ]
    result = demo_cmd._plan(profile_from_json({**doc, "waiting": waiting}))
    assert result.app_processes == demo_cmd.RANKS_PER_NODE == 2
    assert result.scenario.wait_mode == "spin"
    assert result.best.write.processes == 2 and result.best.write_waiting.ranks == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "2 ranks per node (those not writing wait: spinning" in out
