"""Decision policies against the shipped profiles and against fake profiles whose optimum is
known by construction.

Every profile here is SYNTHETIC (made up for the tests or shipped as an example) except the
recorded VM profile, whose power figures are ESTIMATED; none is presented as a measurement.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pytest

from greenckpt.optimize import Profile, ProfilePoint, Scenario, load_profile, plan
from greenckpt.optimize.profile_data import profile_from_json
from greenckpt.platform.root import PlatformError, SysRoot
from greenckpt.runtime import (
    NO_FREQUENCY_CONTROL,
    POLICY_NAMES,
    DefaultPolicy,
    GovernorPolicy,
    Node,
    PhaseRequest,
    Policy,
    ProfilePolicy,
    Settings,
    make_policy,
    storage_key_of,
)
from tests.conftest import ROOT, small_profile_doc
from tests.platform.fake_cpu import build_tree
from tests.platform.fake_storage import make_nvme_ext4

PROFILES = ROOT / "examples" / "profiles"
GIB = 2**30
MIB = 2**20
SAITO_RATE = 1.89474e-5
SAITO_POWER = 471.1
FAKE_CPU = "Fake CPU 9000 (synthetic)"
FAKE_STORAGE = "fake:nvme"


def _fixed_key(key: str) -> Callable[[str], str]:
    return lambda path: key


def fake_node(**changes: object) -> Node:
    """A node that matches :func:`fake_profile` and can control everything (SYNTHETIC)."""
    node = Node(
        hostname="fake-node",
        cpu_model=FAKE_CPU,
        cpus=8,
        frequency_control=True,
        governors=("performance", "powersave", "ondemand", "userspace"),
        cstate_control=True,
        storage_lookup=_fixed_key(FAKE_STORAGE),
    )
    return replace(node, **changes)  # type: ignore[arg-type]


def pt(
    op: str,
    ghz: float | None,
    n: int,
    mbps: float,
    watts: float,
    *,
    codec: str | None = None,
    governor: str | None = None,
    cstates: bool | None = None,
    size: int | None = None,
) -> ProfilePoint:
    """One SYNTHETIC point: ``mbps`` in MB/s (1e6 bytes), ``ghz`` a fixed frequency."""
    return ProfilePoint(
        op=op,  # type: ignore[arg-type]
        processes=n,
        throughput=mbps * 1e6,
        power=watts,
        power_source="synthetic",
        frequency=None if ghz is None else ghz * 1e9,
        governor=governor,
        codec=codec,
        cstates=cstates,
        size=size,
    )


def fake_profile(*points: ProfilePoint, cores: int = 8) -> Profile:
    return Profile(
        points=points,
        synthetic=True,
        note="test fixture (SYNTHETIC)",
        machine={"hostname": "fake-node", "cpu_model": FAKE_CPU, "cores": cores},
        storage={"key": FAKE_STORAGE},
    )


def profile_policy(profile: Profile, node: Node | None = None, **kw: object) -> ProfilePolicy:
    return ProfilePolicy(
        profile,
        node=node or fake_node(),
        mtbf=kw.pop("mtbf", 4 * 3600.0),  # type: ignore[arg-type]
        app_power=kw.pop("app_power", 250.0),  # type: ignore[arg-type]
        **kw,  # type: ignore[arg-type]
    )


def ckpt(size: int = GIB, *, level: int | None = 1, path: str = "/local/ckpt") -> PhaseRequest:
    return PhaseRequest("checkpoint", path, size, level=level)


def restart(
    size: int = GIB, *, level: int | None = 1, codec: str | None = None, path: str = "/local/ckpt"
) -> PhaseRequest:
    return PhaseRequest("restart", path, size, level=level, codec=codec)


def has_note(settings: Settings, *fragments: str) -> bool:
    return any(all(f in note for f in fragments) for note in settings.notes)


# ------------------------------------------------------------------------ shipped profiles


def _synthetic_node(profile: Profile) -> Node:
    """A node matching a shipped SYNTHETIC profile (only tests can be such a node)."""
    return fake_node(
        hostname=profile.machine["hostname"],
        cpu_model=profile.machine["cpu_model"],
        cpus=profile.machine["cores"],
        storage_lookup=_fixed_key(profile.storage["key"]),
    )


@pytest.mark.parametrize("name", ["synthetic-pcie-flash", "synthetic-nfs-1gbe"])
def test_profile_lookup_is_the_planners_choice(name: str) -> None:
    profile = load_profile(PROFILES / f"{name}.json")
    size = 64 * GIB
    policy = ProfilePolicy(
        profile, node=_synthetic_node(profile), rate=SAITO_RATE, app_power=SAITO_POWER
    )
    best = plan(profile, Scenario(size, SAITO_RATE, SAITO_POWER)).best
    w = policy.decide(ckpt(size))
    assert w.source == "profile lookup"
    assert (w.frequency_hz, w.governor, w.io_processes, w.codec) == (
        None if best.write.frequency is None else round(best.write.frequency),
        best.write.governor,
        best.write.processes,
        best.write.codec,
    )
    assert w.power_source == "synthetic"
    assert has_note(w, "SYNTHETIC")
    assert w.predicted_seconds == pytest.approx(size / best.write.throughput)
    assert w.predicted_power_w == pytest.approx(best.write.power)
    assert w.predicted_energy_j == pytest.approx(best.write.power * size / best.write.throughput)
    r = policy.decide(restart(size))
    assert r.io_processes == best.read.processes
    assert r.frequency_hz == (None if best.read.frequency is None else round(best.read.frequency))
    assert r.codec == w.codec
    assert r.predicted_seconds == pytest.approx(size / best.read.throughput)


def test_flash_profile_writes_with_few_processes() -> None:
    """As in saito2013 Table 3: one or two I/O processes, not the 48 the baselines use."""
    profile = load_profile(PROFILES / "synthetic-pcie-flash.json")
    node = _synthetic_node(profile)
    chosen = ProfilePolicy(profile, node=node, rate=SAITO_RATE, app_power=SAITO_POWER)
    baseline = GovernorPolicy("performance", profile, node=node)
    got = chosen.decide(ckpt(64 * GIB))
    base = baseline.decide(ckpt(64 * GIB))
    assert got.io_processes <= 2 < base.io_processes == 48
    assert got.predicted_energy_j is not None and base.predicted_energy_j is not None
    assert got.predicted_energy_j < base.predicted_energy_j


def _vm_node(**changes: object) -> Node:
    profile = load_profile(PROFILES / "recorded-vm-virtio-estimated.json")
    node = fake_node(
        hostname="vm",
        cpu_model=profile.machine["cpu_model"],
        cpus=2,
        frequency_control=False,
        frequency_reason="cpufreq not available: no cpufreq policies (test)",
        governors=(),
        storage_lookup=_fixed_key(profile.storage["key"]),
    )
    return replace(node, **changes)  # type: ignore[arg-type]


def test_recorded_vm_profile_gives_parallelism_only() -> None:
    profile = load_profile(PROFILES / "recorded-vm-virtio-estimated.json")
    policy = ProfilePolicy(profile, node=_vm_node(), mtbf=3600.0, app_power=10.0)
    size = profile.sizes[0]
    s = policy.decide(ckpt(size))
    best = plan(profile, Scenario(size, 1 / 3600.0, 10.0)).best
    assert s.source == "profile lookup"
    assert s.frequency_hz is None and s.governor is None
    assert s.io_processes == best.write.processes
    assert s.power_source == "estimated"
    assert has_note(s, NO_FREQUENCY_CONTROL, "cpufreq not available")
    assert not has_note(s, "extrapolated")
    assert s.predicted_seconds == pytest.approx(size / best.write.throughput)


def test_recorded_vm_profile_beyond_its_size_says_extrapolated() -> None:
    profile = load_profile(PROFILES / "recorded-vm-virtio-estimated.json")
    (measured,) = profile.sizes
    policy = ProfilePolicy(profile, node=_vm_node(), mtbf=3600.0, app_power=10.0)
    s = policy.decide(ckpt(4 * measured))
    assert has_note(s, "extrapolated", "beyond the largest profiled size", "256 MiB")


def test_synthetic_profile_on_another_machine_falls_back() -> None:
    profile = load_profile(PROFILES / "synthetic-pcie-flash.json")
    node = fake_node(cpu_model="AMD EPYC", hostname="vm", cpus=2)
    s = ProfilePolicy(profile, node=node, rate=SAITO_RATE, app_power=SAITO_POWER).decide(ckpt())
    assert s.source.startswith("defaults")
    assert has_note(s, "another machine", "AMD Opteron 6172 (synthetic)", "AMD EPYC", "defaults")
    assert s.io_processes == 2  # min(4, 2 CPUs)
    assert s.frequency_hz is None and s.predicted_seconds is None and s.power_source is None


# ------------------------------------------------------------------------ known optimum

WRITE_SETTINGS = [(1.0, 1), (1.0, 4), (2.0, 1), (2.0, 4)]


@pytest.mark.parametrize("k", range(len(WRITE_SETTINGS)), ids=lambda k: f"optimum-at-{k}")
def test_dominant_write_and_read_points_are_chosen(k: int) -> None:
    """A point that is both fastest and lowest-power wins under any failure rate and W_A."""
    writes = [
        pt("write", f, n, 900.0, 150.0) if i == k else pt("write", f, n, 300.0, 260.0)
        for i, (f, n) in enumerate(WRITE_SETTINGS)
    ]
    j = (k + 1) % len(WRITE_SETTINGS)
    reads = [
        pt("read", f, n, 1500.0, 140.0) if i == j else pt("read", f, n, 500.0, 250.0)
        for i, (f, n) in enumerate(WRITE_SETTINGS)
    ]
    policy = profile_policy(fake_profile(*writes, *reads))
    w = policy.decide(ckpt())
    r = policy.decide(restart())
    assert (w.frequency_hz, w.io_processes) == (
        round(WRITE_SETTINGS[k][0] * 1e9),
        WRITE_SETTINGS[k][1],
    )
    assert (r.frequency_hz, r.io_processes) == (
        round(WRITE_SETTINGS[j][0] * 1e9),
        WRITE_SETTINGS[j][1],
    )
    assert w.predicted_seconds == pytest.approx(GIB / 900e6)
    assert w.predicted_energy_j == pytest.approx(150.0 * GIB / 900e6)


def test_governor_point_in_the_profile_is_applied_as_a_governor() -> None:
    profile = fake_profile(
        pt("write", None, 2, 900.0, 150.0, governor="powersave"),
        pt("write", 2.0, 2, 300.0, 260.0),
        pt("read", 2.0, 2, 500.0, 200.0),
    )
    s = profile_policy(profile).decide(ckpt())
    assert (s.governor, s.frequency_hz) == ("powersave", None)


def _codec_profile() -> Profile:
    """Compressed checkpoints are far cheaper; the uncompressed read is cheapest on its own."""
    return fake_profile(
        pt("write", 1.0, 1, 200.0, 250.0),
        pt("write", 1.0, 2, 1000.0, 200.0, codec="zstd:3"),
        pt("read", 1.0, 4, 2000.0, 150.0),
        pt("read", 1.0, 1, 500.0, 220.0, codec="zstd:3"),
        pt("read", 1.0, 2, 800.0, 210.0, codec="zstd:3"),
    )


def test_restart_reads_with_the_codec_the_checkpoint_was_written_with() -> None:
    profile = _codec_profile()
    assert plan(profile, Scenario(GIB, 1 / (4 * 3600.0), 250.0)).best.write.codec == "zstd:3"
    policy = profile_policy(profile)
    w = policy.decide(ckpt(level=1))
    r = policy.decide(restart(level=1))
    assert w.codec == r.codec == "zstd:3"
    assert r.io_processes == 2  # the best zstd read, not the faster uncompressed one (4)
    assert not has_note(r, "codec was not given")


def test_restart_remembers_the_codec_of_its_levels_checkpoint() -> None:
    """Level 1 was written uncompressed (fixed by the caller), level 2 as the plan chose: each
    restart reads its level's codec although the joint optimum alone would read zstd."""
    policy = profile_policy(_codec_profile())
    fixed = PhaseRequest("checkpoint", "/local/ckpt", GIB, level=1, codec="none")
    assert policy.decide(fixed).codec is None
    assert policy.decide(ckpt(level=2)).codec == "zstd:3"
    r1, r2 = policy.decide(restart(level=1)), policy.decide(restart(level=2))
    assert (r1.codec, r1.io_processes) == (None, 4)
    assert (r2.codec, r2.io_processes) == ("zstd:3", 2)
    assert not has_note(r1, "codec was not given")


