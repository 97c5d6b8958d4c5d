"""The Slurm plugin's Python side without Slurm: writing as the user, the report folder's
name, the job report from node files, a node's agent started, joined, released and died
(tests/cluster/test_spank.py runs the plugin itself on a real cluster)."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from greenckpt.cli.main import main
from greenckpt.cli.spank import SPANK_FAMILIES, SPANK_POLICIES, expand_report
from greenckpt.errors import InvalidValueError
from greenckpt.native import build as native_build
from greenckpt.runtime.job_files import assemble_job_report, merge_sessions
from greenckpt.runtime.policy import POLICY_NAMES
from greenckpt.runtime.user_files import UserFilesError, Writer, may_execute, write_tree

PLUGIN_SOURCE = Path(native_build.NATIVE_DIR) / native_build.SPANK_SOURCE


# ---------------------------------------------------------------------- writing as the user


def test_write_tree_writes_below_the_folder(tmp_path: Path) -> None:
    paths = write_tree(str(tmp_path / "r"), ["nodes", "node0"], {"a.json": b"{}", "b": b"x"})
    assert sorted(paths) == [
        str(tmp_path / "r/nodes/node0/a.json"),
        str(tmp_path / "r/nodes/node0/b"),
    ]
    assert (tmp_path / "r/nodes/node0/b").read_bytes() == b"x"


def test_write_tree_never_follows_a_planted_link(tmp_path: Path) -> None:
    target = tmp_path / "elsewhere"
    target.mkdir()
    report = tmp_path / "r"
    report.mkdir()
    (report / "nodes").symlink_to(target)
    with pytest.raises(UserFilesError, match="symbolic link"):
        write_tree(str(report), ["nodes", "node0"], {"a": b"x"})
    linked = tmp_path / "linked"
    linked.symlink_to(target)
    with pytest.raises(OSError):
        write_tree(str(linked), ["nodes"], {"a": b"x"})
    (report / "nodes").unlink()
    (report / "f").symlink_to(target / "victim")  # a link where a file is written: replaced
    write_tree(str(report), [], {"f": b"mine"})
    assert not (target / "victim").exists() and list(target.iterdir()) == []
    assert not (report / "f").is_symlink() and (report / "f").read_bytes() == b"mine"


@pytest.mark.parametrize("name", ["", "..", "a/b", "."])
def test_write_tree_takes_plain_names_only(tmp_path: Path, name: str) -> None:
    with pytest.raises(UserFilesError):
        write_tree(str(tmp_path), [name], {"a": b""})


def test_may_execute_reads_the_mode_bits_for_the_user(tmp_path: Path) -> None:
    private = tmp_path / "private"
    private.mkdir(mode=0o700)
    tool = private / "tool"
    tool.write_text("#!/bin/sh\n")
    tool.chmod(0o755)
    tmp_path.chmod(0o755)
    other = os.getuid() + 12345
    assert may_execute(str(tool), os.getuid(), [])
    assert not may_execute(str(tool), other, [])
    private.chmod(0o711)
    assert may_execute(str(tool), other, []) == all(
        os.stat(p).st_mode & 0o001 for p in [*tool.parents][:-1]
    )
    assert not may_execute(str(tmp_path / "missing"), other, [])


def test_writer_defaults_to_this_python() -> None:
    assert Writer(1, 1).python == sys.executable


# ---------------------------------------------------------------------- names and options


def test_report_folder_template() -> None:
    assert expand_report("greenckpt-%j", job="42", user="ann", cwd="/w") == "/w/greenckpt-42"
    assert expand_report("/s/%u/%j-%%", job="4_2", user="ann", cwd="/w") == "/s/ann/4_2-%"
    for bad in ("x-%q", "%", ""):
        with pytest.raises(InvalidValueError):
            expand_report(bad, job="1", user="u", cwd="/")


def test_the_plugin_lists_the_same_policies_and_families() -> None:
    text = PLUGIN_SOURCE.read_text()

    def array(name: str) -> list[str]:
        body = re.search(rf"{name}\[\] = \{{(.*?)\}};", text, re.S)
        assert body is not None
        return re.findall(r'"([a-z]+)"', body.group(1))

    assert tuple(array("POLICIES")) == SPANK_POLICIES
    assert set(SPANK_POLICIES) == set(POLICY_NAMES) - {"fixed"}
    assert tuple(array("FAMILIES")) == SPANK_FAMILIES


def test_the_plugin_builds_warning_free(tmp_path: Path) -> None:
    try:
        native_build.spank_header()
    except native_build.BuildError as exc:
        pytest.skip(str(exc))
    cc = native_build.compiler()
    done = subprocess.run(
        [*cc, "-std=gnu99", "-fPIC", "-shared", "-Wall", "-Wextra", "-Werror", "-o",
         str(tmp_path / "p.so"), str(PLUGIN_SOURCE)],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    built = native_build.build_spank(tmp_path / "out")
    assert built.name == "greenckpt_spank.so" and built.is_file()


def test_no_header_is_one_line_naming_the_package(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(native_build, "_SPANK_HEADER_DIRS", ("/nonexistent",))
    with pytest.raises(native_build.BuildError, match="libslurm-dev") as info:
        native_build.spank_header({"SLURM_INCLUDE_DIR": ""})
    assert "\n" not in str(info.value)


# ---------------------------------------------------------------------- the job report


def _summary(t0: float, checkpoints: int, energy: float | None = 10.0) -> dict[str, Any]:
    records = [
        {"kind": "checkpoint", "start_s": 1.0 + i, "end_s": 1.5 + i, "ok": True, "level": 1,
         "node_energy_j": 1.0, "power_source": "estimated"}
        for i in range(checkpoints)
    ]  # fmt: skip
    return {
        "t0_unix": t0,
        "policy": "defaults",
        "power": {"source": "estimated", "meters": ["estimator"]},
        "total": {"seconds": 10.0, "energy_j": energy, "mean_power_w": 1.0},
        "useful_compute_s": 8.0,
        "rework_s": 0.0,
        "lost_s": 0.0,
        "by_kind": {"checkpoint": {"count": checkpoints, "failed": 0, "seconds": 0.5 * checkpoints,
                                   "energy_j": float(checkpoints)}},
        "by_level": [{"kind": "checkpoint", "level": 1, "count": checkpoints, "failed": 0,
                      "seconds": 0.5 * checkpoints, "energy_j": float(checkpoints)}],
        "records": records,
        "notes": [],
        "files": [],
        "synthetic": True,
        "series": {"t_s": [1.0, 2.0], "power_w": [5.0, 6.0], "source": "estimated"},
    }  # fmt: skip


def _write(folder: Path, node: int, step: int, **docs: dict[str, Any]) -> None:
    where = folder / "nodes" / f"node{node}" / f"step{step}"
    where.mkdir(parents=True)
    for name, doc in docs.items():
        (where / f"{name}.json").write_text(json.dumps(doc))


def test_sessions_of_a_node_merge_in_order() -> None:
    merged = merge_sessions([_summary(100.0, 2), _summary(130.0, 3, energy=None)])
    assert [r["start_s"] for r in merged["records"]] == [1.0, 2.0, 31.0, 32.0, 33.0]
    assert merged["total"]["seconds"] == 20.0 and merged["total"]["energy_j"] is None
    assert merged["by_kind"]["checkpoint"]["count"] == 5
    assert merged["by_level"][0]["count"] == 5
    assert merged["series"]["t_s"] == [1.0, 2.0, 31.0, 32.0]
    assert merged["modelled_epe"]["epe_w"] is None
    one = _summary(1.0, 1)
    assert merge_sessions([one]) == one


def test_the_job_report_from_node_files(tmp_path: Path) -> None:
    hello = {"host": "h", "pid": 7, "power_source": "estimated", "control": False,
             "nodes": 5, "t0_unix": 100.0, "command": ["./app", "-x"]}  # fmt: skip
    _write(tmp_path, 0, 0, hello=hello, summary=_summary(100.0, 2))
    _write(tmp_path, 0, 3, hello={**hello, "t0_unix": 130.0}, summary=_summary(130.0, 1))
    progress = {"t_s": 4.0, "records": 1, "energy_j": 2.0, "by_kind": {}}
    _write(
        tmp_path,
        1,
        0,
        hello=hello,
        died={"reason": "its agent (pid 9) ended", "progress": progress},
    )
    _write(tmp_path, 2, 0, unmanaged={"reason": "node lock held"})
    _write(tmp_path, 3, 0, hello=hello)  # no outcome: died once the wait is over
    report = assemble_job_report(tmp_path, "42", wait_s=0.0)
    doc = report.doc
    assert doc["job"]["nodes"] == 5 and doc["job"]["command"] == ["./app", "-x"]
    assert doc["states"]["finished"] == [0]
    assert doc["states"]["died"] == [1, 3]
    assert doc["states"]["unmanaged"] == [2, 4]
    rows = {r["node"]: r for r in doc["nodes"]}
    assert rows[1]["reason"] == "its agent (pid 9) ended" and rows[1]["energy_j"] == 2.0
    assert rows[2]["reason"] == "node lock held"
    assert "no step of the job ran there" in rows[4]["reason"]
    assert doc["by_kind"]["checkpoint"]["count"] == 3
    assert [p["ordinal"] for p in doc["phases"] if p["kind"] == "checkpoint"] == [0, 1, 2]


def test_an_empty_folder_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(InvalidValueError, match="no node folders"):
        assemble_job_report(tmp_path, "42", wait_s=0.0)


def test_job_report_command(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _write(tmp_path, 0, 0, hello={"nodes": 1, "t0_unix": 1.0}, summary=_summary(1.0, 2))
    assert main(["job-report", "42", "--report", str(tmp_path), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["report"]["states"]["finished"] == [0]
    assert (tmp_path / "job-report.json").is_file() and (tmp_path / "job-phases.csv").is_file()
    assert main(["job-report", "4x2"]) == 2
    assert "does not parse" in capsys.readouterr().err


# ---------------------------------------------------------------------- an agent on this node


def _spank(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "greenckpt.cli.spank", *args],
        capture_output=True, text=True, timeout=90, check=False,
    )  # fmt: skip


@pytest.fixture
def holder() -> Any:
    """A process standing in for a step's slurmstepd (its pid is watched)."""
    proc = subprocess.Popen(["sleep", "60"])
    yield proc
    proc.kill()
    proc.wait()


