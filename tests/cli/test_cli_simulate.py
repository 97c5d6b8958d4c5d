"""``greenckpt simulate``: model and simulation side by side, failure laws, bad input."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from greenckpt.cli.main import main
from tests.conftest import EXAMPLE_PROFILE

BASE = [
    "simulate",
    "--profile",
    str(EXAMPLE_PROFILE),
    "--ckpt-size",
    "64GiB",
    "--mtbf",
    "14h",
    "--app-power",
    "471.1W",
    "--units",
    "200000",
]


def test_simulation_agrees_with_the_exact_model(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([*BASE, "--json", "--confidence", "99.9%", "--seed", "3"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["power_source"] == "synthetic"
    names = [c["name"] for c in doc["configurations"]]
    assert names == ["plan", "performance", "powersave", "ondemand"]
    for conf in doc["configurations"]:
        assert conf["units"] >= 200000
        for quantity in ("compute s/unit", "checkpoint s/unit", "restart s/unit", "total s/unit"):
            row = conf[quantity]
            assert row["in_ci"], (conf["name"], quantity, row)
        # The paper's restart term misses the restarts after failures in compute.
        r = conf["restart s/unit"]
        assert r["model_saito2013"] < r["ci"][0]


def test_table_output_and_weibull(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([*BASE, "--failures", "weibull", "--weibull-shape", "0.6"]) == 0
    out = capsys.readouterr().out
    assert "Weibull (shape 0.6)" in out and "model assumes exponential" in out
    assert "EPE W" in out and "SYNTHETIC profile" in out
    # Clustered failures (shape < 1) waste less per unit than Poisson ones at the same MTBF.
    assert main([*BASE, "--json", "--failures", "weibull", "--weibull-shape", "0.6"]) == 0
    weibull = json.loads(capsys.readouterr().out)["configurations"][0]["total s/unit"]
    assert weibull["simulated"] < weibull["model_exact"]
    assert not weibull["in_ci"]


def test_exact_column_is_exact_whatever_form_the_planner_used(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main([*BASE, "--json", "--form", "saito2013", "--confidence", "99.9%"]) == 0
    doc = json.loads(capsys.readouterr().out)
    for conf in doc["configurations"]:
        restart = conf["restart s/unit"]
        assert restart["model_exact"] != restart["model_saito2013"]
        assert restart["in_ci"] and abs(restart["z"]) < 4


def test_trace_replay(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    trace = tmp_path / "failures.txt"
    trace.write_text("100\n5000\n5200\n90000\n400000\n")
    assert main([*BASE, "--trace", str(trace), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["failures"].startswith("replayed trace")
    assert doc["configurations"][0]["failures"] == 5


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--trace", "/nonexistent/trace.txt"], "cannot read trace file"),
        (["--units", "0"], "must be an integer from 1"),
        (["--failures", "lognormal"], "invalid choice"),
        (["--confidence", "150%"], "--confidence must be between"),
        (["--confidence", "100%"], "--confidence must be between"),
        (["--seed", "-1"], "argument --seed"),
        (["--failures", "weibull", "--weibull-shape", "0"], "must be a finite number > 0"),
        (["--failures", "weibull", "--weibull-shape", "0.001"], "too small"),
    ],
)
def test_bad_input(extra: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        raise SystemExit(main([*BASE, *extra]))
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1 and "Traceback" not in err


def test_unreadable_trace_contents(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    trace = tmp_path / "t.txt"
    trace.write_text("12:00\n")
    assert main([*BASE, "--trace", str(trace)]) == 2
    assert "every line must be a failure time" in capsys.readouterr().err


def test_one_unit_gives_strict_json(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([*BASE[:-2], "--units", "1", "--json"]) == 0
    text = capsys.readouterr().out
    assert "NaN" not in text and "Infinity" not in text
    json.loads(text)
