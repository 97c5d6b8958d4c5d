"""The job report says which levers beyond the core clock each job phase applied, from which
source, and how many nodes lost one (put back, the phase went on): from the phases the agents
send (their settings cut to source, levers and failure notes) to the JSON and the text. The
records are SYNTHETIC."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from greenckpt.report.job_text import render_job_text
from greenckpt.runtime.agent import _progress_phase
from greenckpt.runtime.job import NodeView
from greenckpt.runtime.job_phase import MAX_LEVER_VALUES, JobPhase
from greenckpt.runtime.job_report import JobReport, load_job_report
from greenckpt.runtime.records import PhaseRecord
from greenckpt.runtime.settings import Settings

FAILED = "could not apply the power limit (EIO): power limit put back as found; the phase goes on"


def _record(node: int, *, failed: bool = False) -> PhaseRecord:
    settings = Settings(
        io_processes=1,
        source="profile lookup",
        frequency_hz=2_000_000_000,
        waiting_frequency_hz=1_200_000_000,
        uncore_khz=1_000_000,
        power_limit_w=None if failed else 120.0,
        notes=("the profile is SYNTHETIC", *((FAILED,) if failed else ())),
    )
    return PhaseRecord(
        kind="checkpoint",
        index=node,
        start_s=1.0,
        end_s=2.0,
        energy_j={},
        sources={},
        node_energy_j=10.0,
        power_source="estimated",
        level=1,
        settings=settings,
    )


def _view(node: int) -> NodeView:
    summary: dict[str, Any] = {
        "power": {"source": "estimated", "meters": ["estimator"]},
        "total": {"seconds": 4.0, "energy_j": 40.0, "source": "estimated"},
        "useful_compute_s": 3.0,
        "synthetic": True,
        "records": 1,
    }
    return NodeView(node, state="finished", host=f"h{node}", power_source="estimated",
                    summary=summary, t0_unix=1000.0)  # fmt: skip


def _report(phase: JobPhase) -> JobReport:
    return JobReport.build(
        job_id="levers-1",
        launcher="test",
        command=["app"],
        nodes=[_view(k) for k in range(3)],
        phases=[phase],
        started_unix=1000.0,
        ended_unix=1004.0,
    )


def test_a_job_phase_shows_the_levers_its_nodes_applied_and_the_failures(tmp_path: Path) -> None:
    phase = JobPhase("checkpoint", 0)
    for node in range(3):  # node 2 lost its power limit
        phase.add(_progress_phase(_record(node, failed=node == 2)), 1000.0)
    doc = phase.to_dict(1000.0)
    assert doc["levers"] == {
        "per-core split": ["I/O cores 2.00 GHz, waiting cores 1.20 GHz (profile lookup)"],
        "power limit": ["package 120 W (profile lookup)"],
        "uncore frequency": ["1.00 GHz (profile lookup)"],
    }
    assert doc["lever_failures"] == 1 and doc["lever_failure_notes"] == [FAILED]
    report = _report(phase)
    text = render_job_text(report)
    assert "levers applied beyond the CPU frequency and C-states (value (source)):" in text
    assert "  checkpoint  uncore frequency  1.00 GHz (profile lookup)" in text
    assert "levers that failed on 1 node phase(s)" in text and FAILED in text
    saved = load_job_report(report.write_json(tmp_path / "job-report.json"))
    assert saved.doc["phases"][0]["levers"] == doc["levers"]


def test_a_phase_without_levers_sends_no_settings_and_the_text_is_unchanged() -> None:
    plain = PhaseRecord("checkpoint", 0, 1.0, 2.0, {}, {}, 10.0, "estimated",
                        settings=Settings(io_processes=2, source="governor baseline powersave",
                                          governor="powersave"))  # fmt: skip
    sent = _progress_phase(plain)
    assert "settings" not in sent
    phase = JobPhase("checkpoint", 0)
    phase.add(sent, 1000.0)
    assert phase.to_dict(1000.0)["levers"] == {} and phase.lever_failures == 0
    assert "levers applied" not in render_job_text(_report(phase))


def test_the_values_kept_per_lever_are_bounded() -> None:
    phase = JobPhase("checkpoint", 0)
    for k in range(3 * MAX_LEVER_VALUES):
        settings = {"source": "fixed", "levers": {"uncore frequency": f"{k}"}}
        record = {"start_s": 0.0, "end_s": 1.0, "node_energy_j": 1.0, "settings": settings}
        phase.add(record, None)
    assert len(phase.levers["uncore frequency"]) == MAX_LEVER_VALUES
