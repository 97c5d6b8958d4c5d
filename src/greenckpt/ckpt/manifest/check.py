"""Validating the parts of a manifest document: fields, variables, rank entries, nodes.

Why each check names a JSON path: a manifest is what a restart trusts, so a damaged or foreign
one must be refused with the first bad value named (``manifest.ranks[3].variables[0].nbytes``)
rather than restore garbage. These checks know the relations inside a part (variables
contiguous and adding up to the rank's logical size, an array's bytes matching dtype × shape,
every rank on exactly one node); :func:`~greenckpt.ckpt.manifest.serialize.manifest_from_json`
puts the parts together. Internal to :mod:`greenckpt.ckpt.manifest`; see
docs/design/levels-and-config.md.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any, Final, cast

import numpy as np

from greenckpt.ckpt.levels import level_specs
from greenckpt.ckpt.manifest.document import (
    FORMAT_NAME,
    FORMAT_VERSION,
    LEGACY_VERSION,
    MANIFEST_NAME,
    VARIABLE_KINDS,
    ManifestError,
    RankEntry,
    Variable,
    VariableKind,
)
from greenckpt.io.checksum import CHECKSUMS, digest_hex_length

_MISSING: Final = object()
_HEX: Final = re.compile(r"[0-9a-f]+")


def got(obj: Mapping[str, Any], key: str) -> str:
    value = obj.get(key, _MISSING)
    return "nothing (the key is missing)" if value is _MISSING else repr(value)


def int_field(obj: Mapping[str, Any], key: str, path: str, *, minimum: int) -> int:
    value = obj.get(key)
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ManifestError(f"{path}.{key}: expected an integer >= {minimum}, got {got(obj, key)}")
    return value


def str_field(obj: Mapping[str, Any], key: str, path: str) -> str:
    value = obj.get(key)
    if not isinstance(value, str) or not value:
        raise ManifestError(f"{path}.{key}: expected a non-empty string, got {got(obj, key)}")
    return value


def list_field(obj: Mapping[str, Any], key: str, path: str, what: str) -> list[Any]:
    value = obj.get(key)
    if not isinstance(value, list):
        raise ManifestError(f"{path}.{key}: expected a list of {what}, got {got(obj, key)}")
    return value


def as_object(value: Any, path: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise ManifestError(f"{path}: expected an object, got {type(value).__name__}")
    return value


def digest_field(obj: Mapping[str, Any], key: str, path: str, checksum: str) -> str:
    value = obj.get(key)
    n = digest_hex_length(checksum)
    if not isinstance(value, str) or len(value) != n or not _HEX.fullmatch(value):
        raise ManifestError(
            f"{path}.{key}: expected {n} lowercase hex digits (a {checksum} digest), "
            f"got {got(obj, key)}"
        )
    return value


def created_field(obj: Mapping[str, Any], path: str) -> str:
    value = obj.get("created")
    bad = f"{path}.created: expected an ISO-8601 UTC time such as '2024-05-01T12:00:00Z', got "
    if not isinstance(value, str):
        raise ManifestError(bad + got(obj, "created"))
    try:
        when = datetime.fromisoformat(value)
    except ValueError:
        raise ManifestError(bad + repr(value)) from None
    if when.utcoffset() != UTC.utcoffset(None):
        raise ManifestError(bad + f"{value!r} (not UTC)")
    return value


def file_name_field(obj: Mapping[str, Any], path: str) -> str:
    value = obj.get("file")
    if (
        not isinstance(value, str)
        or value in ("", ".", "..", MANIFEST_NAME)
        or "/" in value
        or "\0" in value
    ):
        raise ManifestError(
            f"{path}.file: expected a plain file name (no '/', not '.', '..' or "
            f"{MANIFEST_NAME!r}), got {got(obj, 'file')}"
        )
    return value


def variable_from_json(obj: Any, path: str, checksum: str) -> Variable:
    v = as_object(obj, path)
    name = str_field(v, "name", path)
    kind = v.get("kind")
    if kind not in VARIABLE_KINDS:
        raise ManifestError(
            f"{path}.kind: expected one of {', '.join(VARIABLE_KINDS)}, got {got(v, 'kind')}"
        )
    offset = int_field(v, "offset", path, minimum=0)
    nbytes = int_field(v, "nbytes", path, minimum=0)
    digest = digest_field(v, "digest", path, checksum)
    raw_shape = v.get("shape")
    shape: tuple[int, ...] | None = None
    if raw_shape is not None:
        if not isinstance(raw_shape, list) or not all(
            isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in raw_shape
        ):
            raise ManifestError(
                f"{path}.shape: expected a list of integers >= 0 or null, got {got(v, 'shape')}"
            )
        shape = tuple(raw_shape)
    raw_dtype = v.get("dtype")
    if kind != "array":
        if raw_dtype is not None:
            raise ManifestError(
                f"{path}.dtype: expected null for a {kind} (only arrays have a dtype), "
                f"got {raw_dtype!r}"
            )
        return Variable(name, cast(VariableKind, kind), None, shape, offset, nbytes, digest)
    if not isinstance(raw_dtype, str) or not raw_dtype:
        raise ManifestError(
            f"{path}.dtype: expected a NumPy dtype string such as '<f8' for an array, "
            f"got {got(v, 'dtype')}"
        )
    try:
        dtype = np.dtype(raw_dtype)
    except (TypeError, ValueError):
        raise ManifestError(
            f"{path}.dtype: {raw_dtype!r} is not a NumPy dtype string (such as '<f8', '<i4')"
        ) from None
    if dtype.hasobject:
        raise ManifestError(
            f"{path}.dtype: {raw_dtype!r} holds Python objects, which have no byte "
            "representation; use a numeric dtype or a 'state' variable"
        )
    if shape is None:
        raise ManifestError(
            f"{path}.shape: expected a list of integers >= 0 for an array, got null"
        )
    expected = math.prod(shape) * dtype.itemsize
    if nbytes != expected:
        raise ManifestError(
            f"{path}.nbytes: an array of shape {list(shape)} and dtype {raw_dtype!r} has "
            f"{expected} bytes, got {nbytes}"
        )
    return Variable(name, "array", raw_dtype, shape, offset, nbytes, digest)


def rank_from_json(obj: Any, path: str, checksum: str) -> RankEntry:
    r = as_object(obj, path)
    rank = int_field(r, "rank", path, minimum=0)
    node = int_field(r, "node", path, minimum=0)
    file = file_name_field(r, path)
    logical = int_field(r, "logical_bytes", path, minimum=0)
    stored = int_field(r, "stored_bytes", path, minimum=0)
    digest = digest_field(r, "digest", path, checksum)
    raw_vars = list_field(r, "variables", path, "variables")
    variables: list[Variable] = []
    names: set[str] = set()
    end = 0
    for i, raw in enumerate(raw_vars):
        where = f"{path}.variables[{i}]"
        var = variable_from_json(raw, where, checksum)
        if var.name in names:
            raise ManifestError(
                f"{where}.name: {var.name!r} appears twice in this rank; names must be unique"
            )
        if var.offset != end:
            raise ManifestError(
                f"{where}.offset: variables must be contiguous in order, expected {end} "
                f"(where the previous one ends), got {var.offset}"
            )
        names.add(var.name)
        end = var.offset + var.nbytes
        variables.append(var)
    if end != logical:
        raise ManifestError(
            f"{path}.logical_bytes: expected {end} (the sum of the variables' nbytes), "
            f"got {logical}"
        )
    return RankEntry(rank, node, file, logical, stored, digest, tuple(variables))


def nodes_from_json(data: Mapping[str, Any], nranks: int) -> tuple[tuple[int, ...], ...]:
    raw = list_field(data, "nodes", "manifest", "lists of ranks (one list per node)")
    if not raw:
        raise ManifestError("manifest.nodes: expected at least one node, got []")
    seen: dict[int, int] = {}
    nodes = []
    for i, ranks in enumerate(raw):
        where = f"manifest.nodes[{i}]"
        if not isinstance(ranks, list) or not ranks:
            raise ManifestError(f"{where}: expected a non-empty list of ranks, got {ranks!r}")
        for j, r in enumerate(ranks):
            if isinstance(r, bool) or not isinstance(r, int) or not 0 <= r < nranks:
                raise ManifestError(
                    f"{where}[{j}]: expected a rank 0..{nranks - 1} (nranks is {nranks}), got {r!r}"
                )
            if r in seen:
                raise ManifestError(
                    f"{where}[{j}]: rank {r} is already on node {seen[r]}; every rank must be "
                    "on exactly one node"
                )
            seen[r] = i
        nodes.append(tuple(ranks))
    missing = sorted(set(range(nranks)) - seen.keys())
    if missing:
        shown = ", ".join(map(str, missing[:5])) + (", ..." if len(missing) > 5 else "")
        which = f"rank {shown} is" if len(missing) == 1 else f"ranks {shown} are"
        raise ManifestError(
            f"manifest.nodes: {which} on no node; every rank 0..{nranks - 1} must be on "
            "exactly one node"
        )
    return tuple(nodes)


def format_version(data: Mapping[str, Any]) -> int:
    """The document's format version, after checking that it is a greenckpt checkpoint
    manifest of a version this greenckpt reads (the current one or the legacy one)."""
    if data.get("format") != FORMAT_NAME:
        raise ManifestError(
            f"manifest.format: expected {FORMAT_NAME!r}, got {got(data, 'format')} "
            "(is this a greenckpt checkpoint manifest?)"
        )
    version = data.get("format_version")
    if isinstance(version, bool) or version not in (LEGACY_VERSION, FORMAT_VERSION):
        newer = isinstance(version, int) and version > FORMAT_VERSION
        raise ManifestError(
            f"manifest.format_version: this checkpoint was written with format version "
            f"{got(data, 'format_version')}; this greenckpt reads version {FORMAT_VERSION} "
            f"(and the older {LEGACY_VERSION})"
            + (" (restart it with the newer greenckpt that wrote it)" if newer else "")
        )
    return cast(int, version)


def level_field(data: Mapping[str, Any]) -> int:
    """The checkpoint's level: one registered now (:mod:`greenckpt.ckpt.levels`)."""
    level = data.get("level")
    specs = level_specs()
    if isinstance(level, bool) or level not in [spec.number for spec in specs]:
        known = ", ".join(str(spec.number) for spec in specs)
        names = ", ".join(f"L{spec.number} {spec.name}" for spec in specs)
        raise ManifestError(
            f"manifest.level: expected one of {known} ({names}), got {got(data, 'level')}"
        )
    return cast(int, level)