def test_restart_after_a_default_checkpoint_reads_uncompressed() -> None:
    """The checkpoint fell back to defaults (its storage was not the profile's then): its
    data are uncompressed, so the restart must not read them as zstd."""
    keys = iter(["other:device", FAKE_STORAGE])
    policy = profile_policy(_codec_profile(), node=fake_node(storage_lookup=lambda p: next(keys)))
    assert policy.decide(ckpt(level=1)).source.startswith("defaults")
    r = policy.decide(restart(level=1))
    assert r.source == "profile lookup" and (r.codec, r.io_processes) == (None, 4)


def test_restart_falling_back_to_defaults_keeps_the_checkpoints_codec() -> None:
    keys = iter([FAKE_STORAGE, "other:device"])
    policy = profile_policy(_codec_profile(), node=fake_node(storage_lookup=lambda p: next(keys)))
    assert policy.decide(ckpt(level=1)).codec == "zstd:3"
    r = policy.decide(restart(level=1))
    assert r.source.startswith("defaults") and r.codec == "zstd:3"


def test_restart_uses_the_codec_of_the_manifest() -> None:
    policy = profile_policy(_codec_profile())
    policy.decide(ckpt(level=1))  # remembered: zstd:3 ...
    r = policy.decide(restart(level=1, codec="none"))  # ... but the manifest says uncompressed
    assert r.codec is None and r.io_processes == 4
    r2 = profile_policy(_codec_profile()).decide(restart(level=2, codec="zstd"))
    assert r2.codec == "zstd:3" and r2.io_processes == 2


