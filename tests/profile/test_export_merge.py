"""CSV export, merging several nodes' profiles, and the node comparison.

Every profile here is a SYNTHETIC test fixture (made-up numbers, labelled ``synthetic: true``),
some with power_source "measured"/"estimated" only to exercise how sources combine.
"""

from __future__ import annotations

import copy
import csv
import io
import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from greenckpt.optimize.profile_data import (
    Profile,
    ProfileError,
    Run,
    profile_from_json,
    profile_to_json,
)
from greenckpt.profile.export import CSV_COLUMNS, profile_to_csv
from greenckpt.profile.merge import (
    COMPARISON_COLUMNS,
    compare_profiles,
    describe_point,
    merge_profiles,
    point_key,
)

MiB = 1024 * 1024


def _point(
    op: str,
    thr: float,
    pw: float,
    *,
    f: float | None = None,
    gov: str | None = None,
    n: int = 1,
    source: str = "measured",
    reliable: bool = True,
) -> dict[str, Any]:
    return {
        "op": op,
        "frequency_hz": f,
        "governor": gov,
        "processes": n,
        "codec": None,
        "cstates": None,
        "throughput_Bps": thr,
        "power_W": pw,
        "power_source": source,
        "repetitions": 2,
        "throughput_spread_Bps": 1e6,
        "power_spread_W": 0.5,
        "size_bytes": 8 * MiB,
        "block_size_bytes": MiB,
        "layout": "file_per_process",
        "read_method": "o_direct" if op == "read" else None,
        "reliable": reliable,
        "runs": [
            {"throughput_Bps": thr, "power_W": pw, "seconds": 1.0},
            {"throughput_Bps": thr, "power_W": pw, "seconds": 1.1},
        ],
    }


def node_doc(
    host: str, thr: tuple[float, float, float], pw: tuple[float, float, float]
) -> dict[str, Any]:
    """A SYNTHETIC node profile: write at 2.1 GHz, write under ondemand, read as found."""
    return {
        "format": "greenckpt-profile",
        "format_version": 2,
        "synthetic": True,
        "note": "SYNTHETIC test fixture",
        "machine": {"hostname": host, "cores": 4, "cpu_model": "test cpu"},
        "storage": {"key": "ext4:vda", "path": f"/scratch/{host}"},
        "meters": ["rapl"],
        "power_domains": ["package-0"],
        "idle_power": {"value_W": 100.0, "source": "measured"},
        "created": "2026-01-01T00:00:00+00:00",
        "tool": "greenckpt 0.1.0",
        "sweep": {"sizes": [8 * MiB]},
        "points": [
            _point("write", thr[0], pw[0], f=2.1e9),
            _point("write", thr[1], pw[1], gov="ondemand", n=2),
            _point("read", thr[2], pw[2]),
        ],
    }


def three_nodes() -> list[dict[str, Any]]:
    return [
        node_doc("a", (100e6, 200e6, 300e6), (200.0, 220.0, 180.0)),
        node_doc("b", (120e6, 190e6, 310e6), (210.0, 230.0, 185.0)),
        node_doc("c", (90e6, 210e6, 290e6), (250.0, 225.0, 175.0)),
    ]


def profiles(docs: list[dict[str, Any]]) -> list[Profile]:
    return [profile_from_json(d) for d in docs]


# --------------------------------------------------------------------------- CSV


