"""The levers beyond the core clock as sweep axes: the grid, the cells really applied on the
node and restored, the profile's record, refusals before anything is measured, the adaptive
mode's bound, and the waiting power at every swept frequency.

Against fake sysfs trees (an Intel node with acpi-cpufreq, two ``intel_uncore_frequency``
domains and two RAPL package zones; the same node without them) through the real
NodeSettings, Sampler and sweep. The "short real profile run" writes and reads 1 MiB files
under ``tmp_path`` with the real I/O engine, metered by the utilisation estimator over a
SYNTHETIC /proc; the adaptive test's I/O and power are the SYNTHETIC model of
``fake_node.py`` with an uncore term (:func:`uncore_saving`). Nothing here is a measurement.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from greenckpt.optimize import plan
from greenckpt.optimize.profile_data import Profile, ProfilePoint, load_profile, profile_from_json
from greenckpt.platform.levers import node_levers
from greenckpt.platform.restore import NodeSettings
from greenckpt.platform.root import SysRoot
from greenckpt.platform.sampler import Sampler
from greenckpt.profile import CpuSetting, MeterRequest, SweepError, SweepSpec, run_profile
from greenckpt.profile.adaptive import AdaptiveChooser, DecisionScenario, lever_bound
from greenckpt.profile.export import profile_to_csv
from greenckpt.profile.grid import Cell, cell_key, point_cell_key
from greenckpt.profile.import_csv import import_profile
from greenckpt.profile.lever_cells import LeverAxes, Levers
from greenckpt.profile.lever_check import check_lever_axes, lever_axes
from greenckpt.profile.measure import NodeMeasurer, RunResult
from greenckpt.profile.power import choose_power_domains
from greenckpt.profile.sweep import SweepContext, run_sweep
from tests.platform import fake_nvml
from tests.platform import fake_power as fp
from tests.platform.fake_cpu import FakeSysfsRoot, build_tree, diff, snapshot
from tests.platform.fake_power import ManualClock
from tests.profile.fake_node import FakeIO, ModelMeter
from tests.profile.test_waiting import rig

MiB = 1 << 20
UNCORE = "sys/devices/system/cpu/intel_uncore_frequency"
POWERCAP = "sys/class/powercap"
DOMAINS = ("package_00_die_00", "package_01_die_00")
ZONES = ("intel-rapl:0", "intel-rapl:1")
UNCORE_MIN, UNCORE_MAX, UNCORE_NOW = 800_000, 2_400_000, 2_000_000
LIMIT_UW, MAX_UW = 125_000_000, 200_000_000
F_LOW, F_HIGH = 1_200_000_000, 2_600_000_000
CTX = SweepContext(
    machine={"hostname": "fake", "cores": 4},
    storage={"key": "synthetic:test"},
    meters=("rapl",),
    synthetic=True,
    note="SYNTHETIC: fake node of the tests",
)


def add_levers(tree: Path) -> None:
    """Two uncore domains (800 MHz – 2.4 GHz, pinned as found at 800 MHz – 2.4 GHz) and two
    RAPL package zones (long-term limit 125 W of at most 200 W; short-term 150 W), laid out
    as the kernel does (docs: /tmp spec's vocabulary, Linux's intel_uncore_frequency and
    powercap)."""
    for dom in DOMAINS:
        d = tree / UNCORE / dom
        d.mkdir(parents=True)
        for name, value in (
            ("initial_min_freq_khz", UNCORE_MIN),
            ("initial_max_freq_khz", UNCORE_MAX),
            ("min_freq_khz", UNCORE_MIN),
            ("max_freq_khz", UNCORE_MAX),
            ("current_freq_khz", UNCORE_NOW),
        ):
            (d / name).write_text(f"{value}\n")
    for i, zone in enumerate(ZONES):
        z = tree / POWERCAP / zone
        z.mkdir(parents=True)
        for name, text in (
            ("name", f"package-{i}"),
            ("enabled", "1"),
            ("energy_uj", "1000000"),
            ("max_energy_range_uj", "262143328850"),
            ("constraint_0_name", "long_term"),
            ("constraint_0_power_limit_uw", str(LIMIT_UW)),
            ("constraint_0_max_power_uw", str(MAX_UW)),
            ("constraint_0_time_window_us", "27983872"),
            ("constraint_1_name", "short_term"),
            ("constraint_1_power_limit_uw", "150000000"),
            ("constraint_1_max_power_uw", str(MAX_UW)),
            ("constraint_1_time_window_us", "2440"),
        ):
            (z / name).write_text(f"{text}\n")


class LeverSysfsRoot(FakeSysfsRoot):
    """The kernel stand-in of the cpufreq tests, which also takes writes to the uncore and
    powercap files (as plain files: the lever modules' own tests check their rules)."""

    def write(self, rel: str, value: str) -> None:
        rel = rel.lstrip("/")
        if not rel.startswith((UNCORE, POWERCAP)):
            super().write(rel, value)
            return
        path = self / rel
        if not path.is_file():
            raise FileNotFoundError(path)
        path.write_text(value.removesuffix("\n") + "\n", encoding="utf-8")
        self.log.append((rel, value.removesuffix("\n")))


@pytest.fixture(autouse=True)
def no_gpu(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """No NVML on these nodes (the GPU levers are absent, whatever this machine has), and
    state files under ``tmp_path``."""
    monkeypatch.setenv("GREENCKPT_NVML_LIBRARY", str(tmp_path / "no-libnvidia-ml.so.1"))
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))


