"""Argument types every command may use, light enough for ``greenckpt notify``.

Why a module of its own: :mod:`greenckpt.cli.args` brings in the model, the profile format
and the meters (NumPy, SciPy) for the commands that describe a job or open meters, and a job
script that calls ``greenckpt notify`` at every checkpoint must not pay for them. Only the
standard library, :mod:`greenckpt.units` and :mod:`greenckpt.errors` are imported here.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

from greenckpt import units


def unit_type(parse: Callable[[str], float], *, allow_zero: bool = False) -> Callable[[str], float]:
    """An argparse ``type=`` that parses a quantity and reports a bad one as a usage error."""

    def convert(text: str) -> float:
        try:
            if allow_zero:
                return parse(text, allow_zero=True)  # type: ignore[call-arg]
            return parse(text)
        except units.UnitError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    convert.__name__ = parse.__name__.removeprefix("parse_")
    return convert


MAX_COUNT = 10**9


def _int_in(text: str, low: int) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer: give e.g. 4") from None
    if not low <= value <= MAX_COUNT:
        raise argparse.ArgumentTypeError(
            f"{text!r} must be an integer from {low} to {MAX_COUNT:.0e}"
        )
    return value


def positive_int(text: str) -> int:
    """An integer from 1 to 10⁹ (process, node and unit counts)."""
    return _int_in(text, 1)


def non_negative_int(text: str) -> int:
    """An integer from 0 to 10⁹ (random seeds)."""
    return _int_in(text, 0)


def add_hidden_alias(
    p: argparse.ArgumentParser | argparse._ArgumentGroup, of: argparse.Action, *names: str
) -> argparse.Action:
    """Accept ``names`` as another spelling of the option ``of``, not shown in ``--help``.

    Why: one idea has one spelling across commands (``--rate``, ``--repeats``, ``-o``), but
    scripts written against an older spelling keep working. The alias stores into the same
    destination with the same type; it has no default of its own, so the real option's
    default stands when neither is given.
    """
    same: dict[str, Any] = {"nargs": of.nargs, "choices": of.choices, "metavar": of.metavar}
    if of.type is not None:
        same["type"] = of.type
    return p.add_argument(
        *names,
        action=type(of),
        dest=of.dest,
        default=argparse.SUPPRESS,
        help=argparse.SUPPRESS,
        **same,
    )
