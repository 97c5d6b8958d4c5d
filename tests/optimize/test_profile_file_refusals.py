"""Profile files: duplicated cells and non-regular files are refused (issue 18, item 20).

Every profile here is SYNTHETIC.
"""

from __future__ import annotations

import json
import os
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from greenckpt.cli.main import main
from greenckpt.optimize import ProfileError, Scenario, load_profile, plan, profile_from_json
from tests.conftest import small_profile_doc

GIB = 2**30
SCN = Scenario(ckpt_size=8 * GIB, rate=1 / 7200, app_power=250.0)


def with_copy(doc: dict[str, Any], index: int, **changes: Any) -> dict[str, Any]:
    doc["points"].append({**doc["points"][index], **changes})
    return doc


def test_a_duplicated_cell_is_refused_naming_both_copies() -> None:
    doc = with_copy(small_profile_doc(), 1, throughput_Bps=4000e6)  # write 2 GHz, 1 process
    with pytest.raises(ProfileError) as info:
        profile_from_json(doc)
    message = str(info.value)
    assert "points[1]" in message and "points[8]" in message
    assert "write" in message and "2.00 GHz" in message and "1 I/O process" in message
    assert "\n" not in message


def test_the_duplicate_would_have_changed_the_plan() -> None:
    """Why it matters: a copy with 10x throughput would win the plan if it were let through
    (here shown by putting the same figure in place of the original)."""
    original = profile_from_json(small_profile_doc())
    assert plan(original, SCN).best.write.throughput != 3000e6
    faster = replace(original.points[2], throughput=3000e6)
    swapped = replace(original, points=(*original.points[:2], faster, *original.points[3:]))
    assert plan(swapped, SCN).best.write.throughput == 3000e6
    with pytest.raises(ProfileError, match="twice"):
        profile_from_json(with_copy(small_profile_doc(), 2, throughput_Bps=3000e6))


def test_the_planner_refuses_a_profile_object_with_duplicates() -> None:
    original = profile_from_json(small_profile_doc())
    doubled = replace(original, points=(*original.points, original.points[0]))
    with pytest.raises(ProfileError, match="twice"):
        plan(doubled, SCN)


@pytest.mark.parametrize(
    "changes",
    [
        {"codec": "zstd:3"},
        {"cstates": False},
        {"size_bytes": 2**28},
        {"frequency_hz": None, "governor": "performance"},
        {"op": "read"},
    ],
    ids=["codec", "cstates", "size", "governor", "op"],
)
def test_points_that_differ_in_a_setting_are_not_duplicates(changes: dict[str, Any]) -> None:
    doc = small_profile_doc()
    doc["format_version"] = 2
    doc["points"] = [p for p in doc["points"] if p["op"] == "write"]
    doc["points"].append({**doc["points"][0], **changes})
    assert len(profile_from_json(doc).points) == 5


def test_a_fifo_is_refused_without_blocking(tmp_path: Path, alarm: None) -> None:
    fifo = tmp_path / "profile.json"
    os.mkfifo(fifo)
    with pytest.raises(ProfileError, match="not a regular file") as info:
        load_profile(fifo)
    assert "FIFO" in str(info.value)


def test_a_directory_and_a_device_are_refused(tmp_path: Path, alarm: None) -> None:
    with pytest.raises(ProfileError, match="it is a directory"):
        load_profile(tmp_path)
    with pytest.raises(ProfileError, match="not a regular file"):
        load_profile("/dev/zero")


def test_a_symlink_to_a_profile_is_read(tmp_path: Path) -> None:
    target = tmp_path / "real.json"
    target.write_text(json.dumps(small_profile_doc()))
    link = tmp_path / "link.json"
    link.symlink_to(target)
    assert len(load_profile(link).points) == 8


def test_cli_plan_on_a_fifo_is_one_line_exit_2(
    tmp_path: Path, alarm: None, capsys: pytest.CaptureFixture[str]
) -> None:
    fifo = tmp_path / "p.json"
    os.mkfifo(fifo)
    argv = ["plan", "--profile", str(fifo), "--ckpt-size", "8GiB", "--mtbf", "2h"]
    assert main([*argv, "--app-power", "250W"]) == 2
    err = capsys.readouterr().err.strip()
    assert "not a regular file" in err and "Traceback" not in err
    assert len(err.splitlines()) == 1


def test_cli_plan_on_a_duplicated_profile_is_one_line_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "dup.json"
    path.write_text(json.dumps(with_copy(small_profile_doc(), 0)))
    argv = ["plan", "--profile", str(path), "--ckpt-size", "8GiB", "--mtbf", "2h"]
    assert main([*argv, "--app-power", "250W"]) == 2
    err = capsys.readouterr().err.strip()
    assert "twice" in err and len(err.splitlines()) == 1