def test_restart_without_known_codec_says_so() -> None:
    r = profile_policy(_codec_profile()).decide(restart(level=3))
    assert has_note(r, "codec was not given")


def test_checkpoint_codec_fixed_by_the_caller_is_respected() -> None:
    s = profile_policy(_codec_profile()).decide(
        PhaseRequest("checkpoint", "/local/ckpt", GIB, level=1, codec="none")
    )
    assert s.codec is None and s.io_processes == 1


# ------------------------------------------------------------------------ governors


@pytest.mark.parametrize("governor", ["performance", "powersave", "ondemand"])
def test_governor_policy_mirrors_the_planners_baselines(governor: str) -> None:
    profile = load_profile(PROFILES / "synthetic-pcie-flash.json")
    size = 64 * GIB
    result = plan(profile, Scenario(size, SAITO_RATE, SAITO_POWER))
    (baseline,) = [b for b in result.baselines if b.name == governor]
    assert baseline.choice is not None
    policy = make_policy(governor, profile, node=_synthetic_node(profile))
    assert isinstance(policy, GovernorPolicy) and policy.name == governor
    w = policy.decide(ckpt(size))
    r = policy.decide(restart(size))
    for s, point in ((w, baseline.choice.write), (r, baseline.choice.read)):
        assert s.governor == governor and s.frequency_hz is None
        assert s.source == f"governor baseline {governor}"
        assert s.io_processes == result.app_processes == point.processes
        assert s.predicted_seconds == pytest.approx(size / point.throughput)
        assert s.predicted_power_w == pytest.approx(point.power)
        assert s.power_source == "synthetic"


