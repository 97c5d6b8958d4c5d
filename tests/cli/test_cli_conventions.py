"""Issue 18, the command-line defects (items 11, 12, 14, 15, 24): one meaning per flag, meter
flags on every command that opens meters, closed pipes, one spelling per idea, ``--json`` on
``restore`` and ``profile merge``, docs that match the code, and errors that blame the right
thing."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from greenckpt.cli.args import meter_options
from greenckpt.cli.main import build_parser, main
from greenckpt.cli.profile_cmd import build_spec
from greenckpt.platform.meters import MeterOptions
from greenckpt.profile.adaptive import AdaptiveChooser
from greenckpt.profile.grid import SweepError
from greenckpt.profile.preflight import preflight
from tests.cli.test_cli import BASE
from tests.cli.test_cli_profile import sweep_args
from tests.conftest import EXAMPLE_PROFILE, small_profile_doc
from tests.platform import fake_power as fp
from tests.platform.fake_cpu import build_tree
from tests.platform.test_cli_restore import _killed_session
from tests.profile.test_sweep import spec_for

ROOT = Path(__file__).resolve().parents[2]
PLAN = BASE  # the plan command line of test_cli


def _with(argv: list[str], flag: str, value: str) -> list[str]:
    out = list(argv)
    out[out.index(flag) + 1] = value
    return out


def _fails(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    """``argv`` exits 2 with one line on stderr and no traceback; returns that line."""
    with pytest.raises(SystemExit) as info:  # argparse's errors exit, the others return
        raise SystemExit(main(argv))
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    return err


# ------------------------------------------------------------------------- item 11


@pytest.mark.parametrize(
    ("argv", "hint"),
    [
        ([*PLAN, "--max-slowdown", "5"], "write 5% for 5 percent, or 500% if that is meant"),
        ([*PLAN, "--max-slowdown", "1"], "write 1% for 1 percent"),
        (
            ["simulate", *PLAN[1:], "--units", "10", "--confidence", "95"],
            "write 95% for 95 percent",
        ),
    ],
)
def test_bare_fraction_of_one_or_more_is_refused_with_a_hint(
    argv: list[str], hint: str, capsys: pytest.CaptureFixture[str]
) -> None:
    err = _fails(argv, capsys)
    assert "read as a fraction" in err and hint in err


def test_fractions_with_a_percent_sign_or_below_one_still_work(
    capsys: pytest.CaptureFixture[str],
) -> None:
    for value in ("5%", "0.05", "500%"):
        assert main([*PLAN, "--max-slowdown", value, "--json"]) == 0
        doc = json.loads(capsys.readouterr().out)
        assert doc["inputs"]["max_slowdown"] == pytest.approx(
            {"5%": 0.05, "0.05": 0.05, "500%": 5.0}[value]
        )


@pytest.mark.parametrize(
    ("size", "shown", "not_shown"),
    [("64GB", "64 GB", "GiB"), ("64GiB", "64 GiB", " GB "), ("1.5TB", "1.5 TB", "TiB")],
)
def test_checkpoint_size_is_echoed_in_the_users_units(
    size: str, shown: str, not_shown: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(_with(PLAN, "--ckpt-size", size)) == 0
    out = " ".join(capsys.readouterr().out.split())  # the header wraps at 120 columns
    assert f"checkpoint {shown} per node" in out
    assert f"Chosen settings for {shown} per node" in out
    assert not_shown not in out.split("Expectations")[0]


def test_job_mtbf_with_nodes_but_no_work_is_refused_not_dropped(
    capsys: pytest.CaptureFixture[str],
) -> None:
    argv = [*_with(PLAN, "--mtbf", "30h"), "--nodes", "4"]
    argv[argv.index("--mtbf")] = "--job-mtbf"
    err = _fails(argv, capsys)
    assert "--nodes 4 with --job-mtbf" in err and "--work" in err


def test_job_mtbf_with_nodes_and_work_is_honoured_and_said(
    capsys: pytest.CaptureFixture[str],
) -> None:
    argv = [*_with(PLAN, "--mtbf", "30h"), "--nodes", "4", "--work", "7d"]
    argv[argv.index("--mtbf")] = "--job-mtbf"
    assert main([*argv, "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["inputs"]["mtbf_s"] == pytest.approx(30 * 3600)  # the job's, not divided by 4
    assert doc["inputs"]["nodes"] == 4
    plan = doc["plan"]
    assert plan["expected_energy_J_job"] == pytest.approx(4 * plan["expected_energy_J_per_node"])
    assert main(argv) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "whole job of 4 node(s)" in out and "scales the job's energy only" in out


@pytest.mark.parametrize(
    ("flag", "value", "message"),
    [
        ("--mtbf", "-1h", "'-1h' is negative"),
        ("--ckpt-size", "-64GiB", "'-64GiB' is negative"),
        ("--app-power", "-.5W", "'-.5W' is negative"),
    ],
)
def test_negative_value_reaches_the_unit_parser(
    flag: str, value: str, message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    err = _fails(_with(PLAN, flag, value), capsys)
    assert message in err and "expected one argument" not in err


def test_profile_adaptive_mtbf_is_one_nodes_and_nodes_scale_the_rate(tmp_path: Path) -> None:
    base = ["profile", "run", str(tmp_path), "-o", str(tmp_path / "o.json"), "--processes", "1"]
    base += ["--adaptive", "--mtbf", "14h"]
    for extra, nodes in (([], 1), (["--nodes", "4"], 4)):
        _, chooser = build_spec(build_parser().parse_args([*base, *extra]))
        assert isinstance(chooser, AdaptiveChooser)
        assert [s.rate for s in chooser.scenarios] == [pytest.approx(nodes / (14 * 3600))]


def test_profile_nodes_without_adaptive_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = sweep_args(tmp_path, tmp_path / "o.json", "--processes", "1", "--nodes", "4")
    assert "--nodes: used only with --adaptive" in _fails(argv, capsys)


# ------------------------------------------------------------------------- item 12


@pytest.fixture
def proc_root(tmp_path: Path) -> Path:
    """A SYNTHETIC root holding only /proc: a CPU the TDP table does not know, 2 sockets."""
    root = tmp_path / "root"
    fp.proc_tree(root, model="Made-up CPU 9000", sockets=2, busy=0, idle=0)
    return root


def _meter(doc: dict[str, object], name: str) -> dict[str, object]:
    caps = doc["capabilities"]
    assert isinstance(caps, list)
    return next(c for c in caps if c["name"] == f"meter:{name}")


def test_probe_passes_tdp_to_the_estimator(
    proc_root: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["probe", "--root", str(proc_root), "--json"]) == 0
    assert "fallback" in str(_meter(json.loads(capsys.readouterr().out), "estimator")["summary"])
    assert main(["probe", "--root", str(proc_root), "--tdp", "100W", "--json"]) == 0
    estimator = _meter(json.loads(capsys.readouterr().out), "estimator")
    assert estimator["available"] is True
    assert "given: 100 W × 2 socket(s)" in str(estimator["summary"])


def _power_log(path: Path) -> Path:
    now = time.time()
    rows = [f"{now - 2 + i:.3f},{100 + i}" for i in range(3)]
    path.write_text("timestamp,watts\n" + "\n".join(rows) + "\n")
    return path


def test_probe_reads_an_external_meter_log(
    proc_root: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    log = _power_log(tmp_path / "meter.csv")
    assert main(["probe", "--root", str(proc_root), "--meter-csv", str(log), "--json"]) == 0
    csv = _meter(json.loads(capsys.readouterr().out), "csv")
    assert csv["available"] is True and "measured" in str(csv["summary"])


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--meters", "csv"], "--meters csv reads an external meter's log: give it with"),
        (["--meters", "estimator", "--meter-csv", "LOG"], "add csv to --meters"),
        (["--meters", "auto", "--meter-csv", "/nonexistent.csv"], "is not an existing file"),
        (["--meters", "csv", "--meter-csv", "LOG", "--tdp", "90W"], "add estimator (or auto)"),
        (["--tdp", "90"], "'90' has no unit"),
    ],
)
def test_profile_run_meter_flags_are_checked_first(
    extra: list[str], message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    log = str(_power_log(tmp_path / "meter.csv"))
    out = tmp_path / "out.json"
    argv = sweep_args(tmp_path, out, "--processes", "1", "--quiet")
    i = argv.index("--meters")
    del argv[i : i + 2]  # the tiny sweep's own --meters estimator
    err = _fails([*argv, *(log if a == "LOG" else a for a in extra)], capsys)
    assert message in err
    assert not out.exists()


def test_profile_run_records_the_given_tdp(tmp_path: Path) -> None:
    out = tmp_path / "out.json"
    argv = sweep_args(tmp_path, out, "--processes", "1", "--quiet", "--tdp", "77W")
    assert main(argv) == 0
    doc = json.loads(out.read_text())
    assert doc["sweep"]["spec"]["extra"]["tdp_W"] == pytest.approx(77.0)
    assert all(p["power_source"] == "estimated" for p in doc["points"])


def test_run_refuses_meter_flags_that_disagree_before_starting(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    report = tmp_path / "report"
    argv = ["run", "--policy", "performance", "--meters", "csv", "-o", str(report), "--", "true"]
    err = _fails(argv, capsys)
    assert "--meter-csv FILE" in err
    assert not report.exists()


def test_meter_options_carry_the_flags() -> None:
    ns = build_parser().parse_args(["probe", "--meter-csv", "m.csv", "--tdp", "1.2kW"])
    assert meter_options(ns) == MeterOptions(csv_path=os.path.abspath("m.csv"), tdp_w=1200.0)


# ------------------------------------------------------------------------- item 14


def _with_closed_stdout(*argv: str) -> subprocess.CompletedProcess[bytes]:
    """Run greenckpt with stdout a pipe whose reader is already gone (``| head`` that quit)."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        return subprocess.run(
            [sys.executable, "-m", "greenckpt", *argv],
            stdout=write_end,
            stderr=subprocess.PIPE,
            timeout=120,
            check=False,
        )
    finally:
        os.close(write_end)


