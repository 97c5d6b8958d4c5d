"""``greenckpt probe`` lists every lever, present with its range or absent with its reason."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from greenckpt.cli.main import main
from greenckpt.platform.levers import LEVER_NAMES
from greenckpt.testing.cpu import build_tree
from tests.platform.fake_levers import build_node


def _levers(tree: Path, capsys: pytest.CaptureFixture[str]) -> dict[str, dict[str, object]]:
    assert main(["probe", "--root", str(tree), "--json"]) == 0
    caps = json.loads(capsys.readouterr().out)["capabilities"]
    return {c["name"].removeprefix("lever:"): c for c in caps if c["name"].startswith("lever:")}


def test_probe_lists_every_lever_with_its_range(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GREENCKPT_NVML_LIBRARY", "/nonexistent/libnvidia-ml.so.1")
    levers = _levers(build_node(tmp_path / "tree"), capsys)
    assert tuple(levers) == LEVER_NAMES
    assert levers["uncore frequency"]["available"] is True
    assert levers["uncore frequency"]["summary"] == "800000..2400000 kHz on 2 domains"
    assert "package: above 0 up to 250 W" in str(levers["power limit"]["summary"])
    assert levers["per-core split"]["available"] is True
    assert levers["gpu clocks"]["available"] is False and levers["gpu clocks"]["summary"]


def test_probe_on_a_vm_says_why_each_lever_is_absent(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    levers = _levers(build_tree("vm-no-cpufreq", tmp_path / "tree"), capsys)
    assert all(c["available"] is False and c["summary"] for c in levers.values())
    assert "intel_uncore_frequency" in str(levers["uncore frequency"]["summary"])
    assert main(["probe", "--root", str(tmp_path / "tree")]) == 0
    out = capsys.readouterr().out
    assert "lever:uncore frequency" in out and "lever:power limit" in out
