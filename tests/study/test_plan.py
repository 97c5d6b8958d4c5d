"""``greenckpt study --plan`` (the repeats needed, from measured noise) and ``--until`` (the
adaptive mode), and their one-line errors. The noise measured here is of a tiny made-up
application on this machine; the adaptive runs are SYNTHETIC (made-up numbers)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from greenckpt.cli.main import main
from greenckpt.study import design, runner
from greenckpt.study.plan import Noise, plan_lines
from greenckpt.study.spec import Study, load_study
from tests.study.test_checks import write_study
from tests.study.test_runner import write


def test_plan_lines_say_the_repeats_and_where_the_noise_comes_from(tmp_path: Path) -> None:
    study = load_study(write(tmp_path))
    noise = Noise(0.1, "from somewhere", (10.0, 11.0), 2.0)
    lines = plan_lines(study, noise, 5.0, "seconds", 3)
    text = "\n".join(lines)
    assert "noise of time (seconds): from somewhere" in text
    # t(n-1) * 0.1 / sqrt(n) <= ln 1.05 = 0.0488 first at n = 19 (2.101 * 0.1 / 4.36 = 0.0482)
    assert "half-width <= 5 % (an effect of 5 % then excludes 0): 19 repeats per cell = 38" in text
    assert "about 1 min at 2.0 s a run" in text
    assert "at 3 repeats this study resolves effects of about ±28.2 %" in text
    assert lines[-1].endswith("--repeats 19")


def test_plan_takes_the_noise_of_an_earlier_study(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    earlier = tmp_path / "earlier"
    write_study(earlier, {"none": [10.7, 12.7, 13.3], "app": [11.0, 12.9, 13.1]})
    spec = write(tmp_path)
    assert main(["study", str(spec), "--plan", "--effect", "5%", "--noise-from", str(earlier)]) == 0
    out = capsys.readouterr().out
    assert f"from {earlier}: the paired log-ratios of its compared cells (2 degrees" in out
    assert "repeats per cell" in out and "80 % chance that a true 5 % effect" in out


def test_plan_measures_the_noise_of_the_baseline_cell(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spec, out = write(tmp_path), tmp_path / "out"
    args = ["study", str(spec), "-o", str(out), "--plan", "--effect", "10%", "--noise-runs", "2"]
    assert main(args) == 0
    captured = capsys.readouterr()
    assert f"measured now: 2 runs of the baseline cell checkpoint=none in {out / 'noise'}" in (
        captured.out
    )
    assert "repeats per cell" in captured.out
    runs = (out / "noise" / "runs.jsonl").read_text().splitlines()
    assert len(runs) == 2 and all(json.loads(r)["cell"] == "checkpoint=none" for r in runs)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--plan", "--effect", "0%"], "--effect 0%: must be a percentage > 0, e.g. --effect 5%"),
        (["--plan", "--effect", "abc"], "--effect abc: must be a percentage > 0"),
        (["--plan", "--effect", "5"], "--effect 5: a bare number: write 5% for 5 percent"),
        (["--plan"], "--plan needs --effect"),
        (["--effect", "5%"], "--effect goes with --plan"),
        (["--plan", "--effect", "5%", "--metric", "watts"], "--metric watts: use one of"),
        (["--plan", "--effect", "5%", "--noise-from", "/nonexistent"], "no runs.jsonl there"),
        (["--until", "0%"], "--until 0%: must be a percentage > 0, e.g. --until 5%"),
        (["--max-runs", "10"], "--max-runs goes with --until"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str], message: str
) -> None:
    spec = write(tmp_path)
    assert main(["study", str(spec), "-o", str(tmp_path / "out"), *args]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1 and "Traceback" not in err
    assert not (tmp_path / "out").exists()  # nothing ran


def fake_runs(monkeypatch: pytest.MonkeyPatch, calls: list[int]) -> None:
    """``run_study`` writing made-up runs: the baseline about 10 s, the other cell about 11 s,
    each with a 5 % spread."""
    rng = np.random.default_rng(5)

    def run_study(study: Study, directory: Path, *, repeats: int, grow: bool, **_: Any) -> None:
        calls.append(repeats)
        runner._claim(directory, runner.study_identity(study, repeats), grow=grow)
        done = {r["run"] for r in runner.finished_runs(directory)}
        for run in design.runs(study, repeats):
            if run.id not in done:
                seconds = (10.0 if run.levels["checkpoint"] == "none" else 11.0) * float(
                    np.exp(rng.normal(0, 0.05))
                )
                runner._append(directory, {"run": run.id, "cell": run.cell, "block": run.block,
                                           "factors": run.levels, "ok": True,
                                           "report": "none", "metrics": {"seconds": seconds,
                                           "power_source": "estimated"}})  # fmt: skip

    monkeypatch.setattr(runner, "run_study", run_study)


def test_until_adds_blocks_until_the_intervals_are_narrow(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    calls: list[int] = []
    fake_runs(monkeypatch, calls)
    spec, out = write(tmp_path), tmp_path / "out"
    assert main(["study", str(spec), "-o", str(out), "--until", "15%"]) == 0
    err = capsys.readouterr().err
    assert calls[0] == 2 and len(calls) > 1  # the file's 2 repeats, then blocks added
    assert f"half-width is <= 15 % at {calls[-1]} repeats" in err
    summary = json.loads((out / "summary.json").read_text())
    (compared,) = [c for c in summary["cells"] if not c["is_baseline"]]
    assert compared["eq2_pct"]["seconds"]["half_width_pct"] <= 15
    assert json.loads((out / "study.json").read_text())["repeats"] == calls[-1]


def test_until_stops_when_the_budget_is_spent(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    calls: list[int] = []
    fake_runs(monkeypatch, calls)
    spec, out = write(tmp_path), tmp_path / "out"
    assert main(["study", str(spec), "-o", str(out), "--until", "0.1%", "--max-runs", "8"]) == 0
    assert calls == [2, 3, 4]  # 2 cells: 8 runs at 4 repeats, a fifth block would pass 8
    assert "the run budget (8 runs) is spent at 4 repeats" in capsys.readouterr().err
