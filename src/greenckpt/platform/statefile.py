"""The node state file: where it lives, what it records, and how it is written and read.

Why one module: the state file is the only record of a node's original settings once a
session has changed them, and root reads it back at every start, so its location, its format
(written by :func:`state_document` and :func:`read_policy_originals`, checked by
:func:`check_doc`) and its durable publication must be defined once. Values are the raw sysfs
text, so a restored tree is byte-for-byte the original. Why each location, and why the file is
untrusted input: docs/design/restore.md.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import socket
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from greenckpt.durable import fsync_directory, write_atomic
from greenckpt.platform.cpufreq_info import CPU_DIR, CPUFREQ_DIR, USERSPACE
from greenckpt.platform.lever_state import check_lever_sections
from greenckpt.platform.root import PlatformError, SysRoot, process_start, read_state_text

__all__ = [
    "BOOT_ID",
    "FORCE_HINT",
    "RESTORE_HINT",
    "STATE_FORMAT",
    "STATE_VERSION",
    "boot_id",
    "check_doc",
    "default_state_file",
    "load_state_file",
    "make_state_dir",
    "read_policy_originals",
    "remove_state_file",
    "state_document",
    "write_state_file",
]

STATE_FORMAT = "greenckpt-node-state"
STATE_VERSION = 1
BOOT_ID = "proc/sys/kernel/random/boot_id"
"""Read through the root, so a fake tree can carry its own boot id."""

RESTORE_HINT = "`greenckpt restore` (or greenckpt.platform.restore.restore_from_state_file())"
FORCE_HINT = "`greenckpt restore --force` (force=True from Python)"

_POLICY_KEY = re.compile(r"policy\d{1,6}")
_IDLE_KEY = re.compile(rf"{CPU_DIR}/cpu\d{{1,6}}/cpuidle/state\d{{1,4}}/disable")
_WORD = re.compile(r"[A-Za-z0-9_\-]{1,64}")
_DIGITS = re.compile(r"\d{1,19}")
"""Bounded: a state file is untrusted text, and ``int()`` of thousands of digits raises."""
_HOST_SAFE = re.compile(r"[^A-Za-z0-9_.\-]")
_LIMIT_KEYS = ("scaling_governor", "scaling_min_freq", "scaling_max_freq")


def default_state_file(
    root: SysRoot | None = None,
    *,
    environ: Mapping[str, str] | None = None,
    euid: int | None = None,
) -> Path:
    """Where a session on ``root`` keeps its state file (why each place: docs/design/restore.md).

    Root: ``/run/greenckpt/node-state.json``; else ``$XDG_RUNTIME_DIR/greenckpt/``; else the
    cache directory, with the host in the name. A fake root adds a hash of its path.
    """
    env = os.environ if environ is None else environ
    uid = os.geteuid() if euid is None else euid
    name = "node-state.json"
    if uid == 0:
        base = Path("/run/greenckpt")
    elif env.get("XDG_RUNTIME_DIR"):
        base = Path(env["XDG_RUNTIME_DIR"]) / "greenckpt"
    else:
        cache = env.get("XDG_CACHE_HOME") or str(Path(env.get("HOME", "~")) / ".cache")
        base = Path(cache).expanduser() / "greenckpt"
        name = f"node-state-{_HOST_SAFE.sub('_', socket.gethostname()) or 'host'}.json"
    chosen = root if root is not None else SysRoot.default()
    if not chosen.is_real:
        digest = hashlib.sha256(str(chosen.path.resolve()).encode()).hexdigest()[:12]
        name = name.removesuffix(".json") + f"-{digest}.json"
    return base / name


def make_state_dir(path: Path) -> None:
    """Create the directory of the state file ``path`` (private: mode 0700)."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    except OSError as exc:
        raise PlatformError(
            f"cannot create the state file directory {path.parent}: {exc.strerror or exc}"
        ) from exc


