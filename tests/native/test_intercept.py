"""libgreenckpt_intercept and ``greenckpt run --intercept`` (issue 16 item 2): FTI, SCR and
VeloC codes announce their checkpoints and restarts with no code change.

Stand-in libfti.so, libscr.so and libveloc-client.so (tests/native/standins/) export the real
libraries' public calls with their signatures, log what they were called with, set a
distinctive errno and return distinctive values. Each test program calls one of them as an
application does and prints every result and errno; a run under the interposer must print
and log exactly what a run without it does, while a recording notification server sees every
phase once with its kind, level, path and bytes.
"""

from __future__ import annotations

import ctypes.util
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from greenckpt.native import intercept_library
from greenckpt.runtime.intercept import intercept_environ, missing_library_note
from greenckpt.runtime.notify import NotifyServer
from tests.runtime.test_notify import FakeTarget

STANDINS = Path(__file__).resolve().parent / "standins"
GREENCKPT = [sys.executable, "-m", "greenckpt"]
LIBS = {"fti": "fti", "scr": "scr", "veloc": "veloc-client"}
CC_FLAGS = ["-std=c99", "-Wall", "-Wextra", "-Werror"]


def c_compiler() -> str:
    found = shutil.which("cc") or shutil.which("gcc")
    if found is None:
        pytest.skip("no C compiler (cc or gcc) on this machine")
    return found


def build(cc: list[str], out: Path, family: str) -> Path:
    """The stand-in library and its test program, built into ``out``; the program's path."""
    out.mkdir(parents=True, exist_ok=True)
    lib = LIBS[family]
    src = STANDINS / f"{family}.c"
    subprocess.run([*cc, *CC_FLAGS, "-fPIC", "-shared", "-o", str(out / f"lib{lib}.so"), str(src)],
                   check=True)  # fmt: skip
    prog = out / f"{family}_prog"
    link = [f"-L{out}", f"-l{lib}", f"-Wl,-rpath,{out}"]
    source = STANDINS / f"{family}_prog.c"
    subprocess.run([*cc, *CC_FLAGS, "-o", str(prog), str(source), *link], check=True)
    return prog


@pytest.fixture(scope="module")
def progs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    out = tmp_path_factory.mktemp("standins")
    return {family: build([c_compiler()], out, family) for family in LIBS}


@pytest.fixture(scope="module")
def preload() -> str:
    return str(intercept_library())


SCR_DIRS = {"SCR_PREFIX": "prefix", "SCR_CACHE_BASE": "cache", "SCR_CNTL_BASE": "cntl",
            "USER": "u", "SCR_JOB_ID": "1"}  # fmt: skip
"""SCR's directories, relative to the run's folder, and the USER and job id it needs."""