def _join(tmp_path: Path, step: str, pid: int) -> subprocess.CompletedProcess[str]:
    return _spank(
        "join", "--job", "77", "--step", step, "--node", "0", "--nodes", "1",
        "--uid", str(os.getuid()), "--gid", str(os.getgid()), "--report", "rep-%j",
        "--cwd", str(tmp_path), "--policy", "defaults", "--no-control",
        "--stepd-pid", str(pid), "--spool", str(tmp_path / "spool"), "--", "./app",
    )  # fmt: skip


def test_an_agent_is_started_joined_and_released(tmp_path: Path, holder: Any) -> None:
    first = _join(tmp_path, "0", holder.pid)
    assert first.stdout.splitlines()[-1] == "ready", first.stdout + first.stderr
    sock = tmp_path / "spool/job-77/agent.sock"
    assert f"set GREENCKPT_RUNTIME_SOCKET {sock}" in first.stdout
    assert (tmp_path / "spool/job-77").stat().st_mode & 0o777 == 0o711
    second = _join(tmp_path, "1", holder.pid)  # a second step joins the running agent
    assert second.stdout.splitlines()[-1] == "ready", second.stdout + second.stderr
    assert _spank("release", "--job", "77", "--step", "0", "--spool",
                  str(tmp_path / "spool")).stdout.strip() == "released"  # fmt: skip
    last = _spank("release", "--job", "77", "--step", "1", "--spool", str(tmp_path / "spool"))
    assert last.stdout.strip() == "released (last)", last.stdout + last.stderr
    session = tmp_path / "rep-77/nodes/node0/step0"
    assert {"hello.json", "summary.json", "report.json"} <= {p.name for p in session.iterdir()}
    summary = json.loads((session / "summary.json").read_text())
    assert summary["session"] == {"node": 0, "step": "0"}
    assert all(f.startswith(str(session)) for f in summary["files"])
    deadline = time.monotonic() + 10
    while (tmp_path / "spool/job-77").exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not (tmp_path / "spool/job-77").exists()


