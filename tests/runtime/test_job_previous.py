"""The job report per node (issue 30 items 7 and 8): a node whose socket heard no
announcement says so in a note; the work a node's run in an earlier job lost (its own report's
``previous_lost``) is in its row, a note and the text, never in the job totals; the phase
table has a bytes column. Every figure here is SYNTHETIC (made up by hand)."""

from __future__ import annotations

from typing import Any

from greenckpt.report.job_text import render_job_text
from greenckpt.runtime.job import NodeView
from greenckpt.runtime.job_bounds import node_summary
from greenckpt.runtime.job_report import JobReport, silent_nodes
from greenckpt.runtime.notify import NotifyServer

LOST = {
    "source": "previous job /jobs/1/job-report.json, node 0",
    "report": "/jobs/1/nodes/node0/report.json",
    "seconds": 12.5,
    "from_s": 20.0,
    "to_s": 32.5,
    "energy_j": 1250.0,
    "energy_source": "measured",
    "energy_basis": "the earlier run's phase records over the span",
    "ended": "cancelled",
    "restart_level": 1,
    "checkpoint_level": 1,
    "read_previous_checkpoint": True,
    "note": "the earlier run was cancelled (a signal); ...",
}


def _summary(heard: int | None, lost: dict[str, Any] | None = None) -> dict[str, Any]:
    by_kind: dict[str, Any] = {
        "compute": {"count": 2, "failed": 0, "seconds": 8.0, "energy_j": 800.0},
        "restart": {"count": 1, "failed": 0, "seconds": 1.0, "energy_j": 100.0},
    }
    if heard:  # a node that heard its restart: 3 MiB restored; one size unknown
        by_kind["restart"].update(bytes=3 << 20, bytes_unknown=0)
    else:
        by_kind["restart"].update(bytes=0, bytes_unknown=1)
    summary = {
        "power": {"source": "measured"},
        "total": {"seconds": 10.0, "energy_j": 1000.0, "source": "measured"},
        "useful_compute_s": 8.0,
        "by_kind": by_kind,
        "records": [{}, {}, {}],
        "notes": [],
        "announcements": heard,
        "previous_lost": lost,
    }
    return node_summary(summary)  # what the leader keeps of it


def _report(*summaries: dict[str, Any]) -> JobReport:
    views = [
        NodeView(k, state="finished", power_source="measured", summary=s)
        for k, s in enumerate(summaries)
    ]
    return JobReport.build(
        job_id="j",
        launcher="local:2",
        command=["app"],
        nodes=views,
        phases=[],
        started_unix=0.0,
        ended_unix=10.0,
    )


def test_a_node_that_heard_nothing_gets_a_note_and_others_do_not() -> None:
    report = _report(_summary(4, LOST), _summary(0))
    assert silent_nodes(report.nodes) == [1]
    notes = report.doc["notes"]
    assert any(n.startswith("node 1 heard no announcement") for n in notes)
    assert not any(n.startswith("node 0 heard") for n in notes)
    assert [r["announcements"] for r in report.nodes] == [4, 0]
    older = _report(_summary(None))  # an agent that did not count: nothing is said
    assert silent_nodes(older.nodes) == []


def test_the_previous_jobs_lost_work_is_per_node_and_not_in_the_totals() -> None:
    report = _report(_summary(4, LOST), _summary(0))
    rows = report.nodes
    assert rows[0]["previous_lost"]["source"] == LOST["source"] and rows[1]["previous_lost"] is None
    assert report.doc["total"]["energy_j"] == 2000.0  # the two nodes own: the 1250 J not added
    text = render_job_text(report)
    assert "work lost by the previous job (per node, from its reports; not in the totals):" in text
    assert "  node 0: lost in the previous run 12.500 s, 1250.0 J (measured" in text
    assert "source: previous job /jobs/1/job-report.json, node 0" in text
    assert any(
        n.startswith("node 0: 12.500 s and 1250.0 J (measured) of work lost")
        for n in report.doc["notes"]
    )


def test_the_phase_table_has_a_bytes_column() -> None:
    text = render_job_text(_report(_summary(4), _summary(0)))
    lines = text.splitlines()
    header = next(ln for ln in lines if ln.startswith("phase "))
    assert header.split()[:4] == ["phase", "count", "nodes", "bytes"]
    restart = next(ln for ln in lines if ln.startswith("restart "))
    assert ">= 3 MiB (1 unknown)" in restart  # node 0's 3 MiB, node 1's size unknown
    compute = next(ln for ln in lines if ln.startswith("compute "))
    assert "MiB" not in compute and "unknown" not in compute


def test_the_socket_counts_what_it_heard(tmp_path: Any) -> None:
    class Target:
        def begin(self, *args: Any, **kwargs: Any) -> None:
            return None

        def end(self, *args: Any, **kwargs: Any) -> None:
            return None

    server = NotifyServer(Target(), tmp_path / "s.sock", front="python")
    assert server.heard == 0
    server.handle('{"v": 1, "event": "ping"}')
    server.handle("not json")  # malformed: not an announcement
    server.handle('{"v": 1, "event": "begin", "kind": "compute"}')
    assert server.heard == 2
