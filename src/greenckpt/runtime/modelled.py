"""The model's EPE for the checkpoint interval a finished run actually used.

Why: a run's report sets the *observed* energy per second of useful work beside the
*modelled* one (saito2013 section 6). The planner's ``Plan.best.epe`` is the EPE at the
model's energy-optimal interval, but a run checkpoints at whatever interval the application
chose, so comparing the observed EPE with the optimum mixes two questions: how good the model
is, and how far the interval was from the optimum. This module answers the first: it
evaluates :func:`greenckpt.model.epe` at the interval the run *used* (``T_A`` observed), with
the checkpoint and restart figures the profile predicts for the settings the runtime applied;
``W_A`` and λ are stated by the caller. ``W_C`` and ``W_R`` are the phase powers the settings
predicted — the profile point's plus the ranks waiting meanwhile, as the planner counts them —
and the derivation says how many ranks waited and where their figure came from. Where each
input comes from, and when there is none: docs/design/runtime.md ("The modelled EPE at the
run's interval"); every derivation says it in :attr:`ModelledEpe.derivation`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from greenckpt.model import ModelForm, epe
from greenckpt.phases import ACCOUNTED_KINDS
from greenckpt.runtime.policy import Policy
from greenckpt.runtime.run_report import PhaseRecord, RunReport
from greenckpt.runtime.settings import NOT_MEASURED, PhaseRequest, Settings
from greenckpt.units import format_duration, format_power

__all__ = [
    "ModelledEpe",
    "PhaseWaiting",
    "modelled_epe",
    "observed_interval",
    "with_modelled_epe",
]

_INTERVAL_KINDS = ACCOUNTED_KINDS
"""The records whose seconds make up a checkpoint interval (docs/design/runtime.md)."""


@dataclass(frozen=True)
class PhaseWaiting:
    """The waiting ranks inside a modelled phase power (``W_C`` or ``W_R``): how many waited
    (every distinct count among the phases averaged), the time-weighted watts they added, in
    which mode, and the per-rank figure's source (``measured``, ``estimated``, ``synthetic``,
    ``not measured``: taken as idle; several joined by ``+``)."""

    ranks: tuple[int, ...]
    power_w: float
    mode: str
    source: str

    def to_dict(self) -> dict[str, Any]:
        return {
            "waiting_ranks": list(self.ranks),
            "power_w": self.power_w,
            "mode": self.mode,
            "source": self.source,
        }

    def words(self) -> str:
        """E.g. ``incl. 1.40 W for 7 waiting ranks (polite; their figure measured)``."""
        if self.ranks == (0,):
            return "no rank waited"
        ranks = "/".join(map(str, self.ranks)) + (
            " waiting rank" if self.ranks == (1,) else " waiting ranks"
        )
        if self.source == NOT_MEASURED:
            return f"{ranks} ({self.mode}) taken as idle: their power not measured"
        watts = format_power(self.power_w)
        return f"incl. {watts} for {ranks} ({self.mode}; their figure {self.source})"


@dataclass(frozen=True)
class _Predicted:
    """The mean prediction of a run's phases of one kind."""

    seconds: float
    power: float
    source: str
    waiting: PhaseWaiting | None
    """None when some phase's prediction did not count waiting ranks."""

    def words(self) -> str:
        """The power's source, and its waiting part when counted."""
        if self.waiting is None:
            return f"{self.source}; waiting ranks not counted"
        return f"{self.source}; {self.waiting.words()}"


