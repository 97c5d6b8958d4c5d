"""What the Slurm plugin runs: ``python -m greenckpt.cli.spank join|agent|release|report``.

Why a module entry point and not the ``greenckpt`` command: the plugin (``greenckpt_spank.so``,
running inside ``slurmstepd`` as root) needs four small, fixed operations with a line protocol
it can read in C, not a user interface; each calls the library (the node agent of
``greenckpt agent``, :func:`greenckpt.runtime.node_serve.serve_node`, the plumbing of
:mod:`greenckpt.runtime.spank_node`, the report of :mod:`greenckpt.runtime.job_files`).

- ``join`` (root, before a step's tasks start): start this node's agent for the job, or join
  the running one; print ``set NAME VALUE`` / ``prepend NAME VALUE`` lines for the tasks'
  environment and ``ready``, or ``unmanaged REASON`` (one line; the step then runs without
  greenckpt on this node, and the session folder gets ``unmanaged.json``).
- ``agent`` (root, detached, started by ``join``): the node's agent until its last step
  releases it.
- ``release`` (root, at a step's end): drop the step's hold; the last one returns when the
  node is restored and its report written. An agent that is gone (killed) leaves a state
  file: the node is restored here and the session gets ``died.json`` with its last progress.
- ``report`` (the job's user, at the batch script's end): assemble the job report.

Files the user names are written by a process running as that user
(:mod:`greenckpt.runtime.user_files`). Admin guide: docs/admin-guide.md.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import json
import os
import pwd
import secrets
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from greenckpt.errors import GreenckptError, InvalidValueError
from greenckpt.platform.nodelock import SESSION_WAIT_ENV
from greenckpt.report.run_files import report_writer
from greenckpt.runtime.agent import AgentIdentity
from greenckpt.runtime.node_options import NodeOptions
from greenckpt.runtime.node_serve import serve_node
from greenckpt.runtime.spank_node import (
    DEFAULT_SPOOL,
    RELEASE_SECONDS,
    ControlServer,
    JobSpool,
    LocalLeader,
    SessionPlace,
    control_request,
    pid_alive,
)
from greenckpt.runtime.user_files import UserFilesError, Writer

SPANK_POLICIES = ("profile", "performance", "powersave", "ondemand", "defaults")
"""What ``--greenckpt=POLICY`` takes besides ``on``/``off`` (``fixed`` needs settings a
job option cannot carry); greenckpt_spank.c lists the same (a test checks)."""
SPANK_FAMILIES = ("fti", "scr", "veloc")
JOIN_SECONDS = 25.0
"""How long ``join`` waits for a new agent's hello (the plugin waits a little longer)."""
_AGENT_ENV = {
    "PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    "LANG": "C.UTF-8",
    SESSION_WAIT_ENV: "30s",  # a step that starts while the last agent still restores
}


