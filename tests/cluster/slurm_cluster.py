"""A real multi-node Slurm on one machine for the cluster tests: Debian's slurmctld, slurmd, munge.

Why a real one: the Slurm launcher's contract is Slurm's (``srun`` steps that overlap, the
environment each task gets, what ``scancel`` sends), which no stand-in would check. The cluster
is installed when missing (as root, through apt), configured in a private directory (its own
``slurm.conf``, state, spool, logs and ports; ``SLURM_CONF`` points at it), started once per test
session and stopped at its end. :func:`start_slurm` says in one line why when it cannot: the
tests then skip with that line.

Why several nodes on one host, each isolated: greenckpt keeps node-local things in node-local
places (``/tmp/greenckpt-<uid>/job-<id>/agent.sock``, ``/run/greenckpt-node.lock``,
``/run/greenckpt/node-state.json``); with every "node" sharing one ``/tmp`` and ``/run`` the
nodes of a job would find each other's files, and a bug that mixes them up would pass. So each
``slurmd -D -N nK`` runs under ``unshare`` in

- its own **mount namespace** (propagation private: nothing it mounts reaches the host, and the
  host's view is never unmounted) where ``<dir>/nodes/nK/{tmp,run,shm}`` are bound over
  ``/tmp``, ``/run`` and ``/dev/shm``; the host's ``/run/munge`` (one munged serves every node)
  and the *shared* directories (the cluster's own directory when it lies under /tmp, pytest's
  base temp directory: a stand-in for a shared file system) are bound back in at their paths;
  ``/etc/hosts`` gets the node names (MPI libraries resolve their own host name);
- its own **UTS namespace** with host name ``nK`` (``socket.gethostname()`` in a job differs per
  node; slurmd is told its node name by ``-N``, every node's ``NodeHostname`` is this host).

Job steps are started by the slurmd, so they inherit its namespaces: a task on n2 sees n2's
``/tmp`` and host name. The host sees a node's files at :meth:`SlurmCluster.node_path`.

No **network namespace**: a node in one would need a veth pair into a bridge, an address and a
route per node, and ``srun`` on the host (its I/O and PMI listeners) would have to reach and be
reached from every node; that is host-wide network state a crashed session would leave behind.
The nodes share the host's network instead: every ``NodeAddr`` is 127.0.0.1, each slurmd has its
own ``Port``, and a TCP port taken on one node is taken on all.

Not either: a PID namespace (the tests find an agent by its command line in the host's /proc)
or cgroups (``ProctrackType=proctrack/linuxproc``, ``TaskPlugin=task/none``: no limits per node,
each node claims every CPU and all the memory ``slurmd -C`` reports).
"""

from __future__ import annotations

import contextlib
import json
import os
import pwd
import random
import shlex
import shutil
import signal
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["JOB_USER", "SlurmCluster", "SlurmUnavailable", "running", "start_slurm"]

MUNGE_KEY = Path("/etc/munge/munge.key")
PACKAGES = ("slurmctld", "slurmd", "slurm-client", "munge", "libslurm-dev")
"""Debian's Slurm, and spank.h to build greenckpt's SPANK plugin (tests/cluster/test_spank.py)."""
SPANK_HEADER = Path("/usr/include/slurm/spank.h")
JOB_ENV = {"UCX_TLS": "tcp,self"}
"""What jobs on this cluster need that jobs on real nodes do not: the nodes share one kernel
but not /dev/shm, so UCX (MPICH's transport) takes two nodes for one host and tries shared
memory between them, which fails at random (``mm ep failed to connect ... Shared memory
error``); TCP between nodes is what a real cluster's network would be."""
JOB_USER = "gckptuser"
STATE_FILE = "cluster.json"
# The node-local directories: a node's own copy of each, under <dir>/nodes/<node>/.
NODE_LOCAL = {"tmp": Path("/tmp"), "run": Path("/run"), "shm": Path("/dev/shm")}


class SlurmUnavailable(Exception):  # noqa: N818 - a test-only reason to skip
    """Slurm could not be installed or started; the message is the one-line reason."""


