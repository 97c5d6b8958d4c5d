"""``--intercept scr`` reports what SCR 3.1 does (issue 30 items 11-14): the stand-in libscr.so
(tests/native/standins/scr.c) behaves as the real one does where the application's calls do not
show it (bypass on by default, SINGLE forced on one node, flushes inside SCR_Complete_output
and SCR_Finalize, restart work inside SCR_Init and SCR_Have_restart). A recording runtime
writes each begin and end into the stand-in's call log, so a test sees which of SCR's work
each phase covers.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from greenckpt.ckpt.notify_client import BeginRequest, ProtocolError, parse_request
from greenckpt.native import intercept_library
from greenckpt.optimize.native_config import NativeLevel, render
from greenckpt.runtime.notify import NotifyServer
from tests.native.test_intercept import CC_FLAGS, LIBS, SCR_DIRS, STANDINS, bare_env, c_compiler
from tests.runtime.test_accounting import make_runtime
from tests.runtime.test_notify import FakeTarget

CK, RS, FL = "checkpoint", "restart", "flush"


class LoggingTarget(FakeTarget):
    """A FakeTarget that also appends "runtime begin|end ..." to the stand-in's call log."""

    log: Path | None = None

    def _line(self, text: str) -> None:
        if self.log is not None:
            with self.log.open("a") as f:
                f.write(f"runtime {text}\n")

    def begin(self, kind: Any, **fields: Any) -> Any:
        self._line(f"begin {kind}")
        return super().begin(kind, **fields)

    def end(self, kind: Any, **fields: Any) -> Any:
        self._line(f"end {kind} {fields.get('ok')}")
        return super().end(kind, **fields)


