"""Reading and writing a manifest file.

Why the same validation both ways: :func:`write_manifest` validates a manifest exactly as
:func:`read_manifest` will, before anything touches the disk, so an invalid manifest is never
committed; and it writes atomically (or durably into a staging directory that is itself renamed
into place), so a crash leaves no manifest or the whole one, never a torn file. Reading turns
every failure into a one-line :class:`ManifestError` naming the file. Internal to
:mod:`greenckpt.ckpt.manifest`; see docs/design/levels-and-config.md.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from greenckpt.ckpt.manifest.document import Manifest, ManifestError
from greenckpt.ckpt.manifest.serialize import manifest_from_json, manifest_to_json
from greenckpt.durable import write_atomic, write_durable


def write_manifest(
    path: str | os.PathLike[str],
    manifest: Manifest,
    *,
    atomic: bool = True,
    keep_version: bool = False,
) -> None:
    """Validate ``manifest`` and write it to ``path``, fsynced (``keep_version``: see
    :func:`manifest_to_json`).

    ``atomic``: the text goes to a temporary file in the same directory, is fsynced, renamed
    over ``path`` and the directory is fsynced: a crash leaves either no manifest or the
    complete one, never a torn file. Without it the file is written in place and fsynced, for
    a directory that is itself renamed into place afterwards (a staging directory), where a
    torn file is never seen. Validation comes first (the same as reading), so a manifest that
    would not read back is refused before anything touches the disk.
    """
    doc = manifest_to_json(manifest, keep_version=keep_version)
    manifest_from_json(doc, own_digest=False)  # sealed just above, from this document
    text = manifest_text(doc)
    if atomic:
        write_atomic(path, text)
    else:
        write_durable(path, text)


def manifest_text(doc: Mapping[str, Any]) -> str:
    """The file's text: one top-level field per line, and one line per rank entry.

    Why not ``json.dumps(doc, indent=1)``: with an indent Python's JSON encoder runs in
    Python, not C, and puts every number of ``nodes`` and every field of every variable on a
    line of its own; for 8192 ranks that took 167 ms of the leader's CPU at every checkpoint
    against 32 ms compact. Each line here comes from the C encoder, and a person reading the
    file (or ``grep``, ``diff``) still finds one rank per line.
    """
    lines = []
    for key, value in doc.items():
        name = json.dumps(key)
        if key == "ranks" and isinstance(value, list) and value:
            entries = ",\n".join("  " + json.dumps(r, allow_nan=False) for r in value)
            lines.append(f" {name}: [\n{entries}\n ]")
        else:
            lines.append(f" {name}: {json.dumps(value, allow_nan=False)}")
    return "{\n" + ",\n".join(lines) + "\n}\n"


def read_manifest(path: str | os.PathLike[str]) -> Manifest:
    """Read and validate a manifest file; every error is a one-line :class:`ManifestError`
    naming the file (missing, truncated or not JSON, another format or version, a bad field)."""
    p = Path(path)
    try:
        raw = p.read_bytes()
    except FileNotFoundError:
        raise ManifestError(
            f"{p} does not exist (the checkpoint is incomplete or removed)"
        ) from None
    except IsADirectoryError:
        raise ManifestError(f"{p} is a directory, expected a manifest file") from None
    except OSError as exc:
        raise ManifestError(f"cannot read {p}: {exc.strerror}") from None
    try:
        data = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError:
        raise ManifestError(f"{p} is truncated or not JSON: not UTF-8 text") from None
    except json.JSONDecodeError as exc:
        raise ManifestError(
            f"{p} is truncated or not JSON: {exc.msg} at line {exc.lineno}, column {exc.colno}"
        ) from None
    except RecursionError:
        raise ManifestError(f"{p} is truncated or not JSON: nested too deeply") from None
    try:
        return manifest_from_json(data)
    except ManifestError as exc:
        raise ManifestError(f"{p}: {exc}") from None
