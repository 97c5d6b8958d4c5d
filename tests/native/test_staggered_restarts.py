"""One recovery of an MPI job is one restart in the report (issue 30 item 1), end to end.

Every rank announces its own restart; a level-1 recovery takes microseconds and has no
collective, so one rank's restart is over before the next rank's begins. Here each rank of
``mpiexec -n 4`` recovers only after the previous rank has finished, 50 µs later
(``STANDIN_STAGGER_US``, tests/native/standins/standins.h), so no two announcements overlap:
the report must still show one restart per recovery, with the four ranks' bytes, one failure
and one lost-work accounting — through the interposed FTI, SCR and VeloC stand-ins and
through the C phase API. A process restarting again, or a restart after a checkpoint, is
still a second failure.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from greenckpt.native import intercept_library
from greenckpt.runtime.notify import NotifyServer
from tests.native.test_intercept import GREENCKPT, bare_env, build, c_compiler, mpi_tools
from tests.native.test_phase_api import CHECKPOINT, DRIVER, RESTART, REWORK, config
from tests.runtime.test_notify import FakeTarget

RANKS = 4
STAGGER = {"STANDIN_STAGGER_US": "50"}
SCR_ENV = {"SCR_PREFIX": "prefix", "SCR_CACHE_BASE": "cache", "SCR_CNTL_BASE": "cntl",
           "USER": "u", "SCR_JOB_ID": "1"}  # fmt: skip
"""SCR's folders (relative to a rank's own folder), and the user and job id it names them by."""


def run_env(tmp: Path, mpiexec: str) -> dict[str, str]:
    return {**bare_env(tmp), **STAGGER, "PATH": f"{Path(mpiexec).parent}:{os.environ['PATH']}"}


def greenckpt_run(tmp: Path, env: dict[str, str], *command: str, intercept: str = "") -> Any:
    """The JSON report of ``greenckpt run`` of ``command``."""
    flags = ["--intercept", intercept] if intercept else []
    done = subprocess.run(
        [*GREENCKPT, "run", *flags, "--policy", "defaults", "--no-control", "--json",
         "-o", str(tmp / "rep"), "--", *command],
        capture_output=True, text=True, env=env, timeout=300, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)["report"]


def phases(report: Any) -> list[tuple[str, int | None, int, int, bool]]:
    """(kind, level, bytes, notifiers, ok) of every record but compute."""
    return [(r["kind"], r["level"], r["size"], r["notifiers"], r["ok"])
            for r in report["records"] if r["kind"] != "compute"]  # fmt: skip


def own_folders(tmp: Path, prog: Path, args: list[str], env: dict[str, str]) -> list[str]:
    """An MPMD command line giving each rank its own folder (files it routes, its log, its
    ``env`` paths under it), so the ranks' files never race each other."""
    command: list[str] = []
    for rank in range(RANKS):
        where = tmp / f"rank{rank}"
        where.mkdir()
        settings = {"STANDIN_DIR": str(where), "STANDIN_LOG": str(where / "calls.log")}
        settings |= {k: str(where / v) if k.endswith(("_PREFIX", "_BASE")) else v
                     for k, v in env.items()}  # fmt: skip
        command += [":"] if command else []
        command += ["-n", "1", "-wdir", str(where)]
        for key, value in settings.items():
            command += ["-env", key, value]
        command += [str(prog), *args]
    return command


def test_fti_ranks_recovering_one_after_another_are_one_restart_each_time(
    tmp_path: Path,
) -> None:
    mpicc, mpiexec = mpi_tools()
    prog = build([mpicc, "-DHAVE_MPI"], tmp_path / "mpi", "fti")
    cfg = tmp_path / "config.fti"
    cfg.write_text(f"[basic]\nckpt_dir = {tmp_path}/local\nglbl_dir = {tmp_path}/global\n")
    report = greenckpt_run(tmp_path, run_env(tmp_path, mpiexec), mpiexec, "-n", str(RANKS),
                           str(prog), str(cfg), intercept="fti")  # fmt: skip
    full, half = RANKS * 8160, RANKS * 4160  # every rank's protected bytes
    ck, rs, n = "checkpoint", "restart", RANKS
    assert phases(report) == [
        (ck, 1, full, n, True), (ck, 4, full, n, True), (ck, 3, full, n, False),
        (ck, 4, half, n, True), (ck, 2, half, n, True),
        ("lost", None, 0, 1, True), (rs, None, half, n, True),  # FTI_Snapshot's FTI_Recover
        ("lost", None, 0, 1, True), (rs, None, half, n, True),  # FTI_Recover: every rank again
        ("lost", None, 0, 1, True), (rs, None, half, n, True),  # FTI_RecoverVarInit ... _Finalize
    ]  # fmt: skip
    restarts = [r for r in report["records"] if r["kind"] == rs]
    assert all(any("joined as one restart" in note for note in r["notes"]) for r in restarts)
    assert report["by_kind"]["restart"]["count"] == 3


