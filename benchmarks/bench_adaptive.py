"""Adaptive sweeps against the full grid, replayed on recorded full-grid profiles.

Run: ``python benchmarks/bench_adaptive.py [PROFILE.json ...] [--margin 0.1]``.
Not a test: it prints, per profile and decision scenario, whether the adaptive mode reached the
same optimal settings (write setting + processes, read setting + processes, codec) as the full
grid, and the share of the full grid's measurement time it used. Target: same decision with at
most 30 % of the time.

Each profile is replayed (:class:`greenckpt.profile.replay.ReplayMeasurer`): every run of a
cell returns the recorded medians and costs the recorded ``size / throughput``; the full grid
and the adaptive sweep use ``greenckpt profile``'s defaults (3 repetitions after 1 warm-up;
the adaptive mode's first looks are single runs). Measurement time is the I/O time of all
runs, the same accounting for both.

Default profiles: ``examples/profiles/synthetic-pcie-flash.json`` and
``synthetic-nfs-1gbe.json`` (SYNTHETIC, 5 frequencies + ondemand × 8 process counts, shaped
after saito2013 and mills2013), and two grids recorded on the development VM (throughput
measured, power ESTIMATED; one CPU setting, since the VM has no cpufreq):
``recorded-vm-virtio-estimated.json`` (1–16 processes) and
``recorded-vm-virtio-codecs-estimated.json`` (1–8 processes × no codec, lz4, zstd:1).
"""

from __future__ import annotations

import argparse
import itertools
import tempfile
from pathlib import Path

from greenckpt.optimize import Scenario, plan
from greenckpt.optimize.profile_data import Profile, load_profile
from greenckpt.profile.adaptive import DEFAULT_MARGIN, AdaptiveChooser, DecisionScenario
from greenckpt.profile.replay import ReplayMeasurer, spec_of
from greenckpt.profile.sweep import SweepContext, run_sweep

EXAMPLES = Path(__file__).resolve().parents[1] / "examples" / "profiles"
DEFAULT_PROFILES = (
    EXAMPLES / "synthetic-pcie-flash.json",
    EXAMPLES / "synthetic-nfs-1gbe.json",
    EXAMPLES / "recorded-vm-virtio-estimated.json",
    EXAMPLES / "recorded-vm-virtio-codecs-estimated.json",
)
MTBFS_H = (1.0, 14.0, 24.0)
SIZE_FACTORS = (8, 32, 128)  # checkpoint size per node, in units of the profiled size S
# Application power in units of the largest power of any I/O point: a busy CPU node, and nodes
# whose compute draws much more than their I/O phases (accelerators), where time weighs more.
APP_FACTORS = (1.2, 3.0, 30.0)


def decision(profile: Profile, scn: Scenario) -> tuple[str, int, str, int, str]:
    """What the optimizer would apply: CPU setting and processes for writes and for reads,
    and the codec (one for both: a restart reads what the checkpoint wrote)."""
    best = plan(profile, scn).best
    return (
        best.write.setting_key,
        best.write.processes,
        best.read.setting_key,
        best.read.processes,
        best.write.codec or "none",
    )


def run_one(path: Path, margin: float) -> tuple[int, int, float]:
    recorded = load_profile(path)
    spec = spec_of(recorded)
    size = spec.sizes[-1]
    top = max(p.power for p in recorded.points)
    ctx = SweepContext(machine=dict(recorded.machine), synthetic=recorded.synthetic)
    matches = total = 0
    worst = 0.0
    with tempfile.TemporaryDirectory() as tmp:
        full_m = ReplayMeasurer(recorded)
        full = run_sweep(spec, full_m, Path(tmp, "full.json"), context=ctx)
        label = "SYNTHETIC" if recorded.synthetic else ", ".join(sorted(recorded.power_sources))
        print(
            f"\n{path.name} ({label}): {len(spec.cells())} cells, full grid "
            f"{full_m.seconds:.0f} s of I/O"
        )
        print(
            f"{'MTBF':>6} {'ckpt':>9} {'app':>7} {'time share':>11} {'cells':>6} {'same':>5}  "
            "decision"
        )
        for mtbf_h, k, f in itertools.product(MTBFS_H, SIZE_FACTORS, APP_FACTORS):
            app = f * top
            d = DecisionScenario(ckpt_size=k * size, rate=1 / (mtbf_h * 3600), app_power=app)
            m = ReplayMeasurer(recorded)
            chooser = AdaptiveChooser(spec, [d], margin=margin)
            got = run_sweep(spec, m, Path(tmp, "a.json"), context=ctx, chooser=chooser)
            scn = d.scenario(full)
            want = decision(full, scn)
            same = decision(got, scn) == want
            share = m.seconds / full_m.seconds
            cells = len({(p.setting_key, p.processes, p.codec) for p in got.points})
            matches += same
            total += 1
            worst = max(worst, share)
            print(
                f"{mtbf_h:>5.0f}h {k * size / 2**30:>6.0f}GiB {app:>6.0f}W {share:>10.1%} "
                f"{cells:>6} {'yes' if same else 'NO':>5}  w {want[0]}/{want[1]}p "
                f"r {want[2]}/{want[3]}p codec {want[4]}"
            )
    return matches, total, worst


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("profiles", nargs="*", type=Path, default=list(DEFAULT_PROFILES))
    ap.add_argument("--margin", type=float, default=DEFAULT_MARGIN)
    args = ap.parse_args(argv)
    print(f"optimism margin {args.margin:.2f}; target: same decision with <= 30 % of the time")
    for path in args.profiles:
        same, total, worst = run_one(path, args.margin)
        verdict = "meets" if same == total and worst <= 0.30 else "does NOT meet"
        print(
            f"=> {path.name}: same decision in {same}/{total} scenarios, at most "
            f"{worst:.1%} of the full grid's time: {verdict} the target"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
