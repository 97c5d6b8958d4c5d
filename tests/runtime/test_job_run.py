"""``greenckpt.runtime.run``: a command under the runtime through the public API only (issue 28,
item 1).

The user guide's script (docs/user-guide.md, "Running a command under the runtime from
Python") runs the heat example over 2 emulated nodes and gets the job report: this test runs
that very script, so the guide cannot drift from the API. The same call on this node gives the
run's report in this process; what cannot start is one line, before anything is created.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from greenckpt.errors import InvalidValueError
from greenckpt.runtime import JobOutcome, NodeOptions, RunReport, run
from tests.ckpt.test_mpi import mpiexec

ROOT = Path(__file__).resolve().parents[2]
GUIDE = ROOT / "docs" / "user-guide.md"


def guide_script() -> str:
    """The python block after the guide's ``<!-- api-script -->`` marker."""
    found = re.search(r"<!-- api-script -->\n```python\n(.*?)```", GUIDE.read_text(), re.S)
    assert found is not None, "the user guide lost its API script"
    return found.group(1)


@pytest.mark.skipif(mpiexec() is None, reason="no mpiexec: pip install '.[mpi]'")
def test_the_guides_script_runs_heat_over_two_emulated_nodes(tmp_path: Path) -> None:
    script = guide_script()
    assert len(script.strip().splitlines()) <= 22  # a short script, as the issue asks
    (tmp_path / "job.py").write_text(script)
    launcher = str(Path(str(mpiexec())).parent)
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT / "src"),
        "XDG_RUNTIME_DIR": str(tmp_path),
        "PATH": f"{launcher}{os.pathsep}{os.environ.get('PATH', '')}",
    }
    done = subprocess.run(
        [sys.executable, str(tmp_path / "job.py"), str(tmp_path / "w")],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert "files:" in done.stdout and "job-report.json" in done.stdout
    doc = json.loads((tmp_path / "w" / "report" / "job-report.json").read_text())
    assert [n["node"] for n in doc["nodes"]] == [0, 1]
    assert all(n["state"] == "finished" for n in doc["nodes"])
    assert doc["by_kind"]["checkpoint"]["count"] > 0  # each node's rank announced its own
    for k in (0, 1):
        assert (tmp_path / "w" / "report" / "nodes" / f"node{k}" / "report.json").is_file()


def test_run_on_this_node_gives_the_runs_report_in_this_process(tmp_path: Path) -> None:
    code = "import sys; print('hello'); sys.exit(3)"
    with open(tmp_path / "out.log", "w") as log:
        outcome = run(
            [sys.executable, "-c", code],
            options=NodeOptions(policy="defaults", control=False),
            report_dir=tmp_path / "rep",
            stdout=log,
        )
    assert isinstance(outcome, JobOutcome) and not outcome.is_job
    assert isinstance(outcome.report, RunReport)
    assert (outcome.status, outcome.signal) == (3, None)  # a failed command is an outcome
    assert outcome.report.exit_status == 3
    assert outcome.modelled is not None and outcome.modelled.epe_w is None
    assert (tmp_path / "out.log").read_text() == "hello\n"
    assert outcome.report_dir == tmp_path / "rep" and outcome.report_dir.is_dir()


def test_what_cannot_start_is_one_line_and_creates_nothing(tmp_path: Path) -> None:
    options = NodeOptions(policy="defaults", control=False)
    with pytest.raises(InvalidValueError, match="cannot run 'no-such-program-x'"):
        run(["no-such-program-x"], options=options, report_dir=tmp_path / "a")
    with pytest.raises(InvalidValueError, match="launcher 'pbs' is not one of"):
        run(["true"], launcher="pbs", options=options, report_dir=tmp_path / "b")
    with pytest.raises(InvalidValueError, match="nodes must be an integer >= 1"):
        run(["true"], nodes=0, options=options, report_dir=tmp_path / "c")
    assert list(tmp_path.iterdir()) == []
