"""``greenckpt run --launcher mpiexec --agent-hosts H1,...`` (issue 15 item 1: agents "started
by the job's launcher (... or mpiexec with one process per host)"): one agent per host through
``mpiexec -n N -ppn 1 -hosts``, its node index the MPI rank; bad host lists are one line.

This machine is one host, so the end-to-end run has one agent (two on one host would take the
same node-local socket: refused by the host check); the launch path, the rank as the node
index, the hello, the job report and the node-local per-job socket are real.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from greenckpt.ckpt.comm import find_mpiexec
from greenckpt.cli.agent_cmd import _node_index
from greenckpt.errors import InvalidValueError
from greenckpt.runtime.launch import AgentSpec
from greenckpt.runtime.launch_mpiexec import (
    MpiexecLauncher,
    job_socket,
    mpi_flavour,
    parse_hosts,
)

APP = """\
import os
from greenckpt.ckpt.notify_client import hook_from_env
hook = hook_from_env()
print("socket", os.environ["GREENCKPT_RUNTIME_SOCKET"])
hook.begin("checkpoint", level=1, path=os.getcwd(), size=1 << 20, node=0)
hook.end("checkpoint", node=0, ok=True, seconds=0.01)
"""


def run_one_agent_on_localhost(
    tmp_path: Path, python: str = sys.executable, env: dict[str, str] | None = None
) -> None:
    """``greenckpt run --launcher mpiexec --agent-hosts localhost`` in ``python`` (the
    mpiexec beside it starts the agent): the agent says hello, the app's checkpoint reaches
    it through the node-local socket, and the job report holds it."""
    (tmp_path / "app.py").write_text(APP)
    done = subprocess.run(
        [python, "-m", "greenckpt", "run", "--launcher", "mpiexec", "--agent-hosts",
         "localhost", "--no-control", "-o", "rep", "--", python, "app.py"],
        cwd=tmp_path, capture_output=True, text=True, timeout=180, check=False, env=env,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    doc = json.loads((tmp_path / "rep" / "job-report.json").read_text())
    assert doc["states"]["finished"] == [0]
    assert doc["job"]["scheduler"] == {"launcher": "mpiexec", "hosts": ["localhost"]}
    assert doc["by_kind"]["checkpoint"]["count"] == 1
    socket_line = next(x for x in done.stdout.splitlines() if x.startswith("socket "))
    assert socket_line.endswith("/agent.sock") and "{node}" not in socket_line  # node-local
    assert (tmp_path / "rep" / "nodes" / "node0" / "report.json").is_file()


def test_one_agent_per_host_through_mpiexec(tmp_path: Path) -> None:
    if find_mpiexec() is None:
        pytest.skip("no mpiexec on this machine (pip install '.[mpi]')")
    run_one_agent_on_localhost(tmp_path)


def test_the_agents_command_line_and_socket() -> None:
    spec = AgentSpec("mpiexec-1-2", 3, "host:1", "t", "/tmp/s.sock", Path("/o"), node_source="mpi")
    argv = MpiexecLauncher(["a", "b", "c"], "mpiexec", "mpich").argv(spec)
    assert argv[:7] == ["mpiexec", "-n", "3", "-ppn", "1", "-hosts", "a,b,c"]
    assert argv[argv.index("--node") + 1] == "mpi"
    assert job_socket("mpiexec-1-2", uid=7) == "/tmp/greenckpt-7/job-mpiexec-1-2/agent.sock"


def test_open_mpis_flags_start_one_unbound_agent_per_host(monkeypatch: pytest.MonkeyPatch) -> None:
    """Open MPI's launcher: one process per host, unbound, with greenckpt's variables named
    (never their values: the token stays off the command line), and as root the flag
    without which Open MPI starts nothing."""
    for name in [k for k in os.environ if k.startswith("GREENCKPT_")]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("GREENCKPT_SYSROOT", "/fake")
    spec = AgentSpec("mpiexec-1-2", 2, "host:1", "s3cret", "/s.sock", Path("/o"), node_source="mpi")
    for euid, root in ((0, ["--allow-run-as-root"]), (1000, [])):
        monkeypatch.setattr(os, "geteuid", lambda euid=euid: euid)
        argv = MpiexecLauncher(["a", "b"], "mpirun", "openmpi").argv(spec)
        assert argv[: argv.index(sys.executable)] == [
            "mpirun", "-n", "2", "--map-by", "ppr:1:node", "--bind-to", "none", "--host", "a,b",
            *root, "-x", "GREENCKPT_JOB_TOKEN", "-x", "GREENCKPT_SYSROOT",
        ]  # fmt: skip
        assert argv[argv.index("--node") + 1] == "mpi"
        assert "s3cret" not in argv


def test_the_launcher_says_whose_flags_it_takes(tmp_path: Path) -> None:
    """``--version`` tells Open MPI's launcher (4.x's and 5.x's) from Hydra; one that does
    not answer keeps Hydra's flags, as before."""
    answers = {
        "ompi4": "mpirun (Open MPI) 4.1.4\n\nReport bugs to https://www.open-mpi.org/",
        "ompi5": "mpiexec (Open MPI) 5.0.11",
        "hydra": "HYDRA build details:\n    Version: 4.2.0",
    }
    for name, text in answers.items():
        (tmp_path / name).write_text(f"#!/bin/sh\nprintf '%s\\n' '{text}'\n")
        (tmp_path / name).chmod(0o755)
    assert [mpi_flavour(str(tmp_path / n)) for n in answers] == ["openmpi", "openmpi", "mpich"]
    assert mpi_flavour(str(tmp_path / "missing")) == "mpich"
    spec = AgentSpec("j", 1, "host:1", "t", "/s.sock", Path("/o"), node_source="mpi")
    asked = MpiexecLauncher(["a"], str(tmp_path / "ompi5")).argv(spec)  # no flavour given
    assert "--map-by" in asked and "-ppn" not in asked


def test_the_rank_is_the_node(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("PMI_RANK", "OMPI_COMM_WORLD_RANK", "PMIX_RANK"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("OMPI_COMM_WORLD_RANK", "3")
    assert _node_index("mpi") == 3
    monkeypatch.delenv("OMPI_COMM_WORLD_RANK")
    with pytest.raises(
        argparse.ArgumentTypeError, match="--node mpi needs the rank of an MPI launcher"
    ):
        _node_index("mpi")


@pytest.mark.parametrize(
    ("hosts", "message"),
    [
        ("", "give the job's hosts separated by commas"),
        ("n01,,n02", "give the job's hosts separated by commas"),
        ("n01,n01", "names n01 more than once"),
        ("n01,-x", "'-x' is not a host name"),
    ],
)
def test_a_bad_host_list_is_refused(hosts: str, message: str) -> None:
    with pytest.raises(InvalidValueError, match=message):
        parse_hosts(hosts)


def test_the_cli_refuses_mpiexec_without_hosts_in_one_line(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "greenckpt", "run", "--launcher", "mpiexec", "--", "true"],
        cwd=tmp_path, capture_output=True, text=True, timeout=60, check=False,
        env={**os.environ},
    )  # fmt: skip
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and "needs --agent-hosts" in done.stderr
    assert not (tmp_path / "greenckpt-report").exists()  # nothing made