@pytest.fixture
def lever_tree(tmp_path: Path) -> FakeSysfsRoot:
    path = build_tree("intel-acpi-cpufreq", tmp_path / "tree")
    add_levers(path)
    return LeverSysfsRoot(path)


@pytest.fixture
def bare_tree(tmp_path: Path) -> FakeSysfsRoot:
    """The same node without uncore or powercap control."""
    return FakeSysfsRoot(build_tree("intel-acpi-cpufreq", tmp_path / "bare"))


def lever_files(tree: SysRoot) -> dict[str, str]:
    """What the levers' files say now (uncore min/max of every domain, every package zone's
    long-term limit and enabled flag)."""
    out = {}
    for dom in DOMAINS:
        for name in ("min_freq_khz", "max_freq_khz"):
            out[f"{dom}/{name}"] = tree.read(f"{UNCORE}/{dom}/{name}")
    for zone in ZONES:
        for name in ("constraint_0_power_limit_uw", "enabled"):
            out[f"{zone}/{name}"] = tree.read(f"{POWERCAP}/{zone}/{name}")
    return out


def expected_files(levers: Levers) -> dict[str, str]:
    """The files' contents while a cell with ``levers`` is measured."""
    lo = hi = levers.uncore_khz
    out = {}
    for dom in DOMAINS:
        out[f"{dom}/min_freq_khz"] = str(lo if lo is not None else UNCORE_MIN)
        out[f"{dom}/max_freq_khz"] = str(hi if hi is not None else UNCORE_MAX)
    w = levers.power_limit_w
    for zone in ZONES:
        out[f"{zone}/constraint_0_power_limit_uw"] = str(LIMIT_UW if w is None else round(w * 1e6))
        out[f"{zone}/enabled"] = "1"
    return out


# --------------------------------------------------------------------------- the grid


