"""The job report's comparison and model (issue 15 item 2), end to end over 2 emulated nodes.

A tiny job run twice — once with ``--policy performance`` as the baseline, once compared
with it through ``--compare`` — prints wu2018 Eq. 2 percentages (runtime, power, energy, EPE)
in the text and writes them in the JSON, and draws ``job-power.png`` next to the job report.
Given the model's inputs (``--profile``, ``--app-power``, ``--mtbf`` with ``--nodes``), the
job's modelled EPE is the sum of its nodes' (each node's report has its own) and stands next
to the observed one; without them, the note names the missing inputs."""

from __future__ import annotations

import json
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from tests.cli.test_cli_run import greenckpt
from tests.cli.test_cli_run_and_demo_output import _profile

# Computes 0.1 s, then a level-1 checkpoint of 1 MiB under argv[1] on each node; twice.
APP = textwrap.dedent(
    """
    import sys, time
    from greenckpt.ckpt.notify_client import hook_from_env
    hook = hook_from_env()
    for _ in range(2):
        time.sleep(0.1)
        for node in range(int(sys.argv[2])):  # one node's socket at a time
            hook.begin("checkpoint", level=1, path=sys.argv[1], size=1 << 20, node=node)
            time.sleep(0.03)
            hook.end("checkpoint", node=node, ok=True, seconds=0.03)
    """
)


def _job(tmp_path: Path, report: str, *args: str) -> tuple[str, dict[str, Any]]:
    proc = greenckpt(
        "run", "--nodes-emulated", "2", "--no-control", "-o", report, *args, "--",
        sys.executable, "-c", APP, str(tmp_path), "2", cwd=tmp_path,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout, json.loads((tmp_path / report / "job-report.json").read_text())


def test_compare_with_a_baseline_job_prints_and_writes_wu2018_percentages(
    tmp_path: Path,
) -> None:
    _, base = _job(tmp_path, "base", "--policy", "performance")
    assert base["states"]["finished"] == [0, 1] and base["comparisons"] == []
    baseline = str(tmp_path / "base" / "job-report.json")
    text, doc = _job(tmp_path, "rep", "--policy", "defaults", "--compare", baseline)
    [c] = doc["comparisons"]
    assert c["baseline"] == baseline and c["source"] in ("measured", "estimated")
    for key in ("runtime_pct", "power_pct", "energy_pct", "epe_pct"):
        assert isinstance(c[key], float), (key, c)
    expected = 100.0 * (doc["total"]["energy_j"] - base["total"]["energy_j"])
    assert c["energy_pct"] == pytest.approx(expected / base["total"]["energy_j"])
    line = next(x for x in text.splitlines() if x.startswith("vs baseline job"))
    assert "wu2018 Eq. 2" in line and baseline in line
    assert f"energy {c['energy_pct']:+.2f} %" in line and f"EPE {c['epe_pct']:+.2f} %" in line
    png = tmp_path / "rep" / "job-power.png"
    assert png.read_bytes()[:4] == b"\x89PNG" and "rep/job-power.png" in text


def test_the_modelled_job_epe_sums_the_nodes_and_says_what_is_missing(tmp_path: Path) -> None:
    profile = _profile(tmp_path)
    text, doc = _job(
        tmp_path, "model", "--profile", str(profile), "--app-power", "20W",
        "--mtbf", "8h", "--nodes", "2",
    )  # fmt: skip
    nodes = [
        json.loads((tmp_path / "model" / "nodes" / f"node{k}" / "report.json").read_text())
        for k in range(2)
    ]
    per_node = [n["epe"]["predicted_w"] for n in nodes]
    assert all(isinstance(w, float) and w > 0 for w in per_node), per_node
    epe = doc["epe"]
    assert epe["modelled_w"] == pytest.approx(sum(per_node))
    assert epe["modelled_source"] in ("measured", "estimated", "synthetic")
    assert [r["modelled_epe_w"] for r in doc["nodes"]] == pytest.approx(per_node)
    assert "sum of 2 finished node(s)' modelled EPEs" in epe["modelled_note"]
    assert isinstance(epe["observed_vs_modelled_pct"], float)
    assert f"modelled {epe['modelled_w']:.2f} W" in text
    _, bare = _job(tmp_path, "bare")
    assert bare["epe"]["modelled_w"] is None
    note = bare["epe"]["modelled_note"]
    assert note.startswith("no modelled job EPE: node(s) 0-1: the model needs --profile")
    assert "--app-power" in note
