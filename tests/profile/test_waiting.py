"""The waiting power: measured per CPU setting and wait mode, saved, resumed, merged.

Against the SYNTHETIC node of ``fake_node.py``: the real sweep, NodeSettings on a fake sysfs
tree and the real Sampler, with a meter whose idle power rises with the frequency set and
fake waiters that add a known power per rank at that frequency — so the entries the sweep
records can be compared with the model exactly, and subtracting the idle power of another
setting would show. Nothing here is a measurement.
"""

from __future__ import annotations

import contextlib
import json
import math
import time
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import pytest

from greenckpt.ckpt import wait as library_wait
from greenckpt.cli.profile_flags import SPELLING
from greenckpt.optimize import Scenario, load_profile, plan
from greenckpt.optimize.waiting import WaitingPower, WaitMode
from greenckpt.platform.restore import NodeSettings
from greenckpt.platform.sampler import Sampler
from greenckpt.profile.grid import Cell, CpuSetting, SweepError, SweepSpec
from greenckpt.profile.measure import NodeMeasurer
from greenckpt.profile.merge import merge_profiles
from greenckpt.profile.power import choose_power_domains
from greenckpt.profile.run import check_wait_loop, resume_or_refuse
from greenckpt.profile.sweep import SweepContext, run_sweep
from greenckpt.profile.waiters import DeadlineRequest
from greenckpt.profile.waiting import (
    WAIT_ENV,
    WAITING_TAIL,
    ProcessWaiters,
    Waiters,
    WaitersError,
)
from tests.platform.fake_cpu import FakeSysfsRoot, build_tree, diff, snapshot
from tests.platform.fake_power import ManualClock
from tests.profile.fake_node import IDLE_W, POLICY0, FakeIO, ModelMeter, Window

MiB = 1 << 20
FREQS = (1_200_000_000, 1_800_000_000, 2_600_000_000)
RANKS = 4
CTX = SweepContext(
    machine={"hostname": "fake", "cores": 4},
    storage={"key": "synthetic:test"},
    meters=("rapl",),
    synthetic=True,
    note="SYNTHETIC: fake node of the tests",
)


def idle_extra(f_hz: float) -> float:
    """SYNTHETIC idle power above IDLE_W at a frequency (W)."""
    return 3.0 * f_hz / 1e9


def per_rank(mode: str, f_hz: float) -> float:
    """SYNTHETIC power of one waiting rank: a spinning one keeps a core busy."""
    ghz = f_hz / 1e9
    return 4.0 * ghz**2 if mode == "spin" else 0.05 + 0.01 * ghz


SHARE = {"polite": 0.02, "spin": 0.97}
"""SYNTHETIC share of a core a waiting rank uses."""


def frequency(tree: FakeSysfsRoot) -> float:
    return int(tree.read(f"{POLICY0}/scaling_cur_freq").strip()) * 1000.0


class SettingMeter(ModelMeter):
    """SYNTHETIC: the model meter, with an idle power that follows the frequency set."""

    def __init__(self, clock: ManualClock) -> None:
        super().__init__(clock)
        self.segments: list[tuple[float, float]] = []  # (from when, extra idle watts)

    def energy_at(self, t: float) -> float:
        e = super().energy_at(t)
        for i, (start, extra) in enumerate(self.segments):
            end = self.segments[i + 1][0] if i + 1 < len(self.segments) else math.inf
            e += extra * max(0.0, min(t, end) - max(self.t0, start))
        return e


class SettingMeasurer(NodeMeasurer):
    """The real measurer; configuring the node also moves the fake meter's idle power."""

    meter: SettingMeter
    tree: FakeSysfsRoot
    clock: ManualClock

    def configure(self, cell: Cell) -> None:
        super().configure(cell)
        self.meter.segments.append((self.clock(), idle_extra(frequency(self.tree))))


