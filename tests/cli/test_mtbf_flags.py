"""One meaning of MTBF in every command that takes a failure rate (issue 15 item 5):
``--node-mtbf`` (with ``--nodes``) or ``--job-mtbf``; ``--mtbf`` is a documented alias of
``--node-mtbf``; both given, they agree (job = node / nodes) or it is a one-line error naming
both values, never a silent drop. Commands: plan, simulate, run, agent (``levels`` reads each
level's MTBF from its TOML file and ``demo`` states its own, so neither takes the flags).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import pytest

from greenckpt.cli.agent_cmd import _options as agent_options
from greenckpt.cli.main import build_parser, main
from greenckpt.cli.runtime_flags import failure_rate, node_options
from greenckpt.errors import InvalidValueError
from greenckpt.runtime.job_agents import agent_args
from greenckpt.units import format_duration
from tests.cli.test_cli import BASE as PLAN
from tests.cli.test_cli_run import greenckpt, vm_node
from tests.cli.test_cli_simulate import BASE as SIMULATE

FAILURE = ("--mtbf", "14h")


def _without_mtbf(argv: list[str]) -> list[str]:
    i = argv.index("--mtbf")
    return argv[:i] + argv[i + 2 :]


def _json(argv: list[str], capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    assert main([*argv, "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert isinstance(doc, dict)
    return doc


def _modelled(doc: dict[str, Any]) -> float:
    """The plan's expected time per unit of work as modelled (plan) or in the model column
    (simulate): it depends on the job's failure rate."""
    if "inputs" in doc:
        return float(doc["plan"]["expected_time_per_unit_s"]["total"])
    return float(doc["configurations"][0]["total s/unit"]["model_exact"])


