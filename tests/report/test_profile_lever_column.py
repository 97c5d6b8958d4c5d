"""``greenckpt profile show`` names each point's levers beyond the core clock (issue 33): two
points that differ only by their uncore frequency or power limit must not print as two
identical rows; a profile without levers prints no such column.

The profile is examples/profiles/synthetic-levers.json (SYNTHETIC: made-up figures).
"""

from __future__ import annotations

import pytest

from greenckpt.cli.main import main
from tests.conftest import ROOT

LEVERS = str(ROOT / "examples" / "profiles" / "synthetic-levers.json")
PLAIN = str(ROOT / "examples" / "profiles" / "synthetic-saito2013-iodrive.json")


def _rows(out: str, setting: str, processes: str) -> list[str]:
    return [
        " ".join(line.split())
        for line in out.splitlines()
        if line.startswith("write") and f" {setting} " in line and f" {processes} " in line
    ]


def test_points_that_differ_by_a_lever_print_apart(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "160")
    assert main(["profile", "show", LEVERS]) == 0
    out = capsys.readouterr().out
    assert "levers (else as found)" in out
    rows = _rows(out, "1.80 GHz", "4")
    assert any(r.startswith("write 1.80 GHz - 4 ") for r in rows), rows
    assert any("uncore 1.20 GHz 4" in r for r in rows) and any(
        "uncore 1.80 GHz 4" in r for r in rows
    )
    assert len(set(rows)) == len(rows) >= 3


def test_a_profile_without_levers_has_no_lever_column(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "160")
    assert main(["profile", "show", PLAIN]) == 0
    assert "levers" not in capsys.readouterr().out
