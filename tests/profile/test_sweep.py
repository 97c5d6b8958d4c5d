"""Sweeps, resume and pre-flight checks against the SYNTHETIC node of ``fake_node.py``.

The real profiler code runs (NodeSettings on a fake sysfs tree, the real Sampler, the real
sweep loop and profile files); only the I/O engine and the meter are models, so every figure
the sweep records can be compared with the model exactly.
"""

from __future__ import annotations

import io
import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from greenckpt.optimize import Scenario, plan
from greenckpt.optimize.profile_data import Profile, ProfilePoint, load_profile
from greenckpt.platform.restore import NodeSettings
from greenckpt.platform.sampler import Sampler
from greenckpt.profile.grid import CpuSetting, SweepError, SweepSpec
from greenckpt.profile.measure import NodeMeasurer
from greenckpt.profile.power import choose_power_domains
from greenckpt.profile.preflight import default_settings, preflight
from greenckpt.profile.progress import Eta, LineProgress, format_eta
from greenckpt.profile.sweep import SweepContext, run_sweep
from tests.platform.fake_cpu import FakeSysfsRoot, build_tree, diff, snapshot
from tests.platform.fake_power import ManualClock
from tests.profile.fake_node import (
    IDLE_W,
    MODEL_RATIO,
    FakeIO,
    ModelMeter,
    model_power,
    model_throughput,
)

MiB = 1 << 20
GHZ = 1_000_000_000
FREQS = (1_200_000_000, 1_800_000_000, 2_600_000_000)
CTX = SweepContext(
    machine={"hostname": "fake", "cores": 4},
    storage={"key": "synthetic:test"},
    meters=("rapl",),
    synthetic=True,
    note="SYNTHETIC: fake node of the tests",
)


@pytest.fixture
def tree(tmp_path: Path) -> FakeSysfsRoot:
    return FakeSysfsRoot(build_tree("intel-acpi-cpufreq", tmp_path / "tree"))


def spec_for(path: Path, **kw: Any) -> SweepSpec:
    base: dict[str, Any] = {
        "path": str(path),
        "settings": (
            *(CpuSetting.frequency(f) for f in FREQS),
            CpuSetting.of_governor("performance"),
            CpuSetting.of_governor("powersave"),
        ),
        "processes": (1, 2, 4),
        "sizes": (64 * MiB,),
        "block_size": MiB,
        "repetitions": 3,
        "warmup": 1,
        "idle_seconds": 1.0,
    }
    base.update(kw)
    return SweepSpec(**base)


@contextmanager
def fake_measurer(
    tree: FakeSysfsRoot, spec: SweepSpec, tmp_path: Path, **io_kw: Any
) -> Iterator[tuple[NodeMeasurer, FakeIO]]:
    clock = ManualClock()
    meter = ModelMeter(clock)
    fio = FakeIO(tree, clock, meter, **io_kw)
    with (
        Sampler([meter], rate_hz=5, clock=clock) as sampler,
        NodeSettings(tree, state_file=tmp_path / "state.json", signals=()) as node,
    ):
        choice = choose_power_domains(sampler.domains, sampler.sources)
        yield NodeMeasurer(spec, sampler, choice, node, io=fio, sleep=clock.advance), fio


def _sweep(tree: FakeSysfsRoot, spec: SweepSpec, tmp_path: Path, out: Path, **kw: Any) -> Profile:
    with fake_measurer(tree, spec, tmp_path) as (m, _):
        return run_sweep(spec, m, out, context=CTX, **kw)


def _id(p: ProfilePoint) -> tuple[Any, ...]:
    return (p.op, p.setting_key, p.processes, p.cstates, p.size)


def _hz(p: ProfilePoint) -> float:
    if p.governor == "performance":
        return 2_601_000_000.0
    if p.governor == "powersave":
        return 1_200_000_000.0
    assert p.frequency is not None
    return p.frequency


