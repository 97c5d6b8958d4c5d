"""libgreenckpt, the C phase API (issue 16 item 1): built from the installed package's flags,
a quiet no-op without a runtime, every announcement reaching the runtime with its fields,
bad calls refused with a status and one line on stderr while the runtime's accounting stays
right, thread-safe, a forked child refused, a stale or vanished runtime reported once.

The C side is driven by tests/native/drivers/phase_driver.c (a script of calls on its command
line, one result line per call on stdout), compiled here with ``greenckpt config`` flags.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from greenckpt.runtime.notify import NotifyServer
from tests.runtime.test_notify import FakeTarget

HERE = Path(__file__).resolve().parent
DRIVER = HERE / "drivers" / "phase_driver.c"
GREENCKPT = [sys.executable, "-m", "greenckpt"]
CHECKPOINT, RESTART, FLUSH, REWORK, COMPUTE = range(5)


def config(*flags: str) -> list[str]:
    """``greenckpt config FLAGS`` split into arguments, as a build line's $(...) is."""
    out = subprocess.run(
        [*GREENCKPT, "config", *flags], capture_output=True, text=True, check=True
    ).stdout
    return out.split()


def c_compiler() -> str:
    found = shutil.which("cc") or shutil.which("gcc")
    if found is None:
        pytest.skip("no C compiler (cc or gcc) on this machine")
    return found