def test_each_axis_multiplies_fixed_frequencies_and_adds_as_found() -> None:
    axes = LeverAxes(uncore_khz=(1_200_000, 1_800_000), power_limits_w=(100.0, 150.0))
    spec = SweepSpec(
        path="/x",
        settings=(
            CpuSetting.frequency(F_LOW),
            CpuSetting.frequency(F_HIGH),
            CpuSetting.of_governor("performance"),
        ),
        processes=(1, 2),
        levers=axes,
    )
    cells = spec.cells()
    assert axes.combinations() == 9  # (1 + 2) × (1 + 2): each axis also as found
    assert len(cells) == 2 * 9 * 2 + 1 * 2  # a governor is a baseline: levers as found only
    gov = [c for c in cells if c.setting.kind == "governor"]
    assert gov and all(c.levers.as_found for c in gov)
    first = [c.levers for c in cells if c.setting.hz == F_LOW and c.processes == 1]
    assert first[0] == Levers()  # as found first
    assert Levers(1_200_000, 150.0) in first and len(set(first)) == 9
    assert len({c.key for c in cells}) == len(cells)
    # a cell with every lever as found keeps the key it had before the lever axes
    plain = Cell(CpuSetting.frequency(F_LOW), None, 2 << 30, None, 4)
    assert plain.key == f"{F_LOW}|asfound|{2 << 30}|none|4"
    lever = Cell(CpuSetting.frequency(F_LOW), None, 8, None, 1, Levers(1_200_000, 150.0))
    assert lever.key == f"{F_LOW}|asfound|8|none|1|uncore=1200000,pl=150.0"
    assert lever.base == Cell(CpuSetting.frequency(F_LOW), None, 8, None, 1)
    assert "uncore 1.20 GHz, package limit 150 W" in lever.label


def test_the_recorded_spec_keeps_the_axes_and_resume_tells_them_apart() -> None:
    plain = SweepSpec(path="/x", settings=(CpuSetting.frequency(F_LOW),), processes=(1,))
    assert "levers" not in plain.to_json()  # sweeps without lever axes record what they did
    axes = LeverAxes(
        uncore_khz=(1_200_000,),
        power_limits_w=(90.5,),
        gpu_clocks=((877, 1410),),
        gpu_power_limits_w=(250.0,),
    )
    swept = SweepSpec(path="/x", settings=plain.settings, processes=(1,), levers=axes)
    doc = json.loads(json.dumps(swept.to_json()))
    assert SweepSpec.from_json(doc) == swept
    assert swept.differences(plain) == ["levers"]
    assert plain.differences(swept) == ["levers"]  # a file with axes, resumed without them


@pytest.mark.parametrize(
    ("axes", "message"),
    [
        (LeverAxes(uncore_khz=(0,)), "--uncore: 0 is not a positive whole number of kHz"),
        (LeverAxes(uncore_khz=(1, 1)), "--uncore: a value is listed twice"),
        (LeverAxes(power_limits_w=(-5.0,)), "--power-limit: -5.0 W is not a positive"),
        (LeverAxes(gpu_power_limits_w=(float("nan"),)), "--gpu-power-limit: nan W"),
        (LeverAxes(gpu_clocks=((877, 0),)), "--gpu-clocks: (877, 0) is not a (memory MHz"),
    ],
)
def test_malformed_axes_are_refused_in_one_line(axes: LeverAxes, message: str) -> None:
    spec = SweepSpec(path="/x", settings=(CpuSetting.uncontrolled(),), processes=(1,), levers=axes)
    with pytest.raises(SweepError) as info:
        spec.validate()
    assert str(info.value).startswith(message) and "\n" not in str(info.value)


# --------------------------------------------------------------------------- a real run


@contextmanager
def spying(monkeypatch: pytest.MonkeyPatch, tree: SysRoot) -> Iterator[list[Any]]:
    """Record, at every run of the I/O engine, the cell and what the lever files said."""
    seen: list[Any] = []
    real_run = NodeMeasurer.run

    def run(self: NodeMeasurer, op: Any, cell: Cell) -> RunResult:
        seen.append((cell, lever_files(tree)))
        return real_run(self, op, cell)

    monkeypatch.setattr(NodeMeasurer, "run", run)
    yield seen


def tiny_spec(data: Path, levers: LeverAxes, **kw: Any) -> SweepSpec:
    data.mkdir(exist_ok=True)
    base: dict[str, Any] = {
        "path": str(data),
        # the frequency as found: $GREENCKPT_SYSROOT is a plain tree, not a kernel stand-in
        "settings": (CpuSetting.uncontrolled(),),
        "processes": (1,),
        "sizes": (MiB,),
        "block_size": MiB,
        "repetitions": 1,
        "warmup": 0,
        "idle_seconds": 0.0,
        "levers": levers,
    }
    base.update(kw)
    return SweepSpec(**base)


