"""The modelled job EPE from the nodes' own (issue 15 item 2): the sum over the finished
nodes, with the source of the least certain; none when a finished node has none, the note
naming which nodes and why (grouped, as ranges); a died node is left out and said so."""

from __future__ import annotations

from typing import Any

import pytest

from greenckpt.runtime.job import NodeView
from greenckpt.runtime.job_report import JobReport, node_list


def _view(node: int, modelled: dict[str, Any] | None, state: str = "finished") -> NodeView:
    summary: dict[str, Any] = {
        "power": {"source": "measured"},
        "total": {"seconds": 10.0, "energy_j": 1000.0, "source": "measured"},
        "useful_compute_s": 8.0,
        "records": 3,
    }
    if modelled is not None:
        summary["modelled_epe"] = modelled
    progress = {"t_s": 5.0, "records": 1, "energy_j": 400.0, "by_kind": {}}
    return NodeView(
        node,
        state=state,  # type: ignore[arg-type]
        power_source="measured",
        summary=summary if state == "finished" else None,
        progress=progress if state == "died" else None,
        reason="its connection closed" if state == "died" else "",
    )


def _epe(*views: NodeView) -> dict[str, Any]:
    report = JobReport.build(
        job_id="m",
        launcher="test",
        command=["app"],
        nodes=views,
        phases=[],
        started_unix=0.0,
        ended_unix=10.0,
    )
    return dict(report.doc["epe"])


def _m(w: float | None, source: str | None = "measured", why: str = "") -> dict[str, Any]:
    return {"epe_w": w, "source": source, "derivation": why or f"modelled EPE {w} W ..."}


def test_the_job_figure_is_the_sum_of_the_finished_nodes() -> None:
    epe = _epe(_view(0, _m(100.0)), _view(1, _m(120.0, "estimated")))
    assert epe["modelled_w"] == pytest.approx(220.0)
    assert epe["modelled_source"] == "estimated"  # the least certain of the nodes'
    assert epe["observed_w"] == pytest.approx(2000.0 / 8.0)
    assert epe["observed_vs_modelled_pct"] == pytest.approx(100.0 * (250.0 - 220.0) / 220.0)
    assert "sum of 2 finished node(s)' modelled EPEs" in epe["modelled_note"]


def test_a_finished_node_without_a_figure_leaves_none_and_says_which_and_why() -> None:
    missing = "no modelled EPE: the model needs --app-power to say what this run's interval"
    views = [_view(k, _m(None, None, missing)) for k in (0, 1, 2)]
    epe = _epe(*views, _view(3, _m(90.0)), _view(4, None))
    assert epe["modelled_w"] is None and epe["modelled_source"] is None
    note = epe["modelled_note"]
    assert note.startswith("no modelled job EPE: node(s) 0-2: the model needs --app-power")
    assert "node(s) 4: its final summary carries no modelled EPE" in note


def test_a_died_node_is_left_out_and_named() -> None:
    epe = _epe(_view(0, _m(100.0)), _view(1, None, state="died"))
    assert epe["modelled_w"] == pytest.approx(100.0)
    assert "finished nodes only, not node(s) 1" in epe["modelled_note"]


def test_node_lists_are_ranges_and_bounded() -> None:
    assert node_list([7, 0, 1, 2, 3]) == "0-3, 7"
    many = list(range(0, 10_000, 2))
    text = node_list(many)
    assert text.endswith("... (5000 in all)") and text.count(",") == 10
