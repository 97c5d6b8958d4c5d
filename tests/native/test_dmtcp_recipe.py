"""The DMTCP recipe, examples/dmtcp/greenckpt-dmtcp.sh (issue 16 item 3), under greenckpt run.

DMTCP's four commands are stand-ins (tests/native/dmtcp_standin.py, written into tmp_path and
put first on PATH) that record their calls; the application is a shell loop that runs until
the stand-in checkpoint says stop. Checked: every blocking checkpoint is a checkpoint phase in
the report with the bytes the script announced (resident memory first, then the previous
images), a second run restarts from the last good images inside a restart phase that ends once
every peer is RUNNING, the application's status comes out, no coordinator is left, bad
arguments are refused in one line, and without greenckpt run nothing is notified. A last test
runs the real DMTCP when dmtcp_launch is on PATH.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
RECIPE = ROOT / "examples" / "dmtcp" / "greenckpt-dmtcp.sh"
STANDIN = Path(__file__).resolve().parent / "dmtcp_standin.py"
TOOLS = ("dmtcp_coordinator", "dmtcp_launch", "dmtcp_command", "dmtcp_restart")
# The application: loops until the stand-in's checkpoint (or restart) says stop, exits with $1.
LOOP = 'while [ ! -e "$FAKE_DMTCP_DIR/stop" ]; do sleep 0.05; done; exit "$1"'
ANNOUNCED = re.compile(r"checkpoint (\d+): announcing (\d+) bytes \((.*)\)")


class Fake:
    """A directory with the stand-ins, their state and a checkpoint directory."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.bin = root / "bin"
        self.state = root / "state"
        self.ckpt = root / "ckpt"
        self.bin.mkdir()
        self.state.mkdir()
        source = f"#!{sys.executable}\n" + STANDIN.read_text()
        for tool in TOOLS:
            (self.bin / tool).write_text(source)
            (self.bin / tool).chmod(0o755)
        # greenckpt itself, through a wrapper that logs each notify into the same call log.
        wrapper = self.bin / "greenckpt-logged"
        wrapper.write_text(
            "#!/bin/sh\n"
            f'printf \'{{"tool": "greenckpt", "argv": "%s"}}\\n\' "$*" '
            f'>> "{self.state}/calls.log"\n'
            f'exec "{sys.executable}" -m greenckpt "$@"\n'
        )
        wrapper.chmod(0o755)

    def env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("GREENCKPT")}
        env["PATH"] = f"{self.bin}{os.pathsep}{env.get('PATH', '')}"
        env["FAKE_DMTCP_DIR"] = str(self.state)
        env["GREENCKPT"] = str(self.bin / "greenckpt-logged")
        env["PYTHONPATH"] = str(ROOT / "src")
        return env

    def calls(self) -> list[dict[str, Any]]:
        path = self.state / "calls.log"
        if not path.exists():
            return []
        return [json.loads(line) for line in path.read_text().splitlines()]

    def stop_after(self, attempts: int) -> None:
        (self.state / "stop_after").write_text(str(attempts))

    def kill_leftovers(self) -> None:
        """After a test: a stand-in the recipe failed to stop must not outlive it."""
        pids = [p.name for p in (self.state / "peers").glob("[0-9]*")]
        if (self.state / "coordinator.pid").exists():
            pids.append((self.state / "coordinator.pid").read_text())
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(pid), signal.SIGKILL)

    def coordinator_gone(self) -> bool:
        pid = int((self.state / "coordinator.pid").read_text())
        return not Path(f"/proc/{pid}").exists()


def recipe(fake: Fake, *args: str, status: int = 0) -> list[str]:
    return [
        str(RECIPE),
        *args,
        "--ckpt-dir",
        str(fake.ckpt),
        "--",
        "sh",
        "-c",
        LOOP,
        "app",
        str(status),
    ]


def under_run(fake: Fake, out: Path, command: list[str]) -> subprocess.CompletedProcess[str]:
    run = [sys.executable, "-m", "greenckpt", "run", "--no-control", "-o", str(out), "--"]
    return subprocess.run(
        run + command, env=fake.env(), check=False, capture_output=True, text=True, timeout=120
    )


def records(out: Path, kind: str) -> list[dict[str, Any]]:
    report = json.loads((out / "report.json").read_text())
    return [r for r in report["records"] if r["kind"] == kind]


def checkpoint_images(fake: Fake) -> list[list[tuple[str, int]]]:
    """The images each successful stand-in checkpoint wrote, in order."""
    done = [c for c in fake.calls() if c["tool"] == "dmtcp_command" and c.get("images")]
    return [[(path, size) for path, size in c["images"]] for c in done]


@pytest.fixture
def fake(tmp_path: Path) -> Iterator[Fake]:
    if shutil.which("bash") is None:
        pytest.skip("no bash on this machine: the recipe is a bash script")
    made = Fake(tmp_path)
    yield made
    made.kill_leftovers()


