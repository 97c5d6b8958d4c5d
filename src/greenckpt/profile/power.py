"""Which metered domains make up a profile point's "node power".

Why: the model needs one power per state (``W_C``, ``W_R``), but meters report overlapping
domains (RAPL ``core`` ⊂ ``package`` ⊂ ``psys``; a BMC's ``node`` includes all of them), so
summing every domain would count the CPU two or three times. The rule, widest honest figure
first:

1. a meter whose role is ``node`` (the BMC through IPMI, an external wall-plug meter's log):
   that domain alone — it already includes CPU, memory, disks and fans;
2. else a CPU meter's ``psys`` (RAPL's whole SoC platform on laptops), alone;
3. else the non-overlapping CPU-side domains: every ``package-N`` plus every ``dram-N`` of the
   CPU meters (RAPL, the perf power PMU), plus every ``gpuN`` of the GPU meters (NVML);
4. else a CPU meter's ``cpu`` domain (the utilisation estimator's).

A meter's role is what it declares (:data:`~greenckpt.platform.meters.MeterRole`); a domain
key whose meter is not registered counts for nothing.

The chosen keys, their scope in words and their source (``estimated`` when any chosen domain is
estimated) are recorded in the profile, so a reader knows what the watts cover.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from greenckpt.errors import InvalidValueError
from greenckpt.optimize.profile_data import PowerSource
from greenckpt.platform.meters import METERS, MeterRole

_PSYS = re.compile(r"psys(@.*)?")
_SIDE: dict[MeterRole, re.Pattern[str]] = {
    "cpu": re.compile(r"(package|dram)-\d+(@.*)?"),
    "gpu": re.compile(r"gpu\d+"),
}


def _role(key: str) -> MeterRole | None:
    """The role of the meter of a ``"<meter>/<domain>"`` key (None: no such meter)."""
    cls = METERS.get(key.split("/", 1)[0])
    return None if cls is None else cls.role


def _domain(key: str) -> str:
    return key.split("/", 1)[1] if "/" in key else ""


def _side(key: str) -> bool:
    """Whether ``key`` is a CPU-side domain that does not overlap the others."""
    pattern = _SIDE.get(_role(key) or "node")
    return pattern is not None and pattern.fullmatch(_domain(key)) is not None


@dataclass(frozen=True)
class PowerChoice:
    """The domains summed into a point's power, what they cover, and where they come from."""

    keys: tuple[str, ...]
    scope: str
    source: PowerSource

    def power(self, energy_j: Mapping[str, float], seconds: float) -> float:
        """Mean watts over ``seconds`` from the joules per domain of that window."""
        return sum(energy_j[k] for k in self.keys) / seconds


def choose_power_domains(domains: Sequence[str], sources: Mapping[str, str]) -> PowerChoice:
    """Pick the domains of a sampler (``"<meter>/<domain>"`` keys) that form node power.

    Raises ValueError when none of the domains can stand for the node (e.g. only ``core``).
    """
    keys: tuple[str, ...]
    node = [d for d in domains if _role(d) == "node"]
    if node:
        keys = (node[0],)
        scope = f"whole node ({METERS[node[0].split('/', 1)[0]].label})"
    elif psys := [d for d in domains if _role(d) == "cpu" and _PSYS.fullmatch(_domain(d))]:
        keys = (psys[0],)
        scope = "platform (RAPL psys)"
    elif side := [d for d in domains if _side(d)]:
        keys = tuple(side)
        kinds = sorted({re.sub(r"-\d+(@.*)?$|\d+$", "", d.split("/", 1)[1]) for d in side})
        scope = " + ".join(kinds) + " (CPU side only: disks, NICs and fans are not included)"
    elif est := [d for d in domains if _role(d) == "cpu" and _domain(d) == "cpu"]:
        keys = (est[0],)
        scope = "CPU, estimated from utilisation and TDP (not a measurement)"
    else:
        raise InvalidValueError(
            f"none of the metered domains ({', '.join(domains) or 'none'}) can stand for the "
            "node's power: a package, dram, psys, node or estimator domain is needed"
        )
    source: PowerSource = (
        "estimated" if any(sources.get(k) == "estimated" for k in keys) else "measured"
    )
    return PowerChoice(keys=keys, scope=scope, source=source)
