"""The epilog recipe (examples/slurm/greenckpt-epilog.sh) as Slurm runs it: as root, with the
job's id in the environment; it restores the node, logs one line with the time, job id and
node, removes the socket folder a killed agent of that job left, and never fails the job."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
EPILOG = ROOT / "examples" / "slurm" / "greenckpt-epilog.sh"


def _epilog(tmp_path: Path, job: str, greenckpt: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "SLURM_JOB_ID": job, "SLURMD_NODENAME": "n7",
           "GREENCKPT": greenckpt, "GREENCKPT_EPILOG_LOG": str(tmp_path / "epilog.log"),
           "PYTHONPATH": str(ROOT / "src")}  # fmt: skip
    return subprocess.run(["bash", str(EPILOG)], env=env, capture_output=True, text=True,
                          timeout=120, check=False)  # fmt: skip


def test_the_epilog_restores_logs_one_line_and_sweeps_the_jobs_socket_folder(
    tmp_path: Path,
) -> None:
    job = f"9{uuid.uuid4().int % 10**8}"
    folder = Path(f"/tmp/greenckpt-{os.getuid()}/job-{job}")
    folder.mkdir(parents=True)
    stale = socket.socket(socket.AF_UNIX)
    stale.bind(str(folder / "agent.sock"))
    stale.close()  # what a SIGKILLed agent leaves
    greenckpt = str(Path(sys.executable).parent / "greenckpt")
    done = _epilog(tmp_path, job, greenckpt)
    assert done.returncode == 0, done.stderr
    assert not folder.exists()
    line = (tmp_path / "epilog.log").read_text().strip()
    pattern = rf"\d{{4}}-\d\d-\d\dT\d\d:\d\d:\d\dZ job {job} node n7: \{{.*\"outcome\".*\}}"
    assert re.fullmatch(pattern, line), line


def test_an_epilog_whose_restore_fails_logs_it_and_still_exits_0(tmp_path: Path) -> None:
    done = _epilog(tmp_path, "4711", str(tmp_path / "no-such-greenckpt"))
    assert done.returncode == 0
    line = (tmp_path / "epilog.log").read_text().strip()
    assert " job 4711 node n7: restore failed: " in line and line.count("\n") == 0