def test_a_real_sweep_applies_each_cells_levers_records_them_and_restores(
    lever_tree: FakeSysfsRoot, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GREENCKPT_SYSROOT", str(lever_tree.path))
    proc = tmp_path / "proc-root"
    fp.proc_tree(proc)
    before = snapshot(lever_tree.path)
    axes = LeverAxes(uncore_khz=(1_200_000, 1_800_000), power_limits_w=(100.0, 150.0))
    spec = tiny_spec(tmp_path / "data", axes)
    out = tmp_path / "p.json"
    with spying(monkeypatch, lever_tree) as seen:
        prof = run_profile(spec, out, meters=MeterRequest("estimator", root=str(proc)))
    assert diff(before, snapshot(lever_tree.path)) == []  # every file back as found
    assert list((tmp_path / "data").iterdir()) == []
    # the cells were really applied: the files said the cell's values while it ran
    assert len(seen) == 2 * 9  # a write and a read per cell
    for cell, files in seen:
        assert files == expected_files(cell.levers), cell.label
    # and the points carry them
    assert prof.status == "complete" and len(prof.points) == 2 * 9
    combos = {(p.uncore_khz, p.power_limit_w) for p in prof.points}
    assert combos == {(u, w) for u in (None, 1_200_000, 1_800_000) for w in (None, 100.0, 150.0)}
    for p in prof.points:
        assert p.gpu_clock_mhz is None and p.gpu_memory_mhz is None
        assert p.gpu_power_limit_w is None
    assert load_profile(out) == prof
    # which levers the node had, from the platform's own look at it
    assert prof.levers == {i.name: i.present for i in node_levers(lever_tree)}
    assert prof.levers["uncore frequency"] is True and prof.levers["power limit"] is True
    assert prof.levers["gpu clocks"] is False and prof.levers["gpu power limit"] is False
    assert "per-core split" in prof.levers


def test_a_real_sweep_moves_the_gpus_per_cell_records_them_and_restores(
    lever_tree: FakeSysfsRoot, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The GPU axes on two SYNTHETIC GPUs of the fake NVML (tests/platform/fake_nvml.c): each
    cell's application clocks and power limit are on every GPU while it is measured, the
    points carry them, and every GPU ends as found."""
    fake = fake_nvml.install(tmp_path, monkeypatch, gpus=2)
    fake.update(1, app_mem=810, app_gr=585)  # not at its default clocks
    found = fake.state()
    as_found = [(g.app_mem, g.app_gr, g.limit_mw) for g in found.gpus]
    monkeypatch.setenv("GREENCKPT_SYSROOT", str(lever_tree.path))
    proc = tmp_path / "proc-root"
    fp.proc_tree(proc)
    axes = LeverAxes(gpu_clocks=((877, 1380),), gpu_power_limits_w=(200.0,))
    spec = tiny_spec(tmp_path / "data", axes)
    seen: list[tuple[Levers, list[tuple[int, int, int]]]] = []
    real_run = NodeMeasurer.run

    def run(self: NodeMeasurer, op: Any, cell: Cell) -> RunResult:
        seen.append((cell.levers, [(g.app_mem, g.app_gr, g.limit_mw) for g in fake.state().gpus]))
        return real_run(self, op, cell)

    monkeypatch.setattr(NodeMeasurer, "run", run)
    prof = run_profile(spec, tmp_path / "p.json", meters=MeterRequest("estimator", root=str(proc)))
    assert fake.state() == found  # clocks (one GPU off its defaults) and limits as found
    assert len(seen) == 2 * 4  # (as found, 877:1380) x (as found, 200 W), a write and a read
    for levers, gpus in seen:
        for k, (mem, gr, limit) in enumerate(gpus):
            want_clocks = levers.gpu_clocks or as_found[k][:2]
            assert (mem, gr) == want_clocks, (levers, gpus)
            want_limit = as_found[k][2] if levers.gpu_power_limit_w is None else 200_000
            assert limit == want_limit, (levers, gpus)
    combos = {(p.gpu_memory_mhz, p.gpu_clock_mhz, p.gpu_power_limit_w) for p in prof.points}
    assert combos == {(m, g, w) for m, g in ((None, None), (877, 1380)) for w in (None, 200.0)}
    assert prof.levers["gpu clocks"] is True and prof.levers["gpu power limit"] is True


def test_a_killed_lever_sweep_resumes_without_measuring_again(
    lever_tree: FakeSysfsRoot, tmp_path: Path
) -> None:
    axes = LeverAxes(uncore_khz=(1_200_000,), power_limits_w=(100.0,))
    spec = fake_spec(tmp_path, axes, repetitions=1, warmup=0)  # a write and a read per cell
    out = tmp_path / "p.json"
    with (
        model_measurer(lever_tree, spec, tmp_path, fail_after=6) as (m, _),
        pytest.raises(KeyboardInterrupt),
    ):
        run_sweep(spec, m, out, context=CTX)
    partial = load_profile(out)
    assert partial.status == "partial" and len(partial.sweep["done"]) == 3
    with model_measurer(lever_tree, spec, tmp_path) as (m, io):
        final = run_sweep(spec, m, out, context=CTX, resume=partial)
    assert final.status == "complete" and len(final.sweep["done"]) == len(spec.cells())
    assert len(io.calls) == 2 * (len(spec.cells()) - 3)  # only the missing cells
    assert {point_cell_key(p) for p in final.points} == {c.key for c in spec.cells()}


# --------------------------------------------------------------------------- refusals


def test_a_lever_the_node_lacks_is_refused_naming_it_and_why(
    bare_tree: FakeSysfsRoot, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GREENCKPT_SYSROOT", str(bare_tree.path))
    reasons = {i.name: i.reason for i in node_levers(bare_tree)}
    before = snapshot(bare_tree.path)
    out = tmp_path / "p.json"
    for axes, flag, name in (
        (LeverAxes(uncore_khz=(1_200_000,)), "--uncore", "uncore frequency"),
        (LeverAxes(power_limits_w=(100.0,)), "--power-limit", "power limit"),
        (LeverAxes(gpu_clocks=((877, 1410),)), "--gpu-clocks", "gpu clocks"),
        (LeverAxes(gpu_power_limits_w=(200.0,)), "--gpu-power-limit", "gpu power limit"),
    ):
        spec = tiny_spec(tmp_path / "data", axes)
        with pytest.raises(SweepError) as info:
            run_profile(spec, out, meters=MeterRequest("estimator"))
        assert str(info.value) == f"{flag}: this node has no {name} control ({reasons[name]})"
        assert reasons[name]  # the platform says why
    assert not out.exists()
    assert diff(before, snapshot(bare_tree.path)) == []
    assert not list(tmp_path.glob("greenckpt/*"))  # no state file either


def test_values_outside_the_nodes_range_are_refused_before_anything_is_measured(
    lever_tree: FakeSysfsRoot, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GREENCKPT_SYSROOT", str(lever_tree.path))
    before = snapshot(lever_tree.path)
    out = tmp_path / "p.json"
    for axes, words in (
        # the bad value is the last of its axis: every cell is checked up front
        (LeverAxes(uncore_khz=(1_200_000, 3_000_000)), ("3", "uncore")),
        (LeverAxes(power_limits_w=(100.0, 250.0)), ("250", "intel-rapl:")),
    ):
        spec = tiny_spec(tmp_path / "data", axes)
        with pytest.raises(SweepError) as info:
            check_lever_axes(spec, lever_tree)
        line = str(info.value)
        assert "\n" not in line and all(w in line for w in words), line
        with pytest.raises(SweepError):
            run_profile(spec, out, meters=MeterRequest("estimator"))
    assert not out.exists()
    assert diff(before, snapshot(lever_tree.path)) == []


def test_uncore_all_spans_the_nodes_range(lever_tree: FakeSysfsRoot, bare_tree: SysRoot) -> None:
    axes = lever_axes("all", root=lever_tree)
    assert axes.uncore_khz[0] == UNCORE_MIN and axes.uncore_khz[-1] == UNCORE_MAX
    assert len(axes.uncore_khz) == 5 and list(axes.uncore_khz) == sorted(set(axes.uncore_khz))
    assert all(k % 100_000 == 0 for k in axes.uncore_khz)
    with pytest.raises(SweepError, match=r"^--uncore: this node has no uncore frequency control"):
        lever_axes("all", root=bare_tree)
    assert lever_axes() == LeverAxes()


# --------------------------------------------------------------------------- adaptive


def uncore_saving(khz: int | None) -> float:
    """SYNTHETIC watts a lower uncore frequency saves (I/O-bound writes do not slow down):
    1 W per 100 MHz below the 2.4 GHz the node runs its uncore at when as found."""
    return 0.0 if khz is None else (UNCORE_MAX - khz) / 100_000


class LeverModelIO(FakeIO):
    """The SYNTHETIC model of ``fake_node.py`` with :func:`uncore_saving` on the power of
    every run (read from the uncore files the cell set: domain 0's max)."""

    def __call__(self, op: Any, path: Any, **kw: Any) -> Any:
        result = super().__call__(op, path, **kw)
        khz = int(self.root.read(f"{UNCORE}/{DOMAINS[0]}/max_freq_khz"))
        self.meter.windows[-1].watts -= uncore_saving(None if khz == UNCORE_MAX else khz)
        return result


def fake_spec(tmp_path: Path, levers: LeverAxes, **kw: Any) -> SweepSpec:
    base: dict[str, Any] = {
        "path": str(tmp_path),
        "settings": (
            CpuSetting.frequency(F_LOW),
            CpuSetting.frequency(1_800_000_000),
            CpuSetting.frequency(F_HIGH),
            CpuSetting.of_governor("performance"),
        ),
        "processes": (1, 2, 4),
        "sizes": (64 * MiB,),
        "block_size": MiB,
        "repetitions": 2,
        "warmup": 1,
        "idle_seconds": 0.0,
        "levers": levers,
    }
    base.update(kw)
    return SweepSpec(**base)


@contextmanager
def model_measurer(
    tree: FakeSysfsRoot, spec: SweepSpec, tmp_path: Path, **io_kw: Any
) -> Iterator[tuple[NodeMeasurer, LeverModelIO]]:
    clock = ManualClock()
    meter = ModelMeter(clock)
    io = LeverModelIO(tree, clock, meter, **io_kw)
    with (
        Sampler([meter], rate_hz=5, clock=clock) as sampler,
        NodeSettings(tree, state_file=tmp_path / "state.json", signals=()) as node,
    ):
        choice = choose_power_domains(sampler.domains, sampler.sources)
        yield NodeMeasurer(spec, sampler, choice, node, io=io, sleep=clock.advance), io


def _levers_of(p: ProfilePoint) -> Levers:
    return Levers.of_point(p)


def test_the_adaptive_mode_tries_levers_only_at_the_front_within_its_bound(
    lever_tree: FakeSysfsRoot, tmp_path: Path
) -> None:
    axes = LeverAxes(uncore_khz=(1_200_000, 1_600_000, 2_000_000), power_limits_w=(100.0, 150.0))
    spec = fake_spec(tmp_path, axes)
    scenarios = [DecisionScenario(ckpt_size=64 * MiB * 100, rate=1 / 3600.0, app_power=200.0)]
    out = tmp_path / "p.json"
    before = snapshot(lever_tree.path)
    with model_measurer(lever_tree, spec, tmp_path) as (m, _):
        prof = run_sweep(spec, m, out, context=CTX, chooser=AdaptiveChooser(spec, scenarios))
    assert diff(before, snapshot(lever_tree.path)) == []
    cells = {c.key: c for c in spec.cells()}
    measured = [cells[k] for k in [*prof.sweep["done"], *prof.sweep["quick"]]]
    lever_cells = [c for c in measured if not c.levers.as_found]
    assert axes.combinations() == 12 and len(cells) == 3 * 12 * 3 + 3
    bound = lever_bound(spec, len(scenarios))
    assert bound == 2 * 1 * 11
    assert 0 < len(lever_cells) <= bound  # the documented bound
    assert len(measured) < len(cells)  # far fewer than the full product
    base_done = set(prof.sweep["done"])
    front = {c.base.key for c in lever_cells}
    assert front <= base_done and len(front) <= 2 * len(scenarios)  # variants of the front only
    for key in front:  # every variant of a front cell was looked at
        variants = [c for c in cells.values() if c.base.key == key and not c.levers.as_found]
        assert all(c.key in {m.key for m in measured} for c in variants)
    # the uncore saving is found: the decision rests on a fully measured lowest-uncore point
    best = _best(prof, scenarios[0])
    assert _levers_of(best).uncore_khz == 1_200_000
    assert point_cell_key(best) in base_done


def _best(prof: Profile, d: DecisionScenario) -> ProfilePoint:
    return plan(prof, d.scenario(prof)).best.write


def test_waiting_power_is_measured_at_every_swept_frequency_with_the_levers_as_found(
    lever_tree: FakeSysfsRoot, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The per-core split: the planner may give the waiting ranks' cores any swept frequency,
    so the waiting power is measured at every one, also where the adaptive mode never
    measures a cell, and with every other lever as found."""
    spec = fake_spec(
        tmp_path,
        LeverAxes(uncore_khz=(1_200_000,)),
        waiting_seconds=1.0,
        repetitions=1,
        warmup=0,
    )
    scenarios = [DecisionScenario(ckpt_size=64 * MiB * 100, rate=1 / 3600.0, app_power=200.0)]
    during: list[dict[str, str]] = []
    with rig(lever_tree, spec, tmp_path) as r:
        release = r.waiters.release

        def spy(mode: Any, seconds: float) -> None:
            during.append(lever_files(lever_tree))
            release(mode, seconds)

        monkeypatch.setattr(r.waiters, "release", spy)
        prof = run_sweep(
            spec,
            r.measurer,
            tmp_path / "p.json",
            context=CTX,
            waiters=r.open,
            chooser=AdaptiveChooser(spec, scenarios),
        )
    assert {(w.setting_key, w.mode) for w in prof.waiting} == {
        (s.key, m) for s in spec.settings for m in ("polite", "spin")
    }
    assert len(during) == 2 * len(spec.settings)
    assert all(files == expected_files(Levers()) for files in during)
    measured = {*prof.sweep["done"], *prof.sweep["quick"]}
    assert len(measured) < len(spec.cells())  # the cells were not all measured; waiting was


def test_cell_keys_of_points_without_levers_are_unchanged() -> None:
    p = ProfilePoint(op="write", processes=2, throughput=1.0, power=1.0, power_source="synthetic")
    assert point_cell_key(p) == cell_key("uncontrolled", None, 0, None, 2)


def test_the_csv_export_carries_the_levers_and_imports_back(tmp_path: Path) -> None:
    """SYNTHETIC points differing only in their levers: the export's lever columns keep them
    apart, and the import reads them back (else the rows would be duplicates)."""
    points = tuple(
        ProfilePoint(
            op="write",
            processes=1,
            throughput=1e8 * (i + 1),
            power=50.0,
            power_source="synthetic",
            frequency=float(F_LOW),
            **lv.point_fields(),
        )
        for i, lv in enumerate((Levers(), Levers(1_200_000, 100.0), Levers(gpu_clocks=(877, 1410))))
    )
    prof = Profile(points=points, synthetic=True, note="SYNTHETIC: lever columns")
    out = tmp_path / "p.csv"
    profile_to_csv(prof, out)
    header, *rows = out.read_text().splitlines()
    assert "uncore_khz,power_limit_W,gpu_memory_MHz,gpu_clock_MHz,gpu_power_limit_W" in header
    assert len(rows) == 3
    back = profile_from_json(import_profile(out, power_source="synthetic"))
    assert [Levers.of_point(p) for p in back.points] == [Levers.of_point(p) for p in points]
