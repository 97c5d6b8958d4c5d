"""``greenckpt profile``: real sweeps on this machine (tiny sizes) and every action on them.

The sweeps are real — the I/O engine writes and reads files under ``tmp_path`` while the
utilisation estimator meters the node — but small (8 MiB, one repetition, no warm-up, no idle
or waiting-power measurement), so the whole module takes seconds. The frequency is left as
found: on a node without cpufreq (a VM) that is the default; elsewhere the tests ask for it,
so they never change the node's settings.
"""

from __future__ import annotations

import io
import json
import subprocess
import sys
from collections.abc import Iterator
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from greenckpt.cli import profile_cmd
from greenckpt.cli.main import main
from greenckpt.optimize.profile_data import Operation, load_profile, profile_from_json
from greenckpt.profile.export import CSV_COLUMNS
from greenckpt.profile.grid import Cell, CpuSetting
from greenckpt.profile.measure import NodeMeasurer, RunResult
from greenckpt.profile.preflight import default_settings
from greenckpt.profile.progress import Eta
from greenckpt.report.profile_plots import FIGURE_NAMES

NO_CPUFREQ = default_settings() == (CpuSetting.uncontrolled(),)
AS_FOUND = [] if NO_CPUFREQ else ["--frequencies", "asfound"]
TINY = [
    *AS_FOUND,
    "--size",
    "8MiB",
    "--repeats",
    "1",
    "--warmup",
    "0",
    "--idle",
    "0",
    "--waiting-seconds",
    "0",
    "--meters",
    "estimator",
]


def sweep_args(data: Path, out: Path, *extra: str) -> list[str]:
    return ["profile", "run", str(data), "-o", str(out), *TINY, *extra]


def fails(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    """Run ``argv``; assert exit status 2 and exactly one line on stderr; return that line."""
    with pytest.raises(SystemExit) as info:
        raise SystemExit(main(argv))
    assert info.value.code == 2
    captured = capsys.readouterr()
    assert captured.err.count("\n") == 1, captured.err
    assert "Traceback" not in captured.err
    return captured.err


@pytest.fixture(scope="module")
def swept(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, Path, str]]:
    """One real sweep (1 and 2 processes): the data directory, the profile and stdout."""
    root = tmp_path_factory.mktemp("swept")
    data = root / "data"
    data.mkdir()
    out = root / "out.json"
    stdout, stderr = io.StringIO(), io.StringIO()
    with redirect_stdout(stdout), redirect_stderr(stderr):
        code = main(sweep_args(data, out, "--processes", "1,2", "--quiet"))
    assert code == 0, stderr.getvalue()
    yield data, out, stdout.getvalue()


def test_run_writes_a_complete_profile_with_estimated_power(swept: tuple[Path, Path, str]) -> None:
    data, out, stdout = swept
    prof = load_profile(out)
    assert prof.status == "complete"
    assert len(prof.points) == 4
    assert {(p.op, p.processes) for p in prof.points} == {
        ("write", 1),
        ("read", 1),
        ("write", 2),
        ("read", 2),
    }
    for p in prof.points:
        assert p.power_source == "estimated"
        assert p.uncontrolled and p.setting_label == "as found"
        assert p.size == 8 << 20 and p.repetitions == 1
        assert p.throughput > 0 and p.power > 0
    assert prof.meters == ("estimator",)
    assert prof.power_domains == ("estimator/cpu",)
    assert prof.sweep["mode"] == "full" and len(prof.sweep["done"]) == 2
    assert "estimated" in str(prof.sweep["power_scope"])
    assert prof.idle_power is None  # --idle 0
    assert list(data.iterdir()) == []  # the sweep's files are gone
    assert "status: complete" in stdout and "estimated" in stdout


def test_codec_sweep_on_the_real_disk(tmp_path: Path) -> None:
    """Codecs are swept through the real engine: each codec's points record the data kind and
    the compression ratio the writes achieved, and the table shows them."""
    data = tmp_path / "data"
    data.mkdir()
    out = tmp_path / "out.json"
    stdout, stderr = io.StringIO(), io.StringIO()
    with redirect_stdout(stdout), redirect_stderr(stderr):
        code = main(sweep_args(data, out, "--processes", "1", "--codecs", "none,zstd:1,lz4"))
    assert code == 0, stderr.getvalue()
    prof = load_profile(out)
    assert {p.codec for p in prof.points} == {None, "zstd:1", "lz4"}
    for p in prof.points:
        assert p.data == "field"  # codecs swept: every cell writes simulation-like data
        if p.codec is None:
            assert p.compression_ratio is None
        else:
            assert p.compression_ratio is not None and 1.1 < p.compression_ratio < 1.6
    assert prof.sweep["spec"]["codecs"] == [None, "zstd:1", "lz4"]
    assert "data written: field" in stdout.getvalue()
    assert "zstd:1 1." in stdout.getvalue()
    assert list(data.iterdir()) == []