@dataclass
class SlurmCluster:
    """A started Slurm of ``nodes`` on this host: ``env`` runs its clients (``SLURM_CONF`` set).

    ``host`` is this machine (the controller, every node's NodeHostname); ``nodes`` the node
    names (also their host names inside their jobs); ``plugstack`` the (empty) SPANK
    ``plugstack.conf`` Slurm reads for each step; ``user``/``uid``/``gid`` a non-root job user
    with ``user_dir``, a directory it owns that every node sees; ``shared`` the host
    directories every node sees at the same path. ``pids`` are the daemons by name
    (``slurmctld``, then each node) and ``namespaces`` each node's mount namespace.
    """

    directory: Path
    host: str
    env: dict[str, str]
    nodes: tuple[str, ...]
    plugstack: Path
    user: str
    uid: int
    gid: int
    user_dir: Path
    shared: tuple[Path, ...] = ()
    pids: dict[str, int] = field(default_factory=dict)
    namespaces: dict[str, str] = field(default_factory=dict)
    munged_pid: int | None = None
    _procs: dict[int, subprocess.Popen[bytes]] = field(default_factory=dict, repr=False)

    def run(
        self, *argv: str, timeout: float = 60.0, user: str | None = None, cwd: Path | None = None
    ) -> subprocess.CompletedProcess[str]:
        """Run a client (``sbatch``, ``srun``, ...) of this cluster; as ``user`` (runuser)."""
        cmd = ["runuser", "-u", user, "--", *argv] if user else list(argv)
        return subprocess.run(
            cmd, env=self.env, cwd=cwd, capture_output=True, text=True, timeout=timeout, check=False
        )

    def node_states(self) -> dict[str, str]:
        """Each node's state as sinfo says it (``idle``, ``alloc``, ...)."""
        out = self.run("sinfo", "-h", "-N", "-o", "%N %t", timeout=20.0).stdout
        return dict(line.split(None, 1) for line in out.splitlines() if " " in line)

    def node_path(self, node: str, path: str | Path) -> Path:
        """Where the host sees ``path`` of ``node`` (for /tmp, /run, /dev/shm: the node's copy)."""
        path = Path(path)
        if any(_under(path, s) for s in self.shared):
            return path
        for name, mount in NODE_LOCAL.items():
            if _under(path, mount):
                return self.directory / "nodes" / node / name / path.relative_to(mount)
        return path

    def cancel_all(self, wait_s: float = 30.0) -> None:
        """Kill every job of this cluster, any user's (a failed test leaves none running)."""
        jobs = self.run("squeue", "-h", "-o", "%i", timeout=20.0).stdout.split()
        if not jobs:
            return
        self.run("scancel", "--full", "--signal=KILL", *jobs, timeout=20.0)
        self.run("scancel", *jobs, timeout=20.0)
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline and self.run("squeue", "-h").stdout.strip():
            time.sleep(0.5)

    def save(self) -> Path:
        """Write what :meth:`load` needs to stop the cluster from another process."""
        doc = {
            "host": self.host,
            "env": {k: v for k, v in self.env.items() if k.startswith("SLURM_")},
            "nodes": list(self.nodes),
            "user": self.user,
            "shared": [str(p) for p in self.shared],
            "pids": self.pids,
            "namespaces": self.namespaces,
            "munged_pid": self.munged_pid,
        }
        path = self.directory / STATE_FILE
        path.write_text(json.dumps(doc, indent=1) + "\n")
        return path

    @classmethod
    def load(cls, directory: Path) -> SlurmCluster:
        """The cluster :meth:`save` described in ``directory`` (OSError/ValueError if none)."""
        doc = json.loads((directory / STATE_FILE).read_text())
        entry = pwd.getpwnam(doc["user"])
        return cls(
            directory=directory,
            host=doc["host"],
            env={**os.environ, **doc["env"]},
            nodes=tuple(doc["nodes"]),
            plugstack=directory / "plugstack.conf",
            user=doc["user"],
            uid=entry.pw_uid,
            gid=entry.pw_gid,
            user_dir=directory / "user",
            shared=tuple(Path(p) for p in doc["shared"]),
            pids={k: int(v) for k, v in doc["pids"].items()},
            namespaces=dict(doc["namespaces"]),
            munged_pid=doc["munged_pid"],
        )

    def stop(self) -> None:
        """Stop what this cluster started (by pid): its jobs, each slurmd, slurmctld; then kill
        whatever still runs in a node's namespace (a step daemon or task that outlived its
        slurmd), so nothing is left running. munged too when this cluster started it, unless
        another Slurm daemon on this host (someone else's cluster) still relies on it."""
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            self.cancel_all()
        for name in reversed(list(self.pids)):
            self._end(self.pids[name], "slurmctld" if name == "slurmctld" else "slurmd")
        for pid in _in_namespaces(set(self.namespaces.values())):
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        if self.munged_pid is not None and not _slurm_running():
            self._end(self.munged_pid, "munged")
        self.pids.clear()
        self.munged_pid = None
        if (self.directory / STATE_FILE).exists():
            self.save()  # says nothing runs

    def _end(self, pid: int, comm: str, wait_s: float = 20.0) -> None:
        """SIGTERM ``pid`` if it still is ``comm`` (not a reused pid), SIGKILL after wait_s."""
        proc = self._procs.pop(pid, None)
        if proc is None and _comm(pid) != comm:
            return
        for sig in (signal.SIGTERM, signal.SIGKILL):
            with contextlib.suppress(OSError):
                os.kill(pid, sig)
            deadline = time.monotonic() + wait_s
            while time.monotonic() < deadline:
                if proc is not None and proc.poll() is not None:
                    return
                if proc is None and _comm(pid) in (None, ""):
                    return
                time.sleep(0.1)


