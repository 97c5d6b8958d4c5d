"""Issue 18 for ``greenckpt run`` and ``greenckpt demo``: modelled EPE at the interval used
(item 3), ``--mtbf``/``--job-mtbf``/``--nodes`` (11), ``--json`` and the demo's profiling
progress (14), SIGTERM from a batch system (18), an unwritable report directory (21) and
error messages that name the command (24).

The runtime on this VM has no frequency control and no energy counters: the tests check what
is decided, accounted and said, not wattages.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from dataclasses import replace
from pathlib import Path

import pytest

from greenckpt.cli import demo_cmd
from greenckpt.model import epe
from greenckpt.report.run_text import render_run_text
from greenckpt.runtime.modelled import modelled_epe, observed_interval, with_modelled_epe
from greenckpt.runtime.run_report import PhaseRecord, RunReport
from greenckpt.runtime.settings import PhaseRequest, Settings
from tests.ckpt.test_mpi import mpiexec
from tests.cli.test_cli_run import CHILD, greenckpt, vm_node
from tests.platform import fake_power
from tests.platform.fake_cpu import build_tree, load_spec
from tests.ready_child import python_with_hangup

ROOT = Path(__file__).resolve().parents[2]

# Announces `count` level-1 checkpoints of 1 MiB under argv[1], computing 0.1 s before each,
# then exits with status argv[2].
CHECKPOINTS = textwrap.dedent(
    """
    import sys, time
    from greenckpt.ckpt.notify_client import hook_from_env
    hook = hook_from_env()
    for _ in range(3):
        time.sleep(0.1)
        hook.begin("checkpoint", level=1, path=sys.argv[1], size=1 << 20, node=0)
        time.sleep(0.02)
        hook.end("checkpoint", node=0, ok=True, seconds=0.02)
    print("announced", flush=True)
    sys.exit(int(sys.argv[2]))
    """
)


def _profile(tmp_path: Path) -> Path:
    """A tiny real profile of tmp_path's storage (a second or so), so the profile policy
    applies to checkpoints under tmp_path and its predictions exist."""
    io_dir = tmp_path / "io"
    io_dir.mkdir()
    proc = greenckpt(
        "profile", "run", str(io_dir), "-o", "p.json", "--size", "1MiB", "--processes", "1",
        "--repetitions", "1", "--warmup", "0", "--idle", "0", "--waiting-seconds", "0",
        "--quiet", cwd=tmp_path,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    return tmp_path / "p.json"


# ------------------------------------------------------------------ item 24: error prefix


@pytest.mark.parametrize(
    "args",
    [["run"], ["run", "--", "/nonexistent/tool"], ["run", "--", "true", "--x"]],
    ids=["no-command", "missing-program", "command-with-args"],
)
def test_run_errors_name_the_command_not_its_arguments(args: list[str], tmp_path: Path) -> None:
    proc = greenckpt(*args, cwd=tmp_path, root=vm_node(tmp_path))
    if args[-1] == "--x":  # `true --x` is a fine command: no error, no odd prefix anywhere
        assert proc.returncode == 0, proc.stderr
        assert "['--'" not in proc.stderr
        return
    assert proc.returncode == 2
    assert proc.stderr.startswith("greenckpt run: error: "), proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1


# ------------------------------------------------------------------ item 11: --mtbf meaning


def test_run_job_mtbf_with_nodes_is_refused_not_dropped(tmp_path: Path) -> None:
    proc = greenckpt("run", "--job-mtbf", "1h", "--nodes", "4", "--", "true", cwd=tmp_path)
    assert proc.returncode == 2
    assert "--nodes 4 has no effect with --job-mtbf" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "greenckpt-report").exists()
    alone = greenckpt("run", "--nodes", "4", "--", "true", cwd=tmp_path)
    assert alone.returncode == 2 and "--nodes 4 needs --mtbf" in alone.stderr
    # Both given: they must agree (issue 15 item 5); 1 node at 1 h is not a 2 h job.
    both = greenckpt("run", "--mtbf", "1h", "--job-mtbf", "2h", "--", "true", cwd=tmp_path)
    assert both.returncode == 2 and "disagree" in both.stderr


# real_node: the profile is of this machine's storage, identified on its own root
@pytest.mark.real_node
def test_run_mtbf_is_one_nodes_and_the_job_rate_counts_the_nodes(tmp_path: Path) -> None:
    """--mtbf 8h --nodes 4: the job fails every 2 h; the profile policy and the modelled
    EPE use that rate, and the JSON says how it was stated."""
    profile = _profile(tmp_path)
    common = ["--profile", str(profile), "--app-power", "20W", "--json"]
    run = [sys.executable, "-c", CHECKPOINTS, str(tmp_path), "0"]
    per_node = greenckpt(
        "run", *common, "--mtbf", "8h", "--nodes", "4", "--report", "a", "--", *run, cwd=tmp_path
    )
    assert per_node.returncode == 0, per_node.stderr
    doc = json.loads(per_node.stdout)
    assert doc["failure_rate"]["job_mtbf_s"] == pytest.approx(7200.0)
    assert doc["failure_rate"]["nodes"] == 4 and doc["failure_rate"]["node_mtbf_s"] == 28800.0
    assert doc["modelled_epe"]["rate_per_s"] == pytest.approx(4 / 28800)
    job = greenckpt("run", *common, "--job-mtbf", "2h", "--report", "b", "--", *run, cwd=tmp_path)
    assert job.returncode == 0, job.stderr
    assert json.loads(job.stdout)["failure_rate"]["rate_per_s"] == pytest.approx(1 / 7200)


# ------------------------------------------------------------------ item 3: modelled EPE


def _settings(seconds: float, power: float, source: str = "estimated") -> Settings:
    return Settings(
        io_processes=1,
        source="profile lookup",
        predicted_seconds=seconds,
        predicted_power_w=power,
        predicted_energy_j=seconds * power,
        power_source=source,  # type: ignore[arg-type]
    )


def _record(kind: str, index: int, start: float, end: float, **extra: object) -> PhaseRecord:
    return PhaseRecord(
        kind=kind,  # type: ignore[arg-type]
        index=index,
        start_s=start,
        end_s=end,
        energy_j={"m/node": 10.0 * (end - start)},
        sources={"m/node": "estimated"},
        node_energy_j=10.0 * (end - start),
        power_source="estimated",
        power_domains=("m/node",),
        **extra,  # type: ignore[arg-type]
    )


class _RestartPolicy:
    """A policy that predicts a restart (and records what it was asked)."""

    name = "fake"

    def __init__(self) -> None:
        self.asked: list[PhaseRequest] = []

    def decide(self, request: PhaseRequest) -> Settings:
        self.asked.append(request)
        return _settings(3.0, 60.0)


def test_modelled_epe_is_the_model_at_the_observed_interval() -> None:
    """Compute 10 s, checkpoint, compute 8 s + rework 4 s + compute 8 s (split by a
    background flush), checkpoint, compute 5 s (no checkpoint ends it): T_A = (10 + 20) / 2 =
    15 s; T_C, W_C from the checkpoints' predictions; T_R, W_R from the policy for a restart
    of the last checkpoint (the run had none)."""
    ck = {"path": "/ck", "size": 2 << 20, "level": 1, "notifiers": 2}
    records = [
        _record("compute", 0, 0.0, 10.0),
        _record("checkpoint", 1, 10.0, 12.0, settings=_settings(1.0, 40.0), **ck),
        _record("compute", 2, 12.0, 20.0),
        _record("flush", 3, 20.0, 25.0, background=True, settings=_settings(9.0, 99.0), **ck),
        _record("rework", 4, 20.0, 24.0),
        _record("compute", 7, 24.0, 32.0),
        _record("checkpoint", 5, 32.0, 35.0, settings=_settings(3.0, 20.0), **ck),
        _record("compute", 6, 35.0, 40.0),
    ]
    report = RunReport.from_records(records)
    assert observed_interval(report.records) == (15.0, 2)
    policy = _RestartPolicy()
    m = modelled_epe(report, rate=1 / 3600, app_power=100.0, policy=policy)
    # T_C: mean of 1 and 3 s; W_C: time-weighted (40·1 + 20·3) / 4 = 25 W.
    want = float(epe(15.0, 2.0, 3.0, 1 / 3600, 100.0, 25.0, 60.0))
    assert m.epe_w == pytest.approx(want)
    assert (m.T_A, m.T_C, m.W_C, m.T_R, m.W_R) == (15.0, 2.0, 25.0, 3.0, 60.0)
    assert m.source == "estimated"
    (asked,) = policy.asked
    assert (asked.kind, asked.path, asked.size, asked.level) == ("restart", "/ck", 1 << 20, 1)
    assert "observed" in m.derivation and "W_A 100.0 W stated" in m.derivation
    filled = with_modelled_epe(report, m)
    assert filled.predicted_epe == pytest.approx(want) and filled.predicted_source == "estimated"
    assert m.derivation in filled.notes
    assert f"predicted {want:.2f} W (model, estimated powers)" in render_run_text(filled)


def test_modelled_epe_says_why_when_it_cannot_be_computed() -> None:
    no_ckpt = RunReport.from_records([_record("compute", 0, 0.0, 5.0)])
    m = modelled_epe(no_ckpt, rate=1e-4, app_power=50.0)
    assert m.epe_w is None and "announced no checkpoint" in m.derivation
    defaults = Settings(io_processes=2, source="defaults (no profile)")
    plain = RunReport.from_records(
        [
            _record("compute", 0, 0.0, 5.0),
            _record("checkpoint", 1, 5.0, 6.0, settings=defaults, path="/ck", size=1),
        ]
    )
    m = modelled_epe(plain, rate=1e-4, app_power=50.0)
    assert m.epe_w is None and "defaults (no profile)" in m.derivation
    assert modelled_epe(plain, rate=None, app_power=50.0).derivation.endswith("failure rate (MTBF)")
    filled = with_modelled_epe(plain, m)
    assert filled.predicted_epe is None and m.derivation in filled.notes


# real_node: the profile is of this machine's storage, identified on its own root
@pytest.mark.real_node
def test_run_fills_the_modelled_epe_or_says_why(tmp_path: Path) -> None:
    """With a profile of this storage, --app-power and --mtbf the report carries the model's
    EPE at the run's interval with its derivation; without them a note says what is missing."""
    profile = _profile(tmp_path)
    run = [sys.executable, "-c", CHECKPOINTS, str(tmp_path), "0"]
    proc = greenckpt(
        "run", "--profile", str(profile), "--app-power", "20W", "--mtbf", "1h",
        "--report", "rep", "--", *run, cwd=tmp_path,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    doc = json.loads((tmp_path / "rep" / "report.json").read_text())
    assert doc["epe"]["predicted_w"] is not None and doc["epe"]["predicted_w"] > 0
    assert doc["epe"]["predicted_source"] == "estimated"
    (note,) = [n for n in doc["notes"] if n.startswith("modelled EPE")]
    assert "at the run's own interval" in note and "between 3 checkpoint(s)" in note
    assert "observed vs predicted" in proc.stdout
    bare = greenckpt("run", "--report", "bare", "--", *run, cwd=tmp_path)
    assert bare.returncode == 0, bare.stderr
    doc = json.loads((tmp_path / "bare" / "report.json").read_text())
    assert doc["epe"]["predicted_w"] is None
    assert any(n.startswith("no modelled EPE: the model needs --profile") for n in doc["notes"])


# ------------------------------------------------------------------ item 14: --json


def test_run_json_is_one_document_and_the_command_output_goes_to_stderr(tmp_path: Path) -> None:
    proc = greenckpt(
        "run", "--json", "--report", "rep", "--", sys.executable, "-c", CHILD, str(tmp_path), "3",
        cwd=tmp_path, root=vm_node(tmp_path),
    )  # fmt: skip
    assert proc.returncode == 3
    doc = json.loads(proc.stdout)  # nothing else on stdout
    assert doc["exit_status"] == 3 and doc["signal"] is None
    assert doc["report"]["format"] == "greenckpt-run-report"
    assert [r["kind"] for r in doc["report"]["records"]].count("checkpoint") == 1
    assert doc["files"][0].endswith("report.json") and doc["report_error"] is None
    assert "advice 2" in proc.stderr  # the command's own stdout


def test_demo_profiling_shows_the_profilers_progress(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The demo's profile step (a minute) prints progress as it goes; here with a smaller
    size and one process count so the step takes a second."""
    small = replace(demo_cmd.PROFILE_SWEEP, sizes=(1 << 20,), processes=(1,))
    monkeypatch.setattr(demo_cmd, "PROFILE_SWEEP", small)
    profile = demo_cmd._profile(tmp_path, again=False)
    assert profile.status == "complete"
    err = capsys.readouterr().err
    assert "profiling 1 cells" in err and "[1/1" in err


@pytest.mark.skipif(mpiexec() is None, reason="no mpiexec: pip install '.[mpi]'")
@pytest.mark.real_node  # the demo end to end, on this machine as a user runs it
def test_demo_json_and_the_model_at_the_interval_it_used(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """demo --json: one JSON document on stdout, progress on stderr; the report's predicted
    EPE is the model's at the interval the run used (not the plan's optimum), and both are
    given."""
    from greenckpt.cli.main import main  # noqa: PLC0415

    small = replace(demo_cmd.PROFILE_SWEEP, sizes=(2 << 20,), processes=(1, 2))
    monkeypatch.setattr(demo_cmd, "PROFILE_SWEEP", small)
    assert main(["demo", "--json", "--dir", str(tmp_path / "d")]) == 0
    out, err = capsys.readouterr()
    doc = json.loads(out)
    assert doc["bit_identical"] is True
    assert "== 6/6 check and report" in err and "model at the interval this run used" in err
    modelled = doc["modelled_epe"]
    assert modelled["epe_w"] is not None and modelled["interval_source"] == "observed"
    assert doc["report"]["epe"]["predicted_w"] == pytest.approx(modelled["epe_w"])
    assert modelled["checkpoints"] >= 20  # levels 1, 2 and 4 every 10, 30, 100 iterations
    assert modelled["interval_s"] != pytest.approx(doc["plan_optimum"]["interval_s"])
    assert modelled["epe_w"] != pytest.approx(doc["plan_optimum"]["epe_w"])
    assert any("at the run's own interval" in n for n in doc["report"]["notes"])


# ------------------------------------------------------------------ item 18: SIGTERM

# Says where its socket is and its pid, then sleeps; with argv[2] == "handle" it catches
# SIGTERM and SIGINT, writes a marker naming the signal and exits 5.
SLEEPER = textwrap.dedent(
    """
    import os, signal, sys, time
    out = sys.argv[1]
    if sys.argv[2] == "handle":
        def bye(signum, frame):
            open(os.path.join(out, "got-" + signal.Signals(signum).name), "w").close()
            sys.exit(5)
        signal.signal(signal.SIGTERM, bye)
        signal.signal(signal.SIGINT, bye)
    with open(os.path.join(out, "child.txt"), "w") as f:
        f.write(f"{os.getpid()}\\n{os.environ['GREENCKPT_RUNTIME_SOCKET']}\\n")
    print("ready", flush=True)
    time.sleep(120)
    """
)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


@pytest.mark.parametrize(
    ("sig", "mode", "status", "control"),
    [
        (signal.SIGTERM, "default", 128 + 15, False),
        (signal.SIGTERM, "handle", 5, False),
        (signal.SIGTERM, "default", 128 + 15, True),
        (signal.SIGHUP, "default", 128 + 1, False),
        (signal.SIGINT, "handle", 5, False),
    ],
    ids=[
        "default-action",
        "child-handles-it",
        "with-frequency-control",
        "sighup",
        "sigint-without-terminal",
    ],
)
def test_sigterm_is_forwarded_and_the_report_written(
    tmp_path: Path, sig: signal.Signals, mode: str, status: int, control: bool
) -> None:
    """SIGTERM to `greenckpt run` reaches the command, which ends; the report is written, the
    socket's directory removed and the status is the command's. With frequency control (a fake
    cpufreq tree with RAPL), the node-settings session restores the node on SIGTERM and then
    hands the signal on to the forwarding (it must not end the process by it). SIGHUP the
    same; SIGINT too when no terminal sent it to the command (a new session: no terminal)."""
    # faulthandler: a run that hangs is sent SIGABRT below and prints every thread's stack
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "PYTHONFAULTHANDLER": "1"}
    # a fake node (the signal path is the point, not this machine's settings): with cpufreq
    # for the control case, without (as this VM) for the others
    spec = "intel-acpi-cpufreq" if control else "vm-no-cpufreq"
    tree = build_tree(load_spec(spec), tmp_path / "tree")
    fake_power.intel_tree(tree)
    env.update(GREENCKPT_SYSROOT=str(tree), XDG_RUNTIME_DIR=str(tmp_path))
    run = subprocess.Popen(
        [*python_with_hangup("-m", "greenckpt", "run", "--report", "rep", "--"),
         sys.executable, "-c", SLEEPER, str(tmp_path), mode],
        cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
        start_new_session=True,
    )  # fmt: skip
    child_pid = 0
    try:
        assert run.stdout is not None
        assert run.stdout.readline().strip() == "ready"
        pid_text, socket_path = (tmp_path / "child.txt").read_text().split()
        child_pid = int(pid_text)
        run.send_signal(sig)
        try:
            out, err = run.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            alive = _alive(child_pid)
            run.send_signal(signal.SIGABRT)
            run.wait(timeout=30)
            if _alive(child_pid):  # it holds the pipes open: end it so the dump can be read
                os.kill(child_pid, signal.SIGKILL)
            _, err = run.communicate(timeout=30)
            pytest.fail(
                f"greenckpt run did not end within 60 s of {sig.name} (the command "
                f"{'still ran' if alive else 'had ended'}); its threads then:\n{err[-6000:]}"
            )
        assert run.returncode == status, err
        assert not _alive(child_pid)  # ended (and reaped by greenckpt)
        if mode == "handle":
            assert (tmp_path / f"got-{sig.name}").exists()
        report = json.loads((tmp_path / "rep" / "report.json").read_text())
        assert any(f"{sig.name} received and forwarded" in n for n in report["notes"])
        controlled = not any("no frequency control" in n for n in report["notes"])
        assert controlled == control
        assert not Path(socket_path).parent.exists()  # the socket's private directory
        assert "greenckpt run report" in out
        assert (
            f"{sig.name} received and forwarded to the command, which ended with status {status}"
            in err
        )
        assert "Traceback" not in err
    finally:
        if run.poll() is None:
            run.kill()
            run.wait()
        if child_pid and _alive(child_pid):
            os.kill(child_pid, signal.SIGKILL)


def test_a_command_killed_by_a_signal_gives_128_plus_n(tmp_path: Path) -> None:
    code = "import os, signal; os.kill(os.getpid(), signal.SIGKILL)"
    proc = greenckpt(
        "run", "--report", "rep", "--", sys.executable, "-c", code, cwd=tmp_path,
        root=vm_node(tmp_path),
    )  # fmt: skip
    assert proc.returncode == 128 + 9, proc.stderr
    assert "exited with status 137" in proc.stderr


# ------------------------------------------------------------------ item 21: report directory


@pytest.mark.parametrize("where", ["/sys/kernel", "/sys/greenckpt-no-such-dir/rep"])
def test_unwritable_report_directory_is_refused_before_the_command_runs(
    tmp_path: Path, where: str
) -> None:
    marker = tmp_path / "ran"
    code = f"open({str(marker)!r}, 'w').close()"
    proc = greenckpt("run", "--report", where, "--", sys.executable, "-c", code, cwd=tmp_path)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stderr.startswith(f"greenckpt run: error: --output {where}: cannot write")
    assert len(proc.stderr.strip().splitlines()) == 1
    assert not marker.exists()


def test_a_report_directory_lost_during_the_run_keeps_the_report(tmp_path: Path) -> None:
    """The command replaces the report directory with a file: the phase table is still
    printed, the report goes to a temporary directory (said so), and the status is the
    command's."""
    code = textwrap.dedent(
        """
        import os, shutil, sys
        shutil.rmtree("rep")
        open("rep", "w").close()
        sys.exit(3)
        """
    )
    proc = greenckpt(
        "run", "--report", "rep", "--", sys.executable, "-c", code, cwd=tmp_path,
        root=vm_node(tmp_path),
    )  # fmt: skip
    assert proc.returncode == 3, proc.stderr
    assert "Traceback" not in proc.stderr
    assert "greenckpt run report" in proc.stdout and "run total" in proc.stdout
    line = next(x for x in proc.stderr.splitlines() if "could not be written to rep" in x)
    fallback = Path(line.rsplit("written to ", 1)[1])
    try:
        doc = json.loads((fallback / "report.json").read_text())
        assert doc["format"] == "greenckpt-run-report"
    finally:
        for f in fallback.iterdir():
            f.unlink()
        fallback.rmdir()