def test_full_sweep_records_the_model_and_restores_the_node(
    tree: FakeSysfsRoot, tmp_path: Path
) -> None:
    before = snapshot(tree.path)
    spec = spec_for(tmp_path)
    out = tmp_path / "p.json"
    prof = _sweep(tree, spec, tmp_path, out)
    assert diff(before, snapshot(tree.path)) == []  # frequencies and governors put back
    assert prof.status == "complete"
    assert len(prof.points) == 5 * 3 * 2
    for p in prof.points:
        f = _hz(p)
        assert p.throughput == pytest.approx(model_throughput(p.op, f, p.processes), rel=1e-9)
        assert p.power == pytest.approx(model_power(p.op, f, p.processes), rel=1e-6)
        assert p.repetitions == 3 and len(p.runs) == 3
        assert p.power_source == "measured" and p.reliable
        assert p.size == 64 * MiB and p.block_size == MiB
    assert prof.idle_power == pytest.approx(IDLE_W, rel=1e-6)
    assert prof.power_domains == ("rapl/package-0",)
    loaded = load_profile(out)
    assert loaded.points == prof.points and loaded.status == "complete"
    assert loaded.sweep["done"] == [c.key for c in spec.cells()]


def test_codec_sweep_records_compressed_points_next_to_uncompressed_ones(
    tree: FakeSysfsRoot, tmp_path: Path
) -> None:
    """Each codec is a dimension of the grid: the same cells measured with and without it,
    the codec and the data kind reach the I/O engine, and the points record the model's
    logical throughput, power and compression ratio."""
    spec = spec_for(
        tmp_path,
        settings=tuple(CpuSetting.frequency(f) for f in FREQS[:2]),
        processes=(1, 4),
        codecs=(None, "zstd:3", "lz4"),
        data="field",
    )
    with fake_measurer(tree, spec, tmp_path) as (m, fio):
        prof = run_sweep(spec, m, tmp_path / "p.json", context=CTX)
    assert {c["codec"] for c in fio.calls} == {None, "zstd:3", "lz4"}
    assert {c["data"] for c in fio.calls} == {"field"}
    assert len(prof.points) == 2 * 2 * 3 * 2
    for p in prof.points:
        f = _hz(p)
        assert p.throughput == pytest.approx(model_throughput(p.op, f, p.processes, p.codec))
        assert p.power == pytest.approx(model_power(p.op, f, p.processes, p.codec), rel=1e-6)
        assert p.data == "field"
        if p.codec is None:
            assert p.compression_ratio is None
        else:
            assert p.compression_ratio == pytest.approx(MODEL_RATIO, rel=1e-6)
    loaded = load_profile(tmp_path / "p.json")
    assert loaded.points == prof.points
    assert SweepSpec.from_json(loaded.sweep["spec"]) == spec


def test_plan_on_a_codec_sweep_picks_the_models_best_codec(
    tree: FakeSysfsRoot, tmp_path: Path
) -> None:
    """With the codec as one more choice, the planner's pick is the brute-force optimum of the
    model over (frequency, processes, codec) — write and read sharing the codec."""
    spec = spec_for(
        tmp_path,
        settings=tuple(CpuSetting.frequency(f) for f in FREQS),
        processes=(1, 2, 4),
        codecs=(None, "zstd:3"),
        data="field",
    )
    prof = _sweep(tree, spec, tmp_path, tmp_path / "p.json")
    truth = Profile(
        points=tuple(
            ProfilePoint(
                op=p.op,
                processes=p.processes,
                throughput=model_throughput(p.op, _hz(p), p.processes, p.codec),
                power=model_power(p.op, _hz(p), p.processes, p.codec),
                power_source="synthetic",
                frequency=p.frequency,
                codec=p.codec,
            )
            for p in prof.points
        ),
        synthetic=True,
        machine={"cores": 4},
    )
    picked = set()
    # a small checkpoint of a frugal application vs a huge one of a power-hungry application:
    # in the model the codec pays only in the second (faster device-bound checkpoints)
    for size, app_power in ((64e9, 60.0), (640e9, 2000.0)):
        scn = Scenario(ckpt_size=size, rate=1 / 3600, app_power=app_power)
        got, want = plan(prof, scn).best, plan(truth, scn).best
        picked.add(want.write.codec)
        assert got.write.codec == got.read.codec
        for mine, model in ((got.write, want.write), (got.read, want.read)):
            assert (mine.codec, mine.setting_key, mine.processes) == (
                model.codec,
                model.setting_key,
                model.processes,
            )
        assert got.epe == pytest.approx(want.epe, rel=1e-6)
    assert picked == {None, "zstd:3"}  # the choice of codec really was exercised


