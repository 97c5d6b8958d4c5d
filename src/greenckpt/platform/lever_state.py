"""The state file's lever sections: uncore and power-limit originals, and the GPU's.

Why its own module: the uncore frequency and the RAPL power limits are plain sysfs files, saved
in the state file's ``"sysfs"`` section as ``{path relative to the root: original text}``;
the GPU's application clocks and power limit are saved in its ``"gpu"`` section by the GPU
module (:mod:`greenckpt.platform.gpu`, ``gpu_originals()`` / ``restore_gpu(saved)``). A state
file is untrusted input that root acts on, so :func:`check_lever_sections` accepts a path only
when it matches one of :data:`SYSFS_PATTERNS` (the files a lever writes, nothing else) with a
value of the form that file holds; :func:`restore_levers` puts them back in a safe order:
uncore limits per domain in the order that never shows min > max, then each RAPL zone's
``enabled`` flag, then its limits, then the GPU. Only what differs is written; a failure does
not stop the others. A GPU section that cannot be restored (the GPU module is missing) is a
failure that keeps the file, never silently dropped. Docs: docs/formats.md, design/restore.md.
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Callable, Mapping
from types import ModuleType
from typing import Any

from greenckpt.platform.powercap import POWERCAP
from greenckpt.platform.root import PlatformError, SysRoot
from greenckpt.platform.sysfs_writes import SysfsWrite, write_attributes
from greenckpt.platform.uncore import UNCORE_DIR, limit_pair_writes

__all__ = [
    "GPU_MODULE",
    "SYSFS_PATTERNS",
    "check_lever_sections",
    "gpu_module",
    "read_sysfs_originals",
    "restore_levers",
]

GPU_MODULE = "greenckpt.platform.gpu"
"""Imported by name, late: the GPU module builds on this layer (it is loaded only when a GPU
section is saved or restored, and a node without it still restores everything else)."""

_DIGITS = r"\d{1,19}"
_UNCORE = re.compile(
    rf"{re.escape(UNCORE_DIR)}/(package_\d{{2,3}}_die_\d{{2,3}}|uncore\d{{1,4}})/"
    r"(min|max)_freq_khz"
)
_LIMIT = re.compile(
    rf"{re.escape(POWERCAP)}/(intel-rapl:\d{{1,3}}(?::\d{{1,3}})?)/constraint_\d{{1,2}}_power_limit_uw"
)
_ENABLED = re.compile(rf"{re.escape(POWERCAP)}/(intel-rapl:\d{{1,3}}(?::\d{{1,3}})?)/enabled")
SYSFS_PATTERNS: tuple[tuple[re.Pattern[str], str], ...] = (
    (_UNCORE, _DIGITS),
    (_LIMIT, _DIGITS),
    (_ENABLED, r"[01]"),
)
"""(path pattern, value pattern): every file a lever may write, and the form of its text."""


def check_lever_sections(doc: Mapping[str, Any], bad: Callable[[str], PlatformError]) -> None:
    """Refuse (``bad(why)``) a ``"sysfs"`` entry outside the allow-list or with a malformed
    value, and a ``"gpu"`` section that is not an object. Both sections are optional (state
    files written before them stay readable)."""
    sysfs = doc.get("sysfs", {})
    if not isinstance(sysfs, dict):
        raise bad("'sysfs' must be an object")
    for key, value in sysfs.items():
        form = next((v for p, v in SYSFS_PATTERNS if p.fullmatch(key)), None)
        if form is None:
            raise bad(
                f"sysfs path {key!r} is not one greenckpt writes (uncore min/max_freq_khz, "
                "powercap constraint_K_power_limit_uw or enabled)"
            )
        if not isinstance(value, str) or not re.fullmatch(form, value):
            raise bad(f"bad value {value!r} for {key!r}")
    if "gpu" in doc and not isinstance(doc["gpu"], dict):
        raise bad("'gpu' must be an object")


def read_sysfs_originals(root: SysRoot, paths: list[str]) -> dict[str, str]:
    """The current text of each path (the originals to save); PlatformError when one is
    unreadable or is not a path the allow-list accepts (nothing is changed then)."""
    out: dict[str, str] = {}
    for rel in paths:
        if not any(p.fullmatch(rel) for p, _ in SYSFS_PATTERNS):
            raise PlatformError(f"{rel} is not a file a lever may write; nothing was changed")
        value = root.read_or_none(rel)
        if value is None:
            raise PlatformError(f"cannot read {root / rel}; nothing was changed")
        out[rel] = value
    return out


def gpu_module() -> ModuleType | None:
    """The GPU lever module, None when it cannot be imported here."""
    try:
        return importlib.import_module(GPU_MODULE)
    except ImportError:
        return None


def _restore_uncore(
    root: SysRoot, saved: Mapping[str, str], written: list[SysfsWrite], failures: list[str]
) -> None:
    dirs = sorted({k.rsplit("/", 1)[0] for k in saved if _UNCORE.fullmatch(k)})
    for d in dirs:
        lo_path, hi_path = f"{d}/min_freq_khz", f"{d}/max_freq_khz"
        try:
            cur_lo, cur_hi = root.read_or_none(lo_path), root.read_or_none(hi_path)
            if cur_lo is None or cur_hi is None or not (cur_lo.isdigit() and cur_hi.isdigit()):
                raise PlatformError(f"cannot read the uncore limits of {root / d}")
            lo = int(saved.get(lo_path, cur_lo))
            hi = int(saved.get(hi_path, cur_hi))
            writes = limit_pair_writes(lo_path, hi_path, int(cur_lo), int(cur_hi), lo, hi)
            written += write_attributes(root, writes, what="the uncore frequency files")
        except PlatformError as exc:
            failures.append(str(exc))


def _restore_plain(
    root: SysRoot,
    keys: list[str],
    saved: Mapping[str, str],
    written: list[SysfsWrite],
    failures: list[str],
) -> None:
    for rel in keys:
        try:
            now = root.read_or_none(rel)
            if now is None:
                raise PlatformError(f"cannot read {root / rel}")
            if now != saved[rel]:
                w = SysfsWrite(rel, saved[rel])
                written += write_attributes(root, [w], what="the powercap (RAPL) files")
        except PlatformError as exc:
            failures.append(str(exc))


def _restore_gpu(saved: Mapping[str, Any]) -> list[str]:
    module = gpu_module()
    restore = getattr(module, "restore_gpu", None) if module is not None else None
    if restore is None:
        return [
            f"the GPU settings saved in the state file cannot be restored: {GPU_MODULE} is not "
            "available here (restore them by hand, e.g. nvidia-smi -rac and -pl)"
        ]
    try:
        failures = restore(dict(saved))
    except PlatformError as exc:
        return [f"restoring the GPU settings failed: {exc}"]
    return [str(f) for f in failures]


def restore_levers(
    root: SysRoot, sysfs: Mapping[str, str], gpu: Mapping[str, Any] | None
) -> tuple[list[SysfsWrite], list[str]]:
    """Put back every saved lever file and the GPU section; (written, failures)."""
    written: list[SysfsWrite] = []
    failures: list[str] = []
    _restore_uncore(root, sysfs, written, failures)
    enabled = sorted(k for k in sysfs if _ENABLED.fullmatch(k))
    limits = sorted(k for k in sysfs if _LIMIT.fullmatch(k))
    _restore_plain(root, enabled, sysfs, written, failures)
    _restore_plain(root, limits, sysfs, written, failures)
    if gpu:
        failures += _restore_gpu(gpu)
    return written, failures
