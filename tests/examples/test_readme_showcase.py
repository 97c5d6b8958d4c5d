"""The README's showcase command runs and prints the numbers the README quotes (the synthetic
profile shaped after saito2013's ioDrive node: Table 3's settings and its savings)."""

from __future__ import annotations

import re
import shlex

import pytest

from greenckpt.cli.main import main
from tests.conftest import ROOT


def test_the_readme_plan_command_prints_what_the_readme_says(
    capsys: pytest.CaptureFixture[str],
) -> None:
    readme = " ".join((ROOT / "README.md").read_text(encoding="utf-8").split())
    found = re.search(r"`greenckpt (plan --profile [^`]+)` shows the comparison", readme)
    assert found, "the README's showcase `greenckpt plan ...` command"
    args = shlex.split(found[1])
    assert "examples/profiles/synthetic-saito2013-iodrive.json" in args
    args[args.index("--profile") + 1] = str(ROOT / args[args.index("--profile") + 1])
    capsys.readouterr()
    assert main(args) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert re.search(r"checkpoint │ 1\.40 GHz │ 2 ", out) and re.search(
        r"restart │ 2\.10 GHz │ 2 ", out
    )
    saved = re.search(r"performance .*? (\S+) % (\S+) % (\S+) %", out)
    assert saved, out
    epe, write, read = (float(x) for x in saved.groups())
    for value in (epe, write, read):
        assert f"−{value:.1f} %" in readme  # the README quotes what the command prints
    assert "−4.7 %, −67.4 % and −40.2 %" in readme  # and the paper's, beside them