def write_state_file(path: Path, doc: Mapping[str, Any], *, exclusive: bool) -> None:
    """Atomically publish ``doc`` at ``path``: temp file + fsync + link/rename + dir fsync.

    ``exclusive`` (the first save of a session) publishes with a hard link, which fails when the
    file exists: another session's record is never replaced. The temporary name is predictable
    (``temp="pid"``), so it is created exclusively and never through a link; one left by an
    earlier process with this pid (killed mid-write) is this pid's to replace.
    """
    data = (json.dumps(doc, indent=2, sort_keys=True) + "\n").encode("utf-8")
    make_state_dir(path)
    try:
        published = write_atomic(path, data, temp="pid", exclusive=exclusive, sync_directory=False)
    except OSError as exc:
        raise PlatformError(
            f"cannot write the state file {path}: {exc.strerror or exc}; nothing was changed"
        ) from exc
    if not published:
        raise PlatformError(
            f"state file {path} appeared: another greenckpt session is changing this "
            "node's settings; nothing was changed by this one"
        )
    fsync_directory(path.parent, best_effort=True)


def remove_state_file(path: Path) -> None:
    """Remove the record (gone already is fine), durably: the node is back as it was."""
    with contextlib.suppress(FileNotFoundError):
        path.unlink()
    fsync_directory(path.parent, best_effort=True)


def check_doc(doc: object, path: Path) -> dict[str, Any]:
    """Validate a state document strictly: it tells a root process which files to write."""
    if not isinstance(doc, dict):
        raise _bad(path, "not a JSON object")
    _check_header(doc, path)
    cpufreq = doc.get("cpufreq")
    cpuidle = doc.get("cpuidle")
    if not isinstance(cpufreq, dict) or not isinstance(cpuidle, dict):
        raise _bad(path, "'cpufreq' and 'cpuidle' must be objects")
    for name, attrs in cpufreq.items():
        _check_policy(name, attrs, path)
    for key, value in cpuidle.items():
        if not _IDLE_KEY.fullmatch(key) or value not in ("0", "1"):
            raise _bad(path, f"bad cpuidle entry {key!r}")
    check_lever_sections(doc, lambda why: _bad(path, why))
    return doc


def _bad(path: Path, why: str) -> PlatformError:
    return PlatformError(
        f"state file {path} is not a valid greenckpt node state ({why}); inspect it and "
        "restore the settings by hand, then remove it"
    )


def _check_header(doc: Mapping[str, Any], path: Path) -> None:
    """Format, version and the writer's identity (pid, host, root, boot, start)."""
    if doc.get("format") != STATE_FORMAT or doc.get("format_version") != STATE_VERSION:
        raise _bad(path, f"format must be {STATE_FORMAT!r} version {STATE_VERSION}")
    for key, kinds in (("pid", int), ("host", str), ("root", str), ("created", str)):
        if not isinstance(doc.get(key), kinds):
            raise _bad(path, f"{key!r} missing or of the wrong type")
    if isinstance(doc["pid"], bool) or not 0 < doc["pid"] < 2**31:
        raise _bad(path, "'pid' out of range")
    for key in ("boot_id", "process_start"):
        if doc.get(key) is not None and not isinstance(doc[key], str | int):
            raise _bad(path, f"{key!r} of the wrong type")
    if "ended" in doc and not isinstance(doc["ended"], bool):
        raise _bad(path, "'ended' must be true or false")


def _check_policy(name: str, attrs: object, path: Path) -> None:
    """One saved cpufreq policy: governor, limits (min <= max), setspeed, EPP."""
    if not _POLICY_KEY.fullmatch(name) or not isinstance(attrs, dict):
        raise _bad(path, f"bad cpufreq entry {name!r}")
    gov, lo, hi = (attrs.get(k) for k in _LIMIT_KEYS)
    if not (isinstance(gov, str) and _WORD.fullmatch(gov)):
        raise _bad(path, f"{name}: bad scaling_governor")
    if not (isinstance(lo, str) and isinstance(hi, str)):
        raise _bad(path, f"{name}: bad limits")
    if not (_DIGITS.fullmatch(lo) and _DIGITS.fullmatch(hi)) or int(lo) > int(hi):
        raise _bad(path, f"{name}: bad limits {lo!r}..{hi!r}")
    speed, epp = attrs.get("scaling_setspeed"), attrs.get("energy_performance_preference")
    if speed is not None and not (isinstance(speed, str) and _DIGITS.fullmatch(speed)):
        raise _bad(path, f"{name}: bad scaling_setspeed")
    if epp is not None and not (isinstance(epp, str) and _WORD.fullmatch(epp)):
        raise _bad(path, f"{name}: bad energy_performance_preference")


