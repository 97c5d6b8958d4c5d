"""``greenckpt run -- srun --cpu-freq=...`` on one node (issue 15 item 3: "Where Slurm itself
was asked to set frequencies, greenckpt must notice and not fight it (say which wins)"): as
with ``--launcher slurm``, Slurm wins — one line, a report note, and the runtime applies no
frequency or governor while other settings and the accounting go on.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.platform import fake_power
from tests.platform.fake_cpu import build_tree, load_spec

GOVERNOR = "sys/devices/system/cpu/cpufreq/policy0/scaling_governor"
APP = """\
import os, sys
from greenckpt.ckpt.notify_client import hook_from_env
hook = hook_from_env()
hook.begin("checkpoint", level=1, path=sys.argv[1], size=1 << 20, node=0)
print("during", open(os.path.join(sys.argv[2], sys.argv[3])).read().strip())
hook.end("checkpoint", node=0, ok=True, seconds=0.01)
"""


@pytest.mark.parametrize("asked", [None, "Low"])
def test_slurms_frequency_request_wins(asked: str | None, tmp_path: Path) -> None:
    tree = tmp_path / "tree"
    fake_power.intel_tree(build_tree(load_spec("intel-acpi-cpufreq"), tree))
    found = (tree / GOVERNOR).read_text().strip()
    env = {**os.environ, "GREENCKPT_SYSROOT": str(tree), "XDG_RUNTIME_DIR": str(tmp_path)}
    env.pop("SLURM_CPU_FREQ_REQ", None)
    if asked is not None:
        env["SLURM_CPU_FREQ_REQ"] = asked
    done = subprocess.run(
        [sys.executable, "-m", "greenckpt", "run", "--policy", "performance", "-o", "rep", "--",
         sys.executable, "-c", APP, str(tmp_path), str(tree), GOVERNOR],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    during = next(x for x in done.stdout.splitlines() if x.startswith("during "))
    notes = json.loads((tmp_path / "rep" / "report.json").read_text())["notes"]
    if asked is None:
        assert during == "during performance"  # the runtime applies its setting
        assert not any("Slurm" in n for n in notes)
    else:
        assert during == f"during {found}"  # left to Slurm
        assert "Slurm's setting wins" in done.stderr
        assert any("--cpu-freq=Low" in n and "Slurm's setting wins" in n for n in notes)
    assert (tree / GOVERNOR).read_text().strip() == found  # as found afterwards
