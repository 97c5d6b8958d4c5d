"""``greenckpt run`` after a run that died (issue 30 item 7): the resubmitted run restarts from
the earlier run's checkpoint, and the work that run lost after it is accounted in the new
report, labelled as coming from the earlier report (found in the same -o folder, or named by
``--previous``); a ``--previous`` that is not a run report is one line, exit 2, nothing made.
"""

from __future__ import annotations

import json
import sys
import textwrap
from pathlib import Path

import pytest

from tests.cli.test_cli_run import greenckpt

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
    assert lost["energy_j"] is not None and lost["energy_source"] == "estimated"
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