def running(directory: Path) -> bool:
    """Whether a daemon of the cluster saved in ``directory`` still runs."""
    try:
        cluster = SlurmCluster.load(directory)
    except (OSError, ValueError, KeyError):
        return False
    return any(
        _comm(pid) == ("slurmctld" if name == "slurmctld" else "slurmd")
        for name, pid in cluster.pids.items()
    )


def _comm(pid: int) -> str | None:
    """The command name of ``pid`` ("" for a zombie), None when there is no such process."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    state = stat.rsplit(")", 1)[1].split()[0]
    return "" if state in ("Z", "X") else stat.split("(", 1)[1].rsplit(")", 1)[0]


def _slurm_running() -> bool:
    """Whether any Slurm daemon (this cluster's are stopped by then) runs on this host."""
    daemons = ("slurmctld", "slurmd", "slurmstepd")
    return any(e.name.isdigit() and _comm(int(e.name)) in daemons for e in Path("/proc").iterdir())


def _namespace(pid: int) -> str | None:
    with contextlib.suppress(OSError):
        return os.readlink(f"/proc/{pid}/ns/mnt")
    return None


def _in_namespaces(spaces: set[str]) -> list[int]:
    """Every process whose mount namespace is one of ``spaces`` (never the host's)."""
    spaces = spaces - {_namespace(os.getpid()), None}
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and _namespace(int(entry.name)) in spaces:
            found.append(int(entry.name))
    return found


def _sh(argv: list[str], timeout: float = 60.0) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)


def _install() -> None:
    tools = ("slurmctld", "slurmd", "munged", "sbatch", "srun", "unshare", "runuser")
    if all(shutil.which(p) for p in tools) and SPANK_HEADER.exists():
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


def _job_user(name: str) -> pwd.struct_passwd:
    """The non-root job user, created (a system user with a home) when missing."""
    with contextlib.suppress(KeyError):
        return pwd.getpwnam(name)
    home = f"/home/{name}"
    made = _sh(["useradd", "--system", "--user-group", "--create-home", "--home-dir", home,
                "--shell", "/bin/sh", name], 30)  # fmt: skip
    if made.returncode != 0:
        raise SlurmUnavailable(f"useradd {name} failed: {made.stderr.strip()[:200]}")
    return pwd.getpwnam(name)


def _free_ports(n: int) -> list[int]:
    socks = [socket.socket() for _ in range(n)]
    for s in socks:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


def _config(directory: Path, host: str, nodes: tuple[str, ...]) -> Path:
    lines = _sh(["slurmd", "-C"], 20).stdout.splitlines()
    if not lines or not lines[0].startswith("NodeName="):
        raise SlurmUnavailable("slurmd -C does not describe this node")
    described = lines[0].strip().split(None, 1)[1]  # CPUs=... RealMemory=..., no NodeName
    ctld, *ports = _free_ports(1 + len(nodes))
    first_job = random.randrange(1000, 60_000_000)  # not job 1 again: ids name node paths
    (directory / "state").mkdir(exist_ok=True)
    (directory / "spool").mkdir(exist_ok=True)
    node_lines = [
        f"NodeName={node} NodeHostname={host} NodeAddr=127.0.0.1 Port={port} {described}"
        f" State=UNKNOWN"
        for node, port in zip(nodes, ports, strict=True)
    ]
    conf = directory / "slurm.conf"
    conf.write_text(
        "\n".join(
            [
                "ClusterName=greenckpt-test",
                f"SlurmctldHost={host}",
                "SlurmUser=root",
                "SlurmdUser=root",
                f"SlurmctldPort={ctld}",
                "AuthType=auth/munge",
                f"StateSaveLocation={directory / 'state'}",
                f"SlurmdSpoolDir={directory / 'spool' / '%n'}",
                f"SlurmctldPidFile={directory / 'slurmctld.pid'}",
                "SlurmdPidFile=/run/slurmd.pid",  # the node's own /run
                f"SlurmctldLogFile={directory / 'slurmctld.log'}",
                f"SlurmdLogFile={directory / 'slurmd-%n.log'}",
                f"PlugStackConfig={directory / 'plugstack.conf'}",
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
                *node_lines,
                f"PartitionName=debug Nodes={','.join(nodes)} Default=YES MaxTime=INFINITE"
                " State=UP",
                "",
            ]
        )
    )
    conf.chmod(0o644)
    return conf