def bare_env(tmp: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GREENCKPT_", "SCR_"))}
    env.pop("LD_PRELOAD", None)
    env.pop("LD_LIBRARY_PATH", None)  # could name a real libfti, found before the stand-in
    return {**env, "STANDIN_DIR": str(tmp), "STANDIN_LOG": str(tmp / "calls.log")}


def run_prog(
    prog: Path, args: list[str], tmp: Path, extra: dict[str, str]
) -> tuple[str, str, list[str]]:
    """stdout, stderr and the stand-in's call log of one run in a fresh ``tmp``."""
    tmp.mkdir()
    env = {**bare_env(tmp), **extra}
    done = subprocess.run([str(prog), *args], capture_output=True, text=True, env=env,
                          timeout=60, check=True, cwd=tmp)  # fmt: skip
    return done.stdout, done.stderr, (tmp / "calls.log").read_text().splitlines()


def compare(
    prog: Path, args: list[str], tmp: Path, extra: dict[str, str], preloaded: dict[str, str]
) -> str:
    """Run without and with the interposer: same output, same calls logged; its stderr."""
    out0, err0, log0 = run_prog(prog, args, tmp / "plain", extra)
    out1, err1, log1 = run_prog(prog, args, tmp / "preloaded", {**extra, **preloaded})
    assert err0 == ""
    assert out1 == out0
    assert re.search(r"errno=[1-9][0-9][0-9]\b", out0)  # the stand-in's distinctive errno
    assert log1 == log0
    return err1


def begin(kind: str, path: str, size: int, level: int | None) -> tuple[object, ...]:
    return ("begin", kind, path, size, level)


def end(kind: str, ok: bool) -> tuple[object, ...]:
    return ("end", kind, ok)


# ------------------------------------------------------------------------------ FTI


def test_fti_checkpoints_and_recoveries_are_announced_once_with_level_and_bytes(
    progs: dict[str, Path], preload: str, server: NotifyServer, target: FakeTarget,
    tmp_path: Path,
) -> None:  # fmt: skip
    cfg = tmp_path / "config.fti"
    cfg.write_text("[basic]\nhead = 0\nckpt_dir = /scratch/local\nglbl_dir = /gpfs/global\n")
    env = {"LD_PRELOAD": preload, **server.environ()}
    err = compare(progs["fti"], [str(cfg)], tmp_path, {}, env)
    assert err == ""
    local, glob = "/scratch/local", "/gpfs/global"
    full = 1000 * 8 + 10 * 4 + 5 * 24  # doubles, ints and a 24-byte type of the program's
    half = 500 * 8 + 10 * 4 + 5 * 24  # id 0 protected again with half its count
    ck, rs = "checkpoint", "restart"
    assert target.calls == [
        begin(ck, local, full, 1), end(ck, True),
        begin(ck, glob, full, 4), end(ck, True),
        begin(ck, local, full, 3), end(ck, False),  # the stand-in fails level 3
        begin(ck, glob, half, 4), end(ck, True),  # FTI_L4_DCP (8) is level 4
        begin(ck, local, half, 2), end(ck, True),  # FTI_Snapshot's own FTI_Checkpoint
        begin(rs, local, half, None), end(rs, True),  # FTI_Snapshot's FTI_Recover
        begin(rs, local, half, None), end(rs, True),  # FTI_Recover
        begin(rs, local, half, None), end(rs, True),  # FTI_RecoverVarInit ... _Finalize
    ]  # fmt: skip


def test_only_the_family_asked_for_is_announced(
    progs: dict[str, Path], preload: str, server: NotifyServer, target: FakeTarget,
    tmp_path: Path,
) -> None:  # fmt: skip
    env = {"LD_PRELOAD": preload, "GREENCKPT_INTERCEPT": "scr,veloc", **server.environ()}
    assert compare(progs["fti"], ["/nonexistent.fti"], tmp_path, {}, env) == ""
    assert target.calls == []


# ------------------------------------------------------------------------------ SCR


def test_scr_datasets_and_restarts_are_announced_with_the_routed_bytes(
    progs: dict[str, Path], preload: str, server: NotifyServer, target: FakeTarget,
    tmp_path: Path,
) -> None:  # fmt: skip
    # in cache (no bypass), on two nodes (no forced SINGLE), no periodic flush: PARTNER is L2
    extra = {**SCR_DIRS, "SCR_COPY_TYPE": "PARTNER", "SCR_CACHE_BYPASS": "0", "SCR_FLUSH": "0",
             "SLURM_STEP_NUM_NODES": "2"}  # fmt: skip
    env = {"LD_PRELOAD": preload, "GREENCKPT_INTERCEPT_BYTES": "4096", **server.environ()}
    assert compare(progs["scr"], [], tmp_path, extra, env) == ""
    cache, ck, rs = str(tmp_path / "preloaded" / "cache"), "checkpoint", "restart"
    assert target.calls == [
        begin(ck, cache, 4096, 2), end(ck, True),  # first: GREENCKPT_INTERCEPT_BYTES
        begin(ck, cache, 5000, 2), end(ck, True),  # the previous dataset's routed file
        # out.3, an output-only dataset (no SCR_FLAG_CHECKPOINT): not a checkpoint phase
        begin(ck, cache, 3000, 2), end(ck, False),  # bad.4, refused by SCR
        begin(ck, cache, 3000, 2), end(ck, True),  # ckpt.5: a refused bad.6 inside leaves it
        begin(rs, cache, 900, None), end(rs, True),  # nothing restarted in SCR_Init: the read
    ]  # fmt: skip


# ------------------------------------------------------------------------------ VeloC


def test_veloc_phases_are_announced_once_even_when_nested(
    progs: dict[str, Path], preload: str, server: NotifyServer, target: FakeTarget,
    tmp_path: Path,
) -> None:  # fmt: skip
    cfg = tmp_path / "veloc.cfg"
    cfg.write_text("scratch = /tmp/scratch\npersistent = /gpfs/veloc\n")
    env = {"LD_PRELOAD": preload, **server.environ()}
    assert compare(progs["veloc"], [str(cfg)], tmp_path, {}, env) == ""
    mem = 1000 * 8 + 10 * 4
    files = 960  # routed in the begin/end checkpoint, measured at its end
    scratch, ck, rs = "/tmp/scratch", "checkpoint", "restart"
    assert target.calls == [
        begin(ck, scratch, mem, None), end(ck, True),  # VELOC_Checkpoint (its begin/end nest)
        begin(ck, scratch, mem, None), end(ck, True),  # VELOC_Checkpoint_begin ... _end
        begin(ck, scratch, 8000 + files, None), end(ck, False),  # begin refused
        begin(rs, scratch, 8000 + files, None), end(rs, True),  # VELOC_Restart
        begin(rs, scratch, 8000 + files, None), end(rs, False),  # _begin ... _end(0)
    ]  # fmt: skip


# ------------------------------------------------------------------ no runtime, missing symbol


def test_without_a_runtime_the_interposer_changes_nothing(
    progs: dict[str, Path], preload: str, tmp_path: Path
) -> None:
    cfg = tmp_path / "veloc.cfg"
    cfg.write_text("scratch = /tmp/scratch\n")
    assert compare(progs["veloc"], [str(cfg)], tmp_path, {}, {"LD_PRELOAD": preload}) == ""


def test_a_missing_real_function_returns_the_library_error_with_one_line(
    preload: str, tmp_path: Path
) -> None:
    source = tmp_path / "lookup.c"
    source.write_text(
        "#include <dlfcn.h>\n#include <stdio.h>\n"
        "int main(void) {\n"
        '  int (*recover)(void) = (int (*)(void))dlsym(RTLD_DEFAULT, "FTI_Recover");\n'
        '  int (*scr)(int) = (int (*)(int))dlsym(RTLD_DEFAULT, "SCR_Complete_output");\n'
        '  printf("%d %d\\n", recover ? recover() : 99, scr ? scr(1) : 99);\n  return 0;\n}\n'
    )
    prog = tmp_path / "lookup"
    subprocess.run([c_compiler(), *CC_FLAGS, "-D_GNU_SOURCE", str(source), "-o", str(prog),
                    "-ldl"], check=True)  # fmt: skip
    env = {**bare_env(tmp_path), "LD_PRELOAD": preload}
    done = subprocess.run([str(prog)], capture_output=True, text=True, env=env, check=True)
    assert done.stdout.split() == ["-1", "1"]  # FTI_NSCS, SCR's failure code
    lines = done.stderr.splitlines()
    assert len(lines) == 2  # one line for each missing function
    assert any("FTI_Recover is not in any library" in ln for ln in lines)


# ------------------------------------------------------------------------------ greenckpt run


def test_the_preload_keeps_the_users_and_names_the_family() -> None:
    env = intercept_environ("scr", {"LD_PRELOAD": "libmine.so"})
    first, rest = env["LD_PRELOAD"].split(":", 1)
    assert first.endswith("libgreenckpt_intercept.so") and rest == "libmine.so"
    assert env["GREENCKPT_INTERCEPT"] == "scr"


def test_a_bad_intercept_value_is_one_line_and_nothing_starts(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    done = subprocess.run(
        [*GREENCKPT, "run", "--intercept", "foo", "-o", str(tmp_path / "rep"), "--",
         "touch", str(marker)],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and "--intercept" in done.stderr
    assert all(name in done.stderr for name in ("fti", "scr", "veloc"))
    assert not marker.exists() and not (tmp_path / "rep").exists()


def test_a_program_that_does_not_link_the_library_gets_one_line_and_runs(
    progs: dict[str, Path], tmp_path: Path
) -> None:
    assert missing_library_note("fti", [str(progs["fti"])]) is None
    assert missing_library_note("veloc", ["env", str(progs["veloc"])]) is None
    marker = tmp_path / "ran"
    done = subprocess.run(
        [*GREENCKPT, "run", "--intercept", "fti", "--policy", "defaults", "--no-control",
         "-o", str(tmp_path / "rep"), "--", "touch", str(marker)],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert done.returncode == 0 and marker.exists()
    notes = [ln for ln in done.stderr.splitlines() if "--intercept" in ln]
    assert len(notes) == 1 and "no program in the command links FTI" in notes[0]
    assert "the run goes on" in notes[0]


def test_a_shell_command_or_script_is_looked_into_not_said_to_link_nothing(
    progs: dict[str, Path], tmp_path: Path
) -> None:
    prog = progs["fti"]
    named = tmp_path / "job.sh"  # names the program: found, no line
    named.write_text(f'#!/bin/sh\nset -e\nfor i in 1 2; do {prog} "$@"; done\n')
    named.chmod(0o755)
    for command in (
        ["bash", "-c", f"cd /tmp && for i in 1 2; do {prog} config.fti; done"],
        [str(named), "config.fti"],
        ["sh", str(named)],
        ["env", "OMP_NUM_THREADS=1", "bash", "-c", f"{prog} a.fti && echo done"],
    ):
        assert missing_library_note("fti", command) is None, command
    hidden = tmp_path / "hidden.sh"  # the program's name is known only when it runs
    hidden.write_text('#!/bin/sh\nexec "$APP" "$@"\n')
    hidden.chmod(0o755)
    for command, shown in (
        (["bash", "-c", 'for i in 1; do "$APP" "$CFG"; done'], "(bash)"),
        ([str(hidden), "config.fti"], f"({hidden})"),
        (["bash", str(hidden)], f"(bash, {hidden})"),
    ):
        note = missing_library_note("fti", command)
        assert note is not None and "no program in the command links" not in note, command
        assert note.startswith(
            "--intercept fti: cannot tell whether the command starts a program that links FTI: "
            f"it runs a script or shell {shown}"
        ), note
        assert "the run goes on, with FTI phases if a program it starts links FTI" in note
    # a command with no script and no shell is still known to link nothing
    note = missing_library_note("fti", ["touch", str(tmp_path / "new")])
    assert note is not None and "no program in the command links FTI" in note


@pytest.mark.parametrize("how", ["bash -c", "script"])
def test_greenckpt_run_intercept_fti_of_a_job_script_says_it_cannot_tell_and_accounts(
    progs: dict[str, Path], tmp_path: Path, how: str
) -> None:
    cfg = tmp_path / "config.fti"
    cfg.write_text(f"[basic]\nckpt_dir = {tmp_path}/local\nglbl_dir = {tmp_path}/global\n")
    script = tmp_path / "job.sh"
    script.write_text('#!/bin/sh\nfor i in 1; do "$APP" "$CFG"; done\n')
    script.chmod(0o755)
    command = ["bash", "-c", 'for i in 1; do "$APP" "$CFG"; done'] if how == "bash -c" else [
        str(script)]  # fmt: skip
    env = {**bare_env(tmp_path), "APP": str(progs["fti"]), "CFG": str(cfg)}
    done = subprocess.run(
        [*GREENCKPT, "run", "--intercept", "fti", "--policy", "defaults", "--no-control",
         "--json", "-o", str(tmp_path / "rep"), "--", *command],
        capture_output=True, text=True, env=env, timeout=300, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    notes = [ln for ln in done.stderr.splitlines() if "--intercept" in ln]
    assert len(notes) == 1 and "cannot tell whether the command starts a program" in notes[0]
    assert "no program in the command links" not in done.stderr
    phases = io_phases(done.stdout)
    full, half = 8160, 4160  # the stand-in program's protected bytes, one process
    assert phases == fti_prog_phases(full, half)


def io_phases(stdout: str) -> list[tuple[object, ...]]:
    """(kind, level, size, ok) of each checkpoint and restart in `greenckpt run --json`'s report."""
    records = json.loads(stdout)["report"]["records"]
    return [(r["kind"], r["level"], r["size"], r["ok"]) for r in records
            if r["kind"] in ("checkpoint", "restart")]  # fmt: skip


def fti_prog_phases(full: int, half: int) -> list[tuple[object, ...]]:
    """What the FTI stand-in program does, with ``full`` and ``half`` its protected bytes
    before and after it frees half: L1, L4, a failed L3, L4, L2, then three restarts."""
    return [
        ("checkpoint", 1, full, True), ("checkpoint", 4, full, True),
        ("checkpoint", 3, full, False), ("checkpoint", 4, half, True),
        ("checkpoint", 2, half, True),
        ("restart", None, half, True), ("restart", None, half, True),
        ("restart", None, half, True),
    ]  # fmt: skip


def mpi_tools() -> tuple[str, str]:
    here = Path(sys.executable).parent
    found = [shutil.which(name, path=f"{here}:{os.environ.get('PATH', '')}")
             for name in ("mpicc", "mpiexec")]  # fmt: skip
    if None in found:
        pytest.skip("mpicc and mpiexec are needed (pip install '.[mpi]')")
    return str(found[0]), str(found[1])


def test_greenckpt_run_intercept_fti_under_mpiexec_reports_the_phases(tmp_path: Path) -> None:
    mpicc, mpiexec = mpi_tools()
    prog = build([mpicc, "-DHAVE_MPI"], tmp_path / "mpi", "fti")
    cfg = tmp_path / "config.fti"
    cfg.write_text(f"[basic]\nckpt_dir = {tmp_path}/local\nglbl_dir = {tmp_path}/global\n")
    env = {**bare_env(tmp_path), "PATH": f"{Path(mpiexec).parent}:{os.environ['PATH']}"}
    done = subprocess.run(
        [*GREENCKPT, "run", "--intercept", "fti", "--policy", "defaults", "--no-control",
         "--json", "-o", str(tmp_path / "rep"), "--", mpiexec, "-n", "2", str(prog), str(cfg)],
        capture_output=True, text=True, env=env, timeout=300, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "--intercept" not in done.stderr  # the program links FTI: no note
    phases = io_phases(done.stdout)
    full, half = 2 * 8160, 2 * 4160  # both ranks' protected bytes, merged per node
    assert phases == fti_prog_phases(full, half)
    log = (tmp_path / "calls.log").read_text().splitlines()
    assert log.count(f"FTI_Init {cfg} world=1") == 2  # the communicator passed on unchanged


# ------------------------------------------------------------------------------ real libraries


WRAPPED = {
    "fti": ["FTI_Init", "FTI_InitType", "FTI_InitCompositeType", "FTI_Protect",
            "FTI_Checkpoint", "FTI_Recover", "FTI_RecoverVarInit", "FTI_RecoverVarFinalize"],
    "scr": ["SCR_Config", "SCR_Init", "SCR_Have_restart", "SCR_Finalize",
            "SCR_Start_output", "SCR_Complete_output", "SCR_Start_checkpoint",
            "SCR_Complete_checkpoint", "SCR_Start_restart", "SCR_Complete_restart",
            "SCR_Route_file"],
    "veloc": ["VELOC_Init", "VELOC_Init_single", "VELOC_Mem_protect", "VELOC_Mem_unprotect",
              "VELOC_Mem_clear", "VELOC_Checkpoint", "VELOC_Restart", "VELOC_Checkpoint_begin",
              "VELOC_Checkpoint_end", "VELOC_Restart_begin", "VELOC_Restart_end",
              "VELOC_Route_file"],
}  # fmt: skip


@pytest.mark.parametrize("family", sorted(LIBS))
def test_a_real_installed_library_exports_every_wrapped_call(family: str) -> None:
    found = ctypes.util.find_library(LIBS[family])
    if found is None:
        pytest.skip(f"no real lib{LIBS[family]} installed on this machine")
    try:
        lib = ctypes.CDLL(found)
    except OSError as exc:
        pytest.skip(f"lib{LIBS[family]} is installed but cannot be loaded here: {exc}")
    assert [name for name in WRAPPED[family] if not hasattr(lib, name)] == []