def test_csv_columns_and_values() -> None:
    prof = profile_from_json(three_nodes()[0])
    out = io.StringIO(newline="")
    assert profile_to_csv(prof, out) == 3
    text = out.getvalue()
    assert text.splitlines()[0] == ",".join(CSV_COLUMNS)  # header first, no comment lines
    rows = list(csv.DictReader(io.StringIO(text)))
    assert len(rows) == 3
    w, g, r = rows
    assert w["op"] == "write" and w["setting"] == "2100000000" and w["setting_label"] == "2.10 GHz"
    assert float(w["frequency_hz"]) == 2.1e9 and w["governor"] == ""
    assert w["processes"] == "1" and w["codec"] == "" and w["cstates"] == ""
    assert w["size_bytes"] == str(8 * MiB) and w["block_size_bytes"] == str(MiB)
    assert w["layout"] == "file_per_process" and w["read_method"] == ""
    assert float(w["throughput_Bps"]) == 100e6 and float(w["throughput_spread_Bps"]) == 1e6
    assert float(w["power_W"]) == 200.0 and float(w["power_spread_W"]) == 0.5
    assert w["power_source"] == "measured"
    assert float(w["energy_per_GB_J"]) == pytest.approx(200.0 / 100e6 * 1e9)
    assert w["repetitions"] == "2" and w["reliable"] == "true"
    assert w["synthetic"] == "true"  # the fixture profile is synthetic: every row says so
    assert g["setting"] == "governor:ondemand" and g["governor"] == "ondemand"
    assert g["frequency_hz"] == "" and g["processes"] == "2"
    assert r["setting"] == "uncontrolled" and r["setting_label"] == "as found"
    assert r["read_method"] == "o_direct"
    # Every value round-trips exactly.
    for row, p in zip(rows, prof.points, strict=True):
        assert float(row["throughput_Bps"]) == p.throughput
        assert float(row["power_W"]) == p.power


def test_csv_to_path_and_synthetic_false(tmp_path: Path) -> None:
    prof = profile_from_json(three_nodes()[1])
    # Test-only object: the same fixture with the flag cleared, to see the column say "false".
    unflagged = replace(prof, synthetic=False, points=(replace(prof.points[0], cstates=False),))
    path = tmp_path / "p.csv"
    assert profile_to_csv(unflagged, path) == 1
    (row,) = list(csv.DictReader(path.open(encoding="utf-8", newline="")))
    assert row["synthetic"] == "false" and row["cstates"] == "false"


def test_csv_synthetic_point_is_always_marked() -> None:
    doc = three_nodes()[0]
    doc["points"][0]["power_source"] = "synthetic"
    prof = replace(profile_from_json(doc), synthetic=False)  # even if the flag were lost
    rows = list(csv.DictReader(io.StringIO(_csv(prof))))
    assert [r["synthetic"] for r in rows] == ["true", "false", "false"]


def _csv(prof: Profile) -> str:
    out = io.StringIO(newline="")
    profile_to_csv(prof, out)
    return out.getvalue()


# --------------------------------------------------------------------------- merge


def test_merge_three_nodes_medians_and_spreads() -> None:
    merged = merge_profiles(profiles(three_nodes()))
    assert len(merged.points) == 3
    w, g, r = merged.points
    assert (w.throughput, w.throughput_spread) == (100e6, 30e6)  # median of 100/120/90
    assert (w.power, w.power_spread) == (210.0, 50.0)  # median of 200/210/250
    assert (g.throughput, g.throughput_spread) == (200e6, 20e6)
    assert (g.power, g.power_spread) == (225.0, 10.0)
    assert (r.throughput, r.throughput_spread) == (300e6, 20e6)
    assert (r.power, r.power_spread) == (180.0, 10.0)
    assert w.repetitions == 6 and len(w.runs) == 6
    assert w.runs[0] == Run(100e6, 200.0, 1.0) and w.runs[-1] == Run(90e6, 250.0, 1.1)
    assert [point_key(p) for p in merged.points] == [
        point_key(p) for p in profile_from_json(three_nodes()[0]).points
    ]
    assert r.read_method == "o_direct" and w.read_method is None
    assert all(p.reliable and p.power_source == "measured" for p in merged.points)
    assert merged.machine["nodes"] == ["a", "b", "c"] and merged.machine["merged_from"] == 3
    assert merged.machine["cores"] == 4 and merged.machine["cpu_model"] == "test cpu"
    assert "hostname" not in merged.machine
    assert merged.storage == {"key": "ext4:vda"}  # paths differ, the key is common
    assert merged.meters == ("rapl",) and merged.power_domains == ("package-0",)
    assert merged.idle_power == 100.0 and merged.idle_power_spread == 0.0
    assert merged.status == "complete" and merged.synthetic
    assert merged.sweep == {"sizes": [8 * MiB]}
    assert "a, b, c" in merged.note
    # The merged profile is a valid file.
    again = profile_from_json(json.loads(json.dumps(profile_to_json(merged))))
    assert again == merged