def lone_restart(tmp: Path, server: NotifyServer, target: FakeTarget) -> tuple[Any, Any]:
    """The level and bytes one SCR rank alone announces for its restart (the stand-in and
    the interposer's rules decide them, and test_intercept.py tests them)."""
    prog = build([c_compiler()], tmp / "plain", "scr")
    where = tmp / "lone"
    where.mkdir()
    env = {**bare_env(where), **{k: str(where / v) if k.endswith(("_PREFIX", "_BASE")) else v
                                 for k, v in SCR_ENV.items()}}  # fmt: skip
    env |= {"LD_PRELOAD": str(intercept_library()), **server.environ()}
    subprocess.run([str(prog)], env=env, cwd=where, capture_output=True, timeout=60, check=True)
    ((level, size),) = [(c[4], c[3]) for c in target.calls if c[:2] == ("begin", "restart")]
    return level, size


def test_scr_ranks_restarting_one_after_another_are_one_restart(
    tmp_path: Path, server: NotifyServer, target: FakeTarget
) -> None:
    mpicc, mpiexec = mpi_tools()
    level, size = lone_restart(tmp_path, server, target)
    prog = build([mpicc, "-DHAVE_MPI"], tmp_path / "mpi", "scr")
    command = own_folders(tmp_path, prog, [], SCR_ENV)
    report = greenckpt_run(tmp_path, run_env(tmp_path, mpiexec), mpiexec, *command,
                           intercept="scr")  # fmt: skip
    restarts = [p for p in phases(report) if p[0] == "restart"]
    each = 0 if size is None else RANKS * size  # 0: unknown
    assert restarts == [("restart", level, each, RANKS, True)]
    assert [p[0] for p in phases(report)][-2:] == ["lost", "restart"]  # one failure


def test_veloc_ranks_restarting_one_after_another_are_one_restart_each_time(
    tmp_path: Path,
) -> None:
    mpicc, mpiexec = mpi_tools()
    prog = build([mpicc, "-DHAVE_MPI"], tmp_path / "mpi", "veloc")
    cfg = tmp_path / "veloc.cfg"
    cfg.write_text(f"scratch = {tmp_path}/scratch\npersistent = {tmp_path}/persistent\n")
    command = own_folders(tmp_path, prog, [str(cfg)], {})
    report = greenckpt_run(tmp_path, run_env(tmp_path, mpiexec), mpiexec, *command,
                           intercept="veloc")  # fmt: skip
    each = RANKS * (8000 + 960)  # protected memory and the file routed in the last checkpoint
    after = phases(report)[[p[0] for p in phases(report)].index("restart") - 1 :]
    assert after == [
        ("lost", None, 0, 1, True), ("restart", None, each, RANKS, True),  # VELOC_Restart
        ("lost", None, 0, 1, True), ("restart", None, each, RANKS, False),  # _begin ... _end(0)
    ]  # fmt: skip


@pytest.fixture(scope="module")
def driver(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("native") / "phase_driver"
    cmd = [c_compiler(), "-std=c99", "-Wall", "-Wextra", "-Werror", "-pthread"]
    subprocess.run([*cmd, *config("--cflags", "--libs"), str(DRIVER), "-o", str(out)], check=True)
    return out


def test_c_api_processes_restarting_one_after_another_are_one_restart(
    driver: Path, tmp_path: Path
) -> None:
    """Four processes (ranks) each announce a level-1 restart of 100 bytes, one after the
    other; a fifth announces the rework (level 1); then a checkpoint and one more restart,
    which is a second failure."""
    d, ck = str(driver), f"{CHECKPOINT} 1 {tmp_path} 4096"
    rank = f"{d} b {RESTART} 1 {tmp_path} 100 e {RESTART} 1"
    script = "; ".join([
        f"{d} b {ck} e {CHECKPOINT} 1", rank, rank, rank, rank,
        f"{d} b {REWORK} 1 - 0 e {REWORK} 1", f"{d} b {ck} e {CHECKPOINT} 1", rank,
    ])  # fmt: skip
    env = {k: v for k, v in os.environ.items() if not k.startswith("GREENCKPT_")}
    report = greenckpt_run(tmp_path, env, "sh", "-c", script)
    assert phases(report) == [
        ("checkpoint", 1, 4096, 1, True),
        ("lost", None, 0, 1, True), ("restart", 1, 400, 4, True),
        ("rework", 1, 0, 1, True),  # the level the program gave (it was null)
        ("checkpoint", 1, 4096, 1, True),
        ("lost", None, 0, 1, True), ("restart", 1, 100, 1, True),
    ]  # fmt: skip
