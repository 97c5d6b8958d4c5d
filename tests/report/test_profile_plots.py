"""The profile figures: every file is written, readable, and says where its power came from."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest

from greenckpt.optimize.profile_data import Profile, load_profile, profile_from_json
from greenckpt.report.profile_plots import FIGURE_NAMES, plot_profile, power_label
from tests.conftest import EXAMPLE_PROFILE

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
DC_DESCRIPTION = "{http://purl.org/dc/elements/1.1/}description"
FMTS = ("svg", "pdf")


def _texts(svg: Path) -> set[str]:
    """The strings drawn in an SVG (matplotlib writes each drawn text as a comment)."""
    return {t.strip() for t in re.findall(r"<!-- (.*?) -->", svg.read_text(encoding="utf-8"), re.S)}


def _check_svg(path: Path, label: str) -> None:
    root = ET.parse(path).getroot()
    assert root.tag == "{http://www.w3.org/2000/svg}svg"
    descriptions = [e.text for e in root.iter(DC_DESCRIPTION)]
    assert descriptions == [label]
    assert any(label in t for t in _texts(path)), "the footer states the power source"


def _uncontrolled_doc(sizes: tuple[int, ...] = (2**20, 2**30)) -> dict[str, Any]:
    """A VM-like profile: no cpufreq control, measured with RAPL, two sizes, one codec run."""

    def pt(op: str, n: int, thr: float, pw: float, size: int, **extra: Any) -> dict[str, Any]:
        return {
            "op": op,
            "frequency_hz": None,
            "governor": None,
            "processes": n,
            "codec": None,
            "cstates": None,
            "throughput_Bps": thr,
            "power_W": pw,
            "power_source": "measured",
            "size_bytes": size,
            **extra,
        }

    points = []
    for size in sizes:
        for n in (1, 2, 4):
            spread = {"throughput_spread_Bps": 4e6, "power_spread_W": 1.5}
            points.append(pt("write", n, 1.0e8 * n * size / 2**30, 100.0 + n, size, **spread))
            points.append(pt("read", n, 2.0e8 * n, 90.0 + n, size))
    points.append(pt("write", 1, 3.0e8, 120.0, sizes[-1], codec="zstd"))
    if len(sizes) > 1:  # leave one cell of the largest size unmeasured: write, 2 processes
        points = [
            p for p in points if (p["op"], p["processes"], p["size_bytes"]) != ("write", 2, 2**30)
        ]
    return {
        "format": "greenckpt-profile",
        "format_version": 2,
        "synthetic": False,
        "meters": ["rapl"],
        "machine": {"hostname": "vm-under-test"},
        "points": points,
    }


@pytest.fixture(scope="module")
def example() -> Profile:
    return load_profile(EXAMPLE_PROFILE)


@pytest.fixture(scope="module")
def example_files(example: Profile, tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    out = tmp_path_factory.mktemp("plots") / "nested" / "dir"
    return plot_profile(example, out, ("png", "svg"))


def test_example_writes_every_figure_in_every_format(example_files: list[Path]) -> None:
    expected = [f"{name}.{fmt}" for name in FIGURE_NAMES for fmt in ("png", "svg")]
    assert [p.name for p in example_files] == expected
    assert len({p.parent for p in example_files}) == 1
    assert sorted(p.name for p in example_files[0].parent.iterdir()) == sorted(expected)
    for path in example_files:
        data = path.read_bytes()
        assert len(data) > 1000, path
        if path.suffix == ".png":
            assert data.startswith(PNG_MAGIC), path


def test_example_svgs_say_synthetic(example: Profile, example_files: list[Path]) -> None:
    label = power_label(example)
    assert label == "power: SYNTHETIC — not a measurement"
    for path in (p for p in example_files if p.suffix == ".svg"):
        _check_svg(path, label)
        texts = _texts(path)
        assert any(t.startswith("SYNTHETIC — ") for t in texts), path  # the title, too
        assert any("SYNTHETIC" in t and "not a measurement" in t for t in texts), path


def test_governor_points_are_labelled(example_files: list[Path]) -> None:
    for name in ("throughput-vs-frequency", "power-vs-frequency", "energy-heatmap"):
        texts = _texts(next(p for p in example_files if p.name == f"{name}.svg"))
        assert "ondemand" in texts, name
        assert {"0.80", "2.10"} <= texts or {"0.80 GHz", "2.10 GHz"} <= texts, name


def test_energy_bars_compare_the_optimum_with_the_baselines(
    example: Profile, example_files: list[Path]
) -> None:
    texts = _texts(next(p for p in example_files if p.name == "energy-per-mb.svg"))
    for op in ("write", "read"):
        points = example.for_op(op)
        best = min(points, key=lambda p: p.energy_per_byte)
        assert f"{best.setting_label}, {best.processes}p" in texts
        assert f"{best.energy_per_byte * 1e6:.3g} J" in texts
        most = max(example.process_counts)
        for label in ("2.10 GHz", "0.80 GHz", "ondemand"):
            assert f"{label}, {most}p" in texts
    assert {"lowest energy", "max frequency", "min frequency", "ondemand"} <= texts


def test_uncontrolled_profile_gives_category_plots(tmp_path: Path) -> None:
    profile = profile_from_json(_uncontrolled_doc())
    assert all(p.uncontrolled for p in profile.points)
    label = power_label(profile)
    assert label == "power: measured (rapl)"
    paths = plot_profile(profile, tmp_path, ("svg", "PDF", "svg"))
    assert [p.name for p in paths] == [f"{name}.{fmt}" for name in FIGURE_NAMES for fmt in FMTS]
    for path in paths:
        data = path.read_bytes()
        assert data, path
        if path.suffix == ".pdf":
            assert data.startswith(b"%PDF")
        else:
            _check_svg(path, label)
            texts = _texts(path)
            assert not any("SYNTHETIC" in t for t in texts), path
            assert any("largest of 1 MiB, 1 GiB" in t for t in texts), path
            assert any("variant shown: uncompressed" in t for t in texts), path
    freq = _texts(tmp_path / "throughput-vs-frequency.svg")
    assert "as found" in freq
    assert "CPU setting (frequency not fixed)" in freq
    # J/GB at 1 GiB: write 10 * (100 + n) / n, read 5 * (90 + n) / n; write n=2 was not measured
    heat = _texts(tmp_path / "energy-heatmap.svg")
    assert {"1010", "260", "455", "230"} <= heat
    assert "510" not in heat  # the unmeasured cell is blank ...
    drawn = re.findall(r"<!-- (.*?) -->", (tmp_path / "energy-heatmap.svg").read_text("utf-8"))
    assert drawn.count("2") == 2  # ... but its column is there in both panels


def test_estimated_and_mixed_sources_are_all_named() -> None:
    doc = _uncontrolled_doc(sizes=(2**30,))
    doc["points"][0]["power_source"] = "estimated"
    label = power_label(profile_from_json(doc))
    assert label.startswith("power: measured (rapl); estimated")


@pytest.mark.parametrize("formats", [("gif",), ("png", "jpeg"), ()])
def test_bad_format_raises_before_writing(
    example: Profile, tmp_path: Path, formats: tuple[str, ...]
) -> None:
    out = tmp_path / "never"
    with pytest.raises(ValueError, match="png, svg, pdf") as info:
        plot_profile(example, out, formats)
    assert "\n" not in str(info.value)
    assert not out.exists()
