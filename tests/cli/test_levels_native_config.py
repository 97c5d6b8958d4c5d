"""Intervals in the libraries' own languages: ``greenckpt levels``/``plan`` ``--write-config
fti|scr|veloc``, ``--fti-config`` read and updated in place, the optimum on FTI's minutes."""

from __future__ import annotations

import json
import math
import os
import re
from pathlib import Path
from typing import Any

import pytest

from greenckpt.cli.main import main
from greenckpt.model import epe, expected_multilevel, fti_schedule
from greenckpt.optimize.levels_file import load_levels
from greenckpt.optimize.native_config import parse_fti
from tests.conftest import ROOT

CONFIG = ROOT / "examples" / "levels" / "fti-4-levels.toml"
PROFILE = ROOT / "examples" / "profiles" / "synthetic-pcie-flash.json"
PLAN = ["plan", "--profile", str(PROFILE), "--ckpt-size", "64GiB", "--mtbf", "12h"]
PLAN += ["--app-power", "300W"]

# An FTI config as users keep them: comments, odd spacing, inline comments, CRLF on one line,
# keys in another section with the same names, a quoted value.
EXISTING = (
    "# my FTI config\n"
    "[Basic]\n"
    "head           = 0   ; no dedicated process\n"
    "node_size      = 2\n"
    "ckpt_dir       = ./Local\n"
    "CKPT_L1        = 3     ; L1 every 3 min\r\n"
    "ckpt_l2=5\n"
    '  ckpt_l3      = "7"  # quoted\n'
    "ckpt_l4        = 11\n"
    "inline_l2      = 1\n"
    "\n"
    "[restart]\n"
    "failure        = 0\n"
    "ckpt_l1        = 99\n"
)


def _levels(capsys: pytest.CaptureFixture[str], *argv: str) -> dict[str, Any]:
    assert main(["levels", "--config", str(CONFIG), *argv, "--json"]) == 0
    doc: dict[str, Any] = json.loads(capsys.readouterr().out)
    return doc


def _refused(capsys: pytest.CaptureFixture[str], argv: list[str], message: str) -> None:
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1 and "Traceback" not in err


def test_the_optimum_of_levels_is_searched_on_the_quantum(
    capsys: pytest.CaptureFixture[str],
) -> None:
    best = _levels(capsys, "--quantum", "1min")["results"]["optimised"]["intervals_s"]
    assert all(iv % 60 == 0 for iv in best)