@dataclass
class FakeWaiters:
    """SYNTHETIC waiters: each release adds ``RANKS × per_rank`` watts to the meter for as long
    as they wait; ``collect`` returns when they are done, as the real ones do."""

    clock: ManualClock
    meter: SettingMeter
    tree: FakeSysfsRoot
    events: list[tuple[str, Any]]
    ranks: int = RANKS
    releases: list[tuple[str, float]] = field(default_factory=list)
    _end: float = 0.0
    _cpu: float = 0.0

    def release(self, mode: WaitMode, seconds: float) -> None:
        f = frequency(self.tree)
        start = self.clock()
        self.meter.windows.append(
            Window(start, start + seconds, IDLE_W + self.ranks * per_rank(mode, f))
        )
        self.releases.append((mode, f))
        self.events.append(("waiting", (mode, f)))
        self._end = start + seconds
        self._cpu = self.ranks * SHARE[mode] * seconds

    def collect(self) -> float:
        self.clock.t = max(self.clock.t, self._end)
        return self._cpu


@pytest.fixture
def tree(tmp_path: Path) -> FakeSysfsRoot:
    return FakeSysfsRoot(build_tree("intel-acpi-cpufreq", tmp_path / "tree"))


def spec_for(path: Path, **kw: Any) -> SweepSpec:
    base: dict[str, Any] = {
        "path": str(path),
        "settings": tuple(CpuSetting.frequency(f) for f in FREQS),
        "processes": (1, 2),
        "sizes": (16 * MiB,),
        "block_size": MiB,
        "repetitions": 1,
        "warmup": 0,
        "idle_seconds": 0.0,
        "waiting_seconds": 1.0,
    }
    base.update(kw)
    return SweepSpec(**base)


@dataclass
class Rig:
    measurer: SettingMeasurer
    io: FakeIO
    waiters: FakeWaiters
    events: list[tuple[str, Any]]

    def open(self) -> AbstractContextManager[Waiters]:
        return contextlib.nullcontext(self.waiters)


@contextmanager
def rig(tree: FakeSysfsRoot, spec: SweepSpec, tmp_path: Path, **io_kw: Any) -> Iterator[Rig]:
    clock = ManualClock()
    meter = SettingMeter(clock)
    events: list[tuple[str, Any]] = []
    fio = FakeIO(tree, clock, meter, on_call=lambda c: events.append(("io", c["f"])), **io_kw)
    with (
        Sampler([meter], rate_hz=5, clock=clock) as sampler,
        NodeSettings(tree, state_file=tmp_path / "state.json", signals=()) as node,
    ):
        choice = choose_power_domains(sampler.domains, sampler.sources)
        m = SettingMeasurer(spec, sampler, choice, node, io=fio, sleep=clock.advance)
        m.meter, m.tree, m.clock = meter, tree, clock
        yield Rig(m, fio, FakeWaiters(clock, meter, tree, events), events)


def test_the_sweep_records_each_settings_waiting_power_before_the_cells(
    tree: FakeSysfsRoot, tmp_path: Path
) -> None:
    before = snapshot(tree.path)
    spec = spec_for(tmp_path)
    out = tmp_path / "p.json"
    with rig(tree, spec, tmp_path) as r:
        prof = run_sweep(spec, r.measurer, out, context=CTX, waiters=r.open)
    assert diff(before, snapshot(tree.path)) == []  # the node is restored
    kinds = [kind for kind, _ in r.events]
    assert kinds == ["waiting"] * 6 + ["io"] * (len(kinds) - 6)  # first, for the adaptive mode
    assert [(w.frequency, w.mode) for w in prof.waiting] == [
        (float(f), mode) for f in FREQS for mode in ("polite", "spin")
    ]
    for w in prof.waiting:
        assert w.frequency is not None
        assert w.power_per_rank == pytest.approx(per_rank(w.mode, w.frequency), rel=1e-6)
        assert w.idle_power == pytest.approx(IDLE_W + idle_extra(w.frequency), rel=1e-6)
        assert w.cpu_fraction == pytest.approx(SHARE[w.mode])
        assert w.power_spread == pytest.approx(0.0, abs=1e-9)
        assert w.seconds == pytest.approx(1.0)
        assert (w.ranks, w.power_source, w.reliable, w.cstates) == (4, "measured", True, None)
    assert load_profile(out).waiting == prof.waiting