def _under(path: Path, mount: Path) -> bool:
    return path == mount or mount in path.parents


def _node_command(directory: Path, node: str, shared: tuple[Path, ...]) -> list[str]:
    """``unshare`` running the mount setup of ``node`` and then, in place, its slurmd.

    Without ``--fork`` unshare execs the shell, which execs slurmd: the pid Popen returns is
    the daemon's. Every bind is made in the node's new namespace only. /run is covered before
    /tmp, since the cluster directory (and so <dir>/nodes/...) may lie under /tmp.
    """
    own = directory / "nodes" / node
    q = shlex.quote
    steps = ["set -e", f"hostname {q(node)}"]
    for path in shared:  # a shared directory under /tmp: bound back at its own path
        if _under(path, NODE_LOCAL["tmp"]):
            inner = own / "tmp" / path.relative_to("/tmp")
            inner.mkdir(parents=True, exist_ok=True)
            steps.append(f"mount --bind {q(str(path))} {q(str(inner))}")
    if Path("/run/munge").is_dir():
        (own / "run" / "munge").mkdir(parents=True, exist_ok=True)
        steps.append(f"mount --bind /run/munge {q(str(own / 'run' / 'munge'))}")
    steps += [
        f"mount --bind {q(str(directory / 'hosts'))} /etc/hosts",
        f"mount --bind {q(str(own / 'shm'))} /dev/shm",
        f"mount --rbind {q(str(own / 'run'))} /run",
        f"mount --rbind {q(str(own / 'tmp'))} /tmp",
        f"exec slurmd -D -N {q(node)}",
    ]
    return ["unshare", "--mount", "--uts", "--propagation", "private", "--", "sh", "-c",
            "\n".join(steps)]  # fmt: skip


def _prepare(directory: Path, nodes: tuple[str, ...], user: pwd.struct_passwd) -> None:
    """The cluster directory: readable by the job user, its node-local trees, hosts file."""
    directory.chmod(0o755)  # the job user reads slurm.conf and works in user/
    (directory / "plugstack.conf").write_text("")  # SPANK plugins: none until a test adds one
    (directory / "plugstack.conf").chmod(0o644)
    user_dir = directory / "user"
    user_dir.mkdir(exist_ok=True)
    os.chown(user_dir, user.pw_uid, user.pw_gid)
    for node in nodes:
        for name in NODE_LOCAL:
            local = directory / "nodes" / node / name
            shutil.rmtree(local, ignore_errors=True)  # a fresh node: its disks start empty
            local.mkdir(parents=True)
            local.chmod(0o1777 if name != "run" else 0o755)
        (directory / "nodes" / node / "run" / "lock").mkdir(exist_ok=True, mode=0o1777)
    hosts = Path("/etc/hosts").read_text() if Path("/etc/hosts").exists() else ""
    (directory / "hosts").write_text(f"{hosts.rstrip()}\n127.0.0.1 {' '.join(nodes)}\n")
    (directory / "hosts").chmod(0o644)


def _daemon(cluster: SlurmCluster, name: str, argv: list[str]) -> subprocess.Popen[bytes]:
    """Start one daemon in its own session: a Ctrl-C meant for the process that started the
    cluster does not reach it, so :meth:`SlurmCluster.stop` ends the daemons in order."""
    out = cluster.directory / (f"{name}.out" if name == "slurmctld" else f"slurmd-{name}.out")
    with open(out, "wb") as log:
        proc = subprocess.Popen(
            argv, env=cluster.env, stdout=log, stderr=log, stdin=subprocess.DEVNULL,
            start_new_session=True,
        )  # fmt: skip
    cluster.pids[name] = proc.pid
    cluster._procs[proc.pid] = proc
    return proc