@dataclass(frozen=True)
class ModelledEpe:
    """The model's EPE at a run's own interval, its inputs and how they were obtained.

    ``epe_w`` is None when it cannot be computed; ``derivation`` then says why. ``source``:
    where the profile's powers behind it came from (``measured``, ``estimated``,
    ``synthetic``). ``checkpoints``: how many checkpoints the interval was observed over.
    ``checkpoint_waiting``/``restart_waiting``: the waiting ranks in ``W_C``/``W_R`` (None
    when the predictions did not count them).
    """

    epe_w: float | None
    derivation: str
    source: str | None = None
    T_A: float | None = None
    T_C: float | None = None
    T_R: float | None = None
    W_A: float | None = None
    W_C: float | None = None
    W_R: float | None = None
    rate: float | None = None
    checkpoints: int = 0
    checkpoint_waiting: PhaseWaiting | None = None
    restart_waiting: PhaseWaiting | None = None

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: the figure, its inputs (SI units) and how each was obtained."""
        return {
            "epe_w": self.epe_w,
            "source": self.source,
            "derivation": self.derivation,
            "interval_s": self.T_A,
            "interval_source": None if self.T_A is None else "observed",
            "checkpoint_s": self.T_C,
            "restart_s": self.T_R,
            "app_power_w": self.W_A,
            "app_power_source": None if self.W_A is None else "stated",
            "checkpoint_power_w": self.W_C,
            "checkpoint_waiting": _waiting_dict(self.checkpoint_waiting),
            "restart_power_w": self.W_R,
            "restart_waiting": _waiting_dict(self.restart_waiting),
            "rate_per_s": self.rate,
            "checkpoints": self.checkpoints,
        }


def _waiting_dict(waiting: PhaseWaiting | None) -> dict[str, Any] | None:
    return None if waiting is None else waiting.to_dict()


def _none(why: str, **known: Any) -> ModelledEpe:
    return ModelledEpe(None, f"no modelled EPE: {why}", **known)


def observed_interval(records: Sequence[PhaseRecord]) -> tuple[float | None, int]:
    """The mean seconds of compute (and rework) between foreground checkpoints, and how many
    checkpoints it was observed over (docs/design/runtime.md); None without checkpoints."""
    checkpoints = sorted(
        (r for r in records if r.kind == "checkpoint" and not r.background),
        key=lambda r: r.start_s,
    )
    if not checkpoints:
        return None, 0
    compute = [r for r in records if r.kind in _INTERVAL_KINDS]
    total = 0.0
    previous_end = 0.0
    for ck in checkpoints:
        total += sum(
            max(0.0, min(r.end_s, ck.start_s) - max(r.start_s, previous_end)) for r in compute
        )
        previous_end = max(previous_end, ck.end_s)
    return total / len(checkpoints), len(checkpoints)


def _predicted(settings: Sequence[Settings]) -> _Predicted | None:
    """Mean predicted seconds, time-weighted mean predicted power (waiting ranks included, as
    predicted), the powers' source and the waiting part of ``settings`` that carry a
    prediction; None when none does."""
    rows = [
        s
        for s in settings
        if s.predicted_seconds is not None
        and s.predicted_seconds > 0
        and s.predicted_power_w is not None
        and s.power_source is not None
    ]
    if not rows:
        return None
    seconds = [s.predicted_seconds or 0.0 for s in rows]
    energy = sum((s.predicted_power_w or 0.0) * t for s, t in zip(rows, seconds, strict=True))
    sources = {str(s.power_source) for s in rows}
    return _Predicted(
        sum(seconds) / len(rows),
        energy / sum(seconds),
        _combined(sources),
        _waiting(rows, seconds),
    )


def _waiting(rows: Sequence[Settings], seconds: Sequence[float]) -> PhaseWaiting | None:
    """The waiting part of the phases' predicted power (None unless every one counted it)."""
    if any(s.waiting_ranks is None or s.waiting_power_w is None for s in rows):
        return None
    watts = sum((s.waiting_power_w or 0.0) * t for s, t in zip(rows, seconds, strict=True))
    waited = [s for s in rows if s.waiting_ranks]
    return PhaseWaiting(
        ranks=tuple(sorted({s.waiting_ranks or 0 for s in rows})),
        power_w=watts / sum(seconds),
        mode="+".join(sorted({str(s.wait_mode) for s in rows})),
        source="+".join(sorted({str(s.waiting_source) for s in waited})) or NOT_MEASURED,
    )


def _combined(sources: set[str]) -> str:
    for label in ("synthetic", "estimated"):
        if label in sources:
            return label
    return "measured"


def _restart_prediction(
    records: Sequence[PhaseRecord], checkpoints: Sequence[PhaseRecord], policy: Policy | None
) -> tuple[_Predicted | None, str]:
    restarts = [r.settings for r in records if r.kind == "restart" and r.settings is not None]
    found = _predicted(restarts)
    if found is not None:
        return (
            found,
            f"the profile's prediction at the settings of the run's {len(restarts)} restart(s)",
        )
    if restarts:
        return None, "the run's restarts carry no profile prediction"
    if policy is None:
        return None, "the run had no restart and no policy was given to predict one"
    last = checkpoints[-1]
    settings = last.settings
    size = max(1, round(last.size / max(1, last.notifiers)))
    try:
        request = PhaseRequest(
            "restart",
            last.path or ".",
            size,
            level=last.level,
            codec=(settings.codec or "none") if settings is not None else None,
        )
        decided = policy.decide(request)
    except Exception as exc:  # a policy must not raise; if it does, say so instead
        return None, f"the policy could not predict a restart ({type(exc).__name__}: {exc})"
    found = _predicted([decided])
    if found is None:
        return None, f"the policy predicts nothing for a restart ({decided.source})"
    return found, (
        f"the profile's prediction for a restart of the last checkpoint at the settings the "
        f"policy would apply ({decided.label}; the run had no restart)"
    )