def checksum_field(data: Mapping[str, Any]) -> str:
    """The digest algorithm of every digest in the document (and of the document's own)."""
    checksum = data.get("checksum")
    if checksum not in CHECKSUMS:
        raise ManifestError(
            f"manifest.checksum: expected one of {', '.join(CHECKSUMS)}, "
            f"got {got(data, 'checksum')}"
        )
    return cast(str, checksum)


def codec_field(data: Mapping[str, Any]) -> str | None:
    """The codec the rank files were written with, or None for none."""
    codec = data.get("codec")
    if codec is not None and not (isinstance(codec, str) and codec):
        raise ManifestError(
            f"manifest.codec: expected a codec name such as 'zstd:3' or null, got {codec!r}"
        )
    return codec


def ranks_from_json(
    data: Mapping[str, Any], nodes: tuple[tuple[int, ...], ...], nranks: int, checksum: str
) -> tuple[RankEntry, ...]:
    """The rank entries, one per rank in rank order, each on the node ``nodes`` puts it on
    and each with its own file."""
    raw_ranks = list_field(data, "ranks", "manifest", "rank entries")
    if len(raw_ranks) != nranks:
        raise ManifestError(
            f"manifest.ranks: expected {nranks} entries (one per rank, nranks is {nranks}), "
            f"got {len(raw_ranks)}"
        )
    node_of = {r: i for i, ranks in enumerate(nodes) for r in ranks}
    files: dict[str, int] = {}
    ranks = []
    for i, raw in enumerate(raw_ranks):
        where = f"manifest.ranks[{i}]"
        entry = rank_from_json(raw, where, checksum)
        if entry.rank != i:
            raise ManifestError(
                f"{where}.rank: expected {i} (entries in rank order), got {entry.rank}"
            )
        if entry.node != node_of[i]:
            raise ManifestError(
                f"{where}.node: manifest.nodes puts rank {i} on node {node_of[i]}, got {entry.node}"
            )
        if entry.file in files:
            raise ManifestError(
                f"{where}.file: {entry.file!r} is already the file of rank {files[entry.file]}; "
                "each rank needs its own file"
            )
        files[entry.file] = i
        ranks.append(entry)
    return tuple(ranks)


def redundancy_field(data: Mapping[str, Any]) -> dict[str, Any]:
    """The level's own metadata (a JSON object, ``{}`` when absent)."""
    redundancy = data.get("redundancy", {})
    if not isinstance(redundancy, dict):
        raise ManifestError(f"manifest.redundancy: expected an object, got {redundancy!r}")
    return dict(redundancy)


def tool_field(data: Mapping[str, Any]) -> str:
    """The greenckpt version that wrote the manifest (``""`` when absent)."""
    tool = data.get("tool", "")
    if not isinstance(tool, str):
        raise ManifestError(f"manifest.tool: expected a string, got {tool!r}")
    return tool