def test_the_planner_uses_what_the_sweep_measured(tree: FakeSysfsRoot, tmp_path: Path) -> None:
    spec = spec_for(tmp_path)
    with rig(tree, spec, tmp_path) as r:
        prof = run_sweep(spec, r.measurer, tmp_path / "p.json", context=CTX, waiters=r.open)
    scn = Scenario(ckpt_size=1e9, rate=1 / 3600, app_power=100.0, wait_mode="spin", app_processes=4)
    best = plan(prof, scn).best
    for p, use in ((best.write, best.write_waiting), (best.read, best.read_waiting)):
        assert p.frequency is not None
        assert use.ranks == 4 - p.processes and use.exact
        assert use.per_rank == pytest.approx(per_rank("spin", p.frequency), rel=1e-6)
        assert use.source == "measured"


def test_waiting_windows_end_while_the_waiters_still_wait(
    tree: FakeSysfsRoot, tmp_path: Path
) -> None:
    """The waiters wait WAITING_TAIL longer than the window, so its last reading is taken
    while they still wait."""
    spec = spec_for(tmp_path)
    with rig(tree, spec, tmp_path) as r:
        run = r.measurer.waiting(r.waiters, "spin", 1.0)
        window = r.measurer.meter.windows[-1]
    assert window.end - window.start == pytest.approx(1.0 * (1 + WAITING_TAIL))
    assert run.waiters_seconds == pytest.approx(1.1) and run.seconds == pytest.approx(1.0)


def test_a_resumed_sweep_keeps_the_entries_and_measures_only_those_missing(
    tree: FakeSysfsRoot, tmp_path: Path
) -> None:
    spec = spec_for(tmp_path)
    out = tmp_path / "p.json"
    with rig(tree, spec, tmp_path, fail_after=5) as r, pytest.raises(KeyboardInterrupt):
        run_sweep(spec, r.measurer, out, context=CTX, waiters=r.open)
    partial = load_profile(out)
    assert partial.status == "partial" and len(partial.waiting) == 6
    with rig(tree, spec, tmp_path) as r:
        final = run_sweep(spec, r.measurer, out, context=CTX, resume=partial, waiters=r.open)
    assert r.waiters.releases == []  # nothing remeasured
    assert final.status == "complete" and final.waiting == partial.waiting

    doc = json.loads(out.read_text())
    doc["status"] = "partial"
    dropped = doc["waiting"].pop(3)  # 1.8 GHz, spin
    out.write_text(json.dumps(doc))
    with rig(tree, spec, tmp_path) as r:
        again = run_sweep(
            spec, r.measurer, out, context=CTX, resume=load_profile(out), waiters=r.open
        )
    assert r.waiters.releases == [("spin", dropped["frequency_hz"])]
    assert [w.frequency for w in again.waiting] == [w.frequency for w in final.waiting]
    assert again.waiting[3].power_per_rank == pytest.approx(final.waiting[3].power_per_rank)


def test_without_waiting_seconds_nothing_is_measured_and_nothing_is_needed(
    tree: FakeSysfsRoot, tmp_path: Path
) -> None:
    spec = spec_for(tmp_path, waiting_seconds=0.0)
    with rig(tree, spec, tmp_path) as r:
        prof = run_sweep(spec, r.measurer, tmp_path / "p.json", context=CTX)
    assert prof.waiting == () and r.waiters.releases == []
    check_wait_loop(spec, None)


def test_asking_for_waiting_power_without_the_means_is_refused_before_measuring(
    tree: FakeSysfsRoot, tmp_path: Path
) -> None:
    spec = spec_for(tmp_path)
    with rig(tree, spec, tmp_path) as r, pytest.raises(SweepError, match="pass waiters="):
        run_sweep(spec, r.measurer, tmp_path / "p.json", context=CTX)
    assert r.io.calls == []
    with pytest.raises(SweepError, match=r"wait_loop=greenckpt\.ckpt\.wait\.complete"):
        check_wait_loop(spec, None)


@pytest.mark.parametrize("seconds", [-1.0, math.nan, math.inf])
def test_the_window_must_be_a_finite_duration(seconds: float, tmp_path: Path) -> None:
    with pytest.raises(SweepError, match="waiting seconds must be a finite number >= 0"):
        spec_for(tmp_path, waiting_seconds=seconds).validate()