def _one_line_error(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    with pytest.raises(SystemExit) as info:
        raise SystemExit(main(argv))
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    return err


@pytest.mark.parametrize("base", [PLAN, SIMULATE], ids=["plan", "simulate"])
def test_node_mtbf_is_mtbf_and_agreeing_job_mtbf_is_accepted(
    base: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    argv = _without_mtbf(base) + (["--seed", "1"] if base is SIMULATE else [])
    old = _json([*argv, "--mtbf", "14h", "--nodes", "4"], capsys)
    new = _json([*argv, "--node-mtbf", "14h", "--nodes", "4"], capsys)
    both = _json([*argv, "--node-mtbf", "14h", "--nodes", "4", "--job-mtbf", "3.5h"], capsys)
    job = _json([*argv, "--job-mtbf", "3.5h"], capsys)
    assert _modelled(old) == _modelled(new) == pytest.approx(_modelled(both))
    assert _modelled(both) == pytest.approx(_modelled(job))
    # Written rounded: 14 h over 3 nodes is 4 h 40 min, 280 min within 1 %.
    _json([*argv, "--node-mtbf", "14h", "--nodes", "3", "--job-mtbf", "279min"], capsys)


@pytest.mark.parametrize("base", [PLAN, SIMULATE], ids=["plan", "simulate"])
def test_disagreeing_node_and_job_mtbf_is_one_line_naming_both(
    base: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    argv = [*_without_mtbf(base), "--node-mtbf", "14h", "--nodes", "4", "--job-mtbf", "14h"]
    err = _one_line_error(argv, capsys)
    h14, implied = format_duration(14 * 3600), format_duration(3.5 * 3600)
    assert f"--node-mtbf {h14} and --job-mtbf {h14} disagree" in err
    assert f"job MTBF of {implied}" in err, err  # what they imply


@pytest.mark.parametrize("base", [PLAN, SIMULATE], ids=["plan", "simulate"])
def test_no_failure_rate_names_both_flags(
    base: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    err = _one_line_error(_without_mtbf(base), capsys)
    assert "--node-mtbf" in err and "--job-mtbf" in err


@pytest.mark.parametrize("command", ["plan", "simulate", "run", "agent"])
def test_help_documents_mtbf_as_the_alias_of_node_mtbf(
    command: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "400")  # no wrapping inside a flag's name
    with pytest.raises(SystemExit):
        main([command, "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "--node-mtbf" in text and "--job-mtbf" in text
    assert "--mtbf is an alias of --node-mtbf" in text


def test_run_takes_node_and_job_mtbf_that_agree(tmp_path: Path) -> None:
    proc = greenckpt(
        "run", "--node-mtbf", "8h", "--nodes", "4", "--job-mtbf", "2h", "--json", "--report",
        "rep", "--", "true", cwd=tmp_path, root=vm_node(tmp_path),
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    rate = json.loads(proc.stdout)["failure_rate"]
    assert rate["job_mtbf_s"] == pytest.approx(7200.0)
    assert rate["nodes"] == 4 and rate["node_mtbf_s"] == 28800.0
    assert "agrees with 4 node(s)" in rate["text"]


def test_run_refuses_disagreeing_mtbfs_before_anything_starts(tmp_path: Path) -> None:
    proc = greenckpt(
        "run", "--node-mtbf", "8h", "--nodes", "4", "--job-mtbf", "8h", "--", "true",
        cwd=tmp_path,
    )  # fmt: skip
    assert proc.returncode == 2
    assert proc.stderr.startswith("greenckpt run: error: ")
    assert len(proc.stderr.strip().splitlines()) == 1
    h8 = format_duration(8 * 3600)
    assert f"--node-mtbf {h8} and --job-mtbf {h8} disagree" in proc.stderr
    assert not (tmp_path / "greenckpt-report").exists()


AGENT = ["agent", "--node", "0", "--job-id", "j", "--socket", "s", "--leader", "h:1",
         "--output", "o"]  # fmt: skip


def test_agent_takes_the_same_flags_and_checks_agreement() -> None:
    parser = build_parser()
    ns = parser.parse_args([*AGENT, "--node-mtbf", "8h", "--nodes", "4", "--job-mtbf", "2h"])
    rate = failure_rate(ns)
    assert rate is not None and rate.rate == pytest.approx(1 / 7200)
    bad = parser.parse_args([*AGENT, "--mtbf", "8h", "--nodes", "4", "--job-mtbf", "1h"])
    with pytest.raises(InvalidValueError, match="disagree"):
        failure_rate(bad)


def test_the_job_leader_passes_its_agents_the_node_mtbf_and_every_profile() -> None:
    ns = build_parser().parse_args(
        ["run", "--node-mtbf", "8h", "--nodes", "4", "--job-mtbf", "2h", "--profile", "a.json",
         "--profile", "b.json", "--app-power", "20W", "--", "true"]
    )  # fmt: skip
    assert isinstance(ns, argparse.Namespace)
    options = node_options(ns)
    assert options.rate_per_s == pytest.approx(1 / 7200)  # 4 nodes x 8 h = the job's 2 h
    assert options.profiles == ("a.json", "b.json")
    agent = build_parser().parse_args([*AGENT, *agent_args(options)])
    assert agent_options(agent) == options  # typed options, not flags rebuilt as strings


def test_profile_run_adaptive_takes_node_mtbf_as_its_mtbf(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    parser = build_parser()
    argv = ["profile", "run", "d", "-o", "p.json", "--adaptive"]
    new = parser.parse_args([*argv, "--node-mtbf", "14h,1d"])
    old = parser.parse_args([*argv, "--mtbf", "14h", "--mtbf", "1d"])
    assert [m for g in new.mtbf for m in g] == [m for g in old.mtbf for m in g] == [50400, 86400]
    monkeypatch.setenv("COLUMNS", "400")
    with pytest.raises(SystemExit):
        main(["profile", "run", "--help"])
    assert "--mtbf is an alias of --node-mtbf" in " ".join(capsys.readouterr().out.split())