def test_merge_sources_reliability_status_and_names() -> None:
    docs = three_nodes()
    docs[1]["points"][0]["power_source"] = "estimated"
    docs[2]["points"][1]["reliable"] = False
    docs[2]["points"][2]["power_source"] = "synthetic"
    docs[0]["status"] = "partial"
    del docs[0]["machine"]["hostname"]
    merged = merge_profiles(profiles(docs))
    w, g, r = merged.points
    assert w.power_source == "estimated" and w.reliable
    assert g.power_source == "measured" and not g.reliable
    assert r.power_source == "synthetic"
    assert merged.status == "partial"
    assert merged.machine["nodes"] == ["node0", "b", "c"]
    named = merge_profiles(profiles(docs[:2]), names=["x", "y"])
    assert named.machine["nodes"] == ["x", "y"] and named.machine["merged_from"] == 2
    assert named.points[0].throughput == 110e6  # two nodes: the mean of both


def _one_line(exc: pytest.ExceptionInfo[ProfileError]) -> str:
    message = str(exc.value)
    assert "\n" not in message
    return message


def test_merge_refuses_fewer_than_two() -> None:
    with pytest.raises(ProfileError, match="at least 2 profiles, got 1") as exc:
        merge_profiles(profiles(three_nodes()[:1]))
    _one_line(exc)
    with pytest.raises(ProfileError, match="got 0"):
        merge_profiles([])


def test_merge_refuses_different_storage() -> None:
    docs = three_nodes()
    docs[2]["storage"]["key"] = "xfs:sdb"
    with pytest.raises(ProfileError) as exc:
        merge_profiles(profiles(docs))
    msg = _one_line(exc)
    assert msg.startswith("storage keys differ: a has 'ext4:vda', c has 'xfs:sdb'")


def test_merge_refuses_different_power_domains() -> None:
    docs = three_nodes()
    docs[1]["power_domains"] = ["package-0", "dram"]
    with pytest.raises(ProfileError) as exc:
        merge_profiles(profiles(docs))
    msg = _one_line(exc)
    assert msg.startswith("power domains differ: a has ['package-0'], b has ['package-0', 'dram']")


def test_merge_refuses_different_meters() -> None:
    docs = three_nodes()
    docs[2]["meters"] = ["ipmi"]
    with pytest.raises(ProfileError) as exc:
        merge_profiles(profiles(docs))
    msg = _one_line(exc)
    assert msg.startswith("power sources differ: a used meters ['rapl'], c used ['ipmi']")


def test_merge_refuses_missing_point() -> None:
    docs = three_nodes()
    del docs[1]["points"][2]
    with pytest.raises(ProfileError) as exc:
        merge_profiles(profiles(docs))
    msg = _one_line(exc)
    assert msg.startswith(
        "b has no point read as found n=1 S=8 MiB block=1 MiB file_per_process (measured on a)"
    )
    # A point only one node has is missing on the others, too.
    docs = three_nodes()
    docs[2]["points"].append(_point("read", 1e8, 100.0, n=4))
    with pytest.raises(
        ProfileError, match=r"^a has no point read as found n=4 .*\(measured on c\)"
    ):
        merge_profiles(profiles(docs))


def test_merge_refuses_duplicate_names_and_points() -> None:
    docs = three_nodes()
    docs[1]["machine"]["hostname"] = "a"
    with pytest.raises(ProfileError, match="node name 'a' appears twice") as exc:
        merge_profiles(profiles(docs))
    _one_line(exc)
    with pytest.raises(ProfileError, match="got 2 names for 3 profiles"):
        merge_profiles(profiles(three_nodes()), names=["x", "y"])
    docs = three_nodes()
    docs[0]["points"].append(copy.deepcopy(docs[0]["points"][0]))
    with pytest.raises(ProfileError, match="measured twice"):  # the loader refuses it first
        profiles(docs)
    nodes = profiles(three_nodes())
    nodes[0] = replace(nodes[0], points=(*nodes[0].points, nodes[0].points[0]))
    with pytest.raises(ProfileError, match=r"a has two points write 2\.10 GHz n=1"):
        merge_profiles(nodes)


# --------------------------------------------------------------------------- compare