@pytest.mark.parametrize("governor", ["performance", "powersave", "ondemand"])
def test_governor_policy_on_fixed_frequency_profile(governor: str) -> None:
    profile = profile_from_json(small_profile_doc())
    by_name = {b.name: b for b in plan(profile, Scenario(GIB, 1 / 7200, 250.0)).baselines}
    node = fake_node(cpu_model=None, storage_lookup=_fixed_key("test"))
    s = GovernorPolicy(governor, profile, node=node).decide(ckpt())
    assert s.governor == governor and s.io_processes == 4
    choice = by_name[governor].choice
    if choice is None:  # ondemand cannot be read from fixed frequencies
        assert s.predicted_seconds is None and has_note(s, "no prediction", "ondemand")
    else:
        assert s.predicted_seconds == pytest.approx(GIB / choice.write.throughput)


@pytest.mark.parametrize(("cores", "want"), [(2, 2), (3, 4)], ids=["cores-measured", "cores-not"])
def test_governor_processes_follow_the_planners_rule(cores: int, want: int) -> None:
    """The profile's core count when it was measured, else the largest measured count."""
    profile = replace(_two_frequency_profile(), machine={"cpu_model": FAKE_CPU, "cores": cores})
    assert profile.process_counts == (2, 4)
    assert plan(profile, Scenario(GIB, 1 / 7200, 250.0)).app_processes == want
    assert (
        GovernorPolicy("performance", profile, node=fake_node()).decide(ckpt()).io_processes == want
    )