@pytest.fixture(scope="module")
def driver(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The driver, built as a user builds: the flags come before the source."""
    out = tmp_path_factory.mktemp("native") / "phase_driver"
    cmd = [c_compiler(), "-std=c99", "-Wall", "-Wextra", "-Werror", "-pthread"]
    cmd += [*config("--cflags", "--libs"), str(DRIVER), "-o", str(out)]
    subprocess.run(cmd, check=True)
    return out


def bare_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GREENCKPT_")}
    return env


def run(driver: Path, *script: object, env: dict[str, str] | None = None) -> tuple[list[str], str]:
    done = subprocess.run(
        [str(driver), *map(str, script)],
        capture_output=True,
        text=True,
        env=bare_env() if env is None else env,
        timeout=60,
        check=True,
    )
    return done.stdout.splitlines(), done.stderr


def server_env(server: NotifyServer) -> dict[str, str]:
    return {**bare_env(), **server.environ()}


# ------------------------------------------------------------------------------ build


def test_the_library_is_found_and_built_from_the_package(driver: Path) -> None:
    libs = config("--libs")
    lib_dir = Path(config("--lib-dir")[0])
    assert f"-L{lib_dir}" in libs and "-lgreenckpt" in libs
    assert (lib_dir / "libgreenckpt.so").is_file()
    assert (Path(config("--include-dir")[0]) / "greenckpt.h").is_file()
    needed = subprocess.run(["ldd", str(driver)], capture_output=True, text=True, check=True).stdout
    assert str(lib_dir / "libgreenckpt.so") in needed  # found through the rpath, no env


def test_pkg_config_gives_the_same_flags(tmp_path: Path) -> None:
    if shutil.which("pkg-config") is None:
        pytest.skip("pkg-config is not installed")
    env = {**os.environ, "PKG_CONFIG_PATH": config("--pkgconfig-dir")[0]}
    flags = subprocess.run(
        ["pkg-config", "--cflags", "--libs", "greenckpt"],
        capture_output=True,
        text=True,
        env=env,
        check=True,
    ).stdout.split()
    out = tmp_path / "viapc"
    subprocess.run([c_compiler(), *flags, "-pthread", str(DRIVER), "-o", str(out)], check=True)
    lines, _ = run(out, "a")
    assert lines == ["a -> 0"]


def test_the_header_is_valid_cplusplus(tmp_path: Path) -> None:
    cxx = shutil.which("c++") or shutil.which("g++")
    if cxx is None:
        pytest.skip("no C++ compiler (c++ or g++) on this machine")
    source = tmp_path / "app.cpp"
    source.write_text(
        "#include <greenckpt.h>\n#include <cstdio>\nint main() {\n  int io = -1;\n"
        '  int s = greenckpt_begin(GREENCKPT_CHECKPOINT, 1, "/tmp", 10, &io);\n'
        '  std::printf("%d %d %d\\n", s, io, greenckpt_end(GREENCKPT_CHECKPOINT, 1));\n}\n'
    )
    out = tmp_path / "app"
    subprocess.run(
        [cxx, "-Wall", "-Werror", *config("--cflags", "--libs"), str(source), "-o", str(out)],
        check=True,
    )
    done = subprocess.run([str(out)], capture_output=True, text=True, env=bare_env(), check=True)
    assert done.stdout.split() == ["1", "0", "1"]


# ------------------------------------------------------------------------------ no runtime


def test_without_a_runtime_every_call_is_a_quiet_no_op(driver: Path) -> None:
    lines, err = run(driver, "a", "b", CHECKPOINT, 1, "/tmp/ck", 4096, "q", CHECKPOINT,
                     "e", CHECKPOINT, 1, "b", REWORK, 0, "-", 0, "e", REWORK, 0)  # fmt: skip
    assert lines == [
        "a -> 0",
        "b 0 -> 1 io=0",
        "q 0 -> 0",
        "e 0 -> 1",
        "b 3 -> 1 io=0",
        "e 3 -> 1",
    ]
    assert err == ""


def test_a_stale_socket_is_reported_once_and_every_call_goes_on(driver: Path) -> None:
    env = {**bare_env(), "GREENCKPT_RUNTIME_SOCKET": "/tmp/greenckpt-no-such.sock"}
    script = ["b", CHECKPOINT, 1, "/tmp", 10, "e", CHECKPOINT, 1] * 5
    lines, err = run(driver, *script, env=env)
    assert lines == ["b 0 -> 1 io=0", "e 0 -> 1"] * 5
    assert err.count("\n") == 1 and "/tmp/greenckpt-no-such.sock cannot be reached" in err


# ------------------------------------------------------------------------------ with a runtime


def test_phases_reach_the_runtime_with_their_fields(
    driver: Path, server: NotifyServer, target: FakeTarget
) -> None:
    lines, err = run(
        driver,
        "n", 3,
        "a",
        "b", CHECKPOINT, 2, "/tmp/ck dir/\"q\"", 4096,
        "q", CHECKPOINT,
        "e", CHECKPOINT, 1,
        "q", CHECKPOINT,
        "b", RESTART, 2, "/tmp/ck", 100,
        "e", RESTART, 0,
        "b", REWORK, 2, "-", 0,
        "e", REWORK, 1,
        env=server_env(server),
    )  # fmt: skip
    assert err == ""
    assert lines == [
        "n 3 -> 0",
        "a -> 1",
        "b 0 -> 0 io=2",  # the fake policy's advice
        "q 0 -> 2",
        "e 0 -> 0",
        "q 0 -> 0",  # no checkpoint open any more: no advice
        "b 1 -> 0 io=2",
        "e 1 -> 0",
        "b 3 -> 0 io=0",  # rework is only accounted: no advice
        "e 3 -> 0",
    ]
    assert target.calls == [
        ("begin", "checkpoint", '/tmp/ck dir/"q"', 4096, 2),
        ("end", "checkpoint", True),
        ("begin", "restart", "/tmp/ck", 100, 2),
        ("end", "restart", False),
        ("begin", "rework", None, 0, 2),  # no path: none
        ("end", "rework", True),
    ]
    assert target.nodes == [3, 3, 3]
    assert all(node == 3 and seconds is not None and seconds >= 0 for node, seconds in target.ends)


def test_bad_calls_are_refused_and_the_accounting_stays_right(
    driver: Path, server: NotifyServer, target: FakeTarget
) -> None:
    lines, err = run(
        driver,
        "e", CHECKPOINT, 1,                      # end without begin
        "b", 9, 0, "/tmp", 1,                    # unknown kind
        "b", CHECKPOINT, 1, "-", 10,             # NULL path for an I/O phase
        "b", CHECKPOINT, 1, "/tmp", -5,          # negative size
        "b", CHECKPOINT, -1, "/tmp", 5,          # negative level
        "b", CHECKPOINT, 1, "/tmp", 10,          # good
        "b", RESTART, 1, "/tmp", 10,             # good, nested inside the checkpoint
        "b", CHECKPOINT, 1, "/tmp", 10,          # the same kind twice in one thread
        "e", CHECKPOINT, 1,                      # wrong nesting: the restart is innermost
        "e", RESTART, 1,                         # good
        "e", CHECKPOINT, 1,                      # good
        "r",
        env=server_env(server),
    )  # fmt: skip
    statuses = [line.split(" -> ")[1].split()[0] for line in lines if line[0] in "be"]
    assert statuses == ["-2", "-1", "-1", "-1", "-1", "0", "0", "-2", "-2", "0", "0"]
    assert lines[-1] == (
        "r -> greenckpt_end(checkpoint): the innermost phase open in this thread is a restart; "
        "end it first (phases nest)"
    )
    errors = err.splitlines()
    assert len(errors) == 7 and all(e.startswith("greenckpt: ") for e in errors)
    assert "unknown kind 9" in errors[1] and "no path" in errors[2] and "-5 bytes" in errors[3]
    assert "innermost phase open in this thread is a restart" in errors[6]
    assert target.calls == [
        ("begin", "checkpoint", "/tmp", 10, 1),
        ("begin", "restart", "/tmp", 10, 1),
        ("end", "restart", True),
        ("end", "checkpoint", True),
    ]
    assert target.open == {"checkpoint": 0, "restart": 0}


def test_a_level_above_the_highest_is_refused_the_same_with_or_without_a_runtime(
    driver: Path, server: NotifyServer, target: FakeTarget
) -> None:
    """Level 9 was accepted without a runtime and refused (−4) by one: a program tested
    without greenckpt broke under it. The library checks it itself now (1..4 or none)."""
    script = ["b", CHECKPOINT, 9, "/tmp", 10, "e", CHECKPOINT, 1, "b", RESTART, 5, "/tmp", 10,
              "b", CHECKPOINT, 4, "/tmp", 10, "e", CHECKPOINT, 1]  # fmt: skip
    alone, err_alone = run(driver, *script)
    attached, err_attached = run(driver, *script, env=server_env(server))
    statuses = [[line.split(" -> ")[1].split()[0] for line in lines] for lines in (alone, attached)]
    assert statuses == [["-1", "-2", "-1", "1", "1"], ["-1", "-2", "-1", "0", "0"]]
    refusals = [line for line in err_alone.splitlines() if "level" in line]
    assert refusals == [line for line in err_attached.splitlines() if "level" in line]
    assert refusals[0] == (
        "greenckpt: greenckpt_begin(checkpoint): level 9; a level is 1 to 4 "
        "(GREENCKPT_MAX_LEVEL), or GREENCKPT_NO_LEVEL"
    )
    assert target.calls == [("begin", "checkpoint", "/tmp", 10, 4), ("end", "checkpoint", True)]


def test_a_refused_begin_is_an_error_and_its_end_is_not_sent(
    driver: Path, server: NotifyServer, target: FakeTarget
) -> None:
    # The fake runtime refuses a begin of 13 bytes, as the real one refuses a bad request.
    lines, err = run(
        driver, "b", CHECKPOINT, 1, "/tmp", 13, "e", CHECKPOINT, 1,
        "b", CHECKPOINT, 1, "/tmp", 14, "e", CHECKPOINT, 1, env=server_env(server),
    )  # fmt: skip
    assert lines == ["b 0 -> -4 io=0", "e 0 -> 1", "b 0 -> 0 io=2", "e 0 -> 0"]
    assert err.count("\n") == 1 and "refused checkpoint: unlucky size second line" in err
    assert target.calls == [("begin", "checkpoint", "/tmp", 14, 1), ("end", "checkpoint", True)]


def test_a_forked_child_is_refused(driver: Path, server: NotifyServer, target: FakeTarget) -> None:
    lines, err = run(driver, "a", "f", CHECKPOINT, env=server_env(server))
    assert lines == ["a -> 1", "f 0 -> -3"]
    assert "called from a forked child" in err
    assert target.calls == []


def test_threads_announce_safely(driver: Path, server: NotifyServer, target: FakeTarget) -> None:
    lines, err = run(driver, "t", 4, 50, env=server_env(server))
    assert lines == ["t -> 0 failures"] and err == ""
    begins = [c for c in target.calls if c[0] == "begin"]
    ends = [c for c in target.calls if c[0] == "end"]
    assert len(begins) == len(ends) == 200
    assert target.open == {"checkpoint": 0}


def test_a_runtime_that_goes_away_is_reported_once(
    driver: Path, server: NotifyServer, target: FakeTarget
) -> None:
    pair = ["b", CHECKPOINT, 1, "/tmp", 10, "e", CHECKPOINT, 1]
    proc = subprocess.Popen(
        [str(driver), *map(str, [*pair, "w", *pair, *pair])],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env=server_env(server),
    )  # fmt: skip
    assert proc.stdout is not None and proc.stdin is not None
    assert [proc.stdout.readline() for _ in range(3)] == ["b 0 -> 0 io=2\n", "e 0 -> 0\n", "w\n"]
    server.close()
    out, err = proc.communicate("go\n", timeout=60)
    assert out.splitlines() == ["b 0 -> -4 io=0", "e 0 -> 1", "b 0 -> 1 io=0", "e 0 -> 1"]
    assert err.count("\n") == 1 and "phase announcements are off" in err
    assert proc.returncode == 0


# ------------------------------------------------------------------------------ real runtime


def test_under_greenckpt_run_the_report_has_exactly_the_good_phases(
    driver: Path, tmp_path: Path
) -> None:
    out = tmp_path / "report"
    done = subprocess.run(
        [*GREENCKPT, "run", "--no-control", "-o", str(out), "--", str(driver), *map(str, [
         "b", CHECKPOINT, 1, tmp_path, 4096, "e", CHECKPOINT, 1, "e", CHECKPOINT, 1,
         "b", RESTART, 1, "-", 5, "b", RESTART, 1, tmp_path, 300, "e", RESTART, 1])],
        capture_output=True, text=True, env=bare_env(), timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "b 0 -> 0" in done.stdout and "e 0 -> -2" in done.stdout
    records = json.loads((out / "report.json").read_text())["records"]
    io = [(r["kind"], r["level"], r["size"], r["ok"]) for r in records if r["kind"] != "compute"]
    assert io == [("checkpoint", 1, 4096, True), ("lost", None, 0, True), ("restart", 1, 300, True)]


def test_a_node_placeholder_in_the_socket_path_picks_the_nodes_runtime(driver: Path) -> None:
    """Emulated nodes on one host each have their own agent: ``{node}`` in the socket path is
    replaced by the node index, and a changed index reconnects to that node's socket."""
    sock_dir = Path(tempfile.mkdtemp(prefix="gcn-", dir="/tmp"))
    targets = [FakeTarget(), FakeTarget()]
    try:
        with (
            NotifyServer(targets[0], sock_dir / "node0.sock"),
            NotifyServer(targets[1], sock_dir / "node1.sock"),
        ):
            env = {**bare_env(), "GREENCKPT_RUNTIME_SOCKET": str(sock_dir / "node{node}.sock")}
            pair = ["b", CHECKPOINT, 1, "/tmp", 10, "e", CHECKPOINT, 1]
            lines, err = run(driver, "n", 1, *pair, "n", 0, *pair, env=env)
    finally:
        shutil.rmtree(sock_dir, ignore_errors=True)
    assert err == "" and lines.count("b 0 -> 0 io=2") == 2
    assert [t.nodes for t in targets] == [[0], [1]]


def test_a_process_killed_in_a_phase_leaves_it_ended_as_failed(
    driver: Path, server: NotifyServer, target: FakeTarget
) -> None:
    proc = subprocess.Popen(
        [str(driver), *map(str, ["b", CHECKPOINT, 1, "/tmp", 10, "w"])],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env=server_env(server),
    )  # fmt: skip
    assert proc.stdout is not None
    assert [proc.stdout.readline() for _ in range(2)] == ["b 0 -> 0 io=2\n", "w\n"]
    proc.kill()  # a rank killed in the middle of its checkpoint
    proc.communicate(timeout=60)
    deadline = time.monotonic() + 10
    while ("end", "checkpoint", False) not in target.calls and time.monotonic() < deadline:
        time.sleep(0.01)
    assert target.calls == [("begin", "checkpoint", "/tmp", 10, 1), ("end", "checkpoint", False)]
    assert server.open_phases() == {}


def test_a_relative_path_is_sent_from_the_programs_folder(
    driver: Path, server: NotifyServer, target: FakeTarget, tmp_path: Path
) -> None:
    done = subprocess.run(
        [str(driver), *map(str, ["b", CHECKPOINT, 1, "ckpt/run1", 10, "e", CHECKPOINT, 1])],
        capture_output=True, text=True, env=server_env(server), cwd=tmp_path, check=True,
    )  # fmt: skip
    assert done.stdout.splitlines()[0] == "b 0 -> 0 io=2"
    assert target.calls[0] == ("begin", "checkpoint", f"{tmp_path}/ckpt/run1", 10, 1)


def test_the_node_cannot_change_under_an_open_phase(driver: Path) -> None:
    sock_dir = Path(tempfile.mkdtemp(prefix="gcn-", dir="/tmp"))
    targets = [FakeTarget(), FakeTarget()]
    try:
        with (
            NotifyServer(targets[0], sock_dir / "node0.sock"),
            NotifyServer(targets[1], sock_dir / "node1.sock"),
        ):
            env = {**bare_env(), "GREENCKPT_RUNTIME_SOCKET": str(sock_dir / "node{node}.sock")}
            lines, err = run(
                driver, "b", CHECKPOINT, 1, "/tmp", 10, "n", 1, "e", CHECKPOINT, 1, env=env
            )
    finally:
        shutil.rmtree(sock_dir, ignore_errors=True)
    assert lines == ["b 0 -> 0 io=2", "n 1 -> -2", "e 0 -> 0"]
    assert "end them first" in err and err.count("\n") == 1
    assert [c[0] for c in targets[0].calls] == ["begin", "end"] and targets[1].calls == []