def test_the_window_is_recorded_and_a_different_one_cannot_resume(tmp_path: Path) -> None:
    spec = spec_for(tmp_path)
    assert SweepSpec.from_json(spec.to_json()) == spec
    old = spec.to_json()
    del old["waiting_seconds"]  # a file written before the field existed
    assert SweepSpec.from_json(old).waiting_seconds == 0.0
    out = tmp_path / "p.json"
    point = {"op": "write", "frequency_hz": float(FREQS[0]), "processes": 1}
    point |= {"throughput_Bps": 1e8, "power_W": 50.0, "power_source": "synthetic"}
    doc = {"format": "greenckpt-profile", "format_version": 2, "status": "partial"}
    doc |= {"synthetic": True, "sweep": {"spec": spec.to_json()}, "points": [point]}
    out.write_text(json.dumps(doc))
    other = replace(spec, waiting_seconds=2.0)
    with pytest.raises(SweepError, match=r"differs in waiting_seconds \(--waiting-seconds\)"):
        resume_or_refuse(out, other, resume=True, spelling=SPELLING)
    assert resume_or_refuse(out, spec, resume=True, spelling=SPELLING) is not None


def _entry(node_w: float, *, mode: WaitMode = "spin", ranks: int = 4) -> WaitingPower:
    return WaitingPower(
        mode=mode,
        ranks=ranks,
        power_per_rank=node_w,
        power_source="measured",
        frequency=1.2e9,
        cpu_fraction=0.9,
        seconds=2.0,
        idle_power=40.0,
    )


def test_merged_profiles_keep_the_entries_every_node_measured(
    tree: FakeSysfsRoot, tmp_path: Path
) -> None:
    spec = spec_for(tmp_path, settings=(CpuSetting.frequency(FREQS[0]),), waiting_seconds=0.0)
    with rig(tree, spec, tmp_path) as r:
        base = run_sweep(spec, r.measurer, tmp_path / "p.json", context=CTX)
    polite = _entry(0.1, mode="polite")
    waiting = [(_entry(4.0), polite), (_entry(6.0, ranks=2), polite), (_entry(5.5),)]
    nodes = [replace(base, machine={"hostname": f"n{i}"}, waiting=w) for i, w in enumerate(waiting)]
    merged = merge_profiles(nodes).waiting
    assert [w.mode for w in merged] == ["spin"]  # polite is missing on n2: left out
    (spin,) = merged
    assert spin.power_per_rank == pytest.approx(5.5) and spin.power_spread == pytest.approx(2.0)
    assert spin.ranks == 2 and spin.cpu_fraction == pytest.approx(0.9)
    assert merge_profiles([nodes[0], replace(nodes[1], waiting=())]).waiting == ()


# ----------------------------------------------------------------------- the real waiters


def test_the_profiler_names_the_librarys_variable() -> None:
    assert WAIT_ENV == library_wait.WAIT_ENV


def test_the_stand_in_request_completes_at_its_deadline() -> None:
    soon = DeadlineRequest(time.monotonic() + 0.02)
    assert soon.test() == (False, None)
    soon.wait()  # spins until the deadline
    assert soon.test() == (True, None) and time.monotonic() >= soon.deadline
    assert soon.tests > 2
    assert library_wait.complete(DeadlineRequest(time.monotonic() + 0.01)) is None


def test_a_waiter_that_dies_stops_the_measurement_in_one_line() -> None:
    """``len`` cannot wait on a request: the waiter process dies, and the parent says so
    instead of hanging."""
    with ProcessWaiters(len, 1) as waiters:
        waiters.release("polite", 0.01)
        with pytest.raises(WaitersError, match="waiter 0 of 1 died when asked to report"):
            waiters.collect()
        # found in review: the next window's release met the broken pipe with a raw
        # BrokenPipeError
        with pytest.raises(WaitersError, match="waiter 0 of 1 died before a spin window"):
            waiters.release("spin", 0.01)
    with pytest.raises(WaitersError, match="at least 1 waiter"):
        ProcessWaiters(library_wait.complete, 0)