def load_state_file(path: Path) -> dict[str, Any] | None:
    """The validated record at ``path``, None when there is none.

    Every way a file can be wrong ends in one PlatformError (never a hang or another
    exception, which would stop every command at its start): not a regular file (a FIFO would
    block the read), too large, not UTF-8, not JSON, nested too deeply for the parser
    (RecursionError), or not a record :func:`check_doc` accepts.
    """
    text = read_state_text(path)
    if text is None:
        return None
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise PlatformError(
            f"state file {path} is not valid JSON ({exc.msg} at line {exc.lineno}); inspect it "
            "and restore the settings by hand, then remove it"
        ) from exc
    except RecursionError:
        raise PlatformError(
            f"state file {path} is not a valid greenckpt node state (JSON nested too deeply); "
            "inspect it and restore the settings by hand, then remove it"
        ) from None
    return check_doc(doc, path)


def boot_id(root: SysRoot) -> str | None:
    """The kernel's boot id: a record with another one predates the last reboot."""
    return root.read_or_none(BOOT_ID)


def read_policy_originals(root: SysRoot, name: str) -> dict[str, str | None]:
    """What a state file records for cpufreq policy ``name``: the raw sysfs text of every
    attribute a change may touch, read before the change (PlatformError when unreadable)."""
    path = f"{CPUFREQ_DIR}/{name}"
    originals: dict[str, str | None] = {}
    for attr in _LIMIT_KEYS:
        value = root.read_or_none(f"{path}/{attr}")
        if value is None:
            raise PlatformError(f"cannot read {root / path}/{attr}; nothing was changed")
        originals[attr] = value
    speed = root.read_or_none(f"{path}/scaling_setspeed")
    is_userspace = originals["scaling_governor"] == USERSPACE
    originals["scaling_setspeed"] = (
        speed if is_userspace and speed and _DIGITS.fullmatch(speed) else None
    )
    originals["energy_performance_preference"] = root.read_or_none(
        f"{path}/energy_performance_preference"
    )
    originals["scaling_driver"] = root.read_or_none(f"{path}/scaling_driver")
    return originals


def state_document(
    root: SysRoot,
    created: str,
    cpufreq: Mapping[str, Mapping[str, str | None]],
    cpuidle: Mapping[str, str],
    sysfs: Mapping[str, str] | None = None,
    gpu: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The record a session on ``root`` publishes: who wrote it (host, pid and start, boot)
    and the original values it saved (what :func:`check_doc` accepts). ``sysfs`` (uncore and
    power-limit files) and ``gpu`` (the GPU module's originals) appear only when saved."""
    doc: dict[str, Any] = {
        "format": STATE_FORMAT,
        "format_version": STATE_VERSION,
        "note": (
            "Original node settings saved by greenckpt before changing them. If this file "
            f"exists, a session ended without restoring them: call {RESTORE_HINT}."
        ),
        "host": socket.gethostname(),
        "pid": os.getpid(),
        "process_start": process_start(os.getpid()),
        "boot_id": boot_id(root),
        "root": str(root.path.resolve()),
        "created": created,
        "cpufreq": {k: dict(v) for k, v in cpufreq.items()},
        "cpuidle": dict(cpuidle),
    }
    if sysfs:
        doc["sysfs"] = dict(sysfs)
    if gpu:
        doc["gpu"] = dict(gpu)
    return doc
