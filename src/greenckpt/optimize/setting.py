"""How the CPU is set while I/O runs: one type for the whole package (issue 17 item 5).

Why one type: the profiler sweeps settings, a profile point records the setting it was measured
under, and the runtime decides one per phase; each used to spell "a fixed frequency, a stock
governor, or left as found" its own way (float Hz, int Hz, a tagged type) and its own key and
label. The records keep their field pairs (``frequency``/``frequency_hz`` and ``governor``:
the file formats name them) and answer with this type, so keys and labels are computed once.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from greenckpt.errors import GreenckptError

__all__ = ["GOVERNORS", "CpuSetting", "CpuSettingError", "SettingKind"]

GOVERNORS = ("performance", "powersave", "ondemand", "schedutil", "conservative", "userspace")
"""The Linux cpufreq governors a setting may name (a typo would silently make a point no
policy can ever apply)."""

SettingKind = Literal["frequency", "governor", "uncontrolled"]


class CpuSettingError(GreenckptError, ValueError):
    """A CPU setting that cannot be: an unknown governor, an unreadable key, both kinds at once."""


@dataclass(frozen=True, order=True)
class CpuSetting:
    """How the CPU is set while a cell runs: a fixed frequency, a governor, or left as found."""

    kind: SettingKind
    hz: int | None = None
    governor: str | None = None

    @classmethod
    def frequency(cls, hz: float) -> CpuSetting:
        """A fixed frequency in Hz."""
        return cls("frequency", hz=round(hz))

    @classmethod
    def of_governor(cls, name: str) -> CpuSetting:
        """A stock governor measured as a setting."""
        if name not in GOVERNORS:
            raise CpuSettingError(
                f"unknown governor {name!r}: expected one of {', '.join(GOVERNORS)}"
            )
        return cls("governor", governor=name)

    @classmethod
    def uncontrolled(cls) -> CpuSetting:
        """The frequency left as the node has it (no cpufreq control)."""
        return cls("uncontrolled")

    @classmethod
    def of(cls, frequency_hz: float | None, governor: str | None) -> CpuSetting:
        """The setting a record's field pair describes (a profile point's ``frequency`` and
        ``governor``, a runtime decision's ``frequency_hz`` and ``governor``): at most one is
        set; neither means the CPU was left as found."""
        if frequency_hz is not None and governor is not None:
            raise CpuSettingError(
                "give at most one of a fixed CPU frequency and a governor, "
                f"not both ({frequency_hz!r} Hz and {governor!r})"
            )
        if governor is not None:
            return cls.of_governor(governor)
        if frequency_hz is not None:
            return cls.frequency(frequency_hz)
        return cls.uncontrolled()

    @property
    def key(self) -> str:
        """Stable text key (same as ``ProfilePoint.setting_key``)."""
        if self.kind == "governor":
            return f"governor:{self.governor}"
        if self.kind == "uncontrolled":
            return "uncontrolled"
        return str(self.hz)

    @classmethod
    def from_key(cls, key: str) -> CpuSetting:
        """Inverse of :attr:`key`."""
        if key == "uncontrolled":
            return cls.uncontrolled()
        if key.startswith("governor:"):
            return cls.of_governor(key.removeprefix("governor:"))
        try:
            return cls.frequency(int(key))
        except ValueError:
            raise CpuSettingError(f"not a CPU setting: {key!r}") from None

    @property
    def label(self) -> str:
        """Human label: ``2.10 GHz``, ``ondemand`` or ``as found``."""
        if self.kind == "governor":
            assert self.governor is not None
            return self.governor
        if self.kind == "uncontrolled":
            return "as found"
        assert self.hz is not None
        return f"{self.hz / 1e9:.2f} GHz"
