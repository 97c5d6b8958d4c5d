"""NVIDIA GPUs through NVML (the ``pynvml`` module of the ``nvidia-ml-py`` package).

Why NVML: it is the vendor's own interface, present wherever the driver is, and since Volta it
keeps a cumulative energy counter per GPU (``nvmlDeviceGetTotalEnergyConsumption``, mJ since
the driver loaded) — a counter, so phase energies are exact deltas. Older GPUs only report
instantaneous board power (``nvmlDeviceGetPowerUsage``, mW, itself averaged by the driver over
about a second); there the meter integrates power by zero-order hold, queried at most every
``MeterOptions.nvml_period_s`` (20 ms).

All GPUs use the same mode: if any GPU lacks the energy counter, every GPU is integrated from
power, so that all figures from this meter share one resolution and method. Domains are
``gpu0``, ``gpu1``, ... in NVML index order (which may differ from ``CUDA_VISIBLE_DEVICES``
order). ``pynvml`` is imported lazily: greenckpt does not depend on it (extra ``nvidia``).

Errors: any ``NVMLError`` while probing (``nvmlInit``, counting GPUs, getting handles, the first
energy or power query) makes the meter unavailable with NVML's message, and NVML is shut down
again; an ``NVMLError`` while reading (a GPU fallen off the bus, a driver reset) becomes a
:class:`~greenckpt.platform.root.PlatformError` — in energy mode at once, in power mode after
the held power has run out (see :class:`~greenckpt.platform.meters.base.PolledPowerMeter`).
"""

from __future__ import annotations

import contextlib
import importlib
from collections.abc import Mapping
from types import ModuleType
from typing import Any, ClassVar, Self

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


def _load_pynvml() -> ModuleType:
    try:
        return importlib.import_module("pynvml")
    except ImportError:
        raise MeterUnavailable(
            NvmlMeter.name,
            "the pynvml module is not installed (`pip install nvidia-ml-py`, or the "
            "greenckpt[nvidia] extra)",
        ) from None


class NvmlMeter(PolledPowerMeter):
    """Cumulative energy per NVIDIA GPU (counter where supported, else integrated power)."""

    name = "nvml"
    source: ClassVar[Source] = "measured"
    role: ClassVar[MeterRole] = "gpu"
    label = "NVIDIA GPUs via NVML"
    options = (MeterOption("nvml_period_s", "the shortest time between two NVML queries (s)"),)

    def __init__(
        self, nvml: ModuleType, handles: list[Any], energy_mode: bool, options: MeterOptions
    ) -> None:
        domains = tuple(f"gpu{i}" for i in range(len(handles)))
        super().__init__(domains, 0.0 if energy_mode else options.nvml_period_s, options.clock)
        self._nvml = nvml
        self._error: type[BaseException] = getattr(nvml, "NVMLError", Exception)
        self._handles = handles
        self.energy_mode = energy_mode
        self._closed = False
        self._base: list[int] = []
        if energy_mode:
            self._base = self._energy_mj()
        else:
            self._accept(options.clock(), self._query())  # the probe's reading: first sample

    @classmethod
    def probe(cls, root: SysRoot, options: MeterOptions) -> Self:
        nvml = _load_pynvml()
        error: type[BaseException] = getattr(nvml, "NVMLError", Exception)
        try:
            nvml.nvmlInit()
        except error as exc:
            raise MeterUnavailable(
                cls.name, f"nvmlInit failed (no NVIDIA driver?): {exc}"
            ) from None
        try:
            try:
                count = int(nvml.nvmlDeviceGetCount())
            except error as exc:
                raise MeterUnavailable(cls.name, f"nvmlDeviceGetCount failed: {exc}") from None
            if count == 0:
                raise MeterUnavailable(cls.name, "NVML sees no GPU")
            handles = []
            for i in range(count):
                try:
                    handles.append(nvml.nvmlDeviceGetHandleByIndex(i))
                except error as exc:
                    raise MeterUnavailable(
                        cls.name, f"gpu{i}: nvmlDeviceGetHandleByIndex failed: {exc}"
                    ) from None
            energy_mode = True
            for h in handles:
                try:
                    nvml.nvmlDeviceGetTotalEnergyConsumption(h)
                except error:
                    energy_mode = False
            if not energy_mode:
                for i, h in enumerate(handles):
                    try:
                        nvml.nvmlDeviceGetPowerUsage(h)
                    except error as exc:
                        raise MeterUnavailable(
                            cls.name, f"gpu{i} reports neither energy nor power: {exc}"
                        ) from None
            try:
                return cls(nvml, handles, energy_mode, options)
            except (error, PlatformError) as exc:  # a GPU lost between the checks and now
                raise MeterUnavailable(cls.name, f"first reading failed: {exc}") from None
        except BaseException:
            with contextlib.suppress(Exception):
                nvml.nvmlShutdown()
            raise

    @property
    def resolution(self) -> Resolution:
        return Resolution(1e-3, "J") if self.energy_mode else Resolution(1e-3, "W")

    def _query(self) -> Mapping[str, float]:
        out: dict[str, float] = {}
        for d, h in zip(self.domains, self._handles, strict=True):
            try:
                out[d] = float(self._nvml.nvmlDeviceGetPowerUsage(h)) * 1e-3
            except self._error as exc:
                raise PlatformError(f"{d}: nvmlDeviceGetPowerUsage failed: {exc}") from None
        return out

    def _energy_mj(self) -> list[int]:
        out: list[int] = []
        for d, h in zip(self.domains, self._handles, strict=True):
            try:
                out.append(int(self._nvml.nvmlDeviceGetTotalEnergyConsumption(h)))
            except self._error as exc:
                raise PlatformError(
                    f"{d}: nvmlDeviceGetTotalEnergyConsumption failed: {exc}"
                ) from None
        return out

    def poll(self) -> None:
        if not self.energy_mode:
            super().poll()

    def read_nowait(self) -> dict[str, float]:
        if not self.energy_mode:
            return super().read_nowait()
        if self._closed:
            raise PlatformError("the nvml meter is closed")
        return {
            d: (e - b) * 1e-3
            for d, e, b in zip(self.domains, self._energy_mj(), self._base, strict=True)
        }

    def describe(self) -> str:
        how = "energy counter" if self.energy_mode else "integrated power"
        return f"{super().describe()}; {how}"

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            with contextlib.suppress(Exception):
                self._nvml.nvmlShutdown()
