"""The example applications' study modes (issue 20 item 6): a no-checkpoint baseline, a
problem-size factor and wu2018-style bit flips, with no code change in the application."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from greenckpt.apps import heat2d, stream


def run_heat(tmp_path: Path, *extra: str) -> dict[str, object]:
    out = tmp_path / "result.json"
    argv = ["--nx", "32", "--ny", "32", "--iterations", "20", "--result", str(out), *extra]
    assert heat2d.main(argv) == 0
    result: dict[str, object] = json.loads(out.read_text())
    return result


def test_no_checkpoint_writes_nothing_and_computes_the_same(tmp_path: Path) -> None:
    local = tmp_path / "local"
    local.mkdir()
    with_ckpt = run_heat(tmp_path, "--local-dir", str(local), "--l1-every", "5it")
    assert with_ckpt["checkpoints"] == 4 and any(local.iterdir())
    bare = tmp_path / "bare"
    bare.mkdir()
    without = run_heat(tmp_path, "--local-dir", str(bare), "--no-checkpoint")
    assert without["checkpoints"] == 0 and without["restored"] is None
    assert list(bare.iterdir()) == []  # no checkpoint files at all
    assert without["digest"] == with_ckpt["digest"]  # the same computation


def test_size_factor_scales_the_cells(tmp_path: Path) -> None:
    result = run_heat(tmp_path, "--size-factor", "4", "--no-checkpoint")
    assert (result["nx"], result["ny"]) == (64, 64)  # 4x the cells
    out = tmp_path / "s.json"
    argv = ["--elements", "1000", "--iterations", "2", "--size-factor", "2.5"]
    assert stream.main([*argv, "--no-checkpoint", "--result", str(out)]) == 0
    assert json.loads(out.read_text())["elements"] == 2500


def test_bit_flips_are_injected_and_counted(tmp_path: Path) -> None:
    clean = run_heat(tmp_path, "--no-checkpoint")
    flipped = run_heat(tmp_path, "--no-checkpoint", "--bitflip", "52/1e-9s")
    assert clean["bitflips"] == 0
    assert flipped["bitflips"] == 20  # a period shorter than an iteration: one per iteration
    assert flipped["digest"] != clean["digest"]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--bitflip", "x"], "--bitflip must be POS/EVERY, e.g. 1/10s, not 'x'"),
        (["--bitflip", "65/1s"], "the position must be 1..64"),
        (["--size-factor", "0"], "--size-factor must be a number > 0, not 0.0"),
    ],
)
def test_bad_values_are_one_usage_line(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        heat2d.main(argv)
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err