def test_governor_policy_without_profile_uses_the_nodes_cpus() -> None:
    s = GovernorPolicy("powersave", node=fake_node(cpus=6)).decide(ckpt())
    assert (s.governor, s.io_processes, s.predicted_seconds) == ("powersave", 6, None)


def test_governor_not_offered_leaves_frequency_alone() -> None:
    node = fake_node(governors=("performance", "powersave"))
    s = GovernorPolicy("ondemand", node=node).decide(ckpt())
    assert s.governor is None and has_note(s, "ondemand is not offered", "performance, powersave")


# ------------------------------------------------------------------------ no frequency control


def _two_frequency_profile() -> Profile:
    return fake_profile(
        pt("write", 1.0, 2, 900.0, 150.0),
        pt("write", 2.0, 4, 300.0, 260.0),
        pt("read", 1.0, 2, 500.0, 200.0),
        pt("read", 2.0, 4, 600.0, 240.0),
    )


def test_no_frequency_control_keeps_parallelism_and_says_so() -> None:
    s = profile_policy(_two_frequency_profile(), frequency_control=False).decide(ckpt())
    assert s.frequency_hz is None and s.governor is None and not s.controls_frequency
    assert s.io_processes == 2
    assert has_note(s, NO_FREQUENCY_CONTROL, "turned off")
    assert has_note(s, "predictions assume the profiled CPU setting")


def test_no_frequency_control_detected_on_the_node_gives_its_reason() -> None:
    node = fake_node(frequency_control=False, frequency_reason="cpufreq not available: VM")
    s = profile_policy(_two_frequency_profile(), node=node).decide(ckpt())
    assert s.frequency_hz is None and has_note(s, NO_FREQUENCY_CONTROL, "cpufreq not available")
    g = GovernorPolicy("performance", node=node).decide(ckpt())
    assert g.governor is None and g.io_processes == 8 and has_note(g, NO_FREQUENCY_CONTROL)


def test_no_frequency_control_prefers_points_measured_without_it() -> None:
    profile = fake_profile(
        pt("write", 1.0, 2, 900.0, 150.0),  # better, but needs a frequency setting
        pt("write", None, 3, 400.0, 200.0),
        pt("write", None, 1, 300.0, 210.0),
        pt("read", 1.0, 2, 900.0, 150.0),
        pt("read", None, 3, 600.0, 200.0),
    )
    off = profile_policy(profile, frequency_control=False).decide(ckpt())
    on = profile_policy(profile).decide(ckpt())
    assert off.io_processes == 3 and not has_note(off, "predictions assume")
    assert (on.io_processes, on.frequency_hz) == (2, 1_000_000_000)


@pytest.mark.parametrize("control", [True, False], ids=["cstate-control", "no-cstate-control"])
def test_cstates_disabled_only_where_they_can_be_set(control: bool) -> None:
    profile = fake_profile(
        pt("write", 1.0, 2, 900.0, 150.0, cstates=False),
        pt("write", 1.0, 1, 400.0, 200.0, cstates=True),
        pt("read", 1.0, 2, 600.0, 200.0, cstates=True),
    )
    s = profile_policy(profile, cstate_control=control).decide(ckpt())
    assert (s.io_processes, s.cstates) == ((2, False) if control else (1, None))