def test_every_run_ran_at_the_cells_frequency(tree: FakeSysfsRoot, tmp_path: Path) -> None:
    spec = spec_for(tmp_path, settings=tuple(CpuSetting.frequency(f) for f in FREQS))
    with fake_measurer(tree, spec, tmp_path) as (m, fio):
        run_sweep(spec, m, tmp_path / "p.json", context=CTX)
    cells = spec.cells()
    per_cell = spec.runs_per_cell()
    assert len(fio.calls) == len(cells) * per_cell
    for i, call in enumerate(fio.calls):
        cell = cells[i // per_cell]
        assert call["f"] == cell.setting.hz and call["n"] == cell.processes
    assert [c["op"] for c in fio.calls[:per_cell]] == ["write", "read"] * 4


def test_plan_on_the_swept_profile_finds_the_models_optimum(
    tree: FakeSysfsRoot, tmp_path: Path
) -> None:
    prof = _sweep(tree, spec_for(tmp_path), tmp_path, tmp_path / "p.json")
    truth = Profile(
        points=tuple(
            ProfilePoint(
                op=p.op,
                processes=p.processes,
                throughput=model_throughput(p.op, _hz(p), p.processes),
                power=model_power(p.op, _hz(p), p.processes),
                power_source="synthetic",
                frequency=p.frequency,
                governor=p.governor,
            )
            for p in prof.points
        ),
        synthetic=True,
        machine={"cores": 4},
    )
    scn = Scenario(ckpt_size=64 * MiB * 100, rate=1 / 3600, app_power=120.0)
    got, want = plan(prof, scn).best, plan(truth, scn).best
    assert (got.write.setting_key, got.write.processes) == (
        want.write.setting_key,
        want.write.processes,
    )
    assert (got.read.setting_key, got.read.processes) == (
        want.read.setting_key,
        want.read.processes,
    )
    assert got.epe == pytest.approx(want.epe, rel=1e-6)
    names = {b.name: b for b in plan(prof, scn).baselines}
    assert "measured under the performance governor" in names["performance"].how


def test_killed_sweep_leaves_a_valid_partial_profile_and_resumes(
    tree: FakeSysfsRoot, tmp_path: Path
) -> None:
    spec = spec_for(tmp_path)
    full = _sweep(tree, spec, tmp_path, tmp_path / "full.json")
    before = snapshot(tree.path)
    out = tmp_path / "p.json"
    per_cell = spec.runs_per_cell()
    with (
        pytest.raises(KeyboardInterrupt),
        fake_measurer(tree, spec, tmp_path, fail_after=4 * per_cell + 3) as (m, _),
    ):
        run_sweep(spec, m, out, context=CTX)
    assert diff(before, snapshot(tree.path)) == []  # restored on the interrupt too
    partial = load_profile(out)
    assert partial.status == "partial"
    assert len(partial.sweep["done"]) == 4
    assert len(partial.points) == 4 * 2
    assert not list(tmp_path.glob(".p.json.*.tmp"))
    with fake_measurer(tree, spec, tmp_path) as (m, fio):
        resumed = run_sweep(spec, m, out, context=CTX, resume=partial)
    assert len(fio.calls) == (len(spec.cells()) - 4) * per_cell
    assert resumed.status == "complete"
    assert [_id(p) for p in resumed.points] == [_id(p) for p in full.points]
    for a, b in zip(resumed.points, full.points, strict=True):
        assert (a.throughput, a.power) == pytest.approx((b.throughput, b.power), rel=1e-9)
    assert resumed.idle_power == partial.idle_power  # not measured again


def test_the_file_is_valid_at_every_moment(tree: FakeSysfsRoot, tmp_path: Path) -> None:
    out = tmp_path / "p.json"
    seen: list[str] = []

    def check(_call: Any) -> None:
        if out.exists():
            seen.append(load_profile(out).status)

    spec = spec_for(tmp_path, processes=(1, 2), settings=(CpuSetting.frequency(FREQS[0]),))
    with fake_measurer(tree, spec, tmp_path, on_call=check) as (m, _):
        run_sweep(spec, m, out, context=CTX)
    assert seen and set(seen) == {"partial"}
    assert load_profile(out).status == "complete"


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"processes": (1, 2)}, "processes"),
        ({"repetitions": 5}, "repetitions"),
        ({"sizes": (32 * MiB,)}, "sizes"),
    ],
)
def test_resume_refuses_a_different_sweep(
    tree: FakeSysfsRoot, tmp_path: Path, change: dict[str, Any], field: str
) -> None:
    spec = spec_for(tmp_path, settings=(CpuSetting.frequency(FREQS[0]),))
    prof = _sweep(tree, spec, tmp_path, tmp_path / "p.json")
    other = spec_for(tmp_path, settings=(CpuSetting.frequency(FREQS[0]),), **change)
    with pytest.raises(SweepError, match=f"differs in {field}"):
        _sweep(tree, other, tmp_path, tmp_path / "q.json", resume=prof)


