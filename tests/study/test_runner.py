"""``greenckpt study`` end to end with a tiny application through the real ``greenckpt run``:
the journal, resuming, refusing another study's directory, and an interruption."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from greenckpt.cli.main import main

STUDY = """\
[study]
name = "tiny"
repeats = 2
seed = 1
baseline = {{ checkpoint = "none" }}

[app]
command = ["{{python}}", "-c", "import sys, time; time.sleep({sleep}); print(sys.argv[1:])",
           "{{checkpoint_args}}", "{{size}}"]

[run]
no_control = true

[factors]
checkpoint = ["none", "app"]
"""


def write(tmp_path: Path, sleep: float = 0.05, name: str = "s.toml") -> Path:
    path = tmp_path / name
    path.write_text(STUDY.format(sleep=sleep))
    return path


def journal(out: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in (out / "runs.jsonl").read_text().splitlines()]


def test_a_study_runs_every_run_through_the_runtime_and_resumes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spec, out = write(tmp_path), tmp_path / "out"
    assert main(["study", str(spec), "-o", str(out)]) == 0
    runs = journal(out)
    assert sorted(r["run"] for r in runs) == ["r0001", "r0002", "r0003", "r0004"]
    assert all(r["ok"] and r["exit_code"] == 0 for r in runs)
    for r in runs:
        metrics = r["metrics"]
        assert isinstance(metrics, dict) and metrics["power_source"] in ("measured", "estimated")
        assert metrics["seconds"] > 0 and (out / str(r["report"]) / "report.json").is_file()
    logs = {r["cell"]: (out / "runs" / str(r["run"]) / "output.log").read_text() for r in runs}
    assert "['--no-checkpoint', '1']" in logs["checkpoint=none"]  # placeholders expanded
    assert "['1']" in logs["checkpoint=app"]
    summary = json.loads((out / "summary.json").read_text())
    compared = [c for c in summary["cells"] if not c["is_baseline"]]
    assert len(compared) == 1 and compared[0]["baseline_cell"] == "checkpoint=none"
    assert set(compared[0]["eq2_pct"]) >= {"seconds", "energy_j"}
    assert (out / "report.html").is_file() and (out / "cells.csv").is_file()
    capsys.readouterr()
    assert main(["study", str(spec), "-o", str(out)]) == 0  # again: nothing to run
    assert len(journal(out)) == 4
    assert "resuming: 4 of 4 runs done, 0 to go" in capsys.readouterr().err
    other = write(tmp_path, sleep=0.01, name="other.toml")
    assert main(["study", str(other), "-o", str(out)]) == 2
    err = capsys.readouterr().err
    assert "was made by another study file" in err and err.count("\n") == 1


def test_an_interrupted_study_resumes_with_the_missing_runs_only(tmp_path: Path) -> None:
    spec, out = write(tmp_path, sleep=1.5), tmp_path / "out"
    cmd = [sys.executable, "-m", "greenckpt", "study", str(spec), "-o", str(out)]
    proc = subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True, start_new_session=True)
    assert proc.stderr is not None
    for line in proc.stderr:  # wait until the second run has started
        if line.startswith("[2/4]"):
            break
    time.sleep(0.5)
    os.killpg(proc.pid, signal.SIGINT)
    rest = proc.stderr.read()
    assert proc.wait(60) == 130, rest
    assert "run the same command again to resume" in rest
    done = journal(out)
    assert len(done) == 1  # the first run finished, the second was stopped
    assert subprocess.run(cmd, capture_output=True, check=False, timeout=300).returncode == 0
    runs = journal(out)
    assert sorted(r["run"] for r in runs) == ["r0001", "r0002", "r0003", "r0004"]
    assert runs[0] == done[0]  # the finished run was not repeated


KILL_STUDY = """\
[study]
name = "kill"
repeats = 1

[app]
command = ["{mpiexec}", "-n", "2", "{python}", "-m", "greenckpt.apps.heat2d", "--nx", "32",
           "--ny", "32", "--iterations", "60", "--local-dir", "{run_dir}/local",
           "--l1-every", "10it", "--result", "{run_dir}/result.json"]
dirs = ["local"]

[run]
no_control = true

[factors]
failure = ["kill@35it"]
"""


def test_a_killed_run_restarts_once_and_both_parts_are_accounted(tmp_path: Path) -> None:
    spec, out = tmp_path / "k.toml", tmp_path / "out"
    spec.write_text(KILL_STUDY)
    assert main(["study", str(spec), "-o", str(out)]) == 0
    (run,) = journal(out)
    assert run["ok"] and run["killed_exit_code"] != 0  # the planned kill, then the restart
    result = json.loads((out / "runs" / "r0001" / "result.json").read_text())
    assert result["restored"]["iteration"] == 30  # restarted from the last checkpoint
    first = json.loads((out / "runs/r0001/report/report.json").read_text())
    second = json.loads((out / str(run["restart_report"]) / "report.json").read_text())
    metrics = run["metrics"]
    assert isinstance(metrics, dict)
    assert metrics["seconds"] == pytest.approx(
        first["total"]["seconds"] + second["total"]["seconds"]
    )
    assert metrics["by_kind"]["restart"]["count"] == 1
    summary = json.loads((out / "summary.json").read_text())
    (entry,) = summary["cells"]
    (outcome,) = entry["failures"]["runs"]
    assert outcome["outcome"] == "restart" and outcome["restart_level"] == 1
    assert "restart from level 1" in outcome["summary"]
    assert entry["restarts"] == 1 and entry["restart_j_per_gb"] > 0  # the restart's reads
