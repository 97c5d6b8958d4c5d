"""``--policy fixed``: the stated settings for every phase, refused in one line where the node
cannot apply them (issue 20: a study varies one setting at a time)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from greenckpt.cli.main import main
from greenckpt.errors import InvalidValueError
from greenckpt.runtime.fixed_policy import FixedPolicy, FixedSettings, check_fixed
from greenckpt.runtime.policy import make_policy
from greenckpt.runtime.settings import PhaseRequest

CAN = dict(cpus=8, frequency_control=True, cstate_control=True)


def node(**kw: object):  # type: ignore[no-untyped-def]
    from greenckpt.runtime.node import Node  # noqa: PLC0415

    return Node(**kw)  # type: ignore[arg-type]


def test_every_phase_gets_the_fixed_settings() -> None:
    fixed = FixedSettings(io_processes=2, frequency_hz=1_400_000_000, cstates=False)
    policy = make_policy("fixed", node=node(**CAN), fixed=fixed)
    assert isinstance(policy, FixedPolicy)
    for request in (
        PhaseRequest("checkpoint", "/c", 10, level=1),
        PhaseRequest("restart", "/c", 5),
    ):
        s = policy.decide(request)
        assert (s.io_processes, s.frequency_hz, s.cstates) == (2, 1_400_000_000, False)
        assert s.source == "fixed (1.40 GHz, 2 I/O processes, C-states off)"
    default = make_policy("fixed", node=node(**CAN)).decide(PhaseRequest("flush", "/g", 1))
    assert default.io_processes == 4 and default.frequency_hz is None  # min(4, CPUs)


def test_what_the_node_cannot_do_is_one_line() -> None:
    bare = node(cpus=2, frequency_reason="no cpufreq policies")
    with pytest.raises(
        InvalidValueError, match=r"cannot set a CPU frequency \(no cpufreq policies\)"
    ):
        check_fixed(FixedSettings(frequency_hz=1_000_000_000), bare)
    with pytest.raises(InvalidValueError, match="cannot switch C-states"):
        check_fixed(FixedSettings(cstates=True), bare)
    with pytest.raises(InvalidValueError, match="go with --policy fixed, not powersave"):
        make_policy("powersave", node=bare, fixed=FixedSettings(io_processes=1))


def test_the_runtime_advises_the_fixed_processes(tmp_path: Path) -> None:
    probe = (
        "from greenckpt.ckpt.notify_client import hook_from_env\n"
        "h = hook_from_env()\n"
        "a = h.begin('checkpoint', level=1, path='/tmp', size=100, node=0)\n"
        "print('ADVICE', a.io_processes)\n"
        "h.end('checkpoint', node=0, ok=True, seconds=0.0)\n"
    )
    out = tmp_path / "r"
    cmd = [sys.executable, "-m", "greenckpt", "run", "--policy", "fixed", "--io-processes", "3",
           "--no-control", "-o", str(out), "--", sys.executable, "-c", probe]  # fmt: skip
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr[-1500:]
    assert "ADVICE 3" in done.stdout
    record = next(r for r in json.loads((out / "report.json").read_text())["records"]
                  if r["kind"] == "checkpoint")  # fmt: skip
    assert record["settings"]["io_processes"] == 3
    assert record["settings"]["source"].startswith("fixed (3 I/O processes")


def test_bad_combinations_are_exit_2_and_nothing_is_made(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "r"
    assert (
        main(
            ["run", "--policy", "performance", "--io-processes", "2", "-o", str(out), "--", "true"]
        )
        == 2
    )
    assert "go with --policy fixed, not performance" in capsys.readouterr().err
    with pytest.raises(SystemExit) as info:  # argparse's own usage error
        main(["run", "--policy", "fixed", "--io-processes", "0", "-o", str(out), "--", "true"])
    assert info.value.code == 2 and "--io-processes" in capsys.readouterr().err
    assert not out.exists()
