"""A meter added from test code alone: its class declares its role and options, one
``register_meter`` call adds it, and detection, profile power, the self-check and the meter
flags pick it up where its role says so (issue 28 item 2)."""

from __future__ import annotations

import argparse
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import ClassVar, Self

import pytest

from greenckpt.cli.args import add_meter_arguments, meter_names, meter_options
from greenckpt.errors import InvalidValueError
from greenckpt.platform.meters import (
    METERS,
    MeterOption,
    MeterOptions,
    MeterRole,
    MeterUnavailable,
    Resolution,
    Source,
    register_meter,
    select_meters,
    unregister_meter,
    with_role,
)
from greenckpt.platform.meters.base import PolledPowerMeter
from greenckpt.platform.root import SysRoot
from greenckpt.platform.selfcheck_base import NOT_CHECKED, PASSED
from greenckpt.platform.selfcheck_meters import check_meters
from greenckpt.profile.power import choose_power_domains
from greenckpt.testing.meter_contract import MeterContract
from tests.platform.test_selfcheck import node, options

__all__ = ["node"]  # the fixture, used by name


class ShuntMeter(PolledPowerMeter):
    """A node meter reading watts from a file (a shunt's logger), only in these tests."""

    name = "shunt"
    source: ClassVar[Source] = "measured"
    role: ClassVar[MeterRole] = "node"
    label = "test shunt logger"
    options: ClassVar[tuple[MeterOption, ...]] = (
        MeterOption(
            "shunt_file", "the shunt logger's file (watts)", flag="--shunt-file", path=True
        ),
    )

    def __init__(self, path: Path, opts: MeterOptions) -> None:
        super().__init__(("node",), 0.0, opts.clock)
        self.path = path

    @classmethod
    def not_needed(cls, options: MeterOptions) -> str | None:
        return "no shunt file given" if options.value("shunt_file") is None else None

    @classmethod
    def probe(cls, root: SysRoot, options: MeterOptions) -> Self:
        path = options.value("shunt_file")
        if not isinstance(path, str) or not Path(path).is_file():
            raise MeterUnavailable(cls.name, f"no shunt file: {path!r}")
        return cls(Path(path), options)

    @property
    def resolution(self) -> Resolution:
        return Resolution(0.1, "W")

    def _query(self) -> Mapping[str, float]:
        return {"node": float(self.path.read_text())}


class FastCpuMeter(ShuntMeter):
    """A measured CPU meter registered after the built-in ones."""

    name = "fastcpu"
    role: ClassVar[MeterRole] = "cpu"
    label = "test CPU meter"
    options = ()


@pytest.fixture
def shunt(tmp_path: Path) -> Iterator[Path]:
    """The shunt meter registered, and its file (300 W)."""
    register_meter(ShuntMeter)
    path = tmp_path / "shunt.txt"
    path.write_text("300\n")
    try:
        yield path
    finally:
        unregister_meter("shunt")


class TestShuntMeterContract(MeterContract):
    @pytest.fixture
    def meter(self, shunt: Path) -> Iterator[ShuntMeter]:
        m = ShuntMeter.probe(SysRoot(shunt.parent), MeterOptions(extra={"shunt_file": str(shunt)}))
        yield m
        m.close()

    @pytest.fixture
    def unavailable(self, tmp_path: Path) -> Callable[[], object]:
        return lambda: ShuntMeter.probe(SysRoot(tmp_path), MeterOptions())


def test_registered_meters_are_listed_and_removed(shunt: Path) -> None:
    assert METERS["shunt"] is ShuntMeter and "shunt" in with_role("node")
    with pytest.raises(InvalidValueError, match="already registered"):
        register_meter(ShuntMeter)
    register_meter(FastCpuMeter)
    try:
        # measured CPU meters before the estimate, whenever they were registered
        assert with_role("cpu") == ["rapl", "perf", "fastcpu", "estimator"]
    finally:
        assert unregister_meter("fastcpu") is FastCpuMeter
    assert "fastcpu" not in METERS


def test_a_meter_must_declare_a_role_and_options_of_its_own(shunt: Path) -> None:
    class Roleless(ShuntMeter):
        name = "roleless"
        role = "disk"  # type: ignore[assignment]

    class Clash(ShuntMeter):
        name = "clash"

    with pytest.raises(InvalidValueError, match="role must be one of cpu, gpu, node"):
        register_meter(Roleless)
    with pytest.raises(InvalidValueError, match=r"option shunt_file .* is shunt's already"):
        register_meter(Clash)
    assert "roleless" not in METERS and "clash" not in METERS


def test_detection_probes_a_node_meter_after_the_cpu_chain(node: Path, shunt: Path) -> None:
    with select_meters(root=str(node)) as sel:
        probes = {p.name: p for p in sel.probes}
        assert probes["shunt"].status == "not needed" and probes["shunt"].reason == (
            "no shunt file given"
        )
    opts = MeterOptions.from_values({"shunt_file": str(shunt)})
    assert opts.extra == {"shunt_file": str(shunt)} and opts.value("shunt_file") == str(shunt)
    with select_meters(root=str(node), options=opts) as sel:
        assert [m.name for m in sel.meters] == ["rapl", "shunt"]
        assert [p.name for p in sel.probes][-1] == "shunt"
        assert sel.meters[1].read()["node"] >= 0.0


def test_profile_power_takes_a_node_meter_alone() -> None:
    domains = ["rapl/package-0", "rapl/dram-0", "shunt/node"]
    assert choose_power_domains(domains, {}).keys == ("rapl/package-0", "rapl/dram-0")
    register_meter(ShuntMeter)
    try:
        choice = choose_power_domains(domains, {"shunt/node": "measured"})
    finally:
        unregister_meter("shunt")
    assert choice.keys == ("shunt/node",)
    assert choice.scope == "whole node (test shunt logger)" and choice.source == "measured"


def test_the_self_check_reads_it_and_compares_it_with_the_cpu(
    node: Path, shunt: Path, tmp_path: Path
) -> None:
    meter_opts = MeterOptions(ipmi_period_s=0.0, extra={"shunt_file": str(shunt)})
    checks = {
        c.name: c
        for c in check_meters(SysRoot(node), options(node, tmp_path, meter_options=meter_opts))
    }
    assert checks["meter shunt"].outcome == PASSED
    assert checks["meter shunt"].details["power_w"]["node"] == pytest.approx(300, rel=0.05)
    assert checks["shunt node >= rapl package-0+dram-0"].outcome == PASSED
    without = {c.name: c for c in check_meters(SysRoot(node), options(node, tmp_path))}
    assert without["meter shunt"].outcome == NOT_CHECKED
    assert without["meter shunt"].reason == "no shunt file given (--shunt-file)"


def test_its_flag_is_offered_and_fills_the_options(shunt: Path) -> None:
    parser = argparse.ArgumentParser()
    add_meter_arguments(parser)
    ns = parser.parse_args(["--meters", "rapl,shunt", "--shunt-file", "shunt.txt"])
    assert meter_options(ns).value("shunt_file") == str(Path("shunt.txt").absolute())
    assert meter_names(ns) == ["rapl", "shunt"]
    bad = parser.parse_args(["--meters", "rapl", "--shunt-file", "shunt.txt"])
    with pytest.raises(InvalidValueError, match="--shunt-file is read only by the shunt meter"):
        meter_names(bad)
    assert meter_options(parser.parse_args(["--tdp", "125W"])).tdp_w == 125.0