def expand_report(template: str, *, job: str, user: str, cwd: str) -> str:
    """The report folder from the option or the site default: ``%j`` the job id, ``%u`` the
    user's name, ``%%`` a percent sign; a relative path is relative to ``cwd`` (the step's
    working folder). InvalidValueError for an empty result or another ``%`` escape."""
    out, i = [], 0
    while i < len(template):
        ch = template[i]
        if ch == "%":
            nxt = template[i + 1 : i + 2]
            if nxt not in ("j", "u", "%"):
                raise InvalidValueError(
                    f"report folder {template!r}: %{nxt} is not %j (job id), %u (user) or %%"
                )
            out.append({"j": job, "u": user, "%": "%"}[nxt])
            i += 2
            continue
        out.append(ch)
        i += 1
    text = "".join(out)
    if not text or "\n" in text or "\0" in text:
        raise InvalidValueError(f"report folder {template!r} is empty or has a line break")
    return os.path.normpath(os.path.join(cwd, text))


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m greenckpt.cli.spank")
    sub = p.add_subparsers(dest="op", required=True)
    join = sub.add_parser("join")
    join.add_argument("--job", required=True)
    join.add_argument("--step", required=True)
    join.add_argument("--node", type=int, required=True)
    join.add_argument("--nodes", type=int, default=None)
    join.add_argument("--uid", type=int, required=True)
    join.add_argument("--gid", type=int, required=True)
    join.add_argument("--groups", default="")
    join.add_argument("--report", default="greenckpt-%j")
    join.add_argument("--cwd", default="/")
    join.add_argument("--policy", choices=SPANK_POLICIES, default="profile")
    join.add_argument("--profile", action="append", default=[])
    join.add_argument("--no-control", action="store_true")
    join.add_argument("--intercept", choices=SPANK_FAMILIES, default=None)
    join.add_argument("--stepd-pid", type=int, default=0)
    join.add_argument("--timeout", type=float, default=JOIN_SECONDS)
    join.add_argument("--spool", default=str(DEFAULT_SPOOL))
    join.add_argument("command", nargs=argparse.REMAINDER)
    agent = sub.add_parser("agent")
    agent.add_argument("--job", required=True)
    agent.add_argument("--spool", default=str(DEFAULT_SPOOL))
    release = sub.add_parser("release")
    release.add_argument("--job", required=True)
    release.add_argument("--step", required=True)
    release.add_argument("--spool", default=str(DEFAULT_SPOOL))
    report = sub.add_parser("report")
    report.add_argument("--job", required=True)
    report.add_argument("--template", default="greenckpt-%j")
    report.add_argument("--cwd", default="/")
    report.add_argument("--nodes", type=int, default=None)
    report.add_argument("--wait", type=float, default=30.0)
    report.add_argument("--uid", type=int, default=None)
    report.add_argument("--gid", type=int, default=None)
    report.add_argument("--groups", default="")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    ns = _parser().parse_args(argv)
    try:
        if ns.op == "join":
            return _join(ns)
        if ns.op == "agent":
            return _agent(ns)
        if ns.op == "release":
            return _release(ns)
        return _report(ns)
    except (GreenckptError, OSError) as exc:
        print(f"greenckpt: {' '.join(str(exc).split())}", file=sys.stderr)
        return 1


# ---------------------------------------------------------------------- join


@contextlib.contextmanager
def _flock(path: Path) -> Iterator[None]:
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def _user_name(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)


def _join(ns: argparse.Namespace) -> int:
    groups = tuple(int(g) for g in ns.groups.split(",") if g.strip().isdigit())
    writer = Writer(ns.uid, ns.gid, groups, sys.executable)
    try:
        report = expand_report(ns.report, job=ns.job, user=_user_name(ns.uid), cwd=ns.cwd)
    except InvalidValueError as exc:
        print(f"unmanaged {exc}", flush=True)
        return 0
    place = SessionPlace(report, ns.node, ns.step, writer)
    try:
        spool = JobSpool.create(Path(ns.spool), ns.job)
        reason = _start_or_hold(ns, spool, place)
    except (GreenckptError, OSError) as exc:
        reason = " ".join(str(exc).split())
    if reason is not None:
        return _unmanaged(place, reason)
    if ns.intercept is not None:
        try:
            from greenckpt.native import BuildError, intercept_library  # noqa: PLC0415

            print(f"prepend LD_PRELOAD {intercept_library()}")
            print(f"set GREENCKPT_INTERCEPT {ns.intercept}")
        except (BuildError, OSError) as exc:
            print(f"note --greenckpt-intercept={ns.intercept}: {exc}")
    print(f"set GREENCKPT_RUNTIME_SOCKET {spool.socket}")
    print("ready", flush=True)
    return 0


def _unmanaged(place: SessionPlace, reason: str) -> int:
    with contextlib.suppress(UserFilesError):
        place.write_json("unmanaged.json", {"reason": reason, "node": place.node})
    print(f"unmanaged {reason}", flush=True)
    return 0


