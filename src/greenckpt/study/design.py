"""The design of a study: its cells (one combination of factor levels) and its runs, in order.

Why an explicit order: runs of one cell must not all fall in the same minutes of a machine
whose load drifts, so the order is randomised — either every run shuffled ("random"), or
each repeat a block that holds every cell once, shuffled within the block ("blocks"), which
also pairs each run with the baseline run of its block for paired comparisons. Seeded, so
the same study file gives the same order (and resuming finds the same run ids).
"""

from __future__ import annotations

import itertools
import random
from dataclasses import dataclass

from greenckpt.study.spec import Study

__all__ = ["Run", "cell_label", "cells", "runs"]


@dataclass(frozen=True)
class Run:
    """One run of the design: ``id`` (``r0001``...), its cell's levels, block and repeat."""

    id: str
    cell: str
    levels: dict[str, object]
    block: int
    repeat: int


def cell_label(levels: dict[str, object]) -> str:
    """``factor=level,...`` in the study's factor order ("all" for a study with no factor)."""
    return ",".join(f"{k}={_text(v)}" for k, v in levels.items()) or "all"


def _text(value: object) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


def cells(study: Study) -> list[dict[str, object]]:
    """Every combination of the factors' levels (the full factorial), in file order."""
    names = list(study.factors)
    return [
        dict(zip(names, combo, strict=True)) for combo in itertools.product(*study.factors.values())
    ]


def runs(study: Study, repeats: int | None = None) -> list[Run]:
    """Every run of the design in the order they are run (see the module docstring)."""
    repeats = study.repeats if repeats is None else repeats
    rng = random.Random(study.seed)
    design = cells(study)
    order: list[tuple[dict[str, object], int, int]] = []
    for repeat in range(repeats):
        block = [(levels, repeat, repeat) for levels in design]
        if study.order == "blocks":
            rng.shuffle(block)
        order.extend(block)
    if study.order == "random":
        rng.shuffle(order)
    return [
        Run(f"r{i + 1:04d}", cell_label(levels), dict(levels), block, repeat)
        for i, (levels, block, repeat) in enumerate(order)
    ]