# ------------------------------------------------------------------------ machine and storage


def test_profile_for_another_cpu_falls_back_naming_both() -> None:
    node = fake_node(cpu_model="Other CPU 1 (synthetic)", hostname="other", cpus=2)
    policy = profile_policy(_two_frequency_profile(), node=node)
    s = policy.decide(ckpt())
    assert s.source == "defaults (profile not used)"
    assert has_note(s, "another machine", FAKE_CPU, "Other CPU 1 (synthetic)", "using defaults")
    assert s.io_processes == 2 and s.frequency_hz is None and s.predicted_energy_j is None
    g = GovernorPolicy("performance", _two_frequency_profile(), node=node).decide(ckpt())
    assert g.governor == "performance" and g.predicted_seconds is None
    assert has_note(g, "another machine", "figures are not used")


def test_profile_for_another_storage_falls_back_for_that_path_only() -> None:
    def lookup(path: str) -> str:
        return "nfs4:fs1:/export:async:tcp" if path.startswith("/pfs") else FAKE_STORAGE

    policy = profile_policy(_two_frequency_profile(), node=fake_node(storage_lookup=lookup))
    flush = policy.decide(PhaseRequest("flush", "/pfs/ckpt", GIB, level=4))
    local = policy.decide(ckpt(path="/local/ckpt"))
    assert flush.source.startswith("defaults")
    assert has_note(flush, "another storage", FAKE_STORAGE, "nfs4:fs1:/export:async:tcp")
    assert local.source == "profile lookup" and local.frequency_hz == 1_000_000_000


def test_other_host_with_the_same_cpu_uses_the_profile() -> None:
    s = profile_policy(_two_frequency_profile(), node=fake_node(hostname="n042")).decide(ckpt())
    assert s.source == "profile lookup"
    assert has_note(s, "fake-node", "n042")


def test_unidentified_storage_is_stated_and_the_profile_used() -> None:
    def lookup(path: str) -> str:
        raise PlatformError("no mount holds it")

    s = profile_policy(_two_frequency_profile(), node=fake_node(storage_lookup=lookup)).decide(
        ckpt()
    )
    assert s.source == "profile lookup"
    assert has_note(s, "could not identify the storage", "no mount holds it", FAKE_STORAGE)


def test_planner_refusal_falls_back_with_its_reason() -> None:
    # MTBF of 1 s: no checkpoint of 1 GiB fits, the planner refuses, the phase still runs.
    s = profile_policy(_two_frequency_profile(), mtbf=1.0).decide(ckpt())
    assert s.source.startswith("defaults")
    assert has_note(s, "profile lookup failed", "MTBF")


# ------------------------------------------------------------------------ sizes


def _sized_profile() -> Profile:
    points = []
    for size, mbps in ((64 * MIB, 400.0), (256 * MIB, 800.0)):
        points += [
            pt("write", 1.0, 2, mbps, 150.0, size=size),
            pt("write", 2.0, 4, mbps / 2, 260.0, size=size),
            pt("read", 1.0, 2, mbps, 200.0 + size / GIB, size=size),
        ]
    return fake_profile(*points)


@pytest.mark.parametrize(
    ("size", "words", "mbps"),
    [
        pytest.param(GIB, ("extrapolated", "beyond the largest", "256 MiB"), 800.0, id="above"),
        pytest.param(16 * MIB, ("extrapolated", "below the smallest", "64 MiB"), 400.0, id="below"),
        pytest.param(128 * MIB, ("interpolated", "64 MiB", "256 MiB"), 600.0, id="between"),
    ],
)
def test_sizes_outside_or_between_profiled_ones(
    size: int, words: tuple[str, ...], mbps: float
) -> None:
    s = profile_policy(_sized_profile()).decide(ckpt(size))
    assert s.io_processes == 2 and has_note(s, *words)
    assert s.predicted_seconds == pytest.approx(size / (mbps * 1e6))