def _refused_inputs(rate: float | None, app_power: float | None) -> str | None:
    """Why the model cannot be given ``rate`` and ``app_power`` (None: it can)."""
    if app_power is None or rate is None:
        missing = " and ".join(
            name
            for name, value in (
                ("the application's power W_A", app_power),
                ("the job's failure rate (MTBF)", rate),
            )
            if value is None
        )
        return f"the model needs {missing}"
    if not (math.isfinite(rate) and rate > 0 and math.isfinite(app_power) and app_power > 0):
        return f"rate ({rate!r}/s) and W_A ({app_power!r} W) must be finite and > 0"
    return None


def modelled_epe(
    report: RunReport,
    *,
    rate: float | None,
    app_power: float | None,
    policy: Policy | None = None,
    form: ModelForm = "exact",
) -> ModelledEpe:
    """The model's EPE for ``report``'s run at the interval it used (see the module
    docstring). ``rate``: the job's failure rate (1/s); ``app_power``: ``W_A`` (watts);
    ``policy``: the run's policy, asked for a restart's prediction when the run had none."""
    refused = _refused_inputs(rate, app_power)
    if refused is not None or rate is None or app_power is None:
        return _none(refused or "")
    known: dict[str, Any] = {"W_A": app_power, "rate": rate}
    T_A, count = observed_interval(report.records)
    if T_A is None:
        return _none("the run announced no checkpoint, so it has no interval to model", **known)
    known.update(T_A=T_A, checkpoints=count)
    if T_A <= 0:
        return _none("no compute was accounted before its checkpoints", **known)
    checkpoints = sorted(
        (r for r in report.records if r.kind == "checkpoint" and not r.background),
        key=lambda r: r.start_s,
    )
    written = _predicted([r.settings for r in checkpoints if r.settings is not None])
    if written is None:
        sources = sorted({r.settings.source for r in checkpoints if r.settings is not None})
        why = f" (settings from: {', '.join(sources)})" if sources else ""
        return _none(
            "the checkpoints' settings carry no profile prediction: the policy did not use a "
            f"profile{why}",
            **known,
        )
    T_C, W_C = written.seconds, written.power
    known.update(T_C=T_C, W_C=W_C, checkpoint_waiting=written.waiting)
    read, read_how = _restart_prediction(report.records, checkpoints, policy)
    if read is None:
        return _none(read_how, **known)
    T_R, W_R = read.seconds, read.power
    value = float(epe(T_A, T_C, T_R, rate, app_power, W_C, W_R, form=form))
    source = _combined({written.source, read.source})
    levels = sorted({r.level for r in checkpoints if r.level is not None})
    as_one = f", levels {', '.join(map(str, levels))} as one level" if len(levels) > 1 else ""
    derivation = (
        f"modelled EPE {value:.2f} W at the run's own interval: T_A {T_A:.4g} s observed (mean "
        f"compute between {count} checkpoint(s){as_one}); T_C {T_C:.4g} s, W_C "
        f"{W_C:.1f} W ({written.words()}): the profile's prediction at the applied checkpoint "
        f"settings; T_R {T_R:.4g} s, W_R {W_R:.1f} W ({read.words()}): {read_how}; W_A "
        f"{app_power:.1f} W stated; job MTBF {format_duration(1 / rate)} stated"
    )
    return ModelledEpe(
        value, derivation, source, T_R=T_R, W_R=W_R, restart_waiting=read.waiting, **known
    )


def with_modelled_epe(report: RunReport, modelled: ModelledEpe) -> RunReport:
    """``report`` with the modelled EPE as its prediction (labelled with the profile's power
    source) and the derivation — or why there is none — among its notes."""
    notes = (*report.notes, modelled.derivation)
    if modelled.epe_w is None:
        return replace(report, predicted_epe=None, predicted_source=None, notes=notes)
    return replace(
        report, predicted_epe=modelled.epe_w, predicted_source=modelled.source, notes=notes
    )