def outlier_docs() -> list[dict[str, Any]]:
    """Four SYNTHETIC nodes; d is 30 % slow everywhere, c draws 15 % more power on reads."""
    docs = [
        node_doc("a", (100e6, 200e6, 300e6), (200.0, 220.0, 180.0)),
        node_doc("b", (102e6, 198e6, 303e6), (202.0, 221.0, 181.0)),
        node_doc("c", (99e6, 201e6, 298e6), (199.0, 219.0, 208.0)),
        node_doc("d", (70e6, 140e6, 210e6), (201.0, 222.0, 180.0)),
    ]
    return docs


def test_compare_flags_the_outlier_nodes_only() -> None:
    cmp = compare_profiles(profiles(outlier_docs()))
    assert cmp.names == ("a", "b", "c", "d") and cmp.threshold == 0.10
    assert cmp.outlier_nodes == ("c", "d")
    flagged = {(pc.label.split()[0], pc.key[1], nf.node, nf.flag) for pc, nf in cmp.outliers}
    assert flagged == {
        ("write", "2100000000", "d", "slow"),
        ("write", "governor:ondemand", "d", "slow"),
        ("read", "uncontrolled", "d", "slow"),
        ("read", "uncontrolled", "c", "power-hungry"),
    }
    read = cmp.points[2]
    by_node = {nf.node: nf for nf in read.nodes}
    assert read.median_throughput == pytest.approx((298e6 + 300e6) / 2)
    assert by_node["d"].throughput_rel == pytest.approx(210e6 / 299e6)
    assert by_node["c"].power_rel == pytest.approx(208.0 / 180.5)
    assert not by_node["a"].outlier and not by_node["b"].outlier
    summary = {s.node: s for s in cmp.summary()}
    assert summary["d"].outlier_points == 3 and summary["a"].outlier_points == 0
    assert summary["d"].min_throughput_rel < 0.75
    assert cmp.missing == ()


def test_compare_three_nodes_single_outlier() -> None:
    docs = [
        node_doc("a", (100e6, 200e6, 300e6), (200.0, 220.0, 180.0)),
        node_doc("b", (100e6, 200e6, 300e6), (201.0, 221.0, 181.0)),
        node_doc("z", (100e6, 200e6, 300e6), (400.0, 440.0, 360.0)),
    ]
    cmp = compare_profiles(profiles(docs))
    assert cmp.outlier_nodes == ("z",)
    assert all(nf.flag == "power-hungry" for _, nf in cmp.outliers)


def test_compare_rows_and_dict() -> None:
    cmp = compare_profiles(profiles(outlier_docs()), names=["n1", "n2", "n3", "n4"])
    rows = cmp.rows()
    assert len(rows) == 12 and all(len(r) == len(COMPARISON_COLUMNS) for r in rows)
    label = "write 2.10 GHz n=1 S=8 MiB block=1 MiB file_per_process"
    assert rows[3] == (label, "n4", "70.0", "0.704", "201.0", "1.002", "slow")
    only = cmp.rows(only_outliers=True)
    assert [r[1] for r in only] == ["n4", "n4", "n3", "n4"]
    doc = json.loads(json.dumps(cmp.to_dict()))
    assert doc["outlier_nodes"] == ["n3", "n4"] and doc["threshold"] == 0.10
    assert doc["points"][0]["setting"] == "2100000000"
    assert doc["points"][0]["nodes"][3]["throughput_outlier"] is True
    assert {s["node"] for s in doc["summary"]} == {"n1", "n2", "n3", "n4"}


def test_compare_threshold_and_missing_points() -> None:
    docs = outlier_docs()
    cmp = compare_profiles(profiles(docs), threshold=0.5)
    assert cmp.outliers == ()
    del docs[0]["points"][1]
    cmp = compare_profiles(profiles(docs))
    assert len(cmp.points) == 2
    assert cmp.missing == (("a", describe_point(profile_from_json(docs[1]).points[1])),)
    with pytest.raises(ProfileError, match="at least 2 profiles"):
        compare_profiles(profiles(docs[:1]))
    with pytest.raises(ProfileError, match="threshold must be > 0"):
        compare_profiles(profiles(docs), threshold=0)