def test_profiled_size_is_neither_extrapolated_nor_interpolated() -> None:
    s = profile_policy(_sized_profile()).decide(ckpt(256 * MIB))
    assert not has_note(s, "extrapolated") and not has_note(s, "interpolated")
    assert s.predicted_seconds == pytest.approx(256 * MIB / 800e6)


def test_governor_beyond_measured_processes_says_extrapolated() -> None:
    s = GovernorPolicy("performance", _two_frequency_profile(), node=fake_node(), app_processes=16)
    got = s.decide(ckpt())
    assert got.io_processes == 16 and got.predicted_seconds is None
    assert has_note(got, "extrapolated", "16 I/O processes")


# ------------------------------------------------------------------------ factory and defaults


def test_unknown_policy_name_is_one_line_listing_the_valid_ones() -> None:
    with pytest.raises(ValueError, match="unknown policy 'fastest'") as info:
        make_policy("fastest", None, node=fake_node())
    message = str(info.value)
    assert "\n" not in message
    assert all(name in message for name in POLICY_NAMES)


@pytest.mark.parametrize("name", POLICY_NAMES)
def test_make_policy_gives_each_named_policy(name: str) -> None:
    policy = make_policy(
        name, _two_frequency_profile(), node=fake_node(), mtbf=3600.0, app_power=250.0
    )
    assert isinstance(policy, Policy)
    assert policy.name == name
    s = policy.decide(ckpt())
    if name in ("performance", "powersave", "ondemand"):
        assert s.governor == name
    elif name == "profile":
        assert s.source == "profile lookup"
    elif name == "fixed":  # nothing fixed: the default number of processes, nothing controlled
        assert s.source == "fixed (nothing fixed)" and not s.controls_frequency
    else:
        assert s.source.startswith("defaults") and not s.controls_frequency


def test_profile_policy_without_a_profile_is_stated_defaults() -> None:
    policy = make_policy("profile", None, node=fake_node(cpus=2))
    s = policy.decide(ckpt())
    assert isinstance(policy, DefaultPolicy)
    assert s.notes == ("no profile: defaults",) and s.source == "defaults (no profile)"
    assert (s.io_processes, s.frequency_hz, s.governor, s.codec, s.cstates) == (
        2,
        None,
        None,
        None,
        None,
    )


def test_profile_policy_needs_failure_rate_and_application_power() -> None:
    prof = _two_frequency_profile()
    with pytest.raises(ValueError, match="app_power"):
        make_policy("profile", prof, node=fake_node(), mtbf=3600.0)
    with pytest.raises(ValueError, match="exactly one of rate"):
        make_policy("profile", prof, node=fake_node(), app_power=200.0)
    with pytest.raises(ValueError, match="exactly one of rate"):
        ProfilePolicy(prof, node=fake_node(), rate=1e-4, mtbf=3600.0, app_power=200.0)
    with pytest.raises(ValueError, match="app_power"):
        ProfilePolicy(prof, node=fake_node(), mtbf=3600.0, app_power=-1.0)


@pytest.mark.parametrize(("cpus", "want"), [(1, 1), (2, 2), (4, 4), (64, 4)])
def test_default_io_processes(cpus: int, want: int) -> None:
    restart_request = restart(codec="lz4")
    s = DefaultPolicy(node=fake_node(cpus=cpus)).decide(restart_request)
    assert s.io_processes == want
    assert s.codec == "lz4"  # a restart reads with the codec it was written with


class _FixedPolicy:
    """A fake policy: the decision interface needs nothing but a name and ``decide``."""

    name = "fixed"

    def decide(self, request: PhaseRequest) -> Settings:
        return Settings(io_processes=3, source="fixed", notes=(request.kind,))


def test_any_object_with_name_and_decide_is_a_policy() -> None:
    fake: Policy = _FixedPolicy()
    assert isinstance(fake, Policy)
    assert fake.decide(ckpt()).notes == ("checkpoint",)


# ------------------------------------------------------------------------ value types


