"""The shipped study files (examples/studies/) are valid and their designs are as documented."""

from __future__ import annotations

import pytest

from greenckpt.study import design
from greenckpt.study.spec import load_study
from tests.conftest import ROOT

STUDIES = ROOT / "examples" / "studies"


@pytest.mark.parametrize(
    ("name", "cells", "runs"),
    [("wu2018", 8, 24), ("saito2013", 6, 18), ("moran2018", 6, 18), ("mills2013", 6, 18)],
)
def test_each_shipped_study_parses_with_its_design(name: str, cells: int, runs: int) -> None:
    study = load_study(STUDIES / f"{name}.toml")
    assert len(design.cells(study)) == cells and len(design.runs(study)) == runs
    assert study.mirrors and name.rstrip("0123456789") in study.mirrors.lower()
    assert study.baseline  # every study compares against a baseline
    readme = (STUDIES / "README.md").read_text()
    assert f"**{name}.toml**" in readme
