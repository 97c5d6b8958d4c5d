"""A node's runtime options: typed, JSON round trip (how they reach the Slurm plugin's agent),
refused in one line when wrong, and the one place a node's policy and runtime are built — the
same for ``greenckpt agent`` flags and for the plugin's site configuration."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from greenckpt.errors import InvalidValueError
from greenckpt.runtime.node_options import NodeOptions, build_runtime
from greenckpt.runtime.run_report import RunReport
from tests.platform.fake_cpu import build_tree, load_spec

PROFILE = Path(__file__).resolve().parents[2] / "examples/profiles/synthetic-pcie-flash.json"


def test_options_round_trip_through_json() -> None:
    options = NodeOptions(policy="fixed", profiles=("a.json", "b.json"), io_processes=2,
                          frequency_hz=1_400_000_000, cstates=False, app_power_w=200.0,
                          rate_per_s=1e-5, control=False, meters=("estimator",),
                          root="/x", state_file="/y")  # fmt: skip
    doc = json.loads(json.dumps(options.to_dict()))
    assert NodeOptions.from_dict(doc) == options
    assert options.fixed.io_processes == 2 and options.fixed.cstates is False


@pytest.mark.parametrize(
    ("doc", "message"),
    [
        ({"policy": "fastest"}, "policy 'fastest' is not one of"),
        ({"app_power_w": -1.0}, "app_power_w must be a finite number > 0"),
        ({"rate_per_s": float("nan")}, "rate_per_s must be a finite number > 0"),
        ({"io_processes": 0}, "io_processes must be an integer >= 1"),
        ({"frobnicate": 1}, "unknown node option(s) frobnicate"),
    ],
)
def test_wrong_options_are_one_line(doc: dict[str, object], message: str) -> None:
    with pytest.raises(InvalidValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        NodeOptions.from_dict(doc)


def test_the_runtime_is_built_through_the_nodes_own_root(tmp_path: Path) -> None:
    tree = build_tree(load_spec("intel-acpi-cpufreq"), tmp_path / "tree")
    options = NodeOptions(policy="performance", root=str(tree), state_file=str(tmp_path / "s"))
    runtime = build_runtime(options)
    assert runtime.frequency_control and runtime.policy.name.startswith("performance")
    assert runtime.state_file == tmp_path / "s"
    held = build_runtime(NodeOptions(policy="performance", root=str(tree),
                                     frequency_control=False))  # fmt: skip
    assert not held.frequency_control  # Slurm's --cpu-freq: the frequency is Slurm's
    with pytest.raises(InvalidValueError, match="is not a directory"):
        build_runtime(NodeOptions(root=str(tmp_path / "missing")))


def test_the_modelled_epe_names_what_is_missing() -> None:
    report = RunReport.from_records([], total_seconds=1.0, total_energy_j=None)
    runtime_policy = build_runtime(NodeOptions(policy="defaults", control=False)).policy
    why = NodeOptions(profiles=(str(PROFILE),)).modelled(report, runtime_policy)
    assert why.epe_w is None
    assert "--app-power, --mtbf (or --job-mtbf)" in why.derivation
