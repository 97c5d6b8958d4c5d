"""Pure analytic model of checkpoint/restart with failures: times, energy, intervals.

No I/O and no machine access: every function here is deterministic and vectorised, so the
optimizer can evaluate thousands of settings at once and the simulator can check it.
"""

from greenckpt.model.basic_unit import (
    MODEL_FORMS,
    ModelForm,
    StateTimes,
    expected_failures,
    expected_unit_time,
    sojourn_times,
)
from greenckpt.model.energy import (
    epe,
    expected_energy,
    expected_runtime,
    overhead,
    time_factor,
    unit_energy,
)
from greenckpt.model.intervals import (
    INTERVAL_RULES,
    IntervalRule,
    daly_interval,
    energy_optimal_interval,
    interval,
    time_optimal_interval,
    young_interval,
)
from greenckpt.model.multilevel import (
    Level,
    MultilevelExpectation,
    MultilevelPlan,
    Schedule,
    expected_multilevel,
    fti_schedule,
    nested_schedule,
    optimize_multilevel,
)

__all__ = [
    "INTERVAL_RULES",
    "MODEL_FORMS",
    "IntervalRule",
    "Level",
    "ModelForm",
    "MultilevelExpectation",
    "MultilevelPlan",
    "Schedule",
    "StateTimes",
    "daly_interval",
    "energy_optimal_interval",
    "epe",
    "expected_energy",
    "expected_failures",
    "expected_multilevel",
    "expected_runtime",
    "expected_unit_time",
    "fti_schedule",
    "interval",
    "nested_schedule",
    "optimize_multilevel",
    "overhead",
    "sojourn_times",
    "time_factor",
    "time_optimal_interval",
    "unit_energy",
    "young_interval",
]