@pytest.mark.parametrize(
    "argv",
    [
        ["profile", "csv", str(EXAMPLE_PROFILE)],
        ["profile", "show", str(EXAMPLE_PROFILE)],
        ["probe", "--json"],
        PLAN,
    ],
    ids=["csv", "show (rich)", "probe --json", "plan (rich)"],
)
def test_closed_pipe_ends_quietly_with_141(argv: list[str]) -> None:
    proc = _with_closed_stdout(*argv)
    err = proc.stderr.decode()
    assert "Traceback" not in err and "Exception ignored" not in err, err
    assert "BrokenPipe" not in err
    assert proc.returncode == 141


@pytest.mark.parametrize(
    ("argv", "dest", "value"),
    [
        (["profile", "run", "P", "-o", "O", "--repeats", "2"], "repetitions", 2),
        (["profile", "run", "P", "-o", "O", "--repetitions", "2"], "repetitions", 2),
        (["profile", "validate", "P", "--repetitions", "5"], "repeats", 5),
        (["profile", "run", "P", "-o", "O", "--rate", "20Hz"], "rate", 20.0),
        (["run", "--rate-hz", "5", "--", "true"], "rate", 5.0),
        (["run", "--rate", "5", "--", "true"], "rate", 5.0),
        (["run", "-o", "R", "--", "true"], "report", "R"),
        (["run", "--output", "R", "--", "true"], "report", "R"),
        (["run", "--report", "R", "--", "true"], "report", "R"),
        (["demo", "-o", "D"], "dir", "D"),
        (["demo", "--dir", "D"], "dir", "D"),
    ],
)
def test_one_spelling_with_old_ones_as_aliases(argv: list[str], dest: str, value: object) -> None:
    assert getattr(build_parser().parse_args(argv), dest) == value


