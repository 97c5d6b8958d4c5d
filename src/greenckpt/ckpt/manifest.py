"""The manifest: the versioned description of one committed checkpoint.

Every committed checkpoint directory holds a ``manifest.json`` that says what the checkpoint is
(job name, id, level, when, at which application iteration), how its data are encoded (checksum
algorithm, codec), how the job was laid out (ranks per node) and, per rank, which file holds
its data with sizes and digests, and which variables lie where in the rank's logical data
stream. Restart reads nothing else to decide whether a checkpoint is usable and how to load it.

Why so strict: a manifest is what a restart trusts. Loading validates every field and the
relations between them (every rank on exactly one node, variables contiguous and adding up to
the rank's logical size, array sizes matching dtype × shape, digests of the right shape for the
checksum) and raises :class:`ManifestError` with the JSON path of the first bad value, so a
damaged or foreign file is refused with a clear message instead of restoring garbage.
:func:`write_manifest` runs the same validation before writing, so an invalid manifest is never
committed in the first place.

Why a digest of its own (``manifest_digest``, format version 2): validation catches a manifest
that does not make sense, not one that makes sense but lies — an iteration edited from 110 to
111, a level, a name or a variable's digest changed by hand or by bit rot. Every field
recovery trusts is therefore covered by a digest (the manifest's ``checksum`` algorithm over
the canonical JSON of the whole document without the ``manifest_digest`` key: keys sorted, no
spaces, ASCII), checked before any field is believed. A manifest that fails it is refused with
a :class:`ManifestError` naming the manifest, and recovery skips that checkpoint like one with
a corrupt data file. A version-1 manifest (written before the digest existed) is still read —
refusing it would throw away every checkpoint of a job that was upgraded mid-run — but its
``format_version`` stays 1 so that recovery can warn that its fields are unverified.

The format (``format: "greenckpt-checkpoint"``, ``format_version: 2``)::

    {"format": "greenckpt-checkpoint", "format_version": 2,
     "name": "heat", "id": 12, "level": 1, "created": "2024-05-01T12:00:00.000Z",
     "iteration": 1200, "checksum": "xxh3_64", "codec": "zstd:3",
     "nranks": 2, "nodes": [[0, 1]], "redundancy": {}, "tool": "greenckpt 0.1.0",
     "ranks": [{"rank": 0, "node": 0, "file": "rank-00000.dat",
                "logical_bytes": 800, "stored_bytes": 312, "digest": "<hex of the file>",
                "variables": [{"name": "u", "kind": "array", "dtype": "<f8", "shape": [100],
                               "offset": 0, "nbytes": 800, "digest": "<hex of the bytes>"}]},
               ...],
     "manifest_digest": "<hex of the canonical JSON of everything above>"}

Sizes are plain byte counts. ``digest`` of a rank is over the bytes stored on disk (what a
verify can check without decoding); ``digest`` of a variable is over its logical bytes (what
a restart can check after decoding).
"""

from __future__ import annotations

import copy
import json
import math
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final, Literal, cast

import numpy as np

from greenckpt import __version__
from greenckpt.ckpt.levels import BUILTIN_LEVELS, level_specs
from greenckpt.errors import GreenckptError
from greenckpt.io.atomic import write_atomic, write_durable
from greenckpt.io.checksum import CHECKSUMS, digest_bytes, digest_hex_length

__all__ = [
    "FORMAT_NAME",
    "FORMAT_VERSION",
    "LEGACY_VERSION",
    "LEVELS",
    "MANIFEST_DIGEST_KEY",
    "MANIFEST_NAME",
    "VARIABLE_KINDS",
    "Manifest",
    "ManifestError",
    "RankEntry",
    "Variable",
    "VariableKind",
    "manifest_digest",
    "manifest_from_json",
    "manifest_to_json",
    "read_manifest",
    "utc_now_iso",
    "write_manifest",
]

