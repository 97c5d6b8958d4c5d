"""Power and energy meters: one small interface, six implementations, and auto-detection.

Public API::

    from greenckpt.platform.meters import select_meters, MeterOptions

    with select_meters() as sel:           # best available combination, or ["rapl", "ipmi"]
        print(sel.report())                # every meter: selected, or why not
        for m in sel.meters:
            m.read()                       # cumulative joules per domain, labelled m.source

Meters (registry name → class): ``rapl`` (:class:`RaplMeter`, powercap counters),
``perf`` (:class:`PerfPowerMeter`, perf power PMU via ``perf_event_open``), ``nvml``
(:class:`NvmlMeter`, NVIDIA GPUs), ``ipmi`` (:class:`IpmiMeter`, BMC node power), ``csv``
(:class:`ExternalCsvMeter`, a wall-plug meter's log; :class:`PowerLog` joins one afterwards),
``estimator`` (:class:`UtilisationEstimator`, TDP × utilisation, labelled estimated).
Each declares its :data:`MeterRole` (``cpu``, ``gpu`` or ``node``: where detection, profiles
and the self-check use it) and its options (:class:`MeterOption`: the keys of
:class:`MeterOptions` it reads, and the command-line flags built from them); a new meter is
one module and one :func:`register_meter` call (:func:`unregister_meter` removes it).
The sampler that turns them into time series and per-phase energy is
:mod:`greenckpt.platform.sampler`. A meter never presents a guess as a measurement: held
powers are bounded (a few failed queries, a few log intervals) and then refused, and degraded
readings are counted in :attr:`Meter.gaps` so that phases can be marked.
"""

from greenckpt.platform.meters.base import (
    Meter,
    MeterOption,
    MeterOptions,
    MeterRole,
    MeterUnavailable,
    PowerIntegrator,
    Resolution,
    Source,
    WrappingCounter,
)
from greenckpt.platform.meters.detect import (
    CPU_CHAIN,
    METERS,
    Probe,
    Selection,
    probe_meter,
    register_meter,
    select_meters,
    unregister_meter,
    valid_names,
    with_role,
)
from greenckpt.platform.meters.estimator import CpuInfo, UtilisationEstimator, lookup_tdp
from greenckpt.platform.meters.external import ExternalCsvMeter, PowerLog
from greenckpt.platform.meters.ipmi import IpmiMeter, parse_dcmi_power
from greenckpt.platform.meters.nvml import NvmlMeter
from greenckpt.platform.meters.perf import PerfPowerMeter, PowerPmu, detect_power_pmu
from greenckpt.platform.meters.rapl import RaplMeter, find_zones

__all__ = [
    "CPU_CHAIN",
    "METERS",
    "CpuInfo",
    "ExternalCsvMeter",
    "IpmiMeter",
    "Meter",
    "MeterOption",
    "MeterOptions",
    "MeterRole",
    "MeterUnavailable",
    "NvmlMeter",
    "PerfPowerMeter",
    "PowerIntegrator",
    "PowerLog",
    "PowerPmu",
    "Probe",
    "RaplMeter",
    "Resolution",
    "Selection",
    "Source",
    "UtilisationEstimator",
    "WrappingCounter",
    "detect_power_pmu",
    "find_zones",
    "lookup_tdp",
    "parse_dcmi_power",
    "probe_meter",
    "register_meter",
    "select_meters",
    "unregister_meter",
    "valid_names",
    "with_role",
]