def test_defaults_stand_when_no_spelling_is_given() -> None:
    ns = build_parser().parse_args(["run", "--", "true"])
    assert ns.report == "greenckpt-report" and ns.rate == 10.0
    assert build_parser().parse_args(["profile", "run", "P", "-o", "O"]).repetitions == 3


@pytest.mark.parametrize(
    ("command", "shown", "hidden"),
    [
        (["profile", "run"], "--repeats", "--repetitions"),
        (["profile", "validate"], "--repeats", "--repetitions"),
        (["run"], "--rate", "--rate-hz"),
        (["run"], "--output", "--report"),
        (["demo"], "--output", "--dir"),
    ],
)
def test_aliases_are_hidden_from_help(
    command: list[str], shown: str, hidden: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit):
        build_parser().parse_args([*command, "--help"])
    text = capsys.readouterr().out
    assert re.search(rf"{shown}\b(?!-)", text)
    assert not re.search(rf"{hidden}\b(?!-)", text)


def test_restore_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    tree = build_tree("intel-acpi-cpufreq", tmp_path / "tree")
    state = tmp_path / "run" / "node-state.json"
    argv = ["restore", "--root", str(tree), "--state-file", str(state), "--json"]
    assert main(argv) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["outcome"] == "nothing" and doc["written"] == [] and doc["state_file"] is None
    assert doc["message"].startswith("nothing to restore")