FORMAT_NAME: Final = "greenckpt-checkpoint"
FORMAT_VERSION: Final = 2
LEGACY_VERSION: Final = 1
"""The version before manifests carried their own digest: read, but reported unverified."""
MANIFEST_DIGEST_KEY: Final = "manifest_digest"
"""The key of the manifest's digest of itself (format version 2 on)."""
MANIFEST_NAME: Final = "manifest.json"
"""File name of the manifest inside a checkpoint directory (no rank file may use it)."""

LEVELS: Final = tuple(spec.number for spec in BUILTIN_LEVELS)
"""L1 node-local, L2 partner copy, L3 erasure-coded group, L4 global file system (a manifest
may also name a level added by :func:`greenckpt.ckpt.levels.register_level`)."""

VariableKind = Literal["array", "buffer", "state"]
VARIABLE_KINDS: Final[tuple[VariableKind, ...]] = ("array", "buffer", "state")


class ManifestError(GreenckptError, ValueError):
    """A manifest file or object is malformed; the message names the JSON path and what is
    valid."""


@dataclass(frozen=True)
class Variable:
    """One protected variable in a rank's logical data stream.

    ``kind`` is ``"array"`` (a NumPy array: ``dtype`` and ``shape`` say how to rebuild it),
    ``"buffer"`` (raw bytes) or ``"state"`` (serialised application state); the latter two have
    no dtype. ``offset``/``nbytes`` locate it in the rank's logical (uncompressed) stream;
    ``digest`` is over those logical bytes.
    """

    name: str
    kind: VariableKind
    dtype: str | None
    shape: tuple[int, ...] | None
    offset: int
    nbytes: int
    digest: str


@dataclass(frozen=True)
class RankEntry:
    """What one rank stored: its file (a plain name inside the checkpoint directory), sizes
    before (``logical_bytes``) and after (``stored_bytes``) the codec, the digest of the stored
    bytes, and its variables in stream order."""

    rank: int
    node: int
    file: str
    logical_bytes: int
    stored_bytes: int
    digest: str
    variables: tuple[Variable, ...]


def _default_tool() -> str:
    return f"greenckpt {__version__}"


@dataclass(frozen=True)
class Manifest:
    """One committed checkpoint of job ``name`` (see the module docstring for the fields).

    ``nodes[i]`` lists the ranks of node ``i``; ``ranks[r]`` is rank ``r``'s entry.
    ``redundancy`` is level-specific metadata (partner map, erasure group, ...) kept as a plain
    JSON object; the level that wrote it is the one that interprets it.
    """

    name: str
    id: int
    level: int
    created: str
    iteration: int | None
    checksum: str
    codec: str | None
    nranks: int
    nodes: tuple[tuple[int, ...], ...]
    ranks: tuple[RankEntry, ...]
    redundancy: Mapping[str, Any] = field(default_factory=dict)
    tool: str = field(default_factory=_default_tool)
    format_version: int = field(default=FORMAT_VERSION, compare=False)
    """The version of the file it was read from: :data:`LEGACY_VERSION` means the file had no
    digest of its own, so nothing vouches for its fields. Writing writes the current version
    (with its digest) unless told to keep this one (a copy of a read manifest, such as a
    rebuilt node's: :func:`manifest_to_json`); not part of equality, which is about the
    content."""

    @property
    def verified(self) -> bool:
        """Whether the manifest's own digest vouched for its fields when it was read (always
        True for one built in memory or read from a current file)."""
        return self.format_version >= FORMAT_VERSION

    @property
    def logical_bytes(self) -> int:
        """The job's checkpoint size before compression (sum over ranks)."""
        return sum(r.logical_bytes for r in self.ranks)

    @property
    def stored_bytes(self) -> int:
        """Bytes this checkpoint occupies on disk (sum over ranks, manifest excluded)."""
        return sum(r.stored_bytes for r in self.ranks)

    def ranks_of_node(self, node: int) -> tuple[int, ...]:
        """The ranks that ran on node ``node``."""
        return self.nodes[node]


def utc_now_iso() -> str:
    """The current time as the ISO-8601 UTC string a manifest records (millisecond, ``Z``)."""
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


# --- validation helpers: each names the JSON path of the value it rejects ---------------------