def _start_or_hold(ns: argparse.Namespace, spool: JobSpool, place: SessionPlace) -> str | None:
    """Hold the running agent, or start one; None when ready, else the reason why not."""
    deadline = time.monotonic() + ns.timeout
    hold = {"op": "hold", "step": ns.step, "pid": ns.stepd_pid}
    with _flock(spool.lock):
        try:
            reply = control_request(spool.control, hold, 5.0)
        except OSError:
            reply = {"ok": False}
        if not reply.get("ok"):
            previous = spool.read_state().get("pid")
            while isinstance(previous, int) and pid_alive(previous):
                if time.monotonic() > deadline:  # the last session is still finishing
                    return f"the previous agent (pid {previous}) of this job did not end in time"
                time.sleep(0.2)
            process = _spawn_agent(ns, spool, place)
        else:
            process = None
        return _await_ready(spool, process, deadline)


def _spawn_agent(
    ns: argparse.Namespace, spool: JobSpool, place: SessionPlace
) -> subprocess.Popen[bytes]:
    """The node's agent as a detached root process (its own session: no step's signals)."""
    options = NodeOptions(policy=ns.policy, profiles=tuple(ns.profile), control=not ns.no_control)
    spool.write_state(
        {
            "config": {
                "place": place.to_dict(),
                "job": ns.job,
                "nodes": ns.nodes,
                "first_step": ns.step,
                "stepd_pid": ns.stepd_pid,
                "options": options.to_dict(),
                "command": [a for a in ns.command if a != "--"][:64],
            }
        }
    )
    with open(spool.log, "wb") as log:
        return subprocess.Popen(
            [
                sys.executable,
                "-m",
                "greenckpt.cli.spank",
                "agent",
                "--job",
                ns.job,
                "--spool",
                ns.spool,
            ],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
            start_new_session=True,
            cwd="/",
            env={**_AGENT_ENV, "HOME": pwd.getpwuid(os.geteuid()).pw_dir},
        )


def _await_ready(
    spool: JobSpool, process: subprocess.Popen[bytes] | None, deadline: float
) -> str | None:
    while time.monotonic() < deadline:
        try:
            reply = control_request(spool.control, {"op": "status"}, 2.0)
        except OSError:
            reply = {}
        if reply.get("ready"):
            return None
        if process is not None and process.poll() is not None:
            return spool.last_log_line() or f"the agent exited with status {process.returncode}"
        time.sleep(0.1)
    return "the node's agent did not start in time"


# ---------------------------------------------------------------------- agent


def _agent(ns: argparse.Namespace) -> int:
    """The node's agent (the library's :func:`~greenckpt.runtime.node_serve.serve_node`, as
    under ``greenckpt agent``), led by a LocalLeader."""

    spool = JobSpool(Path(ns.spool) / f"job-{ns.job}")
    state = spool.read_state()
    config = state["config"]
    place = SessionPlace.from_dict(config["place"])
    state["pid"] = os.getpid()
    spool.write_state(state)
    token = secrets.token_hex(16)
    writer = place.writer

    def on_hello(hello: dict[str, Any]) -> None:
        os.chown(spool.socket, writer.uid, writer.gid, follow_symlinks=False)
        doc = {
            **hello,
            "job": config["job"],
            "nodes": config["nodes"],
            "step": config["first_step"],
            "command": config["command"],
        }
        try:
            place.write_json("hello.json", doc)
        except UserFilesError as exc:
            print(f"greenckpt: node {place.node}: hello.json not written: {exc}", flush=True)

    shutil.rmtree(spool.stage, ignore_errors=True)
    os.mkdir(spool.stage, 0o700)
    leader = LocalLeader(spool, place, token, on_hello=on_hello).start()
    holds = {str(config["first_step"]): int(config["stepd_pid"])}
    control = ControlServer(spool, leader, holds, stop=leader.stop_agent).start()
    identity = AgentIdentity(place.node, str(config["job"]), spool.socket, leader.address, token)
    options = NodeOptions.from_dict(config["options"])
    try:
        status = serve_node(identity, options, report_writer(spool.stage, f"node {place.node}"))
        if leader.status.ready:
            leader.status.done.wait(60.0)  # the final is being written as the user
    finally:
        control.close()
        leader.close()
    if leader.status.ready:  # finished: nothing of this session is left on the node
        shutil.rmtree(spool.folder, ignore_errors=True)
    return status


# ---------------------------------------------------------------------- release


