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

from greenckpt.ckpt.notify_client import NotifyError, one_line

__all__ = ["bind_socket", "replace_stale", "unlink_own"]

_LIVE_PROBE_SECONDS = 1.0

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