def test_resume_refuses_another_machine(tree: FakeSysfsRoot, tmp_path: Path) -> None:
    spec = spec_for(tmp_path, settings=(CpuSetting.frequency(FREQS[0]),))
    prof = _sweep(tree, spec, tmp_path, tmp_path / "p.json")
    elsewhere = SweepContext(machine={"hostname": "other"}, storage={"key": "synthetic:test"})
    with (
        fake_measurer(tree, spec, tmp_path) as (m, _),
        pytest.raises(SweepError, match="measured on host 'fake'"),
    ):
        run_sweep(spec, m, tmp_path / "q.json", context=elsewhere, resume=prof)


def test_cstates_off_cells_disable_and_restore(tree: FakeSysfsRoot, tmp_path: Path) -> None:
    before = snapshot(tree.path)
    spec = spec_for(
        tmp_path,
        settings=(CpuSetting.frequency(FREQS[0]),),
        processes=(1,),
        cstates=(True, False),
    )
    prof = _sweep(tree, spec, tmp_path, tmp_path / "p.json")
    assert {p.cstates for p in prof.points} == {True, False}
    disabled = [v for path, v in tree.log if path.endswith("/disable") and v == "1"]
    assert disabled  # C-states were switched off for the "off" cells
    assert diff(before, snapshot(tree.path)) == []


def test_uncontrolled_node_profiles_without_frequency_control(tmp_path: Path) -> None:
    vm = FakeSysfsRoot(build_tree("vm-no-cpufreq", tmp_path / "tree"))
    assert default_settings(vm) == (CpuSetting.uncontrolled(),)
    spec = spec_for(tmp_path, settings=default_settings(vm), idle_seconds=0.0)
    clock = ManualClock()
    meter = ModelMeter(clock)
    # The "frequency" the fake engine reads: the VM has none, so give it a fixed one.
    fio = FakeIO(vm, clock, meter)
    fio.frequency = lambda: 2.0e9  # type: ignore[method-assign]
    with Sampler([meter], rate_hz=5, clock=clock) as sampler:
        choice = choose_power_domains(sampler.domains, sampler.sources)
        m = NodeMeasurer(spec, sampler, choice, None, io=fio, sleep=clock.advance)
        prof = run_sweep(spec, m, tmp_path / "p.json", context=CTX)
    assert all(p.uncontrolled and p.setting_label == "as found" for p in prof.points)
    assert prof.idle_power is None
    result = plan(prof, Scenario(ckpt_size=1e9, rate=1 / 3600, app_power=100.0))
    assert all(b.choice is None and "not controlled" in b.how for b in result.baselines)


# ------------------------------------------------------------------------------ pre-flight


def test_preflight_accepts_a_valid_sweep(tree: FakeSysfsRoot, tmp_path: Path) -> None:
    preflight(spec_for(tmp_path), tree)


@pytest.mark.parametrize(
    ("kw", "message"),
    [
        ({"processes": ()}, "process list is empty"),
        ({"settings": (CpuSetting.frequency(1.25 * GHZ),)}, "not offered by policy0: nearest"),
        ({"settings": (CpuSetting.of_governor("conservative"),)}, None),
        ({"repetitions": 0}, "repetitions must be >= 1"),
        ({"sizes": (MiB,), "processes": (4,)}, "cannot give each of 4 processes"),
        ({"codecs": ("gzip",)}, "unknown codec 'gzip'"),
        ({"codecs": ("zstd",)}, "codec 'zstd' is not in canonical form: write 'zstd:3'"),
        ({"codecs": (None, "lz4", "lz4")}, "a codec is listed twice"),
        ({"codecs": ()}, "the codec list is empty"),
        ({"codecs": ("lz4",), "layout": "shared_file"}, "codecs need --layout file_per_process"),
        ({"data": "zeros"}, "data must be one of random, field"),
    ],
)
def test_preflight_refuses_bad_sweeps_in_one_line(
    tree: FakeSysfsRoot, tmp_path: Path, kw: dict[str, Any], message: str | None
) -> None:
    spec = spec_for(tmp_path, **kw)
    if message is None:
        preflight(spec, tree)  # offered by the tree: accepted
        return
    with pytest.raises(SweepError, match=message) as info:
        preflight(spec, tree)
    assert "\n" not in str(info.value)


