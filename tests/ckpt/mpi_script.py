"""Run a test's own script under ``mpiexec -n N`` and read the JSON its rank 0 prints last
(the MPI halves of tests/ckpt/test_comm_bulk.py and test_polite_objects.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from greenckpt.ckpt.comm import find_mpiexec

ROOT = Path(__file__).resolve().parents[2]


def run_ranks(tmp_path: Path, script: str, ranks: int = 4) -> Any:
    """``script`` written to ``tmp_path`` and run on ``ranks`` ranks with this checkout's
    ``src`` first on the path; the JSON of the last line of its output (it must exit 0)."""
    path = tmp_path / "script.py"
    path.write_text(script)
    launcher = find_mpiexec()
    assert launcher is not None
    proc = subprocess.run(
        [launcher, "-n", str(ranks), sys.executable, str(path)],
        capture_output=True, text=True, timeout=120, check=False,
        env={**os.environ, "PYTHONPATH": str(ROOT / "src")},
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])
