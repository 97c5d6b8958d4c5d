"""Merging nodes' profiles that swept levers beyond the core clock (issue 33): a point at an
uncore setting and its as-found twin stay two points, each merged with the same cell of the
other nodes, and a lever counts as present on the merged node only where every node had it.

SYNTHETIC fixtures (made-up numbers, labelled ``synthetic: true``)."""

from __future__ import annotations

from typing import Any

from greenckpt.optimize.profile_data import profile_from_json
from greenckpt.profile.merge import compare_profiles, describe_point, merge_profiles
from tests.profile.test_export_merge import node_doc


def _with_uncore(host: str, found_w: float, uncore_w: float, per_core: bool) -> dict[str, Any]:
    doc = node_doc(host, (100e6, 200e6, 300e6), (found_w, 220.0, 180.0))
    twin = dict(doc["points"][0], uncore_khz=1_400_000, power_W=uncore_w)
    twin["runs"] = [dict(r, power_W=uncore_w) for r in twin["runs"]]
    doc["points"].append(twin)
    doc["levers"] = {"uncore frequency": True, "per-core split": per_core}
    return doc


def test_an_uncore_point_and_its_as_found_twin_merge_separately() -> None:
    merged = merge_profiles(
        [
            profile_from_json(_with_uncore("a", 200.0, 150.0, per_core=True)),
            profile_from_json(_with_uncore("b", 210.0, 160.0, per_core=False)),
        ]
    )
    writes = [p for p in merged.points if p.op == "write" and p.frequency == 2.1e9]
    assert sorted((p.uncore_khz or 0, p.power) for p in writes) == [
        (0, 205.0),
        (1_400_000, 155.0),
    ]
    assert merged.levers == {"per-core split": False, "uncore frequency": True}
    labels = {describe_point(p) for p in writes}
    assert len(labels) == 2 and any("uncore 1.40 GHz" in label for label in labels)


def test_the_comparison_names_the_lever_of_each_point() -> None:
    docs = [_with_uncore("a", 200.0, 150.0, True), _with_uncore("b", 210.0, 160.0, True)]
    table = compare_profiles([profile_from_json(d) for d in docs]).to_dict()
    keyed = [p for p in table["points"] if p.get("uncore_khz") == 1_400_000]
    assert len(keyed) == 1 and keyed[0]["median_power_W"] == 155.0
