"""A study's noise, its physics checks and what its injected failures did, on SYNTHETIC runs
(made-up numbers written by these tests, labelled estimated): nothing here is a result."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from greenckpt.study.checks import app_result, more_work
from greenckpt.study.summary import summarise, write_report


def write_study(
    out: Path,
    cells: dict[str, list[float]],
    *,
    factor: str = "checkpoint",
    baseline: str = "none",
    results: dict[str, list[str]] | None = None,
    checkpoint_share: float | None = None,
) -> None:
    """One factor's levels (``cells``: the seconds of each block's run), in blocks, the baseline
    first in every block; ``results``: the output.log of each run, by level."""
    out.mkdir()
    identity = {"name": "synthetic", "order": "blocks", "repeats": len(cells[baseline]),
                "factors": {factor: list(cells)}, "baseline": {factor: baseline}}  # fmt: skip
    (out / "study.json").write_text(json.dumps(identity))
    lines, number = [], 0
    for block in range(len(cells[baseline])):
        for level, seconds in cells.items():
            number += 1
            run = f"r{number:04d}"
            metrics = {"seconds": seconds[block], "cpu_s": 2 * seconds[block],
                       "energy_j": 8 * seconds[block], "power_source": "estimated"}  # fmt: skip
            if checkpoint_share is not None:
                io = seconds[block] * checkpoint_share
                metrics["useful_compute_s"] = seconds[block] - io
                metrics["by_kind"] = {
                    "compute": {
                        "seconds": seconds[block] - io,
                        "energy_j": 8 * (seconds[block] - io),
                    },
                    "checkpoint": {"seconds": io, "energy_j": 8 * io},
                }
            if results and level in results:
                (out / "runs" / run).mkdir(parents=True)
                (out / "runs" / run / "output.log").write_text(results[level][block])
            doc = {"run": run, "cell": f"{factor}={level}", "block": block,
                   "factors": {factor: level}, "ok": True, "metrics": metrics}  # fmt: skip
            lines.append(json.dumps(doc | {"report": f"runs/{run}/report"}))
    (out / "runs.jsonl").write_text("\n".join(lines) + "\n")


def cell(summary: dict[str, Any], name: str) -> dict[str, Any]:
    return next(c for c in summary["cells"] if c["cell"] == name)


def test_more_work_is_the_baseline_plus_checkpoints_or_failures() -> None:
    base = {"checkpoint": "none", "failure": "none"}
    assert more_work({"checkpoint": "ckp(1,2,3,4)", "failure": "none"}, base)
    assert more_work({"checkpoint": "none", "failure": "bitflip@1/1s"}, base)
    assert not more_work({"checkpoint": "none", "failure": "none"}, base)
    assert not more_work({"io_processes": 1}, {"io_processes": 4})
    assert not more_work({"checkpoint": "app"}, {"checkpoint": "ckp(1,0,0,0)"})


def test_a_checkpointing_cell_cheaper_beyond_the_noise_is_implausible(tmp_path: Path) -> None:
    # the wu2018 shape: the baseline's runs slow (a loaded machine), the checkpointing runs fast
    out = tmp_path / "s"
    write_study(out, {"none": [10.7, 12.7, 13.3], "ckp(1,2,3,4)": [8.0, 8.6, 8.9],
                      "app": [10.8, 12.6, 13.5]})  # fmt: skip
    summary = summarise(out)
    bad = cell(summary, "checkpoint=ckp(1,2,3,4)")
    assert bad["more_work_than_baseline"]
    assert bad["eq2_pct"]["seconds"]["high"] < 0  # the interval excludes 0...
    flagged = bad["implausible"]["seconds"]
    assert "not a saving" in flagged["why"]  # ...so it is flagged, never a saving
    causes = " ".join(flagged["likely_causes"])
    assert "noise: 3 pairs" in causes and "order: the baseline ran before" in causes
    assert set(bad["implausible"]) == {"seconds", "cpu_s", "energy_j"}
    ok = cell(summary, "checkpoint=app")
    assert "implausible" not in ok and ok["eq2_pct"]["seconds"]["undecided"]
    line = next(x for x in summary["conclusions"] if x.startswith("checkpoint=ckp(1,2,3,4) vs"))
    assert "IMPLAUSIBLE" in line and "time (measured)" in line
    assert line.index("time (measured)") < line.index("energy (estimated)")
    noise = summary["noise"]["seconds"]
    assert noise["baseline_values"] == [10.7, 12.7, 13.3] and noise["n"] == 3
    assert noise["baseline_cv_pct"] == pytest.approx(12.2, abs=0.1)  # sd of the logs 0.115
    assert noise["resolvable_pct"] > 5
    assert summary["measured"]["seconds"].startswith("measured")
    assert summary["measured"]["energy_j"] == "estimated"
    page = write_report(out).read_text()
    assert "IMPLAUSIBLE" in page and "Noise: what this study can resolve" in page
    assert page.index("Time and CPU-seconds (measured)") < page.index("Energy and power")
    head = (out / "cells.csv").read_text().splitlines()[0]
    assert "seconds_implausible" in head


@pytest.mark.parametrize(("share", "flagged"), [(0.04, True), (0.5, False), (None, False)])
def test_an_io_only_change_cannot_save_more_than_the_baseline_spent_outside_compute(
    tmp_path: Path, share: float | None, flagged: bool
) -> None:
    # the moran2018 shape: zstd checkpoints 30 % faster overall, where checkpoints took 4 %
    out = tmp_path / "s"
    write_study(out, {"4": [10.0, 11.0, 12.0], "1": [7.0, 7.8, 8.3]}, factor="io_processes",
                baseline="4", checkpoint_share=share)  # fmt: skip
    summary = summarise(out)
    one = cell(summary, "io_processes=1")
    assert not one["more_work_than_baseline"] and one["io_only_vs_baseline"]
    assert one["eq2_pct"]["seconds"]["high"] < -4
    assert ("implausible" in one) == flagged  # half the time in checkpoints: a saving; unknown: -
    if share is not None:  # measured within each run: 4 % of the time is 4/96 of compute
        over = one["overhead_pct"]
        assert over["mean"] == pytest.approx(share / (1 - share) * 100)
        assert over["low"] == pytest.approx(over["mean"]) and over["n"] == 3
        diff = one["overhead_vs_baseline_pp"]  # the same share in both, block by block
        assert diff["mean"] == pytest.approx(0.0, abs=1e-9) and diff["n"] == 3
    if flagged:
        assert one["implausible"]["seconds"]["limit_pct"] == pytest.approx(-4.0)
        assert "can save at most the 4.0 %" in one["implausible"]["seconds"]["why"]
        line = next(x for x in summary["conclusions"] if x.startswith("io_processes=1 vs"))
        assert "IMPLAUSIBLE: it changes only how checkpoints are written" in line


def test_a_cheaper_cell_of_another_factor_is_not_judged(tmp_path: Path) -> None:
    out = tmp_path / "s"
    write_study(out, {"performance": [10.0, 11.0, 12.0], "profile": [7.0, 7.8, 8.3]},
                factor="policy", baseline="performance", checkpoint_share=0.04)  # fmt: skip
    profile = cell(summarise(out), "policy=profile")
    assert not profile["more_work_than_baseline"] and not profile["io_only_vs_baseline"]
    assert "implausible" not in profile and profile["eq2_pct"]["seconds"]["high"] < 0


def result(digest: str, **more: Any) -> str:
    doc = {"digest": digest, "restored": None, "checkpoints": 3, "bitflips": 0, **more}
    return "heat2d: no checkpoint: starting from the beginning\n" + json.dumps(doc) + "\n"


def test_what_each_injected_failure_did(tmp_path: Path) -> None:
    out = tmp_path / "s"
    same, other = result("aa", bitflips=12), result("bb", bitflips=9)
    restarted = (
        "heat2d: restored checkpoint 3 (level 2, iteration 30) in 0.1 s\n"
        "heat2d:   skipped checkpoint 4 (level 1): digest mismatch\n"
        + result("aa", restored={"id": 3, "level": 2, "iteration": 30})
    )
    write_study(
        out,
        {"none": [10.0, 10.1], "bitflip@1/1s": [10.0, 10.2], "kill@35it": [12.0, 12.2]},
        factor="failure",
        results={"none": [result("aa"), result("aa")], "bitflip@1/1s": [same, other],
                 "kill@35it": [restarted, "no result: crashed\n"]},
    )  # fmt: skip
    summary = summarise(out)
    flips = cell(summary, "failure=bitflip@1/1s")["failures"]
    assert flips["counts"] == {"changed result": 1, "no effect": 1}
    first = flips["runs"][0]
    assert first["outcome"] == "no effect" and first["bitflips"] == 12
    assert "none detected" in first["summary"] and "result identical" in first["summary"]
    kill = cell(summary, "failure=kill@35it")["failures"]
    assert kill["runs"][0]["outcome"] == "restart" and kill["runs"][0]["restart_level"] == 2
    assert kill["runs"][0]["detected"] and "digest check rejected 1" in kill["runs"][0]["summary"]
    assert kill["runs"][1]["outcome"] == "no result"
    assert "failures" not in cell(summary, "failure=none")
    page = write_report(out).read_text()
    assert "What each injected failure did" in page and "restart read" in page


def test_app_result_reads_the_last_result_line(tmp_path: Path) -> None:
    (tmp_path / "output.log").write_text(result("aa") + "noise {not json\n" + result("cc"))
    found = app_result(tmp_path)
    assert found is not None and found["digest"] == "cc" and found["skipped"] == []
    assert app_result(tmp_path / "missing") is None
