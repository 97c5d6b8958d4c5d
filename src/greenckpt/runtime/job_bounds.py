"""What the job's leader keeps of an agent's messages: bounded copies.

Why a module of its own: the leader's memory must grow with nodes plus phases, never with
their product or with what one agent chooses to send (docs/design/cluster.md, "Bounded
memory"); these functions are where every message is cut down to what the job report needs,
for the leader on the wire (:mod:`greenckpt.runtime.job`) and for the report assembled from
node files (:mod:`greenckpt.runtime.job_files`) alike.
"""

from __future__ import annotations

import itertools
from array import array
from collections.abc import Mapping
from typing import Any, Final

__all__ = [
    "MAX_NODE_NOTES",
    "MAX_SERIES_POINTS",
    "bounded_progress",
    "bounded_series",
    "node_summary",
]

MAX_SERIES_POINTS: Final = 1000
"""Points of a node's power series kept by the leader (agents downsample to this)."""
MAX_NODE_NOTES: Final = 20

_SUMMARY_KEYS = (
    "policy",
    "power",
    "total",
    "cpu",
    "useful_compute_s",
    "rework_s",
    "lost_s",
    "epe",
    "by_kind",
    "by_level",
    "synthetic",
    "files",
    "t0_unix",
    "announcements",
)


def node_summary(summary: Mapping[str, Any]) -> dict[str, Any]:
    """The bounded part of a node's final summary: totals, per kind and level, a few notes."""
    kept = {k: summary[k] for k in _SUMMARY_KEYS if k in summary}
    notes = [str(n)[:500] for n in summary.get("notes", [])]
    kept["notes"] = notes[:MAX_NODE_NOTES] + (
        [f"... and {len(notes) - MAX_NODE_NOTES} more note(s) in the node's own report"]
        if len(notes) > MAX_NODE_NOTES
        else []
    )
    kept["records"] = len(summary.get("records") or [])
    lost = summary.get("previous_lost")
    if isinstance(lost, Mapping):  # one account of bounded size: its note cut like the others
        kept["previous_lost"] = {**lost, "note": str(lost.get("note", ""))[:1000]}
    modelled = summary.get("modelled_epe")
    if isinstance(modelled, Mapping):  # the figure, its source and how it was derived
        kept["modelled_epe"] = {
            "epe_w": modelled.get("epe_w"),
            "source": modelled.get("source"),
            "derivation": str(modelled.get("derivation", ""))[:1000],
        }
    return kept


def bounded_progress(msg: Mapping[str, Any]) -> dict[str, Any]:
    by_kind = msg.get("by_kind") or {}
    return {
        "t_s": float(msg.get("t_s", 0.0)),
        "records": int(msg.get("records", 0)),
        "energy_j": msg.get("energy_j"),
        "by_kind": {str(k): dict(v) for k, v in list(by_kind.items())[:16]},
    }


def bounded_series(series: Any) -> dict[str, Any] | None:
    """At most MAX_SERIES_POINTS points, kept as packed doubles (``array('d')``: 8 bytes a
    point, not a list of float objects at 32): the one per-node part of the leader's memory
    that is not a handful of totals (benchmarks/bench_job_scale.py)."""
    if not isinstance(series, Mapping):
        return None
    t = array("d", (float(x) for x in itertools.islice(series.get("t_s", []), MAX_SERIES_POINTS)))
    w = array("d", (float(x) for x in itertools.islice(series.get("power_w", []), len(t))))
    del t[len(w) :]
    return {"t_s": t, "power_w": w, "source": series.get("source")}