def test_fti_written_then_read_back_is_the_same_schedule(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "config.fti"
    doc = _levels(capsys, "--write-config", "fti", "--output", str(out))
    best = doc["results"]["optimised"]
    minutes = parse_fti(out.read_text(), str(out))
    assert minutes == [round(iv / 60) for iv in best["intervals_s"]]
    assert all(iv % 60 == 0 for iv in best["intervals_s"])  # FTI's grid without --quantum
    assert doc["native_config"]["path"] == str(out)
    given = _levels(capsys, "--fti-config", str(out))["results"]["given"]
    assert given["epe_W"] == pytest.approx(best["epe_W"], rel=1e-12)


def test_an_existing_config_fti_keeps_every_other_byte(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cfg = tmp_path / "config.fti"
    cfg.write_bytes(EXISTING.encode())
    cfg.chmod(0o640)
    doc = _levels(capsys, "--fti-config", str(cfg), "--write-config", "fti", "-o", str(cfg))
    m = [round(iv / 60) for iv in doc["results"]["optimised"]["intervals_s"]]
    want = (
        EXISTING.replace("= 3     ;", f"= {m[0]}     ;")
        .replace("ckpt_l2=5", f"ckpt_l2={m[1]}")
        .replace('"7"', str(m[2]))
        .replace("= 11\n", f"= {m[3]}\n")
    )
    assert cfg.read_bytes() == want.encode()
    assert os.stat(cfg).st_mode & 0o777 == 0o640
    assert doc["given_from"] == str(cfg)
    levels, app_power, _ = load_levels(str(CONFIG))
    ref = expected_multilevel(levels, fti_schedule([180, 300, 420, 660], quantum=60), app_power)
    assert doc["results"]["given"]["epe_W"] == pytest.approx(ref.epe)
    assert not [p for p in tmp_path.iterdir() if p.name != "config.fti"]  # no temporary left


def test_a_disabled_level_in_config_fti_is_never_checkpointed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cfg = tmp_path / "config.fti"
    cfg.write_text(EXISTING.replace("ckpt_l2=5", "ckpt_l2=0"))
    given = _levels(capsys, "--fti-config", str(cfg))["results"]["given"]
    assert given["intervals_s"][1] is None and math.isfinite(given["epe_W"])
    assert given["per_useful_second"]["checkpoint"]["L2 partner"] == 0.0


SELF_CHECKPOINTING = (  # a code that calls FTI_Checkpoint itself: FTI_Snapshot never does
    "[basic]\nhead = 0\nckpt_dir = ./Local\n"
    "ckpt_l1 = 0\nckpt_l2 = 0\nckpt_l3 = 0\nckpt_l4 = 0   ; FTI_Checkpoint in the code\n"
)


def test_a_config_fti_with_every_level_at_0_is_updated_like_plan_does(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cfg = tmp_path / "a.fti"
    cfg.write_text(SELF_CHECKPOINTING)
    argv = ["levels", "--config", str(CONFIG), "--fti-config", str(cfg)]
    assert main([*argv, "--write-config", "fti", "-o", str(cfg)]) == 0
    out, err = capsys.readouterr()
    assert "wrote the optimised intervals as fti configuration" in out and "Traceback" not in err
    assert err.count("\n") == 1 and "every ckpt_lN is 0" in err and "FTI_Checkpoint" in err
    written = cfg.read_text()
    minutes = parse_fti(written, str(cfg))
    assert all(m > 0 for m in minutes)  # the optimised schedule, one interval per level
    assert written.splitlines()[:3] == SELF_CHECKPOINTING.splitlines()[:3]
    assert written.endswith("   ; FTI_Checkpoint in the code\n")
    # evaluating it: no "given" schedule, the optimised one and the note say why
    cfg.write_text(SELF_CHECKPOINTING)
    doc = _levels(capsys, "--fti-config", str(cfg))
    assert list(doc["results"]) == ["optimised"] and doc["given_from"] == str(cfg)
    assert "application calls FTI_Checkpoint itself" in doc["given_note"]
    assert main(argv) == 0
    out, err = capsys.readouterr()
    assert "optimised" in out and "given" not in out and "every ckpt_lN is 0" in err


@pytest.mark.parametrize(
    ("old", "new", "message"),
    [
        ("ckpt_l4        = 11\n", "", "[basic] has no ckpt_l4"),
        ("ckpt_l2=5", "ckpt_l2=five", "ckpt_l2 = 'five': expected a whole number of minutes"),
        ("ckpt_l2=5", "ckpt_l2=-5", "ckpt_l2 = '-5': expected a whole number of minutes >= 0"),
        ("ckpt_l2=5", "ckpt_l2=2.5", "expected a whole number of minutes"),
        ("[Basic]", "[basics]", "no [basic] section: not an FTI config"),
        ("inline_l2      = 1\n", "ckpt_l1 = 4\n", "ckpt_l1 is set twice in [basic]"),
        ("node_size      = 2\n", "this is not ini\n", "line 4 is not a [section]"),
    ],
)
def test_an_invalid_config_fti_is_refused_and_nothing_is_written(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], old: str, new: str, message: str
) -> None:
    cfg = tmp_path / "config.fti"
    text = EXISTING.replace(old, new)
    assert text != EXISTING
    cfg.write_bytes(text.encode())
    out = tmp_path / "out.fti"
    argv = ["levels", "--config", str(CONFIG), "--fti-config", str(cfg)]
    _refused(capsys, [*argv, "--write-config", "fti", "-o", str(out)], message)
    assert not out.exists() and cfg.read_bytes() == text.encode()


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--intervals", "3min,5min,7min,11min", "--fti-config", "x"], "not both"),
        (["--output", "x"], "give both"),
        (["--write-config", "fti", "--quantum", "30s"], "give a multiple of 1.00 min"),
        (["--write-config", "veloc"], "VeloC has 3 levels"),
        (["--fti-config", "/nonexistent/config.fti"], "--fti-config: cannot read"),
    ],
)
def test_bad_flags_are_refused(
    tmp_path: Path, extra: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out"
    extra = [str(out) if x == "x" else x for x in extra]
    _refused(capsys, ["levels", "--config", str(CONFIG), *extra], message)
    assert not out.exists()


def test_without_output_only_the_configuration_is_printed(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["levels", "--config", str(CONFIG), "--write-config", "fti"]) == 0
    text = capsys.readouterr().out
    assert "┃" not in text and len(parse_fti(text, "stdout")) == 4


def test_scr_levels_are_descriptors_every_nth_checkpoint_and_a_flush(
    capsys: pytest.CaptureFixture[str],
) -> None:
    doc = _levels(capsys, "--write-config", "scr")
    iv = doc["results"]["optimised"]["intervals_s"]
    text = doc["native_config"]["text"]
    settings = dict(re.findall(r"^(SCR_\w+)=(\d+)$", text, re.M))
    assert settings["SCR_CHECKPOINT_SECONDS"] == str(int(iv[0])) and iv[0] % 1 == 0
    assert settings["SCR_FLUSH"] == str(round(iv[3] / iv[0]))
    descriptors = re.findall(r"^CKPT=(\d) INTERVAL=(\d+) TYPE=(\w+)$", text, re.M)
    assert descriptors == [
        ("0", "1", "SINGLE"),
        ("1", str(round(iv[1] / iv[0])), "PARTNER"),
        ("2", str(round(iv[2] / iv[0])), "RS"),
    ]
    assert "SCR_CHECKPOINT_INTERVAL=" not in text  # it counts calls, not seconds


def test_veloc_windows_take_every_mth_checkpoint(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    three = tmp_path / "veloc.toml"
    text = CONFIG.read_text()
    start, end = text.index('[[level]]\nname = "L2'), text.index('[[level]]\nname = "L3')
    three.write_text(text[:start] + text[end:])
    out = tmp_path / "veloc.cfg"
    argv = ["levels", "--config", str(three), "--write-config", "veloc", "-o", str(out), "--json"]
    assert main(argv) == 0
    iv = json.loads(capsys.readouterr().out)["results"]["optimised"]["intervals_s"]
    got = dict(re.findall(r"^(\w+) = (-?\d+)$", out.read_text(), re.M))
    assert set(got) == {"ec_interval", "persistent_interval"}  # VeloC's own keys only
    for key, lv in (("ec_interval", 1), ("persistent_interval", 2)):
        m = round(iv[lv] / iv[0])
        window = int(got[key])
        # More than m-1 checkpoints' wall time, at most m's: VeloC keeps every m-th one.
        assert (m - 1) * (iv[0] + 5) < window <= m * (iv[0] + 5)


def test_plan_writes_its_interval_for_one_fti_level(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "config.fti"
    argv = [*PLAN, "--write-config", "fti", "--fti-level", "4", "-o", str(out), "--json"]
    assert main(argv) == 0
    doc = json.loads(capsys.readouterr().out)
    minutes = parse_fti(out.read_text(), str(out))
    t_a = doc["native_config"]["interval_s"]
    assert minutes[:3] == [0, 0, 0] and minutes[3] * 60 == t_a
    chosen = doc["native_config"]["epe_W"]
    assert abs(t_a - doc["plan"]["interval_s"]) < 60 and chosen >= doc["plan"]["epe_W"]
    # The other neighbouring whole minute costs at least as much (modelled EPE).
    p, inputs = doc["plan"], doc["inputs"]
    other = t_a + 60 if t_a < p["interval_s"] else max(60, t_a - 60)
    args = (p["T_C_s"], p["T_R_s"], inputs["failure_rate_per_s"], inputs["app_power_W"])
    powers = (p["checkpoint"]["power_W"], p["restart"]["power_W"])
    assert chosen == pytest.approx(float(epe(t_a, *args, *powers)))
    assert chosen <= float(epe(other, *args, *powers))


def test_plan_updates_an_existing_config_fti_and_writes_scr(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cfg = tmp_path / "config.fti"
    cfg.write_text(EXISTING)
    argv = [*PLAN, "--write-config", "fti", "--fti-level", "1", "--fti-config", str(cfg)]
    assert main([*argv, "-o", str(cfg)]) == 0
    assert "wrote the interval" in capsys.readouterr().out
    minutes = parse_fti(cfg.read_text(), str(cfg))
    assert minutes[0] > 0 and minutes[1:] == [0, 0, 0]
    assert cfg.read_text().splitlines()[:5] == EXISTING.splitlines()[:5]
    assert main([*PLAN, "--write-config", "scr"]) == 0
    text = capsys.readouterr().out
    assert re.search(r"^SCR_CHECKPOINT_SECONDS=\d+$", text, re.M) and "SCR_FLUSH=1\n" in text


def test_a_fast_forwarded_fti_config_is_refused() -> None:
    text = "[basic]\nckpt_l1 = 3\nckpt_l2 = 5\nckpt_l3 = 7\nckpt_l4 = 11\nfast_forward = 4\n"
    with pytest.raises(ValueError, match="fast_forward = '4' divides FTI's intervals"):
        parse_fti(text, "config.fti")
    assert parse_fti(text.replace("= 4\n", "= 1\n"), "config.fti") == [3, 5, 7, 11]


def test_plan_header_and_flags_that_need_write_config(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main([*PLAN, "--write-config", "scr"]) == 0
    first = capsys.readouterr().out.splitlines()[0]
    assert re.match(
        r"# greenckpt plan: checkpoint every .+ minimises EPE; written as \d+ s$", first
    )
    for extra in (["--fti-config", str(tmp_path / "none.fti")], ["--fti-level", "2"]):
        assert main([*PLAN, *extra]) == 2  # ignored before: nothing said what to write
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "--write-config fti" in err
    assert main([*PLAN, "--write-config", "veloc", "--fti-level", "2"]) == 2
    assert "--fti-level is an FTI level" in capsys.readouterr().err
