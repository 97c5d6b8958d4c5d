"""``greenckpt profile import``: a profile from a CSV table (issue 20 item 5), its round trip
with ``greenckpt profile csv``, and a one-line error naming the CSV line for every bad row."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from greenckpt.cli.main import main
from greenckpt.optimize.profile_data import load_profile
from tests.conftest import ROOT

TABLE = """\
op,setting,processes,MB/s,W
write,1.4GHz,2,510,332.5
write,2.1,2,510,362.2
write,ondemand,2,480,350
read,2100000000,2,735,362.2
read,1.4GHz,1,600,330
"""


def test_a_typed_in_table_becomes_a_profile_the_planner_uses(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    csv_path, out = tmp_path / "paper.csv", tmp_path / "p.json"
    csv_path.write_text(TABLE)
    assert main(["profile", "import", str(csv_path), "-o", str(out), "--device", "iodrive"]) == 0
    profile = load_profile(out)
    assert len(profile.points) == 5 and not profile.synthetic
    first = profile.points[0]
    assert (first.op, first.frequency, first.processes) == ("write", 1.4e9, 2)
    assert (first.throughput, first.power, first.power_source) == (510e6, 332.5, "measured")
    assert profile.points[1].frequency == 2.1e9 and profile.points[2].governor == "ondemand"
    assert (
        "imported from CSV paper.csv" in profile.note
        and "not measured by greenckpt" in profile.note
    )
    capsys.readouterr()
    args = ["plan", "--profile", str(out), "--ckpt-size", "64GiB", "--mtbf", "14h"]
    assert main([*args, "--app-power", "471.1W", "--json"]) == 0
    plan = json.loads(capsys.readouterr().out)["plan"]
    assert plan["checkpoint"]["frequency_hz"] == 1.4e9  # same throughput, less power


def test_an_exported_profile_imports_back(tmp_path: Path) -> None:
    shipped = ROOT / "examples" / "profiles" / "synthetic-saito2013-iodrive.json"
    exported, back = tmp_path / "e.csv", tmp_path / "back.json"
    assert main(["profile", "csv", str(shipped), "-o", str(exported)]) == 0
    argv = ["profile", "import", str(exported), "-o", str(back), "--power-source", "synthetic"]
    assert main(argv) == 0
    original, again = load_profile(shipped), load_profile(back)
    assert again.synthetic
    key = [
        (p.op, p.frequency, p.governor, p.processes, p.throughput, p.power) for p in original.points
    ]
    assert [
        (p.op, p.frequency, p.governor, p.processes, p.throughput, p.power) for p in again.points
    ] == key


@pytest.mark.parametrize(
    ("row", "message"),
    [
        ("erase,1.4GHz,2,510,300", ":3: operation 'erase' is not write or read"),
        ("write,1.4GHz,2,0,300", ":3: MB/s and W must be numbers > 0"),
        ("write,1.4GHz,2,510,332.5", ":3: the same setting as line 2"),
        ("write,turbo,2,510,300", ":3: "),
        ("write,1.4GHz,0,510,300", ":3: processes must be >= 1"),
    ],
)
def test_a_bad_row_is_one_line_and_nothing_is_written(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], row: str, message: str
) -> None:
    csv_path, out = tmp_path / "t.csv", tmp_path / "p.json"
    csv_path.write_text("op,setting,processes,MB/s,W\nwrite,1.4GHz,2,510,332.5\n" + row + "\n")
    assert main(["profile", "import", str(csv_path), "-o", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"{csv_path}{message}" in err and "Traceback" not in err
    assert not out.exists()


def test_a_missing_column_names_what_the_header_needs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    csv_path = tmp_path / "t.csv"
    csv_path.write_text("op,setting,processes,W\nwrite,1.4GHz,2,300\n")
    assert main(["profile", "import", str(csv_path), "-o", str(tmp_path / "p.json")]) == 2
    assert f"{csv_path}:1: no mbps column" in capsys.readouterr().err
