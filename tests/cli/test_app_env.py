"""``greenckpt`` is on the command's PATH under ``greenckpt run`` (found by the DMTCP recipe's
work, issue 16 item 3): a job script's ``greenckpt notify`` reaches this installation even when
the job does not activate its virtual environment, and nothing else on the PATH changes.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

GREENCKPT = [sys.executable, "-m", "greenckpt"]


def test_a_job_script_finds_greenckpt_without_the_venv_on_its_path(tmp_path: Path) -> None:
    script = tmp_path / "job.sh"
    script.write_text(
        '#!/bin/sh\nset -e\ngreenckpt notify ping\n"$GREENCKPT" notify ping\n'
        'command -v python3 > "$1"\n'
    )
    script.chmod(0o755)
    env = {**os.environ, "PATH": "/usr/bin:/bin"}  # no venv: its greenckpt is not on it
    where = tmp_path / "python3-path"
    done = subprocess.run(
        [*GREENCKPT, "run", "--no-control", "-o", str(tmp_path / "r"), "--", str(script),
         str(where)],
        capture_output=True, text=True, env=env, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.count("greenckpt ") >= 2  # both pings answered by the runtime
    assert where.read_text().strip() == "/usr/bin/python3"  # the job's own python3


def test_a_greenckpt_on_the_users_path_stays_the_one_found(tmp_path: Path) -> None:
    mine = tmp_path / "bin"
    mine.mkdir()
    (mine / "greenckpt").write_text('#!/bin/sh\necho "my greenckpt $*" > "$OUT"\n')
    (mine / "greenckpt").chmod(0o755)
    script = tmp_path / "job.sh"
    script.write_text('#!/bin/sh\ngreenckpt notify ping\necho "GREENCKPT=${GREENCKPT:-}"\n')
    script.chmod(0o755)
    env = {**os.environ, "PATH": f"{mine}:/usr/bin:/bin", "OUT": str(tmp_path / "out")}
    done = subprocess.run(
        [*GREENCKPT, "run", "--no-control", "-o", str(tmp_path / "r"), "--", str(script)],
        capture_output=True, text=True, env=env, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "out").read_text() == "my greenckpt notify ping\n"
    assert "GREENCKPT=\n" in done.stdout
