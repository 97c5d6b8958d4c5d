"""A real one-node Slurm for the cluster tests: Debian's slurmctld, slurmd and munge.

Why a real one: the Slurm launcher's contract is Slurm's (``srun`` steps that overlap, the
environment each task gets, what ``scancel`` sends), which no stand-in would check. The
cluster is installed when missing (as root, through apt), configured in a private directory
(its own ``slurm.conf``, state, spool, logs and ports; ``SLURM_CONF`` points at it), started
once per test session and stopped at its end. :func:`start_slurm` says in one line why when it
cannot: the tests then skip with that line.
"""

from __future__ import annotations

import contextlib
import os
import random
import shutil
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["SlurmCluster", "SlurmUnavailable", "start_slurm"]

MUNGE_KEY = Path("/etc/munge/munge.key")
PACKAGES = ("slurmctld", "slurmd", "slurm-client", "munge")


class SlurmUnavailable(Exception):  # noqa: N818 - a test-only reason to skip
    """Slurm could not be installed or started; the message is the one-line reason."""


@dataclass
class SlurmCluster:
    """A started one-node Slurm: ``env`` runs its clients (``SLURM_CONF`` set)."""

    directory: Path
    host: str
    env: dict[str, str]
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)
    munged_pid: int | None = None

    def run(self, *argv: str, timeout: float = 60.0) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            argv, env=self.env, capture_output=True, text=True, timeout=timeout, check=False
        )

    def node_state(self) -> str:
        out = self.run("sinfo", "-h", "-N", "-o", "%t", timeout=20.0)
        return out.stdout.strip()

    def cancel_all(self, wait_s: float = 30.0) -> None:
        """Kill every job of this cluster (a failed test leaves none running)."""
        if not self.run("squeue", "-h", "-o", "%i", timeout=20.0).stdout.strip():
            return
        self.run("scancel", "--full", "--signal=KILL", "--user=root", timeout=20.0)
        self.run("scancel", "--user=root", timeout=20.0)
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline and self.run("squeue", "-h").stdout.strip():
            time.sleep(0.5)

    def stop(self) -> None:
        """Stop what this session started (by pid), its jobs first, then slurmd."""
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            self.cancel_all()
        for proc in reversed(self.procs):
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(20)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
        if self.munged_pid is not None:
            with contextlib.suppress(OSError):
                os.kill(self.munged_pid, 15)


def _sh(argv: list[str], timeout: float = 60.0) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)


def _install() -> None:
    if all(shutil.which(p) for p in ("slurmctld", "slurmd", "munged", "sbatch", "srun")):
        return
    if os.geteuid() != 0:
        raise SlurmUnavailable("Slurm is not installed and installing it needs root")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for argv in (["apt-get", "update", "-qq"], ["apt-get", "install", "-y", "-qq", *PACKAGES]):
        try:
            done = subprocess.run(
                argv, env=env, capture_output=True, text=True, timeout=900, check=False
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise SlurmUnavailable(f"{' '.join(argv[:2])} failed: {exc}") from None
        if done.returncode != 0:
            last = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["?"]
            raise SlurmUnavailable(f"{' '.join(argv[:2])} failed: {last[0]}")


def _munge() -> int | None:
    """Make sure munged runs (started as user munge); its pid when this session started it."""
    if _sh(["sh", "-c", "munge -n | unmunge"], 20).returncode == 0:
        return None
    if not MUNGE_KEY.exists():
        MUNGE_KEY.parent.mkdir(parents=True, exist_ok=True)
        MUNGE_KEY.write_bytes(os.urandom(1024))
        shutil.chown(MUNGE_KEY, "munge", "munge")
        MUNGE_KEY.chmod(0o400)
    for d in ("/run/munge", "/var/log/munge", "/var/lib/munge"):
        Path(d).mkdir(parents=True, exist_ok=True)
        shutil.chown(d, "munge", "munge")
    started = _sh(["runuser", "-u", "munge", "--", "munged"], 30)
    if started.returncode != 0:
        raise SlurmUnavailable(f"munged does not start: {started.stderr.strip()[:200]}")
    with contextlib.suppress(OSError, ValueError):
        return int(Path("/run/munge/munged.pid").read_text().strip())
    return None


def _free_ports(n: int) -> list[int]:
    socks = [socket.socket() for _ in range(n)]
    for s in socks:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


def _config(directory: Path, host: str) -> Path:
    lines = _sh(["slurmd", "-C"], 20).stdout.splitlines()
    if not lines or not lines[0].startswith("NodeName="):
        raise SlurmUnavailable("slurmd -C does not describe this node")
    node = lines[0].strip()
    ctld, slurmd = _free_ports(2)
    first_job = random.randrange(1000, 60_000_000)  # not job 1 again: ids name node paths
    for sub in ("state", "spool"):
        (directory / sub).mkdir(exist_ok=True)
    conf = directory / "slurm.conf"
    conf.write_text(
        "\n".join(
            [
                "ClusterName=greenckpt-test",
                f"SlurmctldHost={host}",
                "SlurmUser=root",
                "SlurmdUser=root",
                f"SlurmctldPort={ctld}",
                f"SlurmdPort={slurmd}",
                "AuthType=auth/munge",
                f"StateSaveLocation={directory / 'state'}",
                f"SlurmdSpoolDir={directory / 'spool'}",
                f"SlurmctldPidFile={directory / 'slurmctld.pid'}",
                f"SlurmdPidFile={directory / 'slurmd.pid'}",
                f"SlurmctldLogFile={directory / 'slurmctld.log'}",
                f"SlurmdLogFile={directory / 'slurmd.log'}",
                "ProctrackType=proctrack/linuxproc",
                "TaskPlugin=task/none",
                "SelectType=select/cons_tres",
                "SelectTypeParameters=CR_Core",
                "MpiDefault=none",
                "JobAcctGatherType=jobacct_gather/none",
                "AccountingStorageType=accounting_storage/none",
                "ReturnToService=2",
                "KillWait=5",
                "InactiveLimit=0",
                "MinJobAge=300",
                f"FirstJobId={first_job}",
                f"{node} State=UNKNOWN",
                f"PartitionName=debug Nodes={host} Default=YES MaxTime=INFINITE State=UP",
                "",
            ]
        )
    )
    return conf


def start_slurm(directory: Path, wait_s: float = 60.0) -> SlurmCluster:
    """Install (when missing), configure and start a one-node Slurm in ``directory``;
    SlurmUnavailable (one line) when it cannot."""
    _install()
    munged = _munge()
    host = socket.gethostname().split(".")[0]
    conf = _config(directory, host)
    env = {**os.environ, "SLURM_CONF": str(conf)}
    cluster = SlurmCluster(directory, host, env, munged_pid=munged)
    for daemon in ("slurmctld", "slurmd"):
        log = open(directory / f"{daemon}.out", "wb")  # noqa: SIM115 - kept for the daemon
        proc = subprocess.Popen([daemon, "-D"], env=env, stdout=log, stderr=log)
        log.close()
        cluster.procs.append(proc)
        time.sleep(1.0)
    deadline = time.monotonic() + wait_s
    state = ""
    while time.monotonic() < deadline:
        state = cluster.node_state()
        if state == "idle":
            return cluster
        if any(p.poll() is not None for p in cluster.procs):
            break
        time.sleep(0.5)
    cluster.stop()
    tail = (directory / "slurmd.log").read_text(errors="replace").strip().splitlines()[-1:]
    raise SlurmUnavailable(f"Slurm's node is not idle (sinfo: {state or 'nothing'}; {tail})")