def test_checkpoints_are_phases_with_the_sizes_the_script_announced(
    fake: Fake, tmp_path: Path
) -> None:
    fake.stop_after(3)
    done = under_run(fake, tmp_path / "R", recipe(fake, "--interval", "0.3", "--level", "2"))
    assert done.returncode == 0, done.stderr
    announced = [(int(m[1]), m[2]) for m in ANNOUNCED.findall(done.stderr)]
    images = checkpoint_images(fake)
    assert len(announced) == len(images) == 3
    # The first checkpoint announces the processes' resident memory, each later one the bytes of
    # the images the one before it wrote.
    assert announced[0][1] == "resident memory of the processes" and announced[0][0] > 0
    assert [a[0] for a in announced[1:]] == [sum(s for _, s in imgs) for imgs in images[:-1]]
    assert [a[1] for a in announced[1:]] == ["the previous images"] * 2
    phases = records(tmp_path / "R", "checkpoint")
    assert [p["size"] for p in phases] == [a[0] for a in announced]
    assert all(p["ok"] and p["level"] == 2 for p in phases)
    assert {p["path"] for p in phases} == {str(fake.ckpt)}
    assert all(p["reported_seconds"] is not None for p in phases)
    assert records(tmp_path / "R", "restart") == []
    manifest = (fake.ckpt / "greenckpt-dmtcp.images").read_text().split()
    assert manifest == [Path(p).name for p, _ in images[-1]]
    assert fake.coordinator_gone()


def test_a_second_run_restarts_from_the_last_images_inside_a_restart_phase(
    fake: Fake, tmp_path: Path
) -> None:
    fake.stop_after(2)
    first = under_run(fake, tmp_path / "R1", recipe(fake, "--interval", "0.3"))
    assert first.returncode == 0, first.stderr
    last = checkpoint_images(fake)[-1]
    (fake.state / "calls.log").unlink()
    fake.stop_after(1)
    second = under_run(fake, tmp_path / "R2", recipe(fake, "--interval", "0.3"))
    assert second.returncode == 0, second.stderr
    calls = fake.calls()
    restarts = [c for c in calls if c["tool"] == "dmtcp_restart" and "images" in c]
    assert [c["images"] for c in restarts] == [[p for p, _ in last]]
    assert not any(c["tool"] == "dmtcp_launch" for c in calls)
    phases = records(tmp_path / "R2", "restart")
    assert len(phases) == 1
    assert phases[0]["ok"] and phases[0]["size"] == sum(s for _, s in last)
    # The restart phase ends only after the coordinator reported every peer RUNNING.
    order = [
        "begin restart"
        if c["tool"] == "greenckpt" and "begin restart" in c["argv"]
        else "end restart"
        if c["tool"] == "greenckpt" and "end restart" in c["argv"]
        else "restored"
        if c.get("restored")
        else "status running"
        if c["argv"] == ["--status"] and c["running"]
        else "status not running"
        if c["argv"] == ["--status"]
        else None
        for c in calls
    ]
    order = [o for o in order if o is not None]
    assert order[0] == "begin restart" and order[-1] == "end restart"
    assert order.index("restored") < order.index("status running") < order.index("end restart")
    assert "status not running" in order[: order.index("status running")]
    # After the restart, the next checkpoint announces the bytes the restart read.
    announced = [int(m[1]) for m in ANNOUNCED.findall(second.stderr)]
    assert announced[:1] == [sum(s for _, s in last)]
    assert [p["ok"] for p in records(tmp_path / "R2", "checkpoint")] == [True]
    assert fake.coordinator_gone()


def test_the_application_status_comes_out_of_the_recipe_and_of_greenckpt_run(
    fake: Fake, tmp_path: Path
) -> None:
    fake.stop_after(1)
    done = under_run(fake, tmp_path / "R", recipe(fake, "--interval", "0.3", status=7))
    assert done.returncode == 7, done.stderr
    assert fake.coordinator_gone()


