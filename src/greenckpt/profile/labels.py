"""The words every profile report and figure uses to say where its power figures come from.

Why a module of its own: ``greenckpt profile show`` needs the label without loading matplotlib
(which costs a third of a second at every start of the command line).
"""

from __future__ import annotations

from greenckpt.optimize.profile_data import POWER_SOURCES, Profile

_SOURCE_TEXT = {
    "measured": "measured",
    "estimated": "estimated (a model of the node, not a meter)",
    "synthetic": "SYNTHETIC — not a measurement",
}


def source_words(source: str) -> str:
    """A power source in the words every report uses (``estimated`` says it is a model)."""
    return _SOURCE_TEXT.get(source, source)


def power_label(profile: Profile) -> str:
    """Where the profile's power figures come from, e.g. ``power: measured (rapl)``."""
    parts = []
    for source in POWER_SOURCES:
        if source not in profile.power_sources:
            continue
        text = source_words(source)
        meters = [m for m in profile.meters if m != "synthetic"]
        if source == "measured" and meters:
            text += f" ({', '.join(meters)})"
        parts.append(text)
    if profile.synthetic and "synthetic" not in profile.power_sources:
        parts.append("SYNTHETIC profile — not a measurement")
    return "power: " + "; ".join(parts)
