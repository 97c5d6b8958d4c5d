"""The manifest: the versioned description of one committed checkpoint.

Every committed checkpoint directory holds a ``manifest.json`` that says what the checkpoint
is (job, id, level, time, iteration), how its data are encoded (checksum, codec), how the job
was laid out, and per rank which file holds its data, with sizes, digests and where each
variable lies. Restart reads nothing else to decide whether a checkpoint is usable, so the
manifest is strict: loading validates every field and relation and the manifest's own digest,
and refuses a damaged or foreign file with a :class:`ManifestError` naming the JSON path of the
first bad value; writing validates first, so an invalid manifest is never committed.

This package is the public face; its modules split the work by job:
:mod:`~greenckpt.ckpt.manifest.document` (the dataclasses and constants),
:mod:`~greenckpt.ckpt.manifest.check` (validating the parts),
:mod:`~greenckpt.ckpt.manifest.serialize` (to and from JSON, the digest) and
:mod:`~greenckpt.ckpt.manifest.file` (the file). Why a digest of its own, why version 1 is
still read, and the document: docs/design/levels-and-config.md; the fields: docs/formats.md.
"""

from __future__ import annotations

from greenckpt.ckpt.manifest.document import (
    FORMAT_NAME,
    FORMAT_VERSION,
    LEGACY_VERSION,
    LEVELS,
    MANIFEST_DIGEST_KEY,
    MANIFEST_NAME,
    VARIABLE_KINDS,
    Manifest,
    ManifestError,
    RankEntry,
    Variable,
    VariableKind,
    utc_now_iso,
)
from greenckpt.ckpt.manifest.file import read_manifest, write_manifest
from greenckpt.ckpt.manifest.serialize import manifest_digest, manifest_from_json, manifest_to_json

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
