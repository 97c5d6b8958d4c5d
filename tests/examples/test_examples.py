"""The example applications survive a killed rank and a lost node with bit-identical results.

Each example (``examples/heat2d.py``, ``examples/stream.py``) runs under ``mpiexec -n 4`` with
2 emulated nodes of 2 ranks. A failure-free run gives the reference digest and the iterations
it checkpointed at; then rank 2 is SIGKILLed after computing iteration ``K``
(``GREENCKPT_INJECT=kill@compute:...``), the same command is run again, and it must restart
from the newest checkpoint before ``K`` and end with the reference digest. With node 1's local
storage erased between the two runs, the restart must come from level 4 instead. The single
process cases need no MPI at all.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from greenckpt.ckpt.comm import find_mpiexec
from greenckpt.ckpt.inject import ENV, erase_node_storage, flip_bits_in_file

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
TIMEOUT_S = 120
"""Per run; a run takes a few seconds, so hitting this means a hang, not slowness."""


def mpiexec() -> str | None:
    """The launcher next to this Python (a venv with the mpich wheel), else on PATH."""
    return find_mpiexec()


needs_mpi = pytest.mark.skipif(
    mpiexec() is None, reason="no mpiexec: pip install '.[mpi]' (mpi4py + the mpich wheel)"
)


@dataclass(frozen=True)
class Example:
    """How to run one example small, and where to kill it."""

    script: str
    args: tuple[str, ...]
    kill_at: int
    """The iteration after which rank 2 is killed: after an L4 and a newer L1 checkpoint."""


HEAT = Example(
    "heat2d.py",
    ("--nx", "64", "--ny", "64", "--iterations", "60", "--l1-every", "5it", "--l4-every", "20it"),
    kill_at=47,
)
STREAM = Example(
    "stream.py",
    ("--elements", "20000", "--iterations", "30", "--l1-every", "5it", "--l4-every", "20it"),
    kill_at=27,
)
EXAMPLE_LIST = [pytest.param(HEAT, id="heat2d"), pytest.param(STREAM, id="stream")]


@dataclass(frozen=True)
class Run:
    """One launch of an example: its exit status, its output and its JSON result (if any)."""

    returncode: int
    output: str
    result: dict[str, Any] | None


def launch(
    example: Example,
    root: Path,
    *,
    ranks: int | None = 4,
    inject: str | None = None,
    env_extra: dict[str, str] | None = None,
    launcher: Sequence[str] | None = None,
    python: str = sys.executable,
) -> Run:
    """Run ``example`` with its checkpoint directories under ``root`` (created if missing).

    ``ranks`` None runs one plain process without a launcher. ``GREENCKPT_*`` variables of
    the calling environment are dropped, so that only ``inject`` can plan a failure.
    ``launcher``: another MPI's launcher and its flags (default: :func:`mpiexec`), ``python``:
    an interpreter whose mpi4py loads that MPI.
    """
    local, global_ = root / "local", root / "global"
    local.mkdir(parents=True, exist_ok=True)
    global_.mkdir(parents=True, exist_ok=True)
    result = root / "result.json"
    result.unlink(missing_ok=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith("GREENCKPT_")}
    env["PYTHONPATH"] = str(ROOT)
    if inject is not None:
        env[ENV] = inject
    env.update(env_extra or {})
    command = [python, str(EXAMPLES / example.script), *example.args]
    command += ["--local-dir", str(local), "--global-dir", str(global_)]
    command += ["--result", str(result)]
    if ranks is not None:
        if launcher is None:
            found = mpiexec()
            assert found is not None
            launcher = [found]
        command = [*launcher, "-n", str(ranks), *command, "--ranks-per-node", "2"]
    proc = subprocess.run(
        command, capture_output=True, text=True, timeout=TIMEOUT_S, env=env, check=False
    )
    data = json.loads(result.read_text()) if result.exists() else None
    return Run(proc.returncode, proc.stdout + proc.stderr, data)


def ok(run: Run) -> dict[str, Any]:
    """The result of a run that must have succeeded."""
    assert run.returncode == 0, run.output
    assert run.result is not None, run.output
    return run.result


def killed(
    example: Example, root: Path, *, ranks: int | None = 4, rank: int = 2, **how: Any
) -> None:
    """Run ``example`` with ``rank`` SIGKILLed after iteration ``kill_at``: it must fail
    (``how``: the launcher and interpreter to :func:`launch` with)."""
    plan = f"kill@compute:rank={rank},iteration={example.kill_at}"
    run = launch(example, root, ranks=ranks, inject=plan, **how)
    assert run.returncode != 0, run.output
    assert f"killing rank {rank} at compute (iteration {example.kill_at})" in run.output
    assert run.result is None, "a killed job must not write a result"


def newest_before(result: dict[str, Any], iteration: int, level: int | None = None) -> int:
    """The newest iteration (of ``level``, or any) that ``result``'s run checkpointed before
    ``iteration``."""
    return max(
        int(c["iteration"])
        for c in result["checkpointed"]
        if c["iteration"] < iteration and (level is None or c["level"] == level)
    )


class References:
    """The failure-free ``mpiexec -n 4`` result of each example, run once when first asked."""

    def __init__(self, factory: pytest.TempPathFactory) -> None:
        self._factory = factory
        self._results: dict[str, dict[str, Any]] = {}

    def __call__(self, example: Example) -> dict[str, Any]:
        if example.script not in self._results:
            root = self._factory.mktemp(f"reference-{example.script}")
            result = ok(launch(example, root))
            assert result["restored"] is None
            assert result["ranks"] == 4
            assert result["failed_checkpoints"] == 0
            self._results[example.script] = result
        return self._results[example.script]


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> References:
    """Shared by the tests of this module: one reference run per example, not per test."""
    return References(tmp_path_factory)


@needs_mpi
@pytest.mark.parametrize("example", EXAMPLE_LIST)
def test_kill_then_restart_from_newest_checkpoint(
    example: Example, reference: References, tmp_path: Path
) -> None:
    ref = reference(example)
    killed(example, tmp_path)
    result = ok(launch(example, tmp_path))
    restored = result["restored"]
    assert restored is not None, "the rerun must restart from a checkpoint"
    expected = newest_before(ref, example.kill_at)
    assert restored["iteration"] == expected <= example.kill_at
    assert result["digest"] == ref["digest"]


@needs_mpi
@pytest.mark.parametrize("example", EXAMPLE_LIST)
def test_lost_node_restarts_from_level_4(
    example: Example, reference: References, tmp_path: Path
) -> None:
    ref = reference(example)
    killed(example, tmp_path)
    assert erase_node_storage(tmp_path / "local", 1), "node 1 held checkpoints to lose"
    result = ok(launch(example, tmp_path))
    restored = result["restored"]
    assert restored is not None
    assert restored["level"] == 4
    assert restored["iteration"] == newest_before(ref, example.kill_at, level=4)
    assert result["digest"] == ref["digest"]


@pytest.mark.parametrize("example", EXAMPLE_LIST)
def test_single_process_deterministic_and_restartable(example: Example, tmp_path: Path) -> None:
    first = ok(launch(example, tmp_path / "first", ranks=None))
    second = ok(launch(example, tmp_path / "second", ranks=None))
    assert first["ranks"] == 1
    assert first["restored"] is None
    assert second["digest"] == first["digest"]
    killed(example, tmp_path / "killed", ranks=None, rank=0)
    restarted = ok(launch(example, tmp_path / "killed", ranks=None))
    assert restarted["restored"] is not None
    assert restarted["restored"]["iteration"] == newest_before(first, example.kill_at)
    assert restarted["digest"] == first["digest"]


@needs_mpi
def test_heat_digest_does_not_depend_on_the_decomposition(
    reference: References, tmp_path: Path
) -> None:
    """Halo exchange checked end to end: 4 ranks compute the very bits 1 process does."""
    ref = reference(HEAT)
    single = ok(launch(HEAT, tmp_path, ranks=None))
    assert (single["digest"], single["sum"]) == (ref["digest"], ref["sum"])


@pytest.mark.parametrize(
    ("script", "args", "message"),
    [
        ("heat2d.py", ["--nx", "0"], "--nx must be > 0"),
        ("heat2d.py", ["--iterations", "ten"], "invalid int value"),
        ("stream.py", ["--elements", "-5"], "--elements must be > 0"),
        ("stream.py", ["--l1-every", "5parsecs"], "l1 every must be"),
    ],
)
def test_bad_arguments_exit_2_without_traceback(
    script: str, args: list[str], message: str, tmp_path: Path
) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GREENCKPT_")}
    env["PYTHONPATH"] = str(ROOT)
    proc = subprocess.run(
        [sys.executable, str(EXAMPLES / script), *args, "--local-dir", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
        env=env,
        check=False,
    )
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert message in proc.stderr
    assert "Traceback" not in proc.stderr


@needs_mpi
def test_heat_needs_a_row_per_rank(tmp_path: Path) -> None:
    launcher = mpiexec()
    assert launcher is not None
    env = {k: v for k, v in os.environ.items() if not k.startswith("GREENCKPT_")}
    env["PYTHONPATH"] = str(ROOT)
    script = str(EXAMPLES / "heat2d.py")
    proc = subprocess.run(
        [launcher, "-n", "4", sys.executable, script, "--nx", "3", "--local-dir", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
        env=env,
        check=False,
    )
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stderr.count("--nx (3) must be at least the number of ranks (4)") == 1
    assert "Traceback" not in proc.stderr


@needs_mpi
def test_kills_inside_the_library_lose_nothing(reference: References, tmp_path: Path) -> None:
    """A rank killed while writing its 3rd checkpoint (its file written, nothing agreed): the
    restart comes from the checkpoint before. Killed after every rank agreed, just before the
    commit: the node leaders may or may not have committed before MPI ended the job, so the
    restart comes from that checkpoint (complete on every node) or the one before — never a
    partial one. A rank killed while reading at restart: the next start restores the same
    one. Always the same bits as the failure-free run."""
    ref = reference(HEAT)
    done = [int(c["iteration"]) for c in ref["checkpointed"]]
    for point, allowed in (
        ("checkpoint-write", {done[1]}),
        ("checkpoint-commit", {done[1], done[2]}),
    ):
        root = tmp_path / point
        run = launch(HEAT, root, inject=f"kill@{point}:rank=1,hit=3")
        assert run.returncode != 0 and run.result is None, run.output
        assert f"killing rank 1 at {point}" in run.output
        restarted = ok(launch(HEAT, root))
        assert restarted["restored"]["iteration"] in allowed, (point, restarted["restored"])
        assert restarted["digest"] == ref["digest"]
    root = tmp_path / "restart-read"
    killed(HEAT, root)
    run = launch(HEAT, root, inject="kill@restart-read:rank=3")
    assert run.returncode != 0 and run.result is None, run.output
    assert "killing rank 3 at restart-read" in run.output
    restarted = ok(launch(HEAT, root))
    assert restarted["restored"]["iteration"] == newest_before(ref, HEAT.kill_at)
    assert restarted["digest"] == ref["digest"]


@pytest.mark.parametrize("example", EXAMPLE_LIST)
def test_unrestorable_checkpoints_start_afresh_in_one_run(example: Example, tmp_path: Path) -> None:
    """Every checkpoint damaged: with GREENCKPT_ON_UNRECOVERABLE=fresh the example moves them
    aside, puts its arrays back to their initial values (a failed restore may have left part
    of a checkpoint in them) and computes the failure-free result in that same run."""
    clean = ok(launch(example, tmp_path / "clean", ranks=None))
    killed(example, tmp_path / "damaged", ranks=None, rank=0)
    data = sorted((tmp_path / "damaged").rglob("*.data"))
    assert data
    for path in data:
        flip_bits_in_file(path, positions=[8 * 64])
    refused = launch(example, tmp_path / "damaged", ranks=None)
    assert refused.returncode == 1 and "GREENCKPT_ON_UNRECOVERABLE=fresh" in refused.output
    fresh = launch(
        example, tmp_path / "damaged", ranks=None, env_extra={"GREENCKPT_ON_UNRECOVERABLE": "fresh"}
    )
    result = ok(fresh)
    assert result["restored"] is None
    assert result["digest"] == clean["digest"]
    assert list((tmp_path / "damaged").rglob("*.unrestorable-*"))