@pytest.fixture(scope="module")
def cycle(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("scr_cycle")
    lib = out / f"lib{LIBS['scr']}.so"
    cc = c_compiler()
    subprocess.run([cc, *CC_FLAGS, "-fPIC", "-shared", "-o", str(lib), str(STANDINS / "scr.c")],
                   check=True)  # fmt: skip
    prog = out / "scr_cycle"
    subprocess.run([cc, *CC_FLAGS, "-o", str(prog), str(STANDINS / "scr_cycle.c"), f"-L{out}",
                    "-lscr", f"-Wl,-rpath,{out}"], check=True)  # fmt: skip
    return prog


@pytest.fixture
def runtime() -> Iterator[tuple[LoggingTarget, NotifyServer]]:
    target = LoggingTarget()
    sock_dir = Path(tempfile.mkdtemp(prefix="gcn-", dir="/tmp"))
    try:
        with NotifyServer(target, sock_dir / "rt.sock") as srv:
            yield target, srv
    finally:
        shutil.rmtree(sock_dir, ignore_errors=True)


def run(
    prog: Path, where: Path, env: dict[str, str], rt: tuple[LoggingTarget, NotifyServer],
    args: tuple[str, ...] = (),
) -> tuple[list[tuple[object, ...]], list[str]]:  # fmt: skip
    """One run in ``where`` (kept between runs: SCR's cache and prefix) under the interposer:
    the phases the runtime saw and the call log with them interleaved."""
    target, srv = rt
    where.mkdir(exist_ok=True)
    log = where / "calls.log"
    log.unlink(missing_ok=True)
    target.calls.clear()
    target.log = log
    full = {**bare_env(where), **SCR_DIRS, **env, "LD_PRELOAD": str(intercept_library()),
            **srv.environ()}  # fmt: skip
    done = subprocess.run([str(prog), *args], capture_output=True, text=True, env=full,
                          cwd=where, timeout=60, check=True)  # fmt: skip
    assert done.stderr == ""
    return list(target.calls), log.read_text().splitlines()


def begin(kind: str, path: Path, size: int | None, level: int | None) -> tuple[object, ...]:
    return ("begin", kind, str(path), size, level)


def end(kind: str, ok: bool = True) -> tuple[object, ...]:
    return ("end", kind, ok)


def between(log: list[str], first: str, work: str, last: str) -> bool:
    """Whether ``work`` is logged after ``first`` and before the next ``last``."""
    i = log.index(first)
    j = log.index(work, i)
    return log.index(last, i) > j


def test_by_default_scr_bypasses_the_cache_an_l4_checkpoint_at_the_prefix(
    cycle: Path, runtime: tuple[LoggingTarget, NotifyServer], tmp_path: Path
) -> None:
    calls, _ = run(cycle, tmp_path, {}, runtime)
    prefix = tmp_path / "prefix"
    assert calls == [
        begin(CK, prefix, None, 4), end(CK),  # the first one's bytes: unknown, not 1
        begin(CK, prefix, 1000, 4), end(CK),
        begin(CK, prefix, 2000, 4), end(CK),  # no flush phase: the data is in the prefix
    ]  # fmt: skip
    assert (prefix / "ckpt.3" / "rank0.dat").stat().st_size == 3000  # where SCR wrote it


@pytest.mark.parametrize(
    ("env", "args", "level"),
    [
        ({"SCR_COPY_TYPE": "partner"}, (), 1),  # one node: SCR forces SINGLE
        ({"SCR_COPY_TYPE": "XOR"}, (), 1),
        ({"SCR_COPY_TYPE": "PARTNER", "SLURM_STEP_NUM_NODES": "2"}, (), 2),
        ({"SCR_COPY_TYPE": "xor", "SLURM_STEP_NUM_NODES": "2"}, (), 3),
        ({"SLURM_STEP_NUM_NODES": "2"}, (), 3),  # SCR's default copy type: XOR
        ({"SLURM_STEP_NUM_NODES": "2"}, ("SCR_COPY_TYPE=single",), 1),  # set by SCR_Config
        ({"SCR_COPY_TYPE": "partner", "PMI_SIZE": "4"}, (), None),  # nodes unknown: no level
    ],
)
def test_a_cached_checkpoint_has_the_level_scr_really_uses(
    cycle: Path, runtime: tuple[LoggingTarget, NotifyServer], tmp_path: Path,
    env: dict[str, str], args: tuple[str, ...], level: int | None,
) -> None:  # fmt: skip
    env = {"SCR_CACHE_BYPASS": "0", "SCR_FLUSH": "0", **env}  # no flush at SCR_Finalize
    calls, log = run(cycle, tmp_path, env, runtime, ("n=1", *args))
    assert calls == [begin(CK, tmp_path / "cache", None, level), end(CK)]
    assert ("SCR: Forcing copy type to SINGLE in redundancy descriptor 0" in log) == (
        "SLURM_STEP_NUM_NODES" not in env
    )


def test_flushes_inside_complete_output_and_finalize_are_flush_phases(
    cycle: Path, runtime: tuple[LoggingTarget, NotifyServer], tmp_path: Path
) -> None:
    env = {"SCR_CACHE_BYPASS": "0", "SCR_FLUSH": "2", "SCR_COPY_TYPE": "SINGLE"}
    calls, log = run(cycle, tmp_path, env, runtime)
    cache, prefix = tmp_path / "cache", tmp_path / "prefix"
    assert calls == [
        begin(CK, cache, None, 1), end(CK),
        begin(CK, cache, 1000, 1), end(CK),
        begin(FL, prefix, 2000, 4), end(FL),  # SCR_FLUSH=2: ckpt.2 inside Complete_output
        begin(CK, cache, 2000, 1), end(CK),
        begin(FL, prefix, 3000, 4), end(FL),  # ckpt.3, only in cache: SCR_Finalize flushes it
    ]  # fmt: skip
    assert between(log, "runtime begin flush", "flush ckpt.2", "runtime end flush True")
    i = log.index("flush ckpt.2")
    assert between(log[i:], "runtime begin flush", "flush ckpt.3", "runtime end flush True")
    assert log.index("flush ckpt.3") < log.index("SCR_Finalize")


def test_a_restart_covers_scrs_rebuild_in_scr_init_and_the_read(
    cycle: Path, runtime: tuple[LoggingTarget, NotifyServer], tmp_path: Path
) -> None:
    env = {"SCR_CACHE_BYPASS": "0", "SCR_FLUSH": "0"}
    run(cycle, tmp_path, env, runtime)
    calls, log = run(cycle, tmp_path, env, runtime, ("n=1",))  # the next run in the job
    cache = tmp_path / "cache"
    assert calls == [
        begin(RS, cache, None, None), end(RS),  # SCR_Init's rebuild ... SCR_Complete_restart
        begin(CK, cache, None, 1), end(CK),  # the stand-in routes the read to no file
    ]  # fmt: skip
    assert between(log, "runtime begin restart", "rebuild ckpt.3", "SCR_Init")
    assert between(log, "SCR_Init", "SCR_Complete_restart 1", "runtime end restart True")


def test_a_fetch_from_the_prefix_in_have_restart_is_an_l4_restart(
    cycle: Path, runtime: tuple[LoggingTarget, NotifyServer], tmp_path: Path
) -> None:
    run(cycle, tmp_path, {}, runtime)  # bypass: ckpt.3 in the prefix
    shutil.rmtree(tmp_path / "cntl")  # a new job: no cache index
    calls, log = run(cycle, tmp_path, {}, runtime, ("n=0",))
    assert calls == [begin(RS, tmp_path / "prefix", None, 4), end(RS)]
    assert between(log, "runtime begin restart", "fetch ckpt.3", "SCR_Have_restart")
    assert log.index("SCR_Complete_restart 1") < log.index("runtime end restart True")


def test_a_run_with_nothing_to_restart_announces_no_restart(
    cycle: Path, runtime: tuple[LoggingTarget, NotifyServer], tmp_path: Path
) -> None:
    calls, _ = run(cycle, tmp_path, {"SCR_FETCH": "0"}, runtime, ("n=0",))
    assert calls == []


def test_unknown_bytes_reach_the_report_as_unknown_not_as_a_number(tmp_path: Path) -> None:
    wire = {"v": 1, "event": "begin", "kind": "checkpoint", "path": "/c", "size": None}
    assert parse_request(wire) == BeginRequest("checkpoint", path="/c", size=None)
    with pytest.raises(ProtocolError):  # only an I/O phase has bytes to be unknown
        parse_request({**wire, "kind": "compute"})
    with make_runtime(tmp_path) as rt:
        rt.begin("checkpoint", path="/c", size=None)
        rt.begin("checkpoint", path="/c", size=5000)  # another rank knows its bytes
        rt.end("checkpoint")
        rt.end("checkpoint")
        rt.begin("checkpoint", path="/c", size=5000)
        rt.end("checkpoint")
    records = [r for r in rt.report().records if r.kind == "checkpoint"]
    assert [r.size for r in records] == [0, 5000]  # 0: the report's "unknown"
    assert any("size unknown: 1 of 2 notifier(s)" in n for n in records[0].notes)


def test_the_scr_config_written_warns_of_scrs_environment_and_turns_the_bypass_off() -> None:
    text = render("scr", [NativeLevel("L1", 60.0), NativeLevel("L4", 600.0)])
    assert "levels file" not in text  # greenckpt plan writes it too, and has none
    assert "SCR reads a variable of its environment before" in text
    assert "SCR_CACHE_BYPASS=0\n" in text  # else SCR writes every checkpoint to the prefix
    only_top = render("scr", [NativeLevel("L4", 600.0)])
    assert "SCR_CACHE_BYPASS=" not in only_top  # one level: the prefix, which bypass writes
