"""The per-core split follows greenckpt's own write waves (issue 33).

``greenckpt run --policy fixed --io-processes 1 --frequency F --waiting-frequency W`` on a
SYNTHETIC lever node (tests/platform/fake_levers.py) around ``mpiexec -n 2``: the node's agent
runs CPU 0 at F and CPU 1 at W, and the library writes (and, at the restart, reads) in two
waves of one rank each. Both ranks — the second wave's too, whichever core it was on — must do
their I/O on CPU 0 and be back on their own cores afterwards; the restored data are intact.
The affinity each rank had inside the engine's write and read is recorded by a wrapper around
``run_chunks`` (the library looks it up at call time, so a program may replace it).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.ckpt.test_mpi import mpiexec
from tests.cli.test_run_job import _env
from tests.cli.test_run_job_levers import _node

pytestmark = pytest.mark.skipif(mpiexec() is None, reason="no mpiexec: pip install '.[mpi]'")

APP = """\
import json, os, sys
import numpy as np
import greenckpt.ckpt.api as api
import greenckpt.ckpt.recovery as recovery

out = sys.argv[1]
seen = {"write": [], "read": []}

def spy(kind, real):
    def wrapped(*args, **kwargs):
        seen[kind].append(sorted(os.sched_getaffinity(0)))
        return real(*args, **kwargs)
    return wrapped

api.run_chunks = spy("write", api.run_chunks)
recovery.run_chunks = spy("read", recovery.run_chunks)
own = sorted(os.sched_getaffinity(0))
ck = api.Checkpointer(local_dir=f"{out}/local", global_dir=f"{out}/global", name="split")
u = np.arange(50_000.0) + ck.rank
ck.protect("u", u)
ck.checkpoint(1, iteration=1)
after_write = sorted(os.sched_getaffinity(0))
u[:] = -1.0
info = ck.recover()
ck.finalize()
doc = {"own": own, "after_write": after_write, "after_read": sorted(os.sched_getaffinity(0)),
       "intact": bool((u == np.arange(50_000.0) + ck.rank).all()), "restored": info.id, **seen}
with open(f"{out}/rank{ck.rank}.json", "w") as f:
    json.dump(doc, f)
"""
# greenckpt run (its agent, and the ranks mpiexec starts) on the first two CPUs: the split's
# writer (CPU 0) and waiting CPU (1), which lie on the fake node's four.
TWO_CPUS = (
    "import os, sys; os.sched_setaffinity(0, sorted(os.sched_getaffinity(0))[:2]); "
    "from greenckpt.cli.main import main; sys.exit(main(sys.argv[1:]))"
)
SPLIT = ["--policy", "fixed", "--io-processes", "1", "--frequency", "2.0GHz",
         "--waiting-frequency", "1.2GHz"]  # fmt: skip


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="one CPU: no per-core split")
def test_every_wave_writes_and_reads_on_the_writer_core(tmp_path: Path) -> None:
    _node(tmp_path / "trees" / "node0")
    (tmp_path / "app.py").write_text(APP)
    (tmp_path / "local").mkdir()
    (tmp_path / "global").mkdir()
    launcher = mpiexec()
    assert launcher is not None
    done = subprocess.run(
        [sys.executable, "-c", TWO_CPUS, "run", *SPLIT, "--nodes-emulated", "1", "--node-root",
         str(tmp_path / "trees" / "node{node}"), "-o", "rep", "--", launcher, "-n", "2",
         sys.executable, "app.py", str(tmp_path)],
        cwd=tmp_path, env=_env(tmp_path), capture_output=True, text=True, timeout=180,
        check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    for rank in (0, 1):
        doc = json.loads((tmp_path / f"rank{rank}.json").read_text())
        assert doc["intact"] and doc["restored"] >= 1
        assert doc["write"] == [[0]], doc  # the rank's own file, written on the writer core
        assert doc["read"] == [[0]], doc  # and read back there at the restart
        assert doc["after_write"] == doc["own"] == doc["after_read"]  # then back
    report = json.loads((tmp_path / "rep" / "nodes" / "node0" / "report.json").read_text())
    ckpt = next(r for r in report["records"] if r["kind"] == "checkpoint")
    assert ckpt["settings"]["writer_cpus"] == [0]
    assert any("per-core split: I/O CPUs 0 at 2.00 GHz" in n for n in ckpt["notes"])
