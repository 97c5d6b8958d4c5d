"""``greenckpt profile run --waiting-seconds`` and ``greenckpt plan --waiting``, end to end.

One real, tiny sweep on this machine: the I/O engine writes under ``tmp_path``, the
utilisation estimator meters the node (so every power is *estimated*, and labelled so), and
real waiter processes run the checkpoint library's own wait loop for 0.2 s per mode. The plan
made from it must show the waiting power it added, its source and the mode.
"""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path

import pytest

from greenckpt.cli.main import main
from greenckpt.optimize import load_profile
from greenckpt.optimize.setting import CpuSetting
from greenckpt.optimize.waiting import WaitingPower
from greenckpt.profile.preflight import default_settings
from greenckpt.profile.waiting import default_waiting_ranks

AS_FOUND = (
    [] if default_settings() == (CpuSetting.uncontrolled(),) else ["--frequencies", "asfound"]
)
EXAMPLE = Path(__file__).resolve().parents[2] / "examples/profiles/synthetic-pcie-flash.json"
PLAN = ["plan", "--ckpt-size", "64MiB", "--node-mtbf", "1h", "--app-power", "100W"]


def fails(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    """``argv`` exits 2 with one line on stderr and no traceback; returns that line."""
    with pytest.raises(SystemExit) as info:
        raise SystemExit(main(argv))
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    return err


@pytest.fixture(scope="module")
def swept(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("waiting")
    (root / "data").mkdir()
    out = root / "p.json"
    argv = ["profile", "run", str(root / "data"), "-o", str(out), *AS_FOUND, "--size", "4MiB"]
    argv += ["--processes", "1", "--repeats", "1", "--warmup", "0", "--idle", "0"]
    argv += ["--meters", "estimator", "--waiting-seconds", "0.2s", "--quiet"]
    with contextlib.redirect_stdout(io.StringIO()):  # the profile's table
        assert main(argv) == 0
    return out


def _by_mode(entries: tuple[WaitingPower, ...]) -> dict[str, WaitingPower]:
    return {w.mode: w for w in entries}


def test_the_sweep_measures_polite_and_spinning_waiters(swept: Path) -> None:
    prof = load_profile(swept)
    assert prof.sweep["spec"]["waiting_seconds"] == 0.2
    waiting = _by_mode(prof.waiting)
    assert sorted(waiting) == ["polite", "spin"]
    for w in waiting.values():
        assert w.power_source == "estimated" and w.ranks == default_waiting_ranks()
        assert w.setting.kind == "uncontrolled" and w.seconds == pytest.approx(0.2, rel=0.5)
        assert w.idle_power is not None and w.cpu_fraction is not None
    polite, spin = waiting["polite"].cpu_fraction, waiting["spin"].cpu_fraction
    assert polite is not None and spin is not None
    # the library's loop sleeps between tests, spinning busy-tests: a fraction of what
    # spinning takes (on an idle node 2 % against 99 %; a busy CI node shares its cores with
    # the spinners, so only the ratio is asserted)
    assert polite < spin / 3


def test_the_plan_shows_the_waiting_power_it_added(
    swept: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spin = _by_mode(load_profile(swept).waiting)["spin"]
    argv = [*PLAN, "--profile", str(swept), "--app-processes", "3", "--waiting", "spin"]
    assert main([*argv, "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["inputs"]["wait_mode"] == "spin" and doc["inputs"]["app_processes"] == 3
    for phase in ("checkpoint", "restart"):
        entry = doc["plan"][phase]
        waiting = entry["waiting"]
        assert waiting["mode"] == "spin" and waiting["waiting_ranks"] == 2  # 3 ranks, 1 writer
        assert waiting["power_per_rank_W"] == pytest.approx(max(spin.power_per_rank, 0.0))
        assert waiting["power_source"] == "estimated" and waiting["exact"] is True
        assert entry["phase_power_W"] == pytest.approx(entry["power_W"] + waiting["power_W"])
        assert entry["energy_per_GB_J"] == pytest.approx(
            entry["phase_power_W"] / entry["throughput_Bps"] * 1e9
        )
    # the profile records which levers the node had: on a node without per-core frequency
    # control (this one's frequency is as found) the plan says the split was not searched
    split = [n for n in doc["notes"] if n.startswith("per-core split not searched")]
    assert load_profile(swept).levers.get("per-core split") is not None
    assert doc["power_source"] == "estimated" and len(doc["notes"]) == len(split) <= 1
    assert main(argv) == 0
    text = capsys.readouterr().out
    assert "2 ranks wait (spin)" in text and "estimated at the frequency as found" in text


def test_a_profile_without_waiting_entries_says_they_were_not_measured(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main([*PLAN, "--profile", str(EXAMPLE), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    waiting = doc["plan"]["checkpoint"]["waiting"]
    assert doc["inputs"]["wait_mode"] == "polite"
    assert waiting["power_W"] == 0.0 and waiting["power_source"] is None
    assert waiting["waiting_ranks"] == 48 - doc["plan"]["checkpoint"]["processes"]
    assert doc["notes"][0] == (
        f"checkpoint: waiting power of the {waiting['waiting_ranks']} waiting ranks "
        f"{waiting['how']}"
    )
    assert "assumed to cost no more than idle" in waiting["how"]
    assert main([*PLAN, "--profile", str(EXAMPLE)]) == 0
    assert "not measured" in capsys.readouterr().out


def test_a_bad_wait_mode_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    err = fails([*PLAN, "--profile", str(EXAMPLE), "--waiting", "busy"], capsys)
    assert "--waiting" in err and "'polite', 'spin'" in err


def test_a_bad_waiting_window_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["profile", "run", str(tmp_path), "-o", str(tmp_path / "o.json")]
    err = fails([*argv, "--waiting-seconds", "-1s"], capsys)
    assert "--waiting-seconds" in err and "0 to skip" in err
    assert not (tmp_path / "o.json").exists()