def _release(ns: argparse.Namespace) -> int:
    folder = Path(ns.spool) / f"job-{ns.job}"
    if not folder.is_dir():
        print("released: no agent of this job on this node")
        return 0
    spool = JobSpool(folder)
    try:
        reply = control_request(
            spool.control, {"op": "release", "step": ns.step}, RELEASE_SECONDS + 5.0
        )
    except OSError:
        reply = None
    if reply is not None:
        error = reply.get("error")
        print(f"released{' (last)' if reply.get('last') else ''}{f': {error}' if error else ''}")
        return 0
    with _flock(spool.lock):
        return _died(spool)


def _died(spool: JobSpool) -> int:
    """The agent is gone without its final: restore the node, write ``died.json``."""
    state = spool.read_state()
    pid = state.get("pid")
    if isinstance(pid, int) and pid_alive(pid):
        print("released: the agent still runs but does not answer")
        return 0
    if "config" not in state:
        shutil.rmtree(spool.folder, ignore_errors=True)
        return 0
    place = SessionPlace.from_dict(state["config"]["place"])
    restored = _restore_node()
    progress = state.get("progress")
    doc = {
        "reason": f"its agent (pid {pid}) ended without its final summary",
        "progress": progress,
        "progress_unix": state.get("progress_unix"),
        "phases": state.get("phases") or [],
        "energy": state.get("energy") or [],
        "hello": state.get("hello"),
        "restored": restored,
        "node": place.node,
    }
    try:
        place.write_json("died.json", doc)
    except UserFilesError as exc:
        print(f"died.json not written: {exc}")
    shutil.rmtree(spool.folder, ignore_errors=True)
    print(f"released: node {place.node}'s agent had died; {restored}")
    return 0


def _restore_node() -> str:
    """Put back what the dead agent's state file recorded (the node's own restore)."""
    from greenckpt.platform.recovery import restore_from_state_file  # noqa: PLC0415
    from greenckpt.platform.root import PlatformError  # noqa: PLC0415

    try:
        report = restore_from_state_file(None, None)
    except (PlatformError, OSError) as exc:
        return f"the node could not be restored: {' '.join(str(exc).split())}"
    if not report.written:
        return "nothing was left to restore"
    return f"restored {len(report.written)} setting(s)"


# ---------------------------------------------------------------------- report


def _report(ns: argparse.Namespace) -> int:
    """The job report into the report folder, assembled AS THE JOB'S USER.

    Started by the plugin as root at the batch script's end. Everything the report needs is
    imported first, then a forked child gives up root for good (groups, gid, uid) and reads
    the node files and writes the report there: root never reads or writes the user's folder,
    and the user needs no right to run the site's Python (which may sit where only root can
    reach it). Without ``--uid`` (run by the user) it works in this process."""
    from greenckpt.report.job_files import write_job_files  # noqa: PLC0415
    from greenckpt.runtime.job_files import assemble_job_report  # noqa: PLC0415

    def work() -> int:
        user = _user_name(os.getuid())
        folder = Path(expand_report(ns.template, job=ns.job, user=user, cwd=ns.cwd))
        report = assemble_job_report(folder, ns.job, nodes=ns.nodes or None, wait_s=ns.wait)
        paths = write_job_files(report, folder)
        print(json.dumps({"files": [str(p) for p in paths]}), flush=True)
        return 0

    if ns.uid is None or ns.uid == os.getuid():
        return work()
    import matplotlib  # noqa: PLC0415 - loaded (with its Agg canvas) before root is given up

    matplotlib.use("Agg")
    import matplotlib.pyplot  # noqa: PLC0415

    groups = [int(g) for g in ns.groups.split(",") if g.strip().isdigit()]
    sys.stdout.flush()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child of a fork (tested through the cluster)
        code = 1
        try:
            os.setgroups(groups)
            os.setgid(ns.gid)
            os.setuid(ns.uid)
            os.environ["MPLCONFIGDIR"] = tempfile.mkdtemp(prefix="greenckpt-mpl-")
            os.chdir("/")
            code = work()
        except (GreenckptError, OSError) as exc:
            print(f"greenckpt: {' '.join(str(exc).split())}", file=sys.stderr, flush=True)
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status)


if __name__ == "__main__":
    sys.exit(main())