@pytest.mark.parametrize(
    ("kind", "op"), [("checkpoint", "write"), ("flush", "write"), ("restart", "read")]
)
def test_phase_request_op(kind: str, op: str) -> None:
    assert PhaseRequest(kind, "/x", 1).op == op  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("changes", "match"),
    [
        pytest.param({"kind": "compute"}, "phase kind", id="kind"),
        pytest.param({"size": 0}, "size", id="size-zero"),
        pytest.param({"size": 1.5}, "size", id="size-float"),
        pytest.param({"path": ""}, "path", id="path"),
        pytest.param({"level": 0}, "level", id="level"),
        pytest.param({"codec": "gzip"}, "unknown codec", id="codec"),
    ],
)
def test_phase_request_refuses_bad_values(changes: dict[str, object], match: str) -> None:
    args: dict[str, object] = {"kind": "checkpoint", "path": "/x", "size": GIB, **changes}
    with pytest.raises(ValueError, match=match):
        PhaseRequest(**args)  # type: ignore[arg-type]


def test_phase_request_codec_is_canonical() -> None:
    assert PhaseRequest("restart", "/x", 1, codec="zstd").fixed_codec == (True, "zstd:3")
    assert PhaseRequest("restart", "/x", 1, codec="none").fixed_codec == (True, None)
    assert PhaseRequest("restart", "/x", 1).fixed_codec == (False, None)


def test_settings_refuse_contradictions() -> None:
    with pytest.raises(ValueError, match="at most one"):
        Settings(io_processes=1, source="t", frequency_hz=1_000_000_000, governor="performance")
    with pytest.raises(ValueError, match="power_source"):
        Settings(io_processes=1, source="t", predicted_energy_j=5.0)
    with pytest.raises(ValueError, match="io_processes"):
        Settings(io_processes=0, source="t")
    with pytest.raises(ValueError, match="predicted_seconds"):
        Settings(io_processes=1, source="t", predicted_seconds=math.nan)
    label = Settings(io_processes=2, source="t", frequency_hz=1_400_000_000, codec="lz4").label
    assert label == "1.40 GHz, 2 I/O processes, lz4"


# ------------------------------------------------------------------------ node detection


def _write_cpuinfo(tree: Path, model: str, cpus: int) -> None:
    text = "".join(f"processor\t: {i}\nmodel name\t: {model}\n\n" for i in range(cpus))
    (tree / "proc").mkdir(parents=True, exist_ok=True)
    (tree / "proc" / "cpuinfo").write_text(text, encoding="utf-8")


def test_node_detect_on_a_vm_without_cpufreq(tmp_path: Path) -> None:
    tree = build_tree("vm-no-cpufreq", tmp_path / "t")
    _write_cpuinfo(tree, "Fake VM CPU (synthetic)", 2)
    node = Node.detect(SysRoot(tree))
    assert (node.cpu_model, node.cpus, node.frequency_control) == (
        "Fake VM CPU (synthetic)",
        2,
        False,
    )
    assert "cpufreq not available" in node.frequency_reason
    s = GovernorPolicy("performance", node=node).decide(ckpt())
    assert s.governor is None and has_note(s, NO_FREQUENCY_CONTROL, "cpufreq not available")


def test_node_detect_on_an_acpi_cpufreq_node(tmp_path: Path) -> None:
    tree = build_tree("intel-acpi-cpufreq", tmp_path / "t")
    _write_cpuinfo(tree, "Fake Xeon (synthetic)", 4)
    node = Node.detect(SysRoot(tree))
    assert node.frequency_control and node.frequency_reason == ""
    assert {"userspace", "performance", "ondemand"} <= set(node.governors)
    assert node.cpus == 4


def test_storage_key_of_a_directory_not_created_yet(tmp_path: Path) -> None:
    tree, ckpt_dir = make_nvme_ext4(tmp_path / "s")
    key = storage_key_of(ckpt_dir, tree.root)
    assert key.startswith("ext4:nvme")
    assert storage_key_of(f"{ckpt_dir}/run1/L1", tree.root) == key
    node = replace(fake_node(), storage_lookup=lambda p: storage_key_of(p, tree.root))
    profile = replace(_two_frequency_profile(), storage={"key": key})
    s = profile_policy(profile, node=node).decide(ckpt(path=f"{ckpt_dir}/run1/L1"))
    assert s.source == "profile lookup"
