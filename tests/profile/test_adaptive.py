"""The adaptive mode on replayed recordings (the SYNTHETIC example grids and the two grids
recorded on the development VM): it must reach the full grid's decision while measuring a
fraction of it. Time here is the replay's accounting of recorded I/O seconds (deterministic),
not a wall-clock measurement."""

from __future__ import annotations

from pathlib import Path

import pytest

from greenckpt.optimize import plan
from greenckpt.optimize.profile_data import load_profile
from greenckpt.profile.adaptive import AdaptiveChooser, DecisionScenario, initial_cells
from greenckpt.profile.grid import CpuSetting
from greenckpt.profile.replay import ReplayMeasurer, spec_of
from greenckpt.profile.sweep import SweepContext, run_sweep
from tests.conftest import ROOT

EXAMPLES = ROOT / "examples" / "profiles"


def _decision(profile, scn):  # type: ignore[no-untyped-def]
    b = plan(profile, scn).best
    w, r = b.write, b.read
    return (w.setting_key, w.processes, r.setting_key, r.processes, w.codec)


@pytest.mark.parametrize(
    "name",
    [
        "synthetic-pcie-flash.json",
        "synthetic-nfs-1gbe.json",
        "recorded-vm-virtio-estimated.json",
        "recorded-vm-virtio-codecs-estimated.json",
    ],
)
@pytest.mark.parametrize("mtbf_h", [1.0, 24.0])
def test_adaptive_reaches_the_full_grids_decision_cheaply(
    tmp_path: Path, name: str, mtbf_h: float
) -> None:
    recorded = load_profile(EXAMPLES / name)
    spec = spec_of(recorded)
    ctx = SweepContext(machine=dict(recorded.machine), synthetic=recorded.synthetic)
    full_m = ReplayMeasurer(recorded)
    full = run_sweep(spec, full_m, tmp_path / "full.json", context=ctx)
    # a node whose computing draws 3x the most any I/O point drew (as in bench_adaptive.py)
    app = 3.0 * max(p.power for p in recorded.points)
    d = DecisionScenario(ckpt_size=64 * 2**30, rate=1 / (mtbf_h * 3600), app_power=app)
    m = ReplayMeasurer(recorded)
    got = run_sweep(spec, m, tmp_path / "a.json", context=ctx, chooser=AdaptiveChooser(spec, [d]))
    assert _decision(got, d.scenario(got)) == _decision(full, d.scenario(full))
    assert m.seconds <= 0.30 * full_m.seconds
    # The points the decision rests on were measured in full; first looks are single runs.
    best = plan(got, d.scenario(got)).best
    assert best.write.repetitions == spec.repetitions == best.read.repetitions
    assert {p.repetitions for p in got.points} == {1, spec.repetitions}
    assert got.sweep["mode"] == "adaptive" and got.sweep["quick"]
    assert set(got.sweep["done"]).isdisjoint(got.sweep["quick"])


def test_initial_design_spans_the_grid() -> None:
    recorded = load_profile(EXAMPLES / "synthetic-pcie-flash.json")
    cells = spec_of(recorded).cells()
    first = initial_cells(cells)
    top = CpuSetting.frequency(2.1e9)
    low = CpuSetting.frequency(0.8e9)
    assert {c.processes for c in first if c.setting == top} == set(recorded.process_counts)
    assert {c.processes for c in first if c.setting == low} == {1, 12, 48}
    assert {c.processes for c in first if c.setting.kind == "governor"} == {1, 48}
    assert len(first) == 8 + 3 + 2


@pytest.mark.parametrize(
    ("name", "looked_at"),
    [
        ("recorded-vm-virtio-estimated.json", {1, 6, 16}),
        ("recorded-vm-virtio-codecs-estimated.json", {1, 4, 8}),
    ],
)
def test_without_frequencies_the_one_row_is_sampled_not_swept(
    name: str, looked_at: set[int]
) -> None:
    """No cpufreq: one "as found" row per codec; its ends and middle are looked at first (a
    look at every count would alone cost a quarter of the full grid)."""
    recorded = load_profile(EXAMPLES / name)
    cells = spec_of(recorded).cells()
    first = initial_cells(cells)
    codecs = {c.codec for c in cells}
    assert len(first) == len(looked_at) * len(codecs)
    for codec in codecs:
        assert {c.processes for c in first if c.codec == codec} == looked_at


def test_an_adaptive_sweep_resumes_with_its_quick_cells(tmp_path: Path) -> None:
    recorded = load_profile(EXAMPLES / "synthetic-pcie-flash.json")
    spec = spec_of(recorded)
    ctx = SweepContext(machine=dict(recorded.machine), synthetic=True)
    d = DecisionScenario(ckpt_size=64 * 2**30, rate=1 / 3600, app_power=500.0)
    whole_m = ReplayMeasurer(recorded)
    whole = run_sweep(
        spec,
        whole_m,
        tmp_path / "w.json",
        context=ctx,
        chooser=AdaptiveChooser(spec, [d]),
    )

    class Stop(ReplayMeasurer):
        def run(self, op, cell):  # type: ignore[no-untyped-def]
            if self.runs >= 30:
                raise KeyboardInterrupt
            return super().run(op, cell)

    out = tmp_path / "a.json"
    with pytest.raises(KeyboardInterrupt):
        run_sweep(spec, Stop(recorded), out, context=ctx, chooser=AdaptiveChooser(spec, [d]))
    partial = load_profile(out)
    assert partial.status == "partial" and partial.sweep["quick"]
    m = ReplayMeasurer(recorded)
    resumed = run_sweep(
        spec, m, out, context=ctx, resume=partial, chooser=AdaptiveChooser(spec, [d])
    )
    assert _decision(resumed, d.scenario(resumed)) == _decision(whole, d.scenario(whole))
    assert m.runs < whole_m.runs  # the finished cells were not measured again