def test_a_killed_agent_leaves_died_json(tmp_path: Path, holder: Any) -> None:
    assert _join(tmp_path, "0", holder.pid).stdout.splitlines()[-1] == "ready"
    state = json.loads((tmp_path / "spool/job-77/agent.json").read_text())
    os.kill(state["pid"], signal.SIGKILL)
    time.sleep(0.3)
    done = _spank("release", "--job", "77", "--step", "0", "--spool", str(tmp_path / "spool"))
    assert "had died" in done.stdout, done.stdout + done.stderr
    died = json.loads((tmp_path / "rep-77/nodes/node0/step0/died.json").read_text())
    assert f"pid {state['pid']}" in died["reason"]
    assert not (tmp_path / "spool/job-77").exists()
    report = assemble_job_report(tmp_path / "rep-77", "77", wait_s=0.0)
    assert report.doc["states"]["died"] == [0]


def test_an_agent_whose_step_vanished_ends_by_itself(tmp_path: Path, holder: Any) -> None:
    assert _join(tmp_path, "0", holder.pid).stdout.splitlines()[-1] == "ready"
    holder.kill()
    holder.wait()
    summary = tmp_path / "rep-77/nodes/node0/step0/summary.json"
    deadline = time.monotonic() + 30
    while not summary.exists() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert summary.exists()