def _why_not(cluster: SlurmCluster, states: dict[str, str]) -> str:
    """One line: the node states and the last line a failed daemon wrote."""
    said = []
    for name, pid in cluster.pids.items():
        proc = cluster._procs.get(pid)
        if proc is not None and proc.poll() is not None:
            for log in (f"slurmd-{name}.out", f"slurmd-{name}.log", f"{name}.out", f"{name}.log"):
                path = cluster.directory / log
                text = path.read_text(errors="replace").strip() if path.exists() else ""
                if text:
                    said.append(f"{name}: {text.splitlines()[-1]}")
                    break
    shown = ", ".join(f"{k}={v}" for k, v in states.items()) or "nothing"
    return f"Slurm's nodes are not idle (sinfo: {shown}){'; ' if said else ''}{'; '.join(said)}"


def start_slurm(
    directory: Path,
    nodes: int = 3,
    shared: tuple[Path, ...] = (),
    wait_s: float = 60.0,
) -> SlurmCluster:
    """Install (when missing), configure and start a Slurm of ``nodes`` nodes (n1, n2, ...)
    in ``directory``; SlurmUnavailable (one line) when it cannot.

    ``shared``: host directories every node sees at their own path (e.g. pytest's base temp
    directory, under the private /tmp otherwise). A directory used before is reused (the
    nodes' /tmp, /run and /dev/shm emptied, as after a reboot; slurmctld's job state cleared),
    unless the cluster described there still runs.
    """
    if os.geteuid() != 0:
        raise SlurmUnavailable("the test cluster needs root (namespaces, a job user, slurmd)")
    directory = directory.resolve()
    for path in (directory, *shared):
        if _under(path.resolve(), NODE_LOCAL["run"]) or _under(path.resolve(), NODE_LOCAL["shm"]):
            raise SlurmUnavailable(f"{path} is under a node-local /run or /dev/shm")
    shared = tuple(p.resolve() for p in shared)
    if _under(directory, NODE_LOCAL["tmp"]):
        shared = (directory, *shared)
    shared = tuple(  # a path inside another shared one comes with it: bound once
        p for p in dict.fromkeys(shared) if not any(p != o and _under(p, o) for o in shared)
    )
    _install()
    munged = _munge()
    user = _job_user(JOB_USER)
    host = socket.gethostname().split(".")[0]
    names = tuple(f"n{k}" for k in range(1, nodes + 1))
    directory.mkdir(parents=True, exist_ok=True)
    if running(directory):
        raise SlurmUnavailable(f"a cluster still runs in {directory}: stop it first")
    _prepare(directory, names, user)
    conf = _config(directory, host, names)
    env = {**os.environ, "SLURM_CONF": str(conf), **JOB_ENV}
    cluster = SlurmCluster(
        directory, host, env, names, directory / "plugstack.conf", user.pw_name, user.pw_uid,
        user.pw_gid, directory / "user", shared, munged_pid=munged,
    )  # fmt: skip
    try:
        _daemon(cluster, "slurmctld", ["slurmctld", "-D", "-c"])
        time.sleep(1.0)
        for node in names:
            _daemon(cluster, node, _node_command(directory, node, shared))
        _wait_idle(cluster, wait_s)
    except BaseException:
        cluster.stop()
        raise
    cluster.save()
    return cluster


def _wait_idle(cluster: SlurmCluster, wait_s: float) -> None:
    """Until every node is idle, each slurmd runs (the pid is the daemon, not unshare or sh)
    and its mount namespace is known; SlurmUnavailable when that does not happen in wait_s."""
    deadline = time.monotonic() + wait_s
    host_space = _namespace(os.getpid())
    states: dict[str, str] = {}
    while time.monotonic() < deadline:
        states = cluster.node_states()
        for node in cluster.nodes:
            pid = cluster.pids[node]
            space = _namespace(pid)
            if _comm(pid) == "slurmd" and space not in (None, host_space):
                cluster.namespaces[node] = str(space)
        idle = all(states.get(n) == "idle" for n in cluster.nodes)
        if idle and len(cluster.namespaces) == len(cluster.nodes):
            return
        if any(p.poll() is not None for p in cluster._procs.values()):
            break
        time.sleep(0.5)
    raise SlurmUnavailable(_why_not(cluster, states))
