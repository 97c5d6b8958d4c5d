"""The notification socket's file: created private, a stale one replaced, removed only if ours.

Why a module of its own: whoever serves the socket (Python threads or the native front,
runtime/front.py), the file's rules are the same and easy to get wrong: a live runtime's
socket is never taken over, a file that is no socket is never removed, the socket is private
(0600) before anyone can connect, and at the end only our own file is unlinked (the path may
have been replaced meanwhile).
"""

from __future__ import annotations

import contextlib
import errno
import os
import socket
import stat
import time

from greenckpt.ckpt.notify_client import NotifyError, one_line

__all__ = ["bind_socket", "replace_stale", "sweep_dead_jobs", "unlink_own"]

_LIVE_PROBE_SECONDS = 1.0
DEAD_JOB_SECONDS = 60.0
"""A job folder younger than this is left alone: its agent may be starting (folder made,
socket not yet bound)."""

Identity = tuple[int, int]


def bind_socket(path: str, backlog: int) -> tuple[socket.socket, Identity]:
    """A listening Unix socket at ``path`` (mode 0600) and the file's (device, inode);
    :class:`NotifyError` (one line) when the path cannot be used."""
    if os.path.lexists(path):
        replace_stale(path)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    identity: Identity | None = None
    try:
        sock.bind(path)
        os.chmod(path, 0o600)  # before listen(): nobody can connect until then
        st = os.stat(path)
        identity = (st.st_dev, st.st_ino)
        sock.listen(backlog)
    except OSError as exc:
        sock.close()
        if identity is not None:
            with contextlib.suppress(OSError):
                os.unlink(path)
        reason = exc.strerror or str(exc)
        if exc.errno == errno.EADDRINUSE:
            reason = "another process created it meanwhile"
        raise NotifyError(f"cannot create the runtime socket {path}: {one_line(reason)}") from None
    return sock, identity


def replace_stale(path: str) -> None:
    """Remove a stale socket at ``path``; refuse a live one or a file that is no socket."""
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return
    if not stat.S_ISSOCK(mode):
        raise NotifyError(
            f"cannot create the runtime socket {path}: the path exists and is not a socket"
        )
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    probe.settimeout(_LIVE_PROBE_SECONDS)
    try:
        probe.connect(path)
    except (ConnectionRefusedError, FileNotFoundError):
        pass  # stale: nobody listens
    except OSError as exc:
        raise NotifyError(
            f"cannot create the runtime socket {path}: it exists and cannot be probed "
            f"({one_line(exc.strerror or exc)})"
        ) from None
    else:
        raise NotifyError(
            f"cannot create the runtime socket {path}: another running greenckpt runtime "
            "listens there (stop it, or give another socket path)"
        )
    finally:
        probe.close()
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)


def unlink_own(path: str, identity: Identity) -> None:
    """Remove the socket file at ``path`` if it is still the one with ``identity``."""
    try:
        st = os.lstat(path)
        if (st.st_dev, st.st_ino) == identity:
            os.unlink(path)
    except FileNotFoundError:
        pass


def sweep_dead_jobs(base: str, *, older_than_s: float = DEAD_JOB_SECONDS) -> list[str]:
    """Remove the per-job socket folders (``base/job-*``) that a killed agent left: those
    older than ``older_than_s`` whose socket nobody listens on. Only a stale socket file and
    then the empty folder are removed (nothing else, nothing through a link, only this
    user's); the folders removed. An agent calls it as it starts, ``greenckpt restore`` (the
    epilog's) too."""
    removed: list[str] = []
    if not os.path.basename(os.path.normpath(base)).startswith("greenckpt-"):
        return removed  # only greenckpt's own per-user folder holds job folders
    try:
        entries = list(os.scandir(base))
    except OSError:
        return removed
    now = time.time()
    for entry in entries:
        try:
            st = entry.stat(follow_symlinks=False)
        except OSError:
            continue
        own = st.st_uid == os.getuid() and stat.S_ISDIR(st.st_mode)
        if not (entry.name.startswith("job-") and own and now - st.st_mtime > older_than_s):
            continue
        with contextlib.suppress(NotifyError, OSError):
            replace_stale(os.path.join(entry.path, "agent.sock"))
            os.rmdir(entry.path)  # fails, and keeps it, when anything else is inside
            removed.append(entry.path)
    return removed
