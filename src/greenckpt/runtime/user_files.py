"""Writing a job's files as the job's user, from a process that runs as root.

Why: the Slurm plugin's node agent runs as root on every node (it must set the node's
frequency and C-states), but the report folder is the *user's* choice. Root writing there
would let any user make root create or overwrite files the user could not: name
``/etc`` as the report folder, or plant a symbolic link where the agent will write. So root
never writes there itself. It hands the bytes to a short-lived process started with the
user's uid, gid and supplementary groups (:func:`write_as_user`), which can write only where
the user could. That process also creates every folder and file *below* the named report
folder relative to an open folder descriptor with ``O_NOFOLLOW`` (:func:`write_tree`), so a
link planted inside the report folder is refused rather than followed; files are written to a
temporary name and renamed into place (a rename replaces a link, never writes through it).

The child is this file run as a program (``python3 -I -S .../user_files.py``): it reads one
JSON document on stdin (folder, sub-folders, files as base64) and prints one line on failure.
It needs only the standard library, so it runs with the first Python the *user* may execute
(the site's greenckpt Python may sit where only root can reach it; :func:`user_python`), and
costs a Python start-up (~30 ms).
"""

from __future__ import annotations

import base64
import contextlib
import errno
import json
import os
import stat
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

__all__ = [
    "UserFilesError",
    "Writer",
    "may_execute",
    "user_python",
    "write_as_user",
    "write_tree",
]

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_NEW_FILE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
WRITE_SECONDS = 60.0
"""How long the writer process may take (a report of a few files on a slow shared FS)."""


try:
    from greenckpt.errors import GreenckptError

    _BASES: tuple[type[Exception], ...] = (GreenckptError, OSError)
except ImportError:  # run as the writer (-I -S, the standard library only): no package
    _BASES = (OSError,)


class UserFilesError(*_BASES):  # type: ignore[misc]
    """The files could not be written as the user; the message is one line saying why."""


_PYTHONS = (sys.executable, "/usr/bin/python3", "/usr/local/bin/python3", "/bin/python3")
"""Pythons the writer may run with (the first the user may execute): the module is run by
its path with ``-I -S`` and needs only the standard library, so any Python 3.11+ will do."""


@dataclass(frozen=True)
class Writer:
    """Who writes: ``uid``/``gid``/``groups`` of the job's user and the Python to run."""

    uid: int
    gid: int
    groups: tuple[int, ...] = ()
    python: str = sys.executable


def may_execute(path: str, uid: int, groups: Sequence[int]) -> bool:
    """Whether ``uid`` (with ``groups``) may execute ``path``: every folder on the way
    searchable and the file executable for that user, by the mode bits (root's own
    ``os.access`` answers for root, not for the user)."""
    real = os.path.realpath(path)
    if not os.path.isfile(real):
        return False
    parts = [real]
    parent = os.path.dirname(real)
    while True:
        parts.append(parent)
        if parent == os.path.dirname(parent):
            break
        parent = os.path.dirname(parent)
    for item in parts:
        try:
            st = os.stat(item)
        except OSError:
            return False
        if st.st_uid == uid:
            bit = stat.S_IXUSR
        elif st.st_gid in groups:
            bit = stat.S_IXGRP
        else:
            bit = stat.S_IXOTH
        if not st.st_mode & bit:
            return False
    return True


def user_python(writer: Writer, candidates: Sequence[str]) -> str | None:
    """The first of ``candidates`` (then ``writer.python``) the writer's user may run."""
    groups = [writer.gid, *writer.groups]
    for path in (writer.python, *candidates):
        if path and may_execute(path, writer.uid, groups):
            return path
    return None


def _open_folder(parent: int | None, name: str, *, create: bool) -> int:
    """An O_NOFOLLOW descriptor of folder ``name`` (under ``parent``), made when missing."""
    if create:
        with contextlib.suppress(FileExistsError):
            os.mkdir(name, 0o755, dir_fd=parent)
    try:
        return os.open(name, _DIR_FLAGS, dir_fd=parent)
    except OSError as exc:
        st = os.lstat(name, dir_fd=parent) if exc.errno in (errno.ENOTDIR, errno.ELOOP) else None
        if st is not None and stat.S_ISLNK(st.st_mode):
            raise UserFilesError(
                exc.errno, "a symbolic link is there: not followed", os.fspath(name)
            ) from None
        raise