_MISSING: Final = object()
_HEX: Final = re.compile(r"[0-9a-f]+")


def _got(obj: Mapping[str, Any], key: str) -> str:
    value = obj.get(key, _MISSING)
    return "nothing (the key is missing)" if value is _MISSING else repr(value)


def _int(obj: Mapping[str, Any], key: str, path: str, *, minimum: int) -> int:
    value = obj.get(key)
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ManifestError(f"{path}.{key}: expected an integer >= {minimum}, got {_got(obj, key)}")
    return value


def _str(obj: Mapping[str, Any], key: str, path: str) -> str:
    value = obj.get(key)
    if not isinstance(value, str) or not value:
        raise ManifestError(f"{path}.{key}: expected a non-empty string, got {_got(obj, key)}")
    return value


def _list(obj: Mapping[str, Any], key: str, path: str, what: str) -> list[Any]:
    value = obj.get(key)
    if not isinstance(value, list):
        raise ManifestError(f"{path}.{key}: expected a list of {what}, got {_got(obj, key)}")
    return value


def _object(value: Any, path: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise ManifestError(f"{path}: expected an object, got {type(value).__name__}")
    return value


def _digest(obj: Mapping[str, Any], key: str, path: str, checksum: str) -> str:
    value = obj.get(key)
    n = digest_hex_length(checksum)
    if not isinstance(value, str) or len(value) != n or not _HEX.fullmatch(value):
        raise ManifestError(
            f"{path}.{key}: expected {n} lowercase hex digits (a {checksum} digest), "
            f"got {_got(obj, key)}"
        )
    return value


def _created(obj: Mapping[str, Any], path: str) -> str:
    value = obj.get("created")
    bad = f"{path}.created: expected an ISO-8601 UTC time such as '2024-05-01T12:00:00Z', got "
    if not isinstance(value, str):
        raise ManifestError(bad + _got(obj, "created"))
    try:
        when = datetime.fromisoformat(value)
    except ValueError:
        raise ManifestError(bad + repr(value)) from None
    if when.utcoffset() != UTC.utcoffset(None):
        raise ManifestError(bad + f"{value!r} (not UTC)")
    return value


def _file_name(obj: Mapping[str, Any], path: str) -> str:
    value = obj.get("file")
    if (
        not isinstance(value, str)
        or value in ("", ".", "..", MANIFEST_NAME)
        or "/" in value
        or "\0" in value
    ):
        raise ManifestError(
            f"{path}.file: expected a plain file name (no '/', not '.', '..' or "
            f"{MANIFEST_NAME!r}), got {_got(obj, 'file')}"
        )
    return value


def _variable_from_json(obj: Any, path: str, checksum: str) -> Variable:
    v = _object(obj, path)
    name = _str(v, "name", path)
    kind = v.get("kind")
    if kind not in VARIABLE_KINDS:
        raise ManifestError(
            f"{path}.kind: expected one of {', '.join(VARIABLE_KINDS)}, got {_got(v, 'kind')}"
        )
    offset = _int(v, "offset", path, minimum=0)
    nbytes = _int(v, "nbytes", path, minimum=0)
    digest = _digest(v, "digest", path, checksum)
    raw_shape = v.get("shape")
    shape: tuple[int, ...] | None = None
    if raw_shape is not None:
        if not isinstance(raw_shape, list) or not all(
            isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in raw_shape
        ):
            raise ManifestError(
                f"{path}.shape: expected a list of integers >= 0 or null, got {_got(v, 'shape')}"
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
            f"got {_got(v, 'dtype')}"
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


def _rank_from_json(obj: Any, path: str, checksum: str) -> RankEntry:
    r = _object(obj, path)
    rank = _int(r, "rank", path, minimum=0)
    node = _int(r, "node", path, minimum=0)
    file = _file_name(r, path)
    logical = _int(r, "logical_bytes", path, minimum=0)
    stored = _int(r, "stored_bytes", path, minimum=0)
    digest = _digest(r, "digest", path, checksum)
    raw_vars = _list(r, "variables", path, "variables")
    variables: list[Variable] = []
    names: set[str] = set()
    end = 0
    for i, raw in enumerate(raw_vars):
        where = f"{path}.variables[{i}]"
        var = _variable_from_json(raw, where, checksum)
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


def _nodes_from_json(data: Mapping[str, Any], nranks: int) -> tuple[tuple[int, ...], ...]:
    raw = _list(data, "nodes", "manifest", "lists of ranks (one list per node)")
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


def _canonical(data: Mapping[str, Any]) -> bytes:
    """The bytes the manifest digest covers: the document without its digest, as canonical
    JSON (sorted keys, no whitespace, ASCII), so indentation or key order in the file do not
    matter but every value does."""
    body = {k: v for k, v in data.items() if k != MANIFEST_DIGEST_KEY}
    try:
        text = json.dumps(body, sort_keys=True, separators=(",", ":"), allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise ManifestError(f"manifest: not representable as JSON ({exc})") from None
    return text.encode("ascii")


def manifest_digest(data: Mapping[str, Any]) -> str:
    """The digest a manifest document must carry under :data:`MANIFEST_DIGEST_KEY`: its
    ``checksum`` algorithm over :func:`_canonical` (what a tool that edits a manifest on
    purpose recomputes; greenckpt itself never rewrites a committed one)."""
    checksum = data.get("checksum")
    if checksum not in CHECKSUMS:
        raise ManifestError(
            f"manifest.checksum: expected one of {', '.join(CHECKSUMS)}, "
            f"got {_got(data, 'checksum')}"
        )
    return digest_bytes(checksum, _canonical(data))


def _check_own_digest(data: Mapping[str, Any]) -> None:
    """Refuse a version-2 document whose content does not match its own digest, before any
    field is trusted (the fields may be valid and still wrong)."""
    expected = manifest_digest(data)
    recorded = data.get(MANIFEST_DIGEST_KEY)
    if not isinstance(recorded, str) or len(recorded) != len(expected):
        raise ManifestError(
            f"manifest.{MANIFEST_DIGEST_KEY}: expected {len(expected)} lowercase hex digits "
            f"(the {data['checksum']} digest of the manifest itself), "
            f"got {_got(data, MANIFEST_DIGEST_KEY)}"
        )
    if recorded != expected:
        raise ManifestError(
            f"manifest.{MANIFEST_DIGEST_KEY}: the manifest does not match its own digest "
            f"({data['checksum']} {expected}, recorded {recorded}): it was edited or damaged "
            "after it was written, so none of its fields can be trusted"
        )


def manifest_from_json(data: Any) -> Manifest:
    """Build a :class:`Manifest` from parsed JSON, validating every field and relation."""
    if not isinstance(data, dict):
        raise ManifestError(
            f"manifest: expected a JSON object at the top level, got {type(data).__name__}"
        )
    if data.get("format") != FORMAT_NAME:
        raise ManifestError(
            f"manifest.format: expected {FORMAT_NAME!r}, got {_got(data, 'format')} "
            "(is this a greenckpt checkpoint manifest?)"
        )
    version = data.get("format_version")
    if isinstance(version, bool) or version not in (LEGACY_VERSION, FORMAT_VERSION):
        newer = isinstance(version, int) and version > FORMAT_VERSION
        raise ManifestError(
            f"manifest.format_version: this checkpoint was written with format version "
            f"{_got(data, 'format_version')}; this greenckpt reads version {FORMAT_VERSION} "
            f"(and the older {LEGACY_VERSION})"
            + (" (restart it with the newer greenckpt that wrote it)" if newer else "")
        )
    if version == FORMAT_VERSION:
        _check_own_digest(data)
    name = _str(data, "name", "manifest")
    ckpt_id = _int(data, "id", "manifest", minimum=1)
    level = data.get("level")
    specs = level_specs()
    if isinstance(level, bool) or level not in [spec.number for spec in specs]:
        known = ", ".join(str(spec.number) for spec in specs)
        names = ", ".join(f"L{spec.number} {spec.name}" for spec in specs)
        raise ManifestError(
            f"manifest.level: expected one of {known} ({names}), got {_got(data, 'level')}"
        )
    created = _created(data, "manifest")
    iteration = (
        None if data.get("iteration") is None else _int(data, "iteration", "manifest", minimum=0)
    )
    checksum = data.get("checksum")
    if checksum not in CHECKSUMS:
        raise ManifestError(
            f"manifest.checksum: expected one of {', '.join(CHECKSUMS)}, "
            f"got {_got(data, 'checksum')}"
        )
    codec = data.get("codec")
    if codec is not None and not (isinstance(codec, str) and codec):
        raise ManifestError(
            f"manifest.codec: expected a codec name such as 'zstd:3' or null, got {codec!r}"
        )
    nranks = _int(data, "nranks", "manifest", minimum=1)
    nodes = _nodes_from_json(data, nranks)
    raw_ranks = _list(data, "ranks", "manifest", "rank entries")
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
        entry = _rank_from_json(raw, where, checksum)
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
    redundancy = data.get("redundancy", {})
    if not isinstance(redundancy, dict):
        raise ManifestError(f"manifest.redundancy: expected an object, got {redundancy!r}")
    tool = data.get("tool", "")
    if not isinstance(tool, str):
        raise ManifestError(f"manifest.tool: expected a string, got {tool!r}")
    return Manifest(
        name=name,
        id=ckpt_id,
        level=level,
        created=created,
        iteration=iteration,
        checksum=checksum,
        codec=codec,
        nranks=nranks,
        nodes=nodes,
        ranks=tuple(ranks),
        redundancy=dict(redundancy),
        tool=tool,
        format_version=version,
    )


def _variable_to_json(v: Variable) -> dict[str, Any]:
    return {
        "name": v.name,
        "kind": v.kind,
        "dtype": v.dtype,
        "shape": None if v.shape is None else list(v.shape),
        "offset": v.offset,
        "nbytes": v.nbytes,
        "digest": v.digest,
    }


def manifest_to_json(manifest: Manifest, *, keep_version: bool = False) -> dict[str, Any]:
    """The JSON document of a manifest (version :data:`FORMAT_VERSION`, with its digest).

    ``keep_version``: a manifest read from a version-1 file stays version 1, without a digest
    — for copies of a manifest that was read, never for a new one. Why: sealing a copy would
    vouch for fields that nothing verified (a digest says "written like this by greenckpt"),
    and it would claim that the data it describes record their checkpoint, as version-2 data
    do; data written with version-1 manifests have no such record, so every later restart
    reading the sealed copy would refuse a good checkpoint as "does not match the data it
    describes". Kept at version 1, the copy stays what the original is: readable, its data
    verified by their digests, its other fields reported unverified.
    """
    legacy = keep_version and manifest.format_version == LEGACY_VERSION
    doc: dict[str, Any] = {
        "format": FORMAT_NAME,
        "format_version": LEGACY_VERSION if legacy else FORMAT_VERSION,
        "name": manifest.name,
        "id": manifest.id,
        "level": manifest.level,
        "created": manifest.created,
        "iteration": manifest.iteration,
        "checksum": manifest.checksum,
        "codec": manifest.codec,
        "nranks": manifest.nranks,
        "nodes": [list(n) for n in manifest.nodes],
        "redundancy": dict(manifest.redundancy),
        "tool": manifest.tool,
        "ranks": [
            {
                "rank": r.rank,
                "node": r.node,
                "file": r.file,
                "logical_bytes": r.logical_bytes,
                "stored_bytes": r.stored_bytes,
                "digest": r.digest,
                "variables": [_variable_to_json(v) for v in r.variables],
            }
            for r in manifest.ranks
        ],
    }
    # a deep copy: the digest must cover exactly what is written, even if the caller's
    # redundancy object changes afterwards
    doc = copy.deepcopy(doc)
    if not legacy:
        doc[MANIFEST_DIGEST_KEY] = manifest_digest(doc)
    return doc


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
    manifest_from_json(doc)
    text = json.dumps(doc, indent=1, allow_nan=False) + "\n"
    if atomic:
        write_atomic(path, text)
    else:
        write_durable(path, text)


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
