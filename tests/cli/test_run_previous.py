"""``greenckpt run`` after a run that died (issue 30 item 7): the resubmitted run restarts from
the earlier run's checkpoint, and the work that run lost after it is accounted in the new
report, labelled as coming from the earlier report (found in the same -o folder, or named by
``--previous``); a ``--previous`` that is not a run report is one line, exit 2, nothing made.
A job does the same per node, and names a node whose socket heard nothing (item 8).
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.cli.test_cli_run import greenckpt
from tests.cli.test_run_job import _env

# "die": a level-1 checkpoint, then more compute, then exit 1 (the job dies).
# "restart": the resubmitted job restores that checkpoint and ends well.
APP = textwrap.dedent(
    """
    import sys, time
    from greenckpt.ckpt.notify_client import hook_from_env
    hook = hook_from_env()
    mode, out = sys.argv[1], sys.argv[2]
    if mode == "die":
        hook.begin("checkpoint", level=1, path=out, size=8 << 20, node=0)
        time.sleep(0.1)
        hook.end("checkpoint", node=0, ok=True, seconds=0.1)
        time.sleep(0.5)
        sys.exit(1)
    hook.begin("restart", level=1, path=out, size=8 << 20, node=0)
    time.sleep(0.1)
    hook.end("restart", node=0, ok=True, seconds=0.1)
    """
)


def _run(tmp_path: Path, mode: str, *extra: str) -> tuple[int, str, str]:
    proc = greenckpt(
        "run", "--no-control", "-o", "rep", *extra, "--",
        sys.executable, "-c", APP, mode, str(tmp_path), cwd=tmp_path,
    )  # fmt: skip
    return proc.returncode, proc.stdout, proc.stderr


def test_a_resubmitted_run_accounts_the_work_the_earlier_run_lost(tmp_path: Path) -> None:
    status, _, err = _run(tmp_path, "die")
    assert status == 1, err
    earlier = json.loads((tmp_path / "rep" / "report.json").read_text())
    assert earlier["exit_status"] == 1 and earlier["previous_lost"] is None
    checkpoint = next(r for r in earlier["records"] if r["kind"] == "checkpoint")
    status, out, err = _run(tmp_path, "restart")
    assert status == 0, err
    doc = json.loads((tmp_path / "rep" / "report.json").read_text())
    lost = doc["previous_lost"]
    where = tmp_path / "rep" / "report.json"
    assert lost["source"] == f"previous run {where}"
    assert lost["ended"] == "failed" and lost["read_previous_checkpoint"] is True
    assert (lost["restart_level"], lost["checkpoint_level"]) == (1, 1)
    # from the end of the earlier run's checkpoint to the end of that run (its report's
    # figures; the 0.5 s the app computed after it, plus its teardown)
    assert lost["from_s"] == checkpoint["end_s"]
    assert lost["to_s"] == earlier["total"]["seconds"]
    assert lost["seconds"] == pytest.approx(lost["to_s"] - lost["from_s"])
    assert lost["seconds"] >= 0.5
    assert lost["energy_j"] is not None and lost["energy_source"] in ("measured", "estimated")
    assert doc["lost_s"] == 0.0  # this run's own figures are unchanged
    assert f"lost in the previous run {lost['seconds']:.3f} s" in out
    assert f"source: previous run {where}" in out


def test_a_bad_previous_is_one_line_exit_2_and_nothing_changed(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("not a report\n")
    status, out, err = _run(tmp_path, "restart", "--previous", "notes.txt")
    assert status == 2, out + err
    assert "greenckpt run: error: --previous: notes.txt is not JSON" in err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert not (tmp_path / "rep").exists()


def _job(tmp_path: Path, mode: str, *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "greenckpt", "run", "--nodes-emulated", "2", "--no-control",
         "-o", "rep", *extra, "--", sys.executable, "-c", APP, mode, str(tmp_path)],
        cwd=tmp_path, env=_env(tmp_path), capture_output=True, text=True, timeout=180,
        check=False,
    )  # fmt: skip


def test_a_resubmitted_job_accounts_per_node_and_names_a_node_that_heard_nothing(
    tmp_path: Path,
) -> None:
    """Every rank on node 0 (items 7 and 8): node 1 heard nothing, in one line on stderr and
    a note; node 0's run in the job that died lost its work after the checkpoint, accounted
    in the resubmitted job's report for node 0 only."""
    died = _job(tmp_path, "die")
    assert died.returncode == 1, died.stderr
    line = "greenckpt run: node(s) 1 heard no announcement"
    assert sum(ln.startswith(line) for ln in died.stderr.splitlines()) == 1
    first = json.loads((tmp_path / "rep" / "job-report.json").read_text())
    assert [r["announcements"] for r in first["nodes"]][1] == 0
    assert any(n.startswith("node 1 heard no announcement") for n in first["notes"])
    node0 = json.loads((tmp_path / "rep" / "nodes" / "node0" / "report.json").read_text())
    checkpoint = next(r for r in node0["records"] if r["kind"] == "checkpoint")
    again = _job(tmp_path, "restart")
    assert again.returncode == 0, again.stderr
    doc = json.loads((tmp_path / "rep" / "job-report.json").read_text())
    lost = doc["nodes"][0]["previous_lost"]
    job = tmp_path / "rep" / "job-report.json"
    assert lost["source"] == f"previous job {job}, node 0" and lost["ended"] == "failed"
    assert lost["from_s"] == checkpoint["end_s"] and lost["to_s"] == node0["total"]["seconds"]
    assert doc["nodes"][1]["previous_lost"] is None  # it never restarted
    own = json.loads((tmp_path / "rep" / "nodes" / "node0" / "report.json").read_text())
    assert own["previous_lost"] == lost
    assert "work lost by the previous job" in again.stdout
    assert "  node 0: lost in the previous run" in again.stdout


def test_a_job_refuses_a_previous_that_is_not_a_job_report(tmp_path: Path) -> None:
    status, _, err = _run(tmp_path, "die")  # a run report, not a job's
    assert status == 1, err
    bad = _job(tmp_path, "restart", "--previous", "rep/report.json", "-o", "other")
    assert bad.returncode == 2, bad.stdout + bad.stderr
    assert "--previous: rep/report.json is not a greenckpt job report" in bad.stderr
    assert len(bad.stderr.strip().splitlines()) == 1 and "Traceback" not in bad.stderr
    assert not (tmp_path / "other").exists()