def test_show(swept: tuple[Path, Path, str], capsys: pytest.CaptureFixture[str]) -> None:
    _, out, _ = swept
    assert main(["profile", "show", str(out)]) == 0
    text = capsys.readouterr().out
    assert "status: complete, 2 of 2 cells measured" in text
    assert "power domains: estimator/cpu" in text
    assert "idle power: not measured" in text
    assert "power: estimated" in text  # the footer names the power source
    assert text.count("estimated") >= 4 + 1  # and every row does too
    assert "SYNTHETIC" not in text
    assert main(["profile", "show", str(out), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert profile_from_json(doc) == load_profile(out)


def test_csv_to_stdout_and_file(
    swept: tuple[Path, Path, str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _, out, _ = swept
    assert main(["profile", "csv", str(out)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == ",".join(CSV_COLUMNS)
    assert len(lines) == 1 + 4
    target = tmp_path / "p.csv"
    assert main(["profile", "csv", str(out), "-o", str(target)]) == 0
    assert "wrote 4 rows" in capsys.readouterr().out
    assert target.read_text().splitlines() == lines


def test_plot_png(
    swept: tuple[Path, Path, str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _, out, _ = swept
    figures = tmp_path / "figs"
    assert main(["profile", "plot", str(out), "-o", str(figures), "--format", "png"]) == 0
    printed = capsys.readouterr().out.split()
    assert printed == [str(figures / f"{name}.png") for name in FIGURE_NAMES]
    assert all(Path(p).stat().st_size > 0 for p in printed)
    assert sorted(p.name for p in figures.iterdir()) == sorted(f"{n}.png" for n in FIGURE_NAMES)


def test_merge_and_compare_two_nodes(
    swept: tuple[Path, Path, str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _, out, _ = swept
    doc = json.loads(out.read_text())
    paths = []
    for name, factor in (("nodeA", 1.0), ("nodeB", 1.5)):
        copy: dict[str, Any] = json.loads(json.dumps(doc))
        copy["machine"]["hostname"] = name
        for p in copy["points"]:
            p["throughput_Bps"] *= factor
        path = tmp_path / f"{name}.json"
        path.write_text(json.dumps(copy))
        paths.append(str(path))
    merged = tmp_path / "merged.json"
    assert main(["profile", "merge", *paths, "-o", str(merged)]) == 0
    assert "merged 2 profiles (nodeA, nodeB)" in capsys.readouterr().out
    prof = load_profile(merged)
    assert prof.machine["nodes"] == ["nodeA", "nodeB"]
    assert len(prof.points) == 4
    assert all(p.power_source == "estimated" for p in prof.points)

    assert main(["profile", "compare", *paths]) == 0
    text = capsys.readouterr().out
    assert "slow" in text and "fast" in text
    assert "outlier nodes: nodeA, nodeB" in text
    assert main(["profile", "compare", *paths, "--threshold", "30%", "--json"]) == 0
    cmp = json.loads(capsys.readouterr().out)
    assert cmp["threshold"] == pytest.approx(0.3)
    assert cmp["outlier_nodes"] == []  # 1.5× is 1.2× the mean of 1 and 1.5
    assert main(["profile", "compare", *paths, "--names", "a,b", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["nodes"] == ["a", "b"]


def test_existing_out_is_kept_without_resume_or_force(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out.json"
    out.write_text("precious")
    err = fails(sweep_args(tmp_path, out, "--processes", "1"), capsys)
    assert "exists: --resume to continue it or --force to overwrite" in err
    assert out.read_text() == "precious"
    assert main(sweep_args(tmp_path, out, "--processes", "1", "--quiet", "--force")) == 0
    assert load_profile(out).status == "complete"


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--processes", ""], "the process list is empty"),
        (["--processes", "1", "--meters", "nosuchmeter"], "unknown meter 'nosuchmeter'"),
        (["--processes", "1", "--size", "8"], "'8' has no unit"),
        (["--processes", "1", "--resume", "--force"], "not allowed with argument"),
        (["--processes", "1", "--mtbf", "3h"], "--mtbf: used only with --adaptive"),
        (["--processes", "1", "--adaptive", "--margin", "150%"], "margin must be in [0, 1)"),
        (["--processes", "16", "--block-size", "1MiB"], "cannot give each of 16 processes"),
        (["--processes", "1", "--cstates", "maybe"], "not a C-state setting"),
        (["--processes", "1", "--governors", "turbo"], "unknown governor 'turbo'"),
        (["--processes", "1", "--codecs", "gzip"], "unknown codec 'gzip'"),
        (["--processes", "1", "--codecs", "zstd:30"], "zstd level 30 is out of range"),
        (["--processes", "1", "--codecs", "lz4,lz4"], "lists a value twice"),
        (
            ["--processes", "1", "--codecs", "lz4", "--layout", "shared_file"],
            "codecs need --layout file_per_process",
        ),
        (["--processes", "1", "--data", "zeros"], "invalid choice: 'zeros'"),
    ],
)
def test_bad_run_input_is_one_line_and_leaves_nothing(
    extra: list[str], message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = tmp_path / "data"
    data.mkdir()
    out = tmp_path / "out.json"
    err = fails(sweep_args(data, out, *extra), capsys)
    assert message in err
    assert not out.exists()
    assert list(data.iterdir()) == []


@pytest.mark.skipif(not NO_CPUFREQ, reason="this node has cpufreq control")
def test_fixed_frequency_without_cpufreq(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out.json"
    argv = ["profile", "run", str(tmp_path), "-o", str(out), "--frequencies", "1.2GHz"]
    err = fails([*argv, "--size", "8MiB", "--processes", "1"], capsys)
    assert "CPU frequency cannot be controlled on this node" in err
    assert "--frequencies asfound" in err
    assert not out.exists()
    err = fails([*argv[:-1], "all", "--size", "8MiB", "--processes", "1"], capsys)
    assert "offers no CPU frequencies" in err


def test_missing_path_and_corrupt_files(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    missing = tmp_path / "nope"
    err = fails(sweep_args(missing, tmp_path / "out.json", "--processes", "1"), capsys)
    assert "does not exist" in err and str(missing) in err
    corrupt = tmp_path / "corrupt.json"
    corrupt.write_text("{not json")
    assert "not valid JSON" in fails(["profile", "show", str(corrupt)], capsys)
    assert "not valid JSON" in fails(["profile", "csv", str(corrupt)], capsys)
    assert "does not exist" in fails(["profile", "show", str(missing)], capsys)
    assert "not valid JSON" in fails(["profile", "compare", str(corrupt), str(corrupt)], capsys)
    assert "is not an existing directory" in fails(["profile", "validate", str(missing)], capsys)
    assert not (tmp_path / "out.json").exists()


def test_resume_measures_only_the_missing_cell(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = tmp_path / "data"
    data.mkdir()
    out = tmp_path / "out.json"
    argv = sweep_args(data, out, "--processes", "1,2,4")
    assert main([*argv, "--quiet"]) == 0
    capsys.readouterr()
    doc = json.loads(out.read_text())
    last = doc["sweep"]["done"].pop()
    assert last.endswith("|4")
    doc["status"] = "partial"
    kept = [p for p in doc["points"] if p["processes"] != 4]
    doc["points"] = kept
    out.write_text(json.dumps(doc))

    assert main(["profile", "show", str(out)]) == 0
    shown = " ".join(capsys.readouterr().out.split())  # the console wraps long lines
    assert "PARTIAL, 2 of 3 cells measured" in shown
    assert main([*argv, "--resume"]) == 0
    err = capsys.readouterr().err
    assert "profiling 3 cells (2 already measured, resuming)" in err
    measured = [line for line in err.splitlines() if line.startswith("[")]
    assert len(measured) == 1 and measured[0].startswith("[3/3") and "4 proc" in measured[0]
    prof = load_profile(out)
    assert prof.status == "complete" and len(prof.points) == 6
    after = json.loads(out.read_text())["points"]
    assert after[:4] == kept  # the measured cells were kept as they were
    assert [p["processes"] for p in after[4:]] == [4, 4]

    assert main([*argv, "--resume"]) == 0
    assert "already complete (6 points)" in capsys.readouterr().out


def test_resume_refuses_a_different_sweep(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out.json"
    assert main(sweep_args(tmp_path, out, "--processes", "1,2", "--quiet")) == 0
    doc = json.loads(out.read_text())
    doc["status"] = "partial"
    out.write_text(json.dumps(doc))
    before = out.read_text()
    err = fails(sweep_args(tmp_path, out, "--processes", "1,4", "--resume"), capsys)
    assert "different sweep (differs in processes (--processes))" in err
    assert out.read_text() == before


class _Interrupting(NodeMeasurer):
    """Raises KeyboardInterrupt at the third I/O run (the first run of the second cell)."""

    runs = 0

    def run(self, op: Operation, cell: Cell) -> RunResult:
        type(self).runs += 1
        if type(self).runs == 3:
            raise KeyboardInterrupt
        return super().run(op, cell)


def test_interrupt_keeps_the_finished_cells(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    data = tmp_path / "data"
    data.mkdir()
    out = tmp_path / "out.json"
    argv = sweep_args(data, out, "--processes", "1,2", "--quiet")
    monkeypatch.setattr(_Interrupting, "runs", 0)
    monkeypatch.setattr("greenckpt.profile.run.NodeMeasurer", _Interrupting)
    assert main(argv) == 130
    err = capsys.readouterr().err
    assert f"interrupted: the profile in {out} keeps 1 finished cells; rerun with --resume" in err
    prof = load_profile(out)
    assert prof.status == "partial" and len(prof.points) == 2
    assert list(data.iterdir()) == []  # the interrupted cell's files were removed
    monkeypatch.setattr("greenckpt.profile.run.NodeMeasurer", NodeMeasurer)
    assert main([*argv, "--resume"]) == 0
    assert load_profile(out).status == "complete"


def test_interrupt_before_the_first_cell_writes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "out.json"
    monkeypatch.setattr(_Interrupting, "runs", 2)
    monkeypatch.setattr("greenckpt.profile.run.NodeMeasurer", _Interrupting)
    assert main(sweep_args(tmp_path, out, "--processes", "1", "--quiet")) == 130
    assert "before the first cell finished" in capsys.readouterr().err
    assert not out.exists()


def test_adaptive_mode(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "out.json"
    argv = sweep_args(tmp_path, out, "--processes", "1,2,4", "--adaptive", "--mtbf", "1h,24h")
    assert main([*argv, "--quiet", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["status"] == "complete" and doc["sweep"]["mode"] == "adaptive"
    assert doc["sweep"]["spec"]["extra"]["adaptive"]["mtbf_s"] == [3600.0, 86400.0]
    assert load_profile(out).status == "complete"


def test_run_json_with_plots_and_validation_without_fio(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path / "no-bin"))  # no fio to be found
    out = tmp_path / "out.json"
    figures = tmp_path / "figs"
    argv = sweep_args(tmp_path, out, "--processes", "1", "--validate", "--plot", str(figures))
    assert main([*argv, "--json"]) == 0
    captured = capsys.readouterr()
    doc = json.loads(captured.out)
    assert profile_from_json(doc) == load_profile(out)
    assert doc["file"] == str(out)
    assert doc["validation"] is None and "fio is not installed" in doc["validation_note"]
    assert captured.err.count("\n") == 1 and captured.err.startswith("note: fio is not")
    assert len(doc["plots"]) == 2 * len(FIGURE_NAMES)
    assert all(Path(p).is_file() for p in doc["plots"])
    err = fails(["profile", "validate", str(tmp_path), "--size", "8MiB"], capsys)
    assert "fio is not installed" in err


def test_validate_against_fio(tmp_path: Path, capsys: pytest.CaptureFixture[str], fio: str) -> None:
    argv = ["profile", "validate", str(tmp_path), "--size", "8MiB", "--processes", "1"]
    assert main([*argv, "--repeats", "1"]) == 0
    text = capsys.readouterr().out
    assert "I/O engine vs fio" in text and "ratio" in text
    assert main([*argv, "--repeats", "1", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert [(c["op"], c["workers"]) for c in doc["cases"]] == [("write", 1), ("read", 1)]
    assert all(c["ratio"] > 0 for c in doc["cases"])
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_rich_progress_bar() -> None:
    buffer = io.StringIO()
    bar = profile_cmd.RichProgress(Console(file=buffer, force_terminal=True, width=100))
    cell = Cell(CpuSetting.uncontrolled(), None, 8 << 20, None, 2)
    eta = Eta(total_bytes=2 * (16 << 20))
    bar.started(2, 1, eta)
    eta.skip(16 << 20)
    eta.add(16 << 20, 0.5)
    bar.cell_done(2, cell, "write 1,000 MB/s 5.0 W (estimated)", eta)
    bar.finished(eta)
    bar.close()  # idempotent
    text = buffer.getvalue()
    assert "[2/2] as found, 2 proc, 8 MiB: write 1,000 MB/s 5.0 W (estimated)" in text
    assert "ETA" in text and "100%" in text


def test_python_dash_m_profile_run(tmp_path: Path) -> None:
    out = tmp_path / "out.json"
    proc = subprocess.run(
        [sys.executable, "-m", "greenckpt", *sweep_args(tmp_path, out, "--processes", "1")],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert "status: complete" in proc.stdout
    assert "profiling 1 cells" in proc.stderr and "done in" in proc.stderr  # line progress
    assert load_profile(out).status == "complete"


@pytest.mark.parametrize("action", ["run", "show", "csv", "plot", "merge", "compare", "validate"])
def test_help(action: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(["profile", action, "--help"])
    assert info.value.code == 0
    assert f"usage: greenckpt profile {action}" in capsys.readouterr().out