def test_without_greenckpt_run_nothing_is_notified_and_the_status_comes_out(
    fake: Fake,
) -> None:
    fake.stop_after(2)
    done = subprocess.run(
        recipe(fake, "--interval", "0.3", status=5),
        env=fake.env(),
        check=False,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 5, done.stderr
    assert len(checkpoint_images(fake)) == 2
    assert not any(c["tool"] == "greenckpt" for c in fake.calls())
    assert fake.coordinator_gone()


def test_a_failed_checkpoint_is_a_failed_phase_and_keeps_the_previous_images(
    fake: Fake, tmp_path: Path
) -> None:
    fake.stop_after(2)
    first = under_run(fake, tmp_path / "R1", recipe(fake, "--interval", "0.3"))
    assert first.returncode == 0, first.stderr
    manifest = (fake.ckpt / "greenckpt-dmtcp.images").read_text()
    (fake.state / "fail").touch()
    (fake.state / "stop").unlink()
    fake.stop_after(2)  # the restart runs the loop again; two failing checkpoints stop it
    second = under_run(fake, tmp_path / "R2", recipe(fake, "--interval", "0.3"))
    assert second.returncode == 0, second.stderr
    phases = records(tmp_path / "R2", "checkpoint")
    assert [p["ok"] for p in phases] == [False, False]
    assert (fake.ckpt / "greenckpt-dmtcp.images").read_text() == manifest
    assert "checkpoint 1 failed" in second.stderr


def test_a_terminated_recipe_stops_the_coordinator_and_the_application(
    fake: Fake, tmp_path: Path
) -> None:
    env = fake.env()
    proc = subprocess.Popen(
        recipe(fake, "--interval", "0.3"),
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 60
    while not checkpoint_images(fake) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert checkpoint_images(fake), "no checkpoint within 60 s"
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 143, err
    assert fake.coordinator_gone()
    app = [c["pid"] for c in fake.calls() if c["tool"] == "dmtcp_launch"]
    assert app and not Path(f"/proc/{app[0]}").exists()


@pytest.mark.parametrize(
    ("args", "names"),
    [
        (["--interval", "abc", "--", "true"], "--interval 'abc'"),
        (["--interval", "0", "--", "true"], "--interval '0'"),
        (["--interval"], "--interval needs a value"),
        (["--level", "x", "--", "true"], "--level 'x'"),
        (["--bogus", "--", "true"], "unknown option '--bogus'"),
        (["--interval", "5"], "no application given"),
    ],
)
def test_bad_arguments_are_refused_in_one_line_and_start_nothing(
    fake: Fake, args: list[str], names: str
) -> None:
    done = subprocess.run(
        [str(RECIPE), *args],
        env=fake.env(),
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and names in done.stderr
    assert done.stderr.startswith("greenckpt-dmtcp: ")
    assert fake.calls() == []


def test_a_missing_dmtcp_is_said_in_one_line(fake: Fake) -> None:
    (fake.bin / "dmtcp_launch").unlink()
    env = fake.env()
    env["PATH"] = f"{fake.bin}{os.pathsep}/usr/bin{os.pathsep}/bin"
    if shutil.which("dmtcp_launch", path=env["PATH"]):
        pytest.skip("a real dmtcp_launch is installed in /usr/bin or /bin")
    done = subprocess.run(
        recipe(fake), env=env, check=False, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 2
    assert done.stderr == (
        "greenckpt-dmtcp: dmtcp_launch is not on PATH: install DMTCP (github.com/dmtcp/dmtcp) "
        "and add its bin directory to PATH\n"
    )
    assert fake.calls() == []


COUNT_C = r"""
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
/* Prints its steps 0..N-1, one every 0.1 s, then exits with status STATUS. */
int main(int argc, char **argv) {
    static char memory[8 << 20];
    struct timespec tick = {0, 100000000};
    int n = atoi(argv[1]);
    for (size_t i = 0; i < sizeof memory; i += 4096) memory[i] = 1;
    for (int i = 0; i < n; i++) { printf("step %d\n", i); fflush(stdout); nanosleep(&tick, NULL); }
    return atoi(argv[2]);
}
"""


def test_with_the_real_dmtcp(tmp_path: Path) -> None:
    if shutil.which("dmtcp_launch") is None:
        pytest.skip("DMTCP is not installed (no dmtcp_launch on PATH)")
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler (cc or gcc) for the test application")
    (tmp_path / "count.c").write_text(COUNT_C)
    subprocess.run(
        [cc, "-O2", "-o", str(tmp_path / "count"), str(tmp_path / "count.c")], check=True
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("GREENCKPT")}
    env["GREENCKPT"] = f"{sys.executable} -m greenckpt"
    env["PYTHONPATH"] = str(ROOT / "src")
    ckpt = tmp_path / "ckpt"
    command = [
        str(RECIPE),
        "--interval",
        "1",
        "--ckpt-dir",
        str(ckpt),
        "--",
        str(tmp_path / "count"),
        "40",
        "3",
    ]
    runs = []
    images: list[str] = []
    for name in ("R1", "R2"):
        run = [sys.executable, "-m", "greenckpt", "run", "--no-control", "-o", str(tmp_path / name)]
        runs.append(
            subprocess.run(
                [*run, "--", *command],
                env=env,
                check=False,
                capture_output=True,
                text=True,
                timeout=300,
                cwd=tmp_path,
            )
        )
        assert runs[-1].returncode == 3, runs[-1].stderr
        images = images or (ckpt / "greenckpt-dmtcp.images").read_text().split()
    phases = records(tmp_path / "R1", "checkpoint")
    assert phases and all(p["ok"] for p in phases)
    announced = [int(m[1]) for m in ANNOUNCED.findall(runs[0].stderr)]
    assert [p["size"] for p in phases] == announced
    restart = records(tmp_path / "R2", "restart")
    assert len(restart) == 1 and restart[0]["ok"]
    assert restart[0]["size"] == sum((ckpt / name).stat().st_size for name in images)
    # The restarted application goes on from its checkpoint, not from step 0.
    steps = [int(s) for s in re.findall(r"^step (\d+)$", runs[1].stdout, re.M)]
    assert steps and steps[0] > 0 and steps[-1] == 39