def test_restore_json_after_kill_9(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    tree, state, _ = _killed_session(tmp_path)
    assert main(["restore", "--root", str(tree), "--state-file", str(state), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["outcome"] == "restored" and doc["state_file"] == str(state)
    assert any(w["path"].endswith("scaling_governor") for w in doc["written"])
    assert not state.exists()


def test_profile_merge_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    paths = []
    for name in ("a", "b", "c"):
        doc = small_profile_doc()
        doc["machine"]["hostname"] = name
        path = tmp_path / f"{name}.json"
        path.write_text(json.dumps(doc))
        paths.append(str(path))
    merged = tmp_path / "merged.json"
    assert main(["profile", "merge", *paths, "-o", str(merged), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["file"] == str(merged) and merged.exists()
    assert doc["nodes"] == ["a", "b", "c"] and doc["profiles"] == paths
    assert doc["points"] == 8 and doc["status"] == "complete"
    assert doc["synthetic"] is True and doc["power_sources"] == ["synthetic"]
    assert doc["outlier_nodes"] == []


# ------------------------------------------------------------------------- item 15


def test_top_level_help_names_every_part(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        build_parser().parse_args(["--help"])
    text = " ".join(capsys.readouterr().out.split())
    for word in ("probe", "profile", "plan", "simulate", "run", "restore"):
        assert word in text.split("positional arguments")[0], word


DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.name)
def test_docs_link_only_to_shipped_files(doc: Path) -> None:
    text = doc.read_text(encoding="utf-8")
    for target in re.findall(r"\]\(([^)#\s]+)", text):
        if "://" in target or target.startswith("mailto:"):
            continue
        assert (doc.parent / target).exists(), f"{doc.name} links to missing {target}"
    for name in re.findall(r"`((?:\.\./)?shared/[^`]+)`", text):
        pytest.fail(f"{doc.name} cites {name}, which is not shipped")


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.name)
def test_scripts_named_in_docs_exist(doc: Path) -> None:
    text = doc.read_text(encoding="utf-8")
    shipped = {p.name for p in ROOT.rglob("*.py") if ".venv" not in p.parts}
    for script in re.findall(r"`(?:[\w./-]*/)?([\w-]+\.py)`", text):
        assert script in shipped, f"{doc.name} names {script}, which does not exist"


def test_architecture_does_not_call_the_runtime_in_progress() -> None:
    text = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    assert "in progress" not in text


# ------------------------------------------------------------------------- item 24


def test_probe_missing_root_blames_the_root(capsys: pytest.CaptureFixture[str]) -> None:
    err = _fails(["probe", "--root", "/nonexistent/tree"], capsys)
    assert "--root '/nonexistent/tree' is not an existing directory" in err
    assert "--path" not in err


def test_probe_missing_env_root_names_the_variable(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("GREENCKPT_SYSROOT", "/nonexistent/tree")
    err = _fails(["probe"], capsys)
    assert "$GREENCKPT_SYSROOT=/nonexistent/tree is not an existing directory" in err


def test_probe_fake_root_without_path_says_why_storage_is_missing(
    proc_root: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["probe", "--root", str(proc_root), "--json"]) == 0
    caps = {c["name"]: c for c in json.loads(capsys.readouterr().out)["capabilities"]}
    assert caps["storage"]["available"] is False
    assert "no --path given" in caps["storage"]["summary"]


def test_full_target_says_how_much_in_a_readable_unit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    class Usage:
        free = 3 << 20

    monkeypatch.setattr("shutil.disk_usage", lambda _p: Usage())
    with pytest.raises(SweepError) as info:
        preflight(spec_for(tmp_path))  # the free space is checked before anything else
    message = str(info.value)
    assert "has 3 MiB free" in message and "0.00 GiB" not in message
    assert "the sweep writes 64 MiB at a time" in message
