"""``greenckpt probe`` on this machine and on a fake Intel node: reports, changes nothing."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from greenckpt.cli.main import main
from greenckpt.platform.probe import probe
from greenckpt.platform.root import SysRoot
from tests.platform.fake_cpu import build_tree, diff, snapshot


def test_probe_this_machine(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["probe", "--path", str(tmp_path), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    caps = {c["name"]: c for c in doc["capabilities"]}
    # Some CPU meter is always selected; the estimator says it estimates.
    cpu_meters = [
        c for n, c in caps.items() if n in ("meter:rapl", "meter:perf", "meter:estimator")
    ]
    assert any(c["available"] for c in cpu_meters)
    if caps["meter:estimator"]["available"]:
        assert caps["meter:estimator"]["details"]["source"] == "estimated"
    for c in caps.values():
        assert c["available"] or c["summary"]  # every missing capability says why
    storage = caps[f"storage:{tmp_path}"]
    assert storage["available"] and storage["details"]["key"]


def test_probe_fake_intel_node_reads_and_changes_nothing(tmp_path: Path) -> None:
    tree = build_tree("intel-acpi-cpufreq", tmp_path / "tree")
    before = snapshot(tree)
    report = probe([], SysRoot(tree))
    caps = {c.name: c for c in report.capabilities}
    assert caps["cpufreq"].available
    assert "acpi-cpufreq" in caps["cpufreq"].summary
    assert "userspace" in caps["cpufreq"].details["policies"][0]["governors"]
    assert caps["cpuidle"].available
    assert not caps["meter:rapl"].available and caps["meter:rapl"].summary
    assert not caps["page-reporting"].available  # a bare-metal node: nothing goes back
    assert diff(before, snapshot(tree)) == []


def test_probe_reports_a_guest_handing_memory_back(tmp_path: Path) -> None:
    tree = build_tree("intel-acpi-cpufreq", tmp_path / "tree")
    params = tree / "sys/module/page_reporting/parameters"
    params.mkdir(parents=True)
    (params / "page_reporting_order").write_text("9\n")
    (params / "min_free_ms").write_text("0\n")
    before = snapshot(tree)
    caps = {c.name: c for c in probe([], SysRoot(tree)).capabilities}
    pr = caps["page-reporting"]
    assert pr.available and pr.details["min_free_ms"] == 0
    assert "as soon as it is freed" in pr.summary and "--page-reporting" in pr.summary
    assert diff(before, snapshot(tree)) == []


def test_probe_table_and_bad_path(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["probe"]) == 0
    assert "What greenckpt can use here" in capsys.readouterr().out
    assert main(["probe", "--path", "/nonexistent/ckpt"]) == 2
    err = capsys.readouterr().err
    assert "does not exist" in err and err.count("\n") == 1


def test_probe_survives_malformed_files_and_markup(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    tree = build_tree("intel-acpi-cpufreq", tmp_path / "tree")
    (tree / "sys/devices/system/cpu/cpufreq/policy0/affected_cpus").write_text("zz[/bold]\n")
    report = probe([], SysRoot(tree))
    cpufreq = next(c for c in report.capabilities if c.name == "cpufreq")
    assert not cpufreq.available and "affected_cpus" in cpufreq.summary
    assert main(["probe", "--root", str(tree), "--path", "/"]) in (0, 2)
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err and "MarkupError" not in captured.err