def write_tree(directory: str, parts: Sequence[str], files: Mapping[str, bytes]) -> list[str]:
    """Write ``files`` into ``directory/parts[0]/parts[1]/...`` as the calling process.

    ``directory`` itself is created when missing (as by ``mkdir -p``) and must not be a
    symbolic link; every folder below it and every file is opened relative to its parent's
    descriptor without following links. Returns the paths written."""
    for name in [*parts, *files]:
        if not name or "/" in name or name in (".", ".."):
            raise UserFilesError(errno.EINVAL, "not a plain file or folder name", name)
    os.makedirs(directory, mode=0o755, exist_ok=True)
    fd = _open_folder(None, directory, create=False)
    here = directory
    try:
        for part in parts:
            child = _open_folder(fd, part, create=True)
            os.close(fd)
            fd, here = child, os.path.join(here, part)
        written = []
        for name, data in files.items():
            temp = f".{name}.{os.getpid()}.tmp"
            with contextlib.suppress(FileNotFoundError):
                os.unlink(temp, dir_fd=fd)
            out = os.open(temp, _NEW_FILE, 0o644, dir_fd=fd)
            try:
                view = memoryview(data)
                while view:
                    view = view[os.write(out, view) :]
                os.fsync(out)
            finally:
                os.close(out)
            os.rename(temp, name, src_dir_fd=fd, dst_dir_fd=fd)
            written.append(os.path.join(here, name))
        return written
    finally:
        os.close(fd)


def write_as_user(
    writer: Writer, directory: str, parts: Sequence[str], files: Mapping[str, bytes]
) -> list[str]:
    """:func:`write_tree` in a child process running as ``writer``'s user (see the module
    docstring); UserFilesError with the child's one line when it could not."""
    doc = {
        "directory": directory,
        "parts": list(parts),
        "files": {k: base64.b64encode(v).decode("ascii") for k, v in files.items()},
    }
    own = writer.uid == os.geteuid()
    python = writer.python if own else user_python(writer, _PYTHONS)
    if python is None:
        raise UserFilesError(
            errno.EACCES, f"no Python that uid {writer.uid} may run ({', '.join(_PYTHONS)})"
        )
    try:
        done = subprocess.run(
            [python, "-I", "-S", os.path.abspath(__file__)],
            input=json.dumps(doc).encode(),
            capture_output=True,
            timeout=WRITE_SECONDS,
            check=False,
            user=None if own else writer.uid,
            group=None if own else writer.gid,
            extra_groups=None if own else list(writer.groups),
            cwd="/",
            env={"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"},
        )
    except (OSError, subprocess.SubprocessError) as exc:
        raise UserFilesError(
            errno.EIO, f"the writer could not run as uid {writer.uid}: {exc}"
        ) from None
    out = done.stdout.decode("utf-8", "replace").strip().splitlines()
    if done.returncode != 0:
        err = done.stderr.decode("utf-8", "replace").strip().splitlines()
        raise UserFilesError(errno.EIO, (err or out or [f"writer exited {done.returncode}"])[-1])
    return out


def main() -> int:
    """The child: read the document on stdin, write, print the paths (or one line, exit 1)."""
    try:
        doc = json.loads(sys.stdin.buffer.read())
        files = {str(k): base64.b64decode(v) for k, v in doc["files"].items()}
        paths = write_tree(str(doc["directory"]), [str(p) for p in doc["parts"]], files)
    except OSError as exc:
        where = f": {exc.filename}" if exc.filename else ""
        print(f"cannot write as uid {os.getuid()}: {exc.strerror or exc}{where}", file=sys.stderr)
        return 1
    except (ValueError, KeyError, TypeError) as exc:
        print(f"malformed request: {exc}", file=sys.stderr)
        return 1
    print("\n".join(paths))
    return 0


if __name__ == "__main__":
    sys.exit(main())
