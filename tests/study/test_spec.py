"""Study files: every mistake is one line naming FILE:LINE before anything runs (issue 20)."""

from __future__ import annotations

from pathlib import Path

import pytest

from greenckpt.cli.main import main
from greenckpt.study import design
from greenckpt.study.spec import StudyError, load_study

GOOD = """\
[study]
name = "t"
repeats = 2
seed = 3
order = "blocks"
baseline = { checkpoint = "none" }

[app]
command = ["{python}", "-c", "pass", "{checkpoint_args}"]

[factors]
checkpoint = ["none", "ckp(1,0,0,2)"]
size = [1, 2]
"""


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "s.toml"
    path.write_text(text)
    return path


def test_a_good_file_and_its_design(tmp_path: Path) -> None:
    study = load_study(write(tmp_path, GOOD))
    assert study.factors == {"checkpoint": ("none", "ckp(1,0,0,2)"), "size": (1.0, 2.0)}
    assert study.baseline == {"checkpoint": "none"}
    runs = design.runs(study)
    assert len(runs) == 8 and len({r.id for r in runs}) == 8
    for block in (0, 1):  # blocks: every cell exactly once per block
        assert sorted(r.cell for r in runs if r.block == block) == sorted(
            design.cell_label(c) for c in design.cells(study)
        )
    assert runs == design.runs(load_study(write(tmp_path, GOOD)))  # seeded: the same order
    other = load_study(write(tmp_path, GOOD.replace("seed = 3", "seed = 4")))
    assert [r.cell for r in design.runs(other)] != [r.cell for r in runs]


@pytest.mark.parametrize(
    ("old", "new", "line", "message"),
    [
        ("repeats = 2", "repeats = 0", 3, "repeats must be an integer >= 1, got 0"),
        ("size = [1, 2]", "size = [1, -2]", 13, "size level -2 is not a number > 0"),
        ('"ckp(1,0,0,2)"]', '"ckp(1,2)"]', 12, "checkpoint level 'ckp(1,2)' is not"),
        ("size = [1, 2]", 'colour = ["red"]', 13, "unknown key 'colour' in [factors]"),
        ("size = [1, 2]", 'target = ["/no/such/dir"]', 13, "target level '/no/such/dir' is not"),
        ("size = [1, 2]", "io_processes = [1, 0]", 13, "io_processes level 0 is not an integer"),
        ("size = [1, 2]", 'codec = ["zip"]', 13, "codec level 'zip' is not"),
        ('order = "blocks"', 'order = "sorted"', 5, "order must be one of blocks, random"),
        (
            '{ checkpoint = "none" }',
            '{ checkpoint = "ckp(9,9,9,9)" }',
            6,
            "is not one of its levels",
        ),
        ('"{python}", "-c"', '"{pyton}", "-c"', 9, "unknown placeholder {pyton}"),
        ('"{python}", "-c"', '"no-such-app-here", "-c"', 9, "'no-such-app-here' is not found"),
    ],
)
def test_each_mistake_is_one_line_with_its_line(
    tmp_path: Path, old: str, new: str, line: int, message: str
) -> None:
    path = write(tmp_path, GOOD.replace(old, new))
    with pytest.raises(StudyError) as info:
        load_study(path)
    text = str(info.value)
    assert text.startswith(f"{path}:{line}: ") and message in text and "\n" not in text


def test_the_cli_refuses_before_running_anything(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write(tmp_path, GOOD.replace("size = [1, 2]", "size = [0]"))
    out = tmp_path / "out"
    assert main(["study", str(path), "-o", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"{path}:13:" in err
    assert not out.exists()


def test_dry_run_prints_the_design(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["study", str(write(tmp_path, GOOD)), "--dry-run", "--repeats", "1"]) == 0
    out = capsys.readouterr().out
    assert "4 cells x 1 repeats = 4 runs, order blocks" in out and out.count(" r000") == 4


def test_impossible_levels_and_conflicts_are_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from greenckpt.runtime.node import Node  # noqa: PLC0415

    monkeypatch.setattr(Node, "detect", classmethod(lambda cls, root=None: Node(cpus=2)))
    path = write(tmp_path, GOOD.replace("size = [1, 2]", 'frequency = ["1.4GHz", "2.1GHz"]'))
    with pytest.raises(StudyError, match=r":13: impossible level: this node cannot set a CPU"):
        load_study(path)
    path = write(tmp_path, GOOD.replace("size = [1, 2]", 'cstates = ["on", "off"]'))
    with pytest.raises(StudyError, match=r":13: impossible level: this node cannot switch"):
        load_study(path)
    both = 'io_processes = [1, 2]\npolicy = ["performance"]'
    with pytest.raises(
        StudyError, match=r":13: io_processes is applied with greenckpt run --policy"
    ):
        load_study(write(tmp_path, GOOD.replace("size = [1, 2]", both)))


def test_settings_factors_become_the_fixed_policys_options(tmp_path: Path) -> None:
    from greenckpt.study.runner import runtime_options  # noqa: PLC0415

    study = load_study(write(tmp_path, GOOD.replace("size = [1, 2]", "io_processes = [1, 3]")))
    run = next(r for r in design.runs(study) if r.levels["io_processes"] == 3)
    options, nodes = runtime_options(study, run)
    assert (options.policy, options.io_processes, nodes) == ("fixed", 3, None)


def test_the_target_factor_fills_the_target_placeholder(tmp_path: Path) -> None:
    from greenckpt.study.runner import expand_command  # noqa: PLC0415

    text = GOOD.replace('"{checkpoint_args}"]', '"--local-dir", "{target}"]')
    text = text.replace("size = [1, 2]", f'target = ["{{run_dir}}/fast", "{tmp_path}"]')
    study = load_study(write(tmp_path, text))
    runs = design.runs(study)
    for r in runs:
        (tmp_path / r.id).mkdir()
    got = {expand_command(study, r, tmp_path / r.id)[-1] for r in runs if r.block == 0}
    assert got == {
        str(tmp_path / r.id / "fast") for r in runs if r.block == 0 and "fast" in r.cell
    } | {str(tmp_path)}
