"""Whole-node power from the BMC: ``ipmitool dcmi power reading``.

Why: RAPL sees the CPU packages and DRAM only; a checkpoint also spends energy in disks,
NICs, fans and power supplies. The BMC's DCMI power reading is the only in-band figure for the
whole node on most servers (it is what the papers' wall-power figures correspond to).

The details are in docs/design/measurement.md ("Meters: IPMI (the BMC)").
"""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Mapping
from typing import ClassVar, Self

from greenckpt.platform.meters.base import (
    MeterOption,
    MeterOptions,
    MeterRole,
    MeterUnavailable,
    PolledPowerMeter,
    Resolution,
    Source,
)
from greenckpt.platform.root import PlatformError, SysRoot

_READING_RE = re.compile(r"Instantaneous power reading:\s*([0-9]+(?:\.[0-9]*)?)\s*Watts", re.I)
_STATE_RE = re.compile(r"Power reading state is:\s*(\w+)", re.I)


def parse_dcmi_power(text: str) -> float:
    """Watts from ``ipmitool dcmi power reading`` output; ``PlatformError`` if absent."""
    state = _STATE_RE.search(text)
    if state and state.group(1).lower() != "activated":
        raise PlatformError(f"the BMC's DCMI power reading is {state.group(1)}")
    m = _READING_RE.search(text)
    if not m:
        first = next((ln.strip() for ln in text.splitlines() if ln.strip()), "(no output)")
        if len(first) > 120:
            first = first[:117] + "..."
        raise PlatformError(f"no 'Instantaneous power reading' in ipmitool output: {first!r}")
    return float(m.group(1))


class IpmiMeter(PolledPowerMeter):
    """Node power from the BMC via ``ipmitool dcmi power reading``, integrated; measured."""

    name = "ipmi"
    source: ClassVar[Source] = "measured"
    role: ClassVar[MeterRole] = "node"
    label = "BMC via IPMI"
    options = (
        MeterOption("ipmitool", "the ipmitool executable (a name looked up on PATH, or a path)"),
        MeterOption("ipmi_timeout_s", "how long one ipmitool query may take (s)"),
        MeterOption("ipmi_period_s", "the shortest time between two BMC queries (s)"),
    )

    def __init__(self, exe: str, options: MeterOptions) -> None:
        super().__init__(("node",), options.ipmi_period_s, options.clock)
        self.exe = exe
        self.timeout_s = options.ipmi_timeout_s

    @classmethod
    def probe(cls, root: SysRoot, options: MeterOptions) -> Self:
        exe = shutil.which(options.ipmitool)
        if exe is None:
            raise MeterUnavailable(
                cls.name,
                f"{options.ipmitool!r} not found on PATH (install ipmitool; a node without a "
                "BMC has no IPMI power reading)",
            )
        meter = cls(exe, options)
        try:
            powers = meter._query()
        except PlatformError as exc:
            raise MeterUnavailable(cls.name, str(exc)) from None
        meter._accept(options.clock(), powers)  # the probe's reading is the first sample
        return meter

    @property
    def resolution(self) -> Resolution:
        return Resolution(1.0, "W")

    def _query(self) -> Mapping[str, float]:
        cmd = [self.exe, "dcmi", "power", "reading"]
        try:
            proc = subprocess.run(cmd, capture_output=True, timeout=self.timeout_s, check=False)
        except subprocess.TimeoutExpired:
            raise PlatformError(
                f"`ipmitool dcmi power reading` did not answer within {self.timeout_s:g} s"
            ) from None
        except OSError as exc:
            raise PlatformError(f"cannot run {self.exe}: {exc}") from None
        # Bytes, decoded leniently: a BMC or a wrapper printing something not UTF-8 must give a
        # PlatformError (no reading found), never a UnicodeDecodeError.
        stdout = proc.stdout.decode("utf-8", errors="replace")
        stderr = proc.stderr.decode("utf-8", errors="replace")
        if proc.returncode != 0:
            msg = next(
                (ln.strip() for ln in (stderr + stdout).splitlines() if ln.strip()),
                "no message",
            )
            hint = ""
            if "/dev/ipmi" in msg:
                hint = (
                    " (no BMC device: load ipmi_si and ipmi_devintf, run as root, or this "
                    "machine has no BMC)"
                )
            raise PlatformError(
                f"`ipmitool dcmi power reading` exited {proc.returncode}: {msg}{hint}"
            )
        return {"node": parse_dcmi_power(stdout)}