def test_a_bad_report_template_is_unmanaged(tmp_path: Path) -> None:
    done = _spank(
        "join", "--job", "77", "--step", "0", "--node", "0", "--uid", str(os.getuid()),
        "--gid", str(os.getgid()), "--report", "x-%q", "--spool", str(tmp_path / "spool"),
    )  # fmt: skip
    assert done.stdout.startswith("unmanaged report folder 'x-%q'"), done.stdout


def test_a_died_sessions_progress_phases_and_energy_reach_the_job_report(tmp_path: Path) -> None:
    """What every progress carried (kept by the plugin's leader in died.json) is merged as on
    the wire: the died node's checkpoints are job phases, its power a curve."""
    hello = {"host": "h", "pid": 7, "power_source": "estimated", "control": False,
             "nodes": 2, "t0_unix": 100.0}  # fmt: skip
    _write(tmp_path, 0, 0, hello=hello, summary=_summary(100.0, 2))
    checkpoint = {"kind": "checkpoint", "start_s": 1.0, "end_s": 2.0, "ok": True,
                  "node_energy_j": 5.0, "power_source": "estimated", "level": 1,
                  "background": False}  # fmt: skip
    died = {"reason": "its agent (pid 9) ended", "progress": {"t_s": 4.0, "by_kind": {}},
            "phases": [checkpoint], "energy": [[2.0, 20.0], [4.0, 60.0], "junk"]}  # fmt: skip
    _write(tmp_path, 1, 0, hello=hello, died=died)
    doc = assemble_job_report(tmp_path, "42", wait_s=0.0).doc
    assert doc["states"]["died"] == [1]
    first = next(p for p in doc["phases"] if p["kind"] == "checkpoint" and p["ordinal"] == 0)
    assert first["nodes"] == 2  # node 0's final and node 1's progress
    assert doc["series"]["nodes"] == 2


def test_a_session_on_a_shared_node_says_so_in_the_job_report(tmp_path: Path) -> None:
    hello = {"host": "h", "pid": 7, "power_source": "estimated", "control": False, "nodes": 1,
             "t0_unix": 100.0, "shared_with": "greenckpt session pid 5 of user u"}  # fmt: skip
    _write(tmp_path, 0, 0, hello=hello, summary=_summary(100.0, 1))
    doc = assemble_job_report(tmp_path, "42", wait_s=0.0).doc
    assert doc["nodes"][0]["shared_with"] == "greenckpt session pid 5 of user u"
    assert any(n.startswith("node 0 shared its node: another greenckpt session pid 5") for n
               in doc["notes"])  # fmt: skip