def test_preflight_refuses_frequencies_without_cpufreq(tmp_path: Path) -> None:
    vm = FakeSysfsRoot(build_tree("vm-no-cpufreq", tmp_path / "tree"))
    with pytest.raises(SweepError, match="cannot be controlled on this node"):
        preflight(spec_for(tmp_path), vm)


def test_preflight_refuses_a_missing_or_full_directory(
    tree: FakeSysfsRoot, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with pytest.raises(SweepError, match="does not exist"):
        preflight(spec_for(tmp_path / "nope"), tree)
    (tmp_path / "file").write_text("x")
    with pytest.raises(SweepError, match="not a directory"):
        preflight(spec_for(tmp_path / "file"), tree)

    class Usage:
        free = 10 * MiB

    monkeypatch.setattr("shutil.disk_usage", lambda _p: Usage())
    with pytest.raises(SweepError, match="has 10 MiB free; the sweep writes"):
        preflight(spec_for(tmp_path), tree)


def test_preflight_refuses_a_read_only_cpufreq_tree(
    tree: FakeSysfsRoot, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As a user without root sees sysfs: the governor file is not writable."""
    real_access = os.access

    def access(path: Any, mode: int) -> bool:
        if str(path).endswith("scaling_governor"):
            return False
        return real_access(path, mode)

    monkeypatch.setattr("greenckpt.profile.preflight.os.access", access)
    with pytest.raises(SweepError, match="scaling_governor is not writable"):
        preflight(spec_for(tmp_path), tree)


def test_default_settings_of_a_cpufreq_node(tree: FakeSysfsRoot) -> None:
    settings = default_settings(tree)
    freqs = [s.hz for s in settings if s.kind == "frequency"]
    govs = [s.governor for s in settings if s.kind == "governor"]
    assert len(freqs) == 16 and min(freqs) == 1_200_000_000  # type: ignore[type-var]
    assert govs == ["performance", "powersave", "ondemand", "schedutil", "conservative"]


# ------------------------------------------------------------------------------ progress


def test_eta_is_bytes_left_at_the_observed_rate() -> None:
    eta = Eta(total_bytes=1000)
    assert format_eta(eta.seconds_left) == "?"
    eta.skip(200)  # resumed: no time
    eta.add(200, 10.0)  # 20 B/s
    assert eta.fraction == pytest.approx(0.4)
    assert eta.seconds_left == pytest.approx(600 / 20)
    assert format_eta(30) == "30s" and format_eta(125) == "2m05s" and format_eta(3720) == "1h02m"


def test_eta_charges_process_starts_separately() -> None:
    """1 s per 100 B plus 0.5 s per process start: fitted exactly from two unlike cells."""
    eta = Eta(total_bytes=1000, total_starts=40)
    eta.add(100, 1.0 + 0.5 * 2, starts=2)
    eta.add(200, 2.0 + 0.5 * 16, starts=16)
    assert eta.seconds_left == pytest.approx((700 / 100) * 1.0 + 22 * 0.5, rel=1e-6)


def test_line_progress_prints_one_line_per_cell(tree: FakeSysfsRoot, tmp_path: Path) -> None:
    stream = io.StringIO()
    spec = spec_for(tmp_path, settings=(CpuSetting.frequency(FREQS[0]),))
    with fake_measurer(tree, spec, tmp_path) as (m, _):
        run_sweep(spec, m, tmp_path / "p.json", context=CTX, progress=LineProgress(stream))
    lines = stream.getvalue().splitlines()
    assert lines[0] == "profiling 3 cells"
    assert lines[1].startswith("[1/3  33%] 1.20 GHz, 1 proc, 64 MiB: write ")
    assert "ETA " in lines[1] and "(measured)" in lines[1]
    assert lines[-1].startswith("done in ")
    json.dumps(stream.getvalue())
